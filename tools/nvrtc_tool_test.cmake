# ctest driver for cudarc-nvrtc (see tools/CMakeLists.txt): TOOL, CASE, WORK_DIR.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run_tool expected_rc)
    execute_process(COMMAND ${TOOL} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    message(STATUS "cudarc-nvrtc ${ARGN}\n-- stdout:\n${out}\n-- stderr:\n${err}")
    if(NOT rc STREQUAL "${expected_rc}")
        message(FATAL_ERROR "cudarc-nvrtc exited with ${rc}, expected ${expected_rc}")
    endif()
    set(tool_stdout "${out}" PARENT_SCOPE)
    set(tool_stderr "${err}" PARENT_SCOPE)
endfunction()

function(expect text pattern)
    if(NOT text MATCHES "${pattern}")
        message(FATAL_ERROR "expected output matching '${pattern}'")
    endif()
endfunction()

# A kernel with known static shared memory, a local header and a template instantiated by -e.
file(WRITE ${WORK_DIR}/scale.cuh "#define SCALE_TILE 256\n")
file(WRITE ${WORK_DIR}/ok.cu [=[
#include "scale.cuh"
#include "bench_vector.cuh"
extern "C" __global__ void tile_copy(float* out, const float* in) {
    __shared__ float tile[SCALE_TILE];
    tile[threadIdx.x] = in[threadIdx.x] * FACTOR;
    __syncthreads();
    out[threadIdx.x] = tile[SCALE_TILE - 1 - threadIdx.x];
}
template <typename T> __global__ void scale(T* p, T s) { p[cudarc_bench::first_index()] *= s; }
]=])
file(WRITE ${WORK_DIR}/bad.cu "extern \"C\" __global__ void broken(float* p) { p[0] = undeclared_name; }\n")

if(CASE STREQUAL "cubin")
    run_tool(0 ${WORK_DIR}/ok.cu --arch sm_90 --cubin -DFACTOR=2.0f -e "scale<float>")
    expect("${tool_stdout}" "tile_copy +[0-9]+ +1024 B")  # 256 floats of static shared memory
    expect("${tool_stdout}" "scale<float> -> _Z5scaleIfEvPT_S0_")
    expect("${tool_stdout}" "scale<float> +[0-9]+ +0 B")  # reported under its name expression
    if(NOT EXISTS ${WORK_DIR}/ok.cubin)
        message(FATAL_ERROR "ok.cubin was not written")
    endif()
elseif(CASE STREQUAL "ptx")
    run_tool(0 ${WORK_DIR}/ok.cu --arch=sm_90 --ptx -D FACTOR=3.0f)
    expect("${tool_stdout}" "for compute_90")
    expect("${tool_stdout}" "kernels in the PTX: tile_copy")
    file(READ ${WORK_DIR}/ok.ptx ptx)
    expect("${ptx}" "\\.entry tile_copy")
elseif(CASE STREQUAL "local_header_wins")
    # A file named like a shipped header, next to the input, replaces the embedded copy.
    file(WRITE ${WORK_DIR}/bench_vector.cuh "#define LOCAL_COPY_VALUE 4242\n")
    file(WRITE ${WORK_DIR}/shadow.cu
         "#include \"bench_vector.cuh\"\nextern \"C\" __global__ void k(int* p) { *p = LOCAL_COPY_VALUE; }\n")
    run_tool(0 ${WORK_DIR}/shadow.cu --arch compute_90)
    file(READ ${WORK_DIR}/shadow.ptx ptx)
    expect("${ptx}" "4242")
elseif(CASE STREQUAL "compile_error")
    run_tool(1 ${WORK_DIR}/bad.cu --arch sm_90)
    expect("${tool_stderr}" "undeclared_name")            # the compiler's own message
    expect("${tool_stderr}" "bad\\.cu")                    # the source name
    expect("${tool_stderr}" "--gpu-architecture=sm_90")   # the options used
    if(EXISTS ${WORK_DIR}/bad.cubin)
        message(FATAL_ERROR "a failed compile must not write output")
    endif()
elseif(CASE STREQUAL "usage")
    run_tool(0 --help)
    expect("${tool_stdout}" "Usage: cudarc-nvrtc")
    expect("${tool_stdout}" "--name-expression")
    run_tool(2)
    expect("${tool_stderr}" "no input file")
    run_tool(1 ${WORK_DIR}/ok.cu --arch sm_90 -DFACTOR=1.0f --no-such-nvrtc-option)
    expect("${tool_stderr}" "--no-such-nvrtc-option")
else()
    message(FATAL_ERROR "unknown CASE ${CASE}")
endif()

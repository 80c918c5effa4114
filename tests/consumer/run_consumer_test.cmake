# The installed tree, as a user gets it (see tests/CMakeLists.txt). CASE:
#   install             installs the built tree into a fresh prefix (the fixture the others need)
#   cmake_consumer      an outside project with find_package(cudarc CONFIG REQUIRED) configures, builds, runs
#   unknown_component   find_package(cudarc COMPONENTS <unknown>) fails naming it; OPTIONAL_COMPONENTS does not
#   pkg_config_consumer a program compiled with `pkg-config --cflags --libs cudarc` builds and runs
#   tools_run           the installed tools start (cudarc-info's RPATH finds the installed libcudarc)
# Inputs: SOURCE_DIR, BUILD_DIR, WORK_DIR, GENERATOR, CXX, VERSION, PREFIX_PATH (the build's
# CMAKE_PREFIX_PATH, for the consumer's own dependencies), TOOLS (whether tools were built), CXX_FLAGS (what
# a program linking this build of the library needs: the sanitizer flags of a sanitized build).
set(prefix ${WORK_DIR}/prefix)

function(run_checked what)
    execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    message(STATUS "${what}: exit ${rc}\n${out}${err}")
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${what} failed (exit ${rc})")
    endif()
    set(output "${out}${err}" PARENT_SCOPE)
endfunction()

if(CASE STREQUAL "install")
    file(REMOVE_RECURSE ${WORK_DIR})
    run_checked("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
    foreach(file IN ITEMS include/cudarc/cudarc.hpp include/cudarc/version.hpp include/cudarc/fmt.hpp
                          share/doc/cudarc/LICENSE)
        if(NOT EXISTS ${prefix}/${file})
            message(FATAL_ERROR "not installed: ${file}")
        endif()
    endforeach()
    file(GLOB_RECURSE pc_files ${prefix}/*/cudarc.pc)
    if(NOT pc_files)
        message(FATAL_ERROR "cudarc.pc was not installed")
    endif()
    # Code for tests and tools only (cudarc_testing, the bench's report library) is neither installed nor
    # exported: the tools carry it linked in.
    file(GLOB_RECURSE installed RELATIVE ${prefix} ${prefix}/*)
    foreach(file IN LISTS installed)
        if(file MATCHES "cudarc_testing|cudarc_bench_report")
            message(FATAL_ERROR "test-only code installed: ${file}")
        endif()
        if(file MATCHES "\\.cmake$")
            file(READ ${prefix}/${file} text)
            if(text MATCHES "cudarc_testing|cudarc_bench_report")
                message(FATAL_ERROR "test-only target exported in ${file}")
            endif()
        endif()
    endforeach()

elseif(CASE STREQUAL "cmake_consumer")
    run_checked("configuring the consumer"
                ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/cmake_consumer -G ${GENERATOR}
                "-DCMAKE_PREFIX_PATH=${prefix};${PREFIX_PATH}" -DCMAKE_CXX_COMPILER=${CXX}
                "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}")
    run_checked("building the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/cmake_consumer)
    run_checked("running the consumer" ${WORK_DIR}/cmake_consumer/consumer)

elseif(CASE STREQUAL "unknown_component")
    set(dir ${WORK_DIR}/components)
    file(REMOVE_RECURSE ${dir})
    file(WRITE ${dir}/required/CMakeLists.txt
         "cmake_minimum_required(VERSION 3.25)\nproject(c LANGUAGES CXX)\n"
         "find_package(cudarc CONFIG REQUIRED COMPONENTS no_such_part)\n")
    execute_process(COMMAND ${CMAKE_COMMAND} -S ${dir}/required -B ${dir}/required/build -G ${GENERATOR}
                            "-DCMAKE_PREFIX_PATH=${prefix};${PREFIX_PATH}" -DCMAKE_CXX_COMPILER=${CXX}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    message(STATUS "required unknown component: exit ${rc}\n${out}${err}")
    if(rc EQUAL 0)
        message(FATAL_ERROR "find_package(cudarc COMPONENTS no_such_part) succeeded")
    endif()
    if(NOT "${out}${err}" MATCHES "no_such_part")
        message(FATAL_ERROR "the failure does not name the unknown component")
    endif()
    file(WRITE ${dir}/optional/CMakeLists.txt
         "cmake_minimum_required(VERSION 3.25)\nproject(c LANGUAGES CXX)\n"
         "find_package(cudarc CONFIG REQUIRED OPTIONAL_COMPONENTS no_such_part)\n"
         "if(cudarc_no_such_part_FOUND OR NOT TARGET cudarc::cudarc)\n"
         "    message(FATAL_ERROR \"an optional unknown component was reported found\")\n"
         "endif()\n")
    run_checked("optional unknown component"
                ${CMAKE_COMMAND} -S ${dir}/optional -B ${dir}/optional/build -G ${GENERATOR}
                "-DCMAKE_PREFIX_PATH=${prefix};${PREFIX_PATH}" -DCMAKE_CXX_COMPILER=${CXX})

elseif(CASE STREQUAL "pkg_config_consumer")
    find_program(PKG_CONFIG NAMES pkg-config pkgconf)
    if(NOT PKG_CONFIG)
        message(STATUS "SKIPPED: pkg-config not found (Debian: apt-get install pkg-config)")
        return()
    endif()
    file(GLOB_RECURSE pc_files ${prefix}/*/cudarc.pc)
    list(GET pc_files 0 pc_file)
    get_filename_component(pc_dir ${pc_file} DIRECTORY)
    set(pkg ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir} ${PKG_CONFIG})
    run_checked("pkg-config --modversion" ${pkg} --modversion cudarc)
    string(STRIP "${output}" modversion)
    if(NOT modversion STREQUAL VERSION)
        message(FATAL_ERROR "pkg-config says version '${modversion}', expected '${VERSION}'")
    endif()
    run_checked("pkg-config --cflags" ${pkg} --cflags cudarc)
    separate_arguments(cflags UNIX_COMMAND "${output}")
    run_checked("pkg-config --libs" ${pkg} --libs cudarc)
    separate_arguments(libs UNIX_COMMAND "${output}")
    run_checked("pkg-config --variable=libdir" ${pkg} --variable=libdir cudarc)
    string(STRIP "${output}" libdir)
    # The .pc file finds the prefix from its own place: its folders must be the installed ones.
    file(REAL_PATH ${libdir} libdir_real)
    file(REAL_PATH ${prefix} prefix_real)
    if(NOT libdir_real MATCHES "^${prefix_real}/")
        message(FATAL_ERROR "cudarc.pc points at ${libdir_real}, outside the prefix ${prefix_real}")
    endif()
    separate_arguments(extra_flags UNIX_COMMAND "${CXX_FLAGS}")
    file(MAKE_DIRECTORY ${WORK_DIR}/pkg_config_consumer)
    run_checked("compiling with pkg-config's flags"
                ${CXX} -std=c++20 ${extra_flags} ${cflags} ${SOURCE_DIR}/tests/consumer/main.cpp ${libs} -Wl,-rpath,${libdir}
                -o ${WORK_DIR}/pkg_config_consumer/consumer)
    run_checked("running the pkg-config consumer" ${WORK_DIR}/pkg_config_consumer/consumer)

elseif(CASE STREQUAL "tools_run")
    if(NOT TOOLS)
        message(STATUS "SKIPPED: the tools were not built (CUDARC_BUILD_TOOLS=OFF)")
        return()
    endif()
    foreach(tool IN ITEMS cudarc-info cudarc-bench cudarc-nvrtc)
        run_checked("${tool} --version" ${prefix}/bin/${tool} --version)
        if(NOT output MATCHES "${tool} ${VERSION}")
            message(FATAL_ERROR "${tool} --version does not say ${VERSION}")
        endif()
        # The library it loads is the installed one (through RPATH $ORIGIN/../lib), not the build tree's.
        # cudarc-bench and cudarc-nvrtc reach internals, so they carry the library's objects linked in
        # instead (Note [Symbol policy] in CMakeLists.txt); cudarc-info uses the public API and libcudarc.
        find_program(LDD ldd)
        if(LDD AND tool STREQUAL "cudarc-info")
            run_checked("ldd ${tool}" ${LDD} ${prefix}/bin/${tool})
            if(NOT output MATCHES "libcudarc\\.so[.0-9]* => ${prefix}/bin/\\.\\./[^ ]*libcudarc")
                message(FATAL_ERROR "${tool} does not resolve libcudarc inside ${prefix}")
            endif()
        endif()
    endforeach()
    run_checked("cudarc-bench --help" ${prefix}/bin/cudarc-bench --help)
    # With or without a GPU cudarc-info starts and says what it found: 0 (devices) or 1 (no GPU), never the
    # loader's 127.
    execute_process(COMMAND ${prefix}/bin/cudarc-info RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    message(STATUS "cudarc-info: exit ${rc}\n${out}${err}")
    if(NOT rc MATCHES "^[01]$")
        message(FATAL_ERROR "the installed cudarc-info exited with ${rc}")
    endif()

else()
    message(FATAL_ERROR "unknown CASE ${CASE}")
endif()

# Note [Symbol policy] (CMakeLists.txt): a shared libcudarc exports its public API only. Fails, naming the
# symbols, when LIBRARY's dynamic symbol table holds anything else: a name outside namespace cudarc (fmt or
# standard-library instantiations), a name in an internal namespace (sys, alloc, rtc, optim::abi,
# optim::detail), or a cudarc::detail name other than the ones the public headers' templates and inline
# functions call. Also fails when a known public symbol is missing (so an empty table cannot pass).
# Inputs: LIBRARY, NM.
execute_process(COMMAND ${NM} -D --defined-only -C ${LIBRARY} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${LIBRARY}: ${err}")
endif()
string(REPLACE ";" "\\;" out "${out}")
string(REPLACE "\n" ";" lines "${out}")

# The detail:: names that header templates and inline functions reach (include/cudarc/detail/*.hpp and the
# detail helpers declared in public headers). "PinnedAllocation (": the typeinfo of a function type returning
# it, which clang's -fsanitize=function emits in the sanitizer build.
set(allowed_detail
    "PinnedAllocation::" "PinnedAllocation (" "begin_capture" "end_capture" "abandon_capture" "check_dlpack" "import_dlpack"
    "export_dlpack" "borrow_memory" "owner_wrote" "sync_owner" "allocate_buffer" "allocate_managed_buffer"
    "destroy_buffer" "buffer_address" "buffer_device_ordinal" "buffer_generation" "check_view" "record_stream"
    "prepare_indirect_access" "copy_host_to_device" "copy_device_to_host" "copy_device_to_device"
    "memset_bytes" "prefetch_to_device" "launch_packed" "validate_launch_config" "throw_out_of_range"
    "throw_size_mismatch" "throw_size_overflow" "copy_pinned_to_device" "copy_device_to_pinned" "pinned_wait"
    "pinned_ready" "copy_2d")
set(count 0)
set(bad "")
foreach(line IN LISTS lines)
    if(line STREQUAL "")
        continue()
    endif()
    # "<address> <type> <name>"
    string(REGEX REPLACE "^[0-9a-fA-F]+ [A-Za-z] " "" name "${line}")
    math(EXPR count "${count} + 1")
    string(REGEX REPLACE "^(typeinfo name for |typeinfo for |vtable for |VTT for |non-virtual thunk to )" ""
           bare "${name}")
    if(NOT bare MATCHES "^cudarc::")
        list(APPEND bad "${name}")
    elseif(bare MATCHES "^cudarc::(sys|alloc|rtc|optim::abi|optim::detail|nccl::detail)::")
        list(APPEND bad "${name}")
    elseif(bare MATCHES "^cudarc::detail::(.*)$")
        set(rest "${CMAKE_MATCH_1}")
        set(ok FALSE)
        foreach(prefix IN LISTS allowed_detail)
            string(FIND "${rest}" "${prefix}" at)
            if(at EQUAL 0)
                set(ok TRUE)
            endif()
        endforeach()
        if(NOT ok)
            list(APPEND bad "${name}")
        endif()
    endif()
endforeach()
foreach(required IN ITEMS "cudarc::Device::open(" "cudarc::version()" "typeinfo for cudarc::Error")
    string(FIND "${out}" "${required}" at)
    if(at EQUAL -1)
        list(APPEND bad "missing: ${required}")
    endif()
endforeach()
if(bad)
    list(LENGTH bad nbad)
    string(REPLACE ";" "\n  " bad "${bad}")
    message(FATAL_ERROR "${LIBRARY} exports ${nbad} symbols outside its public API (of ${count}):\n  ${bad}")
endif()
message(STATUS "${LIBRARY}: ${count} exported symbols, all public API")

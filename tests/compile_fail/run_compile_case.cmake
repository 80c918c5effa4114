# Compiles SOURCE (syntax and template instantiation only) and checks the outcome its first line asks for.
# Inputs: CXX, STD, INCLUDE_DIR, GENERATED_INCLUDE_DIR (cudarc/version.hpp, cudarc/config.hpp), SOURCE.
file(STRINGS ${SOURCE} first_line LIMIT_COUNT 1)
if(first_line MATCHES "^// expect-error: (.+)$")
    set(expect_failure TRUE)
    set(expected_text "${CMAKE_MATCH_1}")
elseif(first_line MATCHES "^// expect: compiles")
    set(expect_failure FALSE)
else()
    message(FATAL_ERROR "${SOURCE}: the first line must be '// expect-error: <text>' or '// expect: compiles'")
endif()

# The project's warning flags, as errors: the control must compile cleanly under them.
execute_process(
    COMMAND ${CXX} ${STD} -fsyntax-only -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
            -Wold-style-cast -Werror -I${INCLUDE_DIR} -I${GENERATED_INCLUDE_DIR} ${SOURCE}
    RESULT_VARIABLE result
    OUTPUT_VARIABLE output
    ERROR_VARIABLE output)

if(expect_failure)
    if(result EQUAL 0)
        message(FATAL_ERROR "${SOURCE} compiled, but it must not (expected: ${expected_text})")
    endif()
    string(FIND "${output}" "${expected_text}" found)
    if(found EQUAL -1)
        message(FATAL_ERROR "${SOURCE} failed to compile, but not with the expected message '${expected_text}':\n"
                            "${output}")
    endif()
    message(STATUS "rejected as expected: ${expected_text}")
else()
    if(NOT result EQUAL 0)
        message(FATAL_ERROR "${SOURCE} must compile, but the compiler said:\n${output}")
    endif()
    message(STATUS "compiled as expected")
endif()

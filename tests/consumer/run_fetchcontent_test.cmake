# A parent project that pulls cudarc in with FetchContent, as docs/getting-started.md shows: the parent
# declares cudarc by its git repository and tag, and FETCHCONTENT_SOURCE_DIR_CUDARC points FetchContent at
# this checkout instead, so nothing is downloaded (CI has no network). The parent keeps its build type and
# cache (Note [Subproject] in CMakeLists.txt) and gets cudarc::cudarc, from this source tree.
# Inputs: SOURCE_DIR, WORK_DIR, GENERATOR, CXX, PREFIX_PATH. Configures only: building the library again
# would double the suite's longest step, and core.subproject_leaves_parent_alone covers the same targets.
file(REMOVE_RECURSE ${WORK_DIR})
file(WRITE ${WORK_DIR}/parent/CMakeLists.txt [=[
cmake_minimum_required(VERSION 3.25)
project(parent LANGUAGES CXX)
include(FetchContent)
FetchContent_Declare(cudarc
    GIT_REPOSITORY https://example.invalid/cudarc.git
    GIT_TAG v0.1.0
    GIT_SHALLOW TRUE)
FetchContent_MakeAvailable(cudarc)
if(NOT TARGET cudarc::cudarc)
    message(FATAL_ERROR "FetchContent_MakeAvailable(cudarc) gave no cudarc::cudarc target")
endif()
FetchContent_GetProperties(cudarc SOURCE_DIR fetched_source)
file(REAL_PATH "${fetched_source}" fetched_source)
file(REAL_PATH "${FETCHCONTENT_SOURCE_DIR_CUDARC}" expected_source)
if(NOT fetched_source STREQUAL expected_source)
    message(FATAL_ERROR "cudarc came from ${fetched_source}, not ${expected_source}")
endif()
if(CMAKE_BUILD_TYPE)
    message(FATAL_ERROR "cudarc set the parent's CMAKE_BUILD_TYPE to '${CMAKE_BUILD_TYPE}'")
endif()
foreach(option IN ITEMS CUDARC_INSTALL CUDARC_BUILD_TESTS CUDARC_BUILD_TOOLS CUDARC_BUILD_EXAMPLES)
    if(${option})
        message(FATAL_ERROR "${option} is on by default under FetchContent")
    endif()
endforeach()
add_executable(app app.cpp)
target_link_libraries(app PRIVATE cudarc::cudarc)
]=])
file(WRITE ${WORK_DIR}/parent/app.cpp "#include <cudarc/cudarc.hpp>\nint main() { return cudarc::version().major; }\n")
# FETCHCONTENT_FULLY_DISCONNECTED as well: should the override ever be ignored, the configure fails at once
# instead of reaching for the network.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${WORK_DIR}/parent -B ${WORK_DIR}/build -G ${GENERATOR}
                        -DFETCHCONTENT_SOURCE_DIR_CUDARC=${SOURCE_DIR} -DFETCHCONTENT_FULLY_DISCONNECTED=ON
                        -DCMAKE_CXX_COMPILER=${CXX} "-DCMAKE_PREFIX_PATH=${PREFIX_PATH}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "configuring the parent: exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configuring a parent project that pulls cudarc in with FetchContent failed")
endif()
# The generated build has the parent's program linking cudarc's library target.
if(GENERATOR STREQUAL "Ninja")
    file(READ ${WORK_DIR}/build/build.ninja ninja)
    if(NOT ninja MATCHES "libcudarc")
        message(FATAL_ERROR "the parent's build does not link libcudarc")
    endif()
endif()

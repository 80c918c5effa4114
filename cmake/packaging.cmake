# Debian packages of cudarc with CPack, one per install component (CMakeLists.txt, "Installation"):
#
#   libcudarc<SOVERSION>  runtime  the shared library (e.g. libcudarc0.1) and the license
#   libcudarc-dev         dev      headers, the libcudarc.so link, the CMake package, cudarc.pc
#   cudarc-tools          tools    cudarc-info, cudarc-bench, cudarc-nvrtc
#
# Built from a configured build tree: `cpack -G DEB --config BUILD/CPackConfig.cmake`, or with the deb
# presets, `cmake --workflow --preset deb` (a Release build laid out for /usr). The packages' files go
# under /usr; the library folder is CMAKE_INSTALL_LIBDIR, the multiarch lib/x86_64-linux-gnu when the
# build was configured with CMAKE_INSTALL_PREFIX=/usr (the deb preset), else lib.
# SPDX-License-Identifier: Apache-2.0

set(CPACK_PACKAGE_NAME cudarc)
set(CPACK_PACKAGE_VENDOR "cudarc")
set(CPACK_PACKAGE_CONTACT "cudarc maintainers <cudarc@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Only the three components: nothing else is installed, but a component left unnamed would make a
# package of its own.
set(CPACK_COMPONENTS_ALL runtime dev tools)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Stripped, as Debian ships binaries (a RelWithDebInfo build would otherwise put its debug information in).
set(CPACK_STRIP_FILES ON)

# Package names follow Debian's policy for libraries: the runtime package carries the SONAME's version
# (Note [SOVERSION] in CMakeLists.txt), so two incompatible releases can be installed side by side.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libcudarc${CUDARC_SOVERSION})
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libcudarc-dev)
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME cudarc-tools)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION devel)
# One string each: its first line is the package's synopsis, the rest its long description. (No
# CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPack would put it above each package's own synopsis.)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "cudarc: safe C++20 access to the CUDA driver API and NVRTC (library)
The shared library of cudarc, a C++20 library for GPU compute. The CUDA driver, NVRTC, HIP and NCCL are
loaded at run time, never linked: programs start on a machine without a GPU and say what is missing.")
set(CPACK_DEBIAN_DEV_DESCRIPTION "cudarc: safe C++20 access to the CUDA driver API and NVRTC (development)
Headers of cudarc, its CMake package (find_package(cudarc), target cudarc::cudarc) and its pkg-config
file (cudarc.pc). Programs compile with -std=c++20.")
set(CPACK_DEBIAN_TOOLS_DESCRIPTION "cudarc: safe C++20 access to the CUDA driver API and NVRTC (tools)
cudarc-info lists the GPUs, cudarc-bench compares cudarc with raw driver calls, cudarc-nvrtc compiles a
kernel file with NVRTC and reports each kernel's registers and shared memory.")

# Dependencies. The development files and the tools need the exact same runtime package (component
# dependencies give "libcudarc0.1 (= 0.1.0)"). What the library and the tools link (libfmt9, libstdc++6,
# libc6, ...) is read from the binaries by dpkg-shlibdeps (package dpkg-dev). The runtime library's own
# shlibs file lets other packages do the same against it: "libcudarc0.1 (>= 0.1.0)", since a later release
# of the same SONAME runs what an earlier one built (docs/abi.md).
set(CPACK_COMPONENT_DEV_DEPENDS runtime)
set(CPACK_COMPONENT_TOOLS_DEPENDS runtime)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# cudarc-info links libcudarc, which no installed package provides yet: dpkg-shlibdeps finds it in the
# build tree, and the component dependency above names its package.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR})
# The headers need only the C++ standard library; cudarc/fmt.hpp (opt-in) needs fmt's headers, and a
# static libcudarc links fmt.
if(CUDARC_LIBRARY_TYPE STREQUAL "STATIC_LIBRARY")
    set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libfmt-dev")
else()
    set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "libfmt-dev")
endif()

include(CPack)
cpack_add_component(runtime DISPLAY_NAME "Library")
cpack_add_component(dev DISPLAY_NAME "Development files" DEPENDS runtime)
cpack_add_component(tools DISPLAY_NAME "Tools" DEPENDS runtime)

/// @file
/// CUDARC_API — marks what libcudarc exports (Note [Symbol policy] in CMakeLists.txt).
#pragma once

// The library is compiled with hidden visibility: only declarations marked CUDARC_API are visible to
// programs that link it. Those are the public API, plus the few detail:: functions and classes that the
// public headers' templates and inline functions call (user code instantiates them, so it needs them too).
// A static libcudarc (CUDARC_STATIC, set by its CMake target and pkg-config file) marks nothing: linked
// into a user's shared library, it stays that library's private code.
#if defined(CUDARC_STATIC)
#define CUDARC_API
#else
/// Marks a declaration that libcudarc exports: default visibility for the shared library, nothing for a
/// static one (CUDARC_STATIC).
#define CUDARC_API __attribute__((visibility("default")))
#endif

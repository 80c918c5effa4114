// Shared by the compile-fail cases: a kernel signature and the objects a launch takes. Nothing here runs;
// the cases are only compiled.
#pragma once

#include "cudarc/launch.hpp"

namespace compile_fail {

// y[i] = a * x[i] + y[i]: writes y, reads x.
using Saxpy = cudarc::Kernel<void(float* y, const float* x, float a, unsigned long long n)>;

}  // namespace compile_fail

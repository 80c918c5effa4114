// expect-error: cudarc::launch: raw pointer type mismatch
#include "prelude.hpp"

void wrong(cudarc::Stream& stream, const compile_fail::Saxpy& saxpy, const float* y, const float* x) {
    cudarc::launch(stream, cudarc::LaunchConfig{1, 256}, saxpy, y, x, 2.0f, 16u);  // const float* as float*
}

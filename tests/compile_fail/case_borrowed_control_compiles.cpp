// expect: compiles
#include "prelude.hpp"

void right(cudarc::Stream& stream, const compile_fail::Saxpy& saxpy, cudarc::BorrowedSlice<float>& y,
           const cudarc::BorrowedSlice<const float>& x) {
    cudarc::launch(stream, cudarc::LaunchConfig{1, 256}, saxpy, y, x, 2.0f, 16u);
    cudarc::launch(stream, cudarc::LaunchConfig{1, 256}, saxpy, y.view(0, 8), x.view(8, 8), 2.0f, 8u);
}

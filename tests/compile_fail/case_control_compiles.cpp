// expect: compiles
// The control: every accepted way to pass arguments compiles, so a failing case fails for its own reason.
#include "prelude.hpp"

void control(cudarc::Stream& stream, const cudarc::LaunchConfig& config, const compile_fail::Saxpy& saxpy,
             cudarc::DeviceSlice<float>& y, const cudarc::DeviceSlice<float>& x, float* raw_y,
             const float* raw_x, std::size_t n) {
    cudarc::launch(stream, config, saxpy, y, x, 2.0f, n);               // slices
    cudarc::launch(stream, config, saxpy, y.view(), x.view(), 2.0, n);  // views; double -> float
    cudarc::launch(stream, config, saxpy, y, y, 2.0f, 10);              // a writable slice read as const T*
    cudarc::launch(stream, config, saxpy, raw_y, raw_x, 1.0f, n);       // raw pointers, untracked
    cudarc::launch(stream, config, saxpy, y.view(0, 4), nullptr, 1.0f, 4u);  // nullptr for a pointer
}

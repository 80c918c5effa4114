// expect-error: cudarc::launch: too many arguments
#include "prelude.hpp"

void wrong(cudarc::Stream& stream, const compile_fail::Saxpy& saxpy, cudarc::DeviceSlice<float>& y,
           const cudarc::DeviceSlice<float>& x) {
    cudarc::launch(stream, cudarc::LaunchConfig{1, 256}, saxpy, y, x, 2.0f, 16u, 0);  // one too many
}

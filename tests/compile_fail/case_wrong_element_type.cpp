// expect-error: cudarc::launch: element type mismatch
#include "prelude.hpp"

void wrong(cudarc::Stream& stream, const compile_fail::Saxpy& saxpy, cudarc::DeviceSlice<double>& y,
           const cudarc::DeviceSlice<float>& x) {
    cudarc::launch(stream, cudarc::LaunchConfig{1, 256}, saxpy, y, x, 2.0f,
                   16u);  // DeviceSlice<double> as float*
}

// expect-error: cudarc::launch: a value was passed where the kernel takes a pointer
#include "prelude.hpp"

void wrong(cudarc::Stream& stream, const compile_fail::Saxpy& saxpy, cudarc::DeviceSlice<float>& y) {
    cudarc::DevicePtr address = y.device_ptr();
    cudarc::launch(stream, cudarc::LaunchConfig{1, 256}, saxpy, y, address, 2.0f,
                   16u);  // an integer as const float*
}

// expect-error: cudarc::launch: temporary DeviceSlice argument
#include <utility>

#include "prelude.hpp"

void wrong(cudarc::Stream& stream, const compile_fail::Saxpy& saxpy, cudarc::DeviceSlice<float>& y,
           cudarc::DeviceSlice<float> x) {
    cudarc::launch(stream, cudarc::LaunchConfig{1, 256}, saxpy, y, std::move(x), 2.0f, 16u);
}

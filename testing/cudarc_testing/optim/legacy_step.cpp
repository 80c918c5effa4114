#include "cudarc_testing/optim/legacy_step.hpp"

#include <cstdint>

namespace cudarc::testing {
namespace {

NativeStream legacy_stream() noexcept {
    return reinterpret_cast<NativeStream>(std::uintptr_t{1});  // CU_STREAM_LEGACY
}

}  // namespace

LegacyStepper::LegacyStepper(const Device& device)
    : stream_(Stream::wrap(device, legacy_stream())), device_(stream_.device()) {}

void LegacyStepper::step(optim::Optimizer& optimizer, optim::GroupId group, std::size_t index,
                         const optim::ParamTensor& tensor) {
    optimizer.step(stream_, group, index, tensor);
    if (tensor.numel() != 0) device_.synchronize();
}

}  // namespace cudarc::testing

#include "cudarc_testing/optim/legacy_step.hpp"

#include <cstdint>
#include <memory>

#include "core/device_state.hpp"

namespace cudarc::testing {
namespace {

// The legacy stream as a foreign stream, which Stream::wrap refuses to make (Note [No legacy stream]): the
// baseline runs where the old launchers ran. Built from the library's internals (cudarc_testing links them).
Stream wrap_legacy_stream(const Device& device) {
    const auto& state = detail::Internals::device_state(device);
    const auto legacy = reinterpret_cast<NativeStream>(std::uintptr_t{1});  // CU_STREAM_LEGACY
    return detail::Internals::make_stream(
        state, std::make_shared<detail::StreamState>(*state, legacy, detail::StreamOwnership::foreign, 0),
        nullptr);
}

}  // namespace

LegacyStepper::LegacyStepper(const Device& device)
    : stream_(wrap_legacy_stream(device)), device_(stream_.device()) {}

void LegacyStepper::step(optim::Optimizer& optimizer, optim::GroupId group, std::size_t index,
                         const optim::ParamTensor& tensor) {
    optimizer.step(stream_, group, index, tensor);
    if (tensor.numel() != 0) device_.synchronize();
}

}  // namespace cudarc::testing

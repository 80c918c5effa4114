// The legacy pattern, kept only as the baseline of cudarc-bench optimizer and of the tests that check it
// gives the same results: every update on the legacy NULL stream, followed by a device-wide synchronize
// (cuCtxSynchronize) per parameter tensor. This is what cudarc's stream-aware steps replace; it is not
// part of the library.
#pragma once

#include <cstddef>

#include "cudarc/device.hpp"
#include "cudarc/optim/optimizer.hpp"
#include "cudarc/stream.hpp"

namespace cudarc::testing {

class LegacyStepper {
  public:
    // Wraps the legacy NULL stream of `device`'s context (CUDA's CU_STREAM_LEGACY).
    explicit LegacyStepper(const Device& device);

    // Tensor `index` of `group` on the legacy stream, then Device::synchronize (cuCtxSynchronize,
    // counted). The same kernel and grid as Optimizer::step(stream, group, index, tensor), so the results
    // are bitwise identical. An empty tensor launches nothing and waits for nothing.
    // Note: hazard tracking orders the step after earlier work on the tensors and the state on other
    // streams, like any step; the baseline's cost is the legacy stream and the synchronize.
    void step(optim::Optimizer& optimizer, optim::GroupId group, std::size_t index,
              const optim::ParamTensor& tensor);

    // The wrapped legacy stream (e.g. to record timing events on it).
    [[nodiscard]] Stream& stream() noexcept { return stream_; }

  private:
    Stream stream_;
    Device device_;
};

}  // namespace cudarc::testing

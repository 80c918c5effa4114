// The bytes an optimizer step must move through device memory: the floor a step's time is measured
// against (bytes / copy bandwidth). Host-only arithmetic, for cudarc-bench optimizer and its tests.
//
// Per element of a tensor: the parameter is read and written, the gradient read; each fp32 state array
// is read and written (8 bytes); each 8-bit state array moves its code both ways (2 bytes) plus its
// block's float absmax both ways (8 bytes per 256 elements). With max_unorm a first pass reads the
// parameter, gradient and state once more and writes one float per tile. Launch overhead, the code maps
// and the chunk tables are not counted.
#pragma once

#include <cstdint>

#include "cudarc/optim/element_type.hpp"
#include "cudarc/optim/options.hpp"

namespace cudarc::testing {

struct StepTraffic {
    std::uint64_t update_pass = 0;  // bytes read + written by the update pass
    std::uint64_t norm_pass = 0;    // bytes of the max_unorm pass (0 without clipping)
    [[nodiscard]] std::uint64_t total() const noexcept { return update_pass + norm_pass; }
};

// `state_arrays`: 0, 1 or 2 (the rule's state arrays). Throws cudarc::Error for a negative numel or a
// state_arrays outside [0, 2].
[[nodiscard]] StepTraffic step_traffic(optim::ElementType type, optim::StatePrecision precision,
                                       int state_arrays, std::int64_t numel, bool max_unorm);

}  // namespace cudarc::testing

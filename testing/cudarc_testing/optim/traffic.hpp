// The bytes an optimizer step must move through device memory: the floor a step's time is measured
// against (bytes / copy bandwidth). Host-only arithmetic, for cudarc-bench optimizer and its tests.
//
// Per element of a tensor: the parameter is read and written, the gradient read; each fp32 state array
// is read and written (8 bytes); each 8-bit state array moves its code both ways (2 bytes) plus its
// block's float absmax both ways (8 bytes per 256 elements). With a first pass (max_unorm, or LAMB's and
// LARS' trust ratios) it reads the parameter, gradient and state once more (LARS': the parameter and
// gradient only) and writes one float per tile and sum. Launch overhead, the code maps and the chunk
// tables are not counted.
#pragma once

#include <cstdint>

#include "cudarc/optim/element_type.hpp"
#include "cudarc/optim/options.hpp"

namespace cudarc::testing {

struct StepTraffic {
    std::uint64_t update_pass = 0;  // bytes read + written by the update pass
    std::uint64_t norm_pass = 0;    // bytes of the first pass (0 without one)
    [[nodiscard]] std::uint64_t total() const noexcept { return update_pass + norm_pass; }
};

// What a rule's step moves besides its parameters and gradients.
struct StepShape {
    int state_arrays = 0;               // arrays of one state value per parameter (AdEMAMix: 3)
    bool norm_pass = false;             // a first pass: max_unorm, or LAMB's and LARS' trust ratios
    bool norm_pass_reads_state = true;  // false for LARS, whose norms need the parameter and gradient only
    int norms = 1;                      // sums per tile the first pass writes
};

// The shape of a step of `rule` with `options` (their momentum and max_unorm).
[[nodiscard]] StepShape step_shape(optim::UpdateRule rule, const optim::GroupOptions& options) noexcept;

// Throws cudarc::Error for a negative numel, state_arrays outside [0, 3] or norms outside [1, 2].
[[nodiscard]] StepTraffic step_traffic(optim::ElementType type, optim::StatePrecision precision,
                                       const StepShape& shape, std::int64_t numel);
// `state_arrays`: 0, 1, 2 or 3; `max_unorm`: a first pass that reads the state and writes one sum per tile.
[[nodiscard]] StepTraffic step_traffic(optim::ElementType type, optim::StatePrecision precision,
                                       int state_arrays, std::int64_t numel, bool max_unorm);

}  // namespace cudarc::testing

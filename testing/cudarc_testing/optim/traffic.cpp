#include "cudarc_testing/optim/traffic.hpp"

#include <fmt/format.h>

#include "cudarc/error.hpp"
#include "optim/group_layout.hpp"
#include "optim/kernel_abi.hpp"

namespace cudarc::testing {

using optim::ElementType;
using optim::StatePrecision;
namespace abi = optim::abi;

StepShape step_shape(optim::UpdateRule rule, const optim::GroupOptions& options) noexcept {
    const optim::detail::StateShape state = optim::detail::state_shape(rule, options.momentum);
    StepShape shape;
    shape.state_arrays = state.arrays + (state.third ? 1 : 0);
    shape.norm_pass = options.max_unorm > 0.0 || abi::always_two_passes(rule);
    shape.norm_pass_reads_state = rule != optim::UpdateRule::lars;
    shape.norms = state.norms;
    return shape;
}

StepTraffic step_traffic(ElementType type, StatePrecision precision, const StepShape& shape,
                         std::int64_t numel) {
    if (numel < 0) throw Error(fmt::format("cudarc::optim: step_traffic of a negative size ({})", numel));
    if (shape.state_arrays < 0 || shape.state_arrays > 3) {
        throw Error(
            fmt::format("cudarc::optim: {} state arrays (an optimizer keeps 0 to 3)", shape.state_arrays));
    }
    if (shape.norms < 1 || shape.norms > 2) {
        throw Error(fmt::format("cudarc::optim: {} sums per tile (a first pass writes 1 or 2)", shape.norms));
    }
    const auto n = static_cast<std::uint64_t>(numel);
    const auto arrays = static_cast<std::uint64_t>(shape.state_arrays);
    const std::uint64_t e = optim::element_size(type);
    const bool eight_bit = precision == StatePrecision::blockwise8;
    const auto blocks = static_cast<std::uint64_t>(abi::absmax_count(numel));
    // One pass over one state array, one direction.
    const std::uint64_t state_once = eight_bit ? n + blocks * sizeof(float) : n * sizeof(float);

    StepTraffic traffic;
    traffic.update_pass = 2 * e * n + e * n + arrays * 2 * state_once;
    if (shape.norm_pass) {
        const auto tiles = static_cast<std::uint64_t>(abi::tile_count(numel, precision));
        traffic.norm_pass = 2 * e * n + (shape.norm_pass_reads_state ? arrays * state_once : 0) +
                            tiles * static_cast<std::uint64_t>(shape.norms) * sizeof(float);
    }
    return traffic;
}

StepTraffic step_traffic(ElementType type, StatePrecision precision, int state_arrays, std::int64_t numel,
                         bool max_unorm) {
    return step_traffic(type, precision, StepShape{state_arrays, max_unorm, true, 1}, numel);
}

}  // namespace cudarc::testing

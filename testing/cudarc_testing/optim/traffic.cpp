#include "cudarc_testing/optim/traffic.hpp"

#include <fmt/format.h>

#include "cudarc/error.hpp"
#include "optim/kernel_abi.hpp"

namespace cudarc::testing {

using optim::ElementType;
using optim::StatePrecision;
namespace abi = optim::abi;

StepTraffic step_traffic(ElementType type, StatePrecision precision, int state_arrays, std::int64_t numel,
                         bool max_unorm) {
    if (numel < 0) throw Error(fmt::format("cudarc::optim: step_traffic of a negative size ({})", numel));
    if (state_arrays < 0 || state_arrays > 2) {
        throw Error(
            fmt::format("cudarc::optim: {} state arrays (an optimizer keeps 0, 1 or 2)", state_arrays));
    }
    const auto n = static_cast<std::uint64_t>(numel);
    const auto arrays = static_cast<std::uint64_t>(state_arrays);
    const std::uint64_t e = optim::element_size(type);
    const bool eight_bit = precision == StatePrecision::blockwise8;
    const auto blocks = static_cast<std::uint64_t>(abi::absmax_count(numel));
    // One pass over one state array, one direction.
    const std::uint64_t state_once = eight_bit ? n + blocks * sizeof(float) : n * sizeof(float);

    StepTraffic traffic;
    traffic.update_pass = 2 * e * n + e * n + arrays * 2 * state_once;
    if (max_unorm) {
        const auto tiles = static_cast<std::uint64_t>(abi::tile_count(numel, precision));
        traffic.norm_pass = 2 * e * n + arrays * state_once + tiles * sizeof(float);
    }
    return traffic;
}

}  // namespace cudarc::testing

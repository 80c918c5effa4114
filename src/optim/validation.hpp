// The checks that run before an optimizer changes anything, with messages prefixed by the public call.
#pragma once

#include <cstdint>
#include <string_view>

#include "cudarc/optim/options.hpp"
#include "optim/kernel_abi.hpp"

namespace cudarc::optim::detail {

// The kernels' parameters for step number `step` (1-based): abi::make_kernel_params, its error prefixed
// by `where`.
[[nodiscard]] abi::KernelParams kernel_params(std::string_view where, UpdateRule rule,
                                              const GroupOptions& options, double grad_scale,
                                              std::int64_t step);

// Throws cudarc::Error (prefixed by `where`) for options no step could run with.
void validate_group_options(std::string_view where, UpdateRule rule, const GroupOptions& options);
void validate_optimizer_options(const OptimizerOptions& options);

}  // namespace cudarc::optim::detail

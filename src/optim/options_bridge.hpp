// From the public options (cudarc/optim/options.hpp) to the kernel ABI's types (optim/kernel_abi.hpp),
// and the checks that run before an optimizer changes anything.
#pragma once

#include <cstdint>
#include <string_view>

#include "cudarc/optim/element_type.hpp"
#include "cudarc/optim/options.hpp"
#include "optim/kernel_abi.hpp"

namespace cudarc::optim::detail {

[[nodiscard]] Algorithm to_algorithm(UpdateRule rule) noexcept;
[[nodiscard]] DType to_dtype(ElementType type) noexcept;
[[nodiscard]] StateFormat to_format(StatePrecision precision) noexcept;
[[nodiscard]] HyperParams to_hyper_params(const GroupOptions& options, double grad_scale,
                                          std::int64_t step) noexcept;

// The kernels' parameters for step number `step` (1-based). Throws cudarc::Error, prefixed by `where`,
// naming the invalid field.
[[nodiscard]] abi::KernelParams kernel_params(std::string_view where, UpdateRule rule,
                                              const GroupOptions& options, double grad_scale,
                                              std::int64_t step);

// Throws cudarc::Error (prefixed by `where`) for options no step could run with.
void validate_group_options(std::string_view where, UpdateRule rule, const GroupOptions& options);
void validate_optimizer_options(const OptimizerOptions& options);

}  // namespace cudarc::optim::detail

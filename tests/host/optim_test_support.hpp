// Helpers shared by the optimizer's host tests.
#pragma once

#include <cstdint>

#include "cudarc/optim/options.hpp"
#include "optim/kernel_abi.hpp"

namespace cudarc::optim::test {

// Everything one step's kernel parameters are made from: a group's options, the gradient scale and the
// 1-based step number.
struct StepInputs : GroupOptions {
    double grad_scale = 1.0;
    std::int64_t step = 1;
};

// torch.optim's defaults for `rule`, gradient scale 1, step 1.
inline StepInputs step_inputs(UpdateRule rule) {
    StepInputs inputs;
    static_cast<GroupOptions&>(inputs) = default_options(rule);
    return inputs;
}

inline abi::KernelParams kernel_params_of(UpdateRule rule, const StepInputs& inputs) {
    return abi::make_kernel_params(rule, inputs, inputs.grad_scale, inputs.step);
}

}  // namespace cudarc::optim::test

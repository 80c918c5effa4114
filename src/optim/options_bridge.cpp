#include "optim/options_bridge.hpp"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "cudarc/error.hpp"

namespace cudarc::optim {

std::string_view to_string(UpdateRule rule) noexcept {
    return to_string(detail::to_algorithm(rule));
}

std::string_view to_string(StatePrecision precision) noexcept {
    return precision == StatePrecision::blockwise8 ? "8bit" : "32bit";
}

std::string_view to_string(StatePlacement placement) noexcept {
    return placement == StatePlacement::managed ? "managed" : "device";
}

GroupOptions default_options(UpdateRule rule) noexcept {
    const HyperParams h = default_hyper_params(detail::to_algorithm(rule));
    GroupOptions o;
    o.lr = h.lr;
    o.beta1 = h.beta1;
    o.beta2 = h.beta2;
    o.eps = h.eps;
    o.weight_decay = h.weight_decay;
    o.momentum = h.momentum;
    o.dampening = h.dampening;
    o.nesterov = h.nesterov;
    o.alpha = h.alpha;
    o.lr_decay = h.lr_decay;
    o.max_unorm = h.max_unorm;
    return o;
}

}  // namespace cudarc::optim

namespace cudarc::optim::detail {

Algorithm to_algorithm(UpdateRule rule) noexcept {
    switch (rule) {
        case UpdateRule::adam:
            return Algorithm::adam;
        case UpdateRule::adamw:
            return Algorithm::adamw;
        case UpdateRule::sgd:
            return Algorithm::sgd;
        case UpdateRule::lion:
            return Algorithm::lion;
        case UpdateRule::rmsprop:
            return Algorithm::rmsprop;
        case UpdateRule::adagrad:
            return Algorithm::adagrad;
    }
    return Algorithm::adam;
}

DType to_dtype(ElementType type) noexcept {
    switch (type) {
        case ElementType::f32:
            return DType::f32;
        case ElementType::f16:
            return DType::f16;
        case ElementType::bf16:
            return DType::bf16;
    }
    return DType::f32;
}

StateFormat to_format(StatePrecision precision) noexcept {
    return precision == StatePrecision::blockwise8 ? StateFormat::blockwise8 : StateFormat::fp32;
}

HyperParams to_hyper_params(const GroupOptions& o, double grad_scale, std::int64_t step) noexcept {
    HyperParams h;
    h.lr = o.lr;
    h.beta1 = o.beta1;
    h.beta2 = o.beta2;
    h.eps = o.eps;
    h.weight_decay = o.weight_decay;
    h.momentum = o.momentum;
    h.dampening = o.dampening;
    h.nesterov = o.nesterov;
    h.alpha = o.alpha;
    h.lr_decay = o.lr_decay;
    h.grad_scale = grad_scale;
    h.max_unorm = o.max_unorm;
    h.step = step;
    return h;
}

abi::KernelParams kernel_params(std::string_view where, UpdateRule rule, const GroupOptions& options,
                                double grad_scale, std::int64_t step) {
    try {
        return abi::make_kernel_params(to_algorithm(rule), to_hyper_params(options, grad_scale, step));
    } catch (const Error& error) {
        throw Error(fmt::format("{}: {}", where, error.what()));
    }
}

void validate_group_options(std::string_view where, UpdateRule rule, const GroupOptions& options) {
    static_cast<void>(kernel_params(where, rule, options, 1.0, 1));
}

void validate_optimizer_options(const OptimizerOptions& options) {
    const auto rule = static_cast<int>(options.rule);
    if (rule < 0 || rule > static_cast<int>(UpdateRule::adagrad)) {
        throw Error(fmt::format("cudarc::optim::Optimizer: unknown update rule {}", rule));
    }
    if (options.precision != StatePrecision::fp32 && options.precision != StatePrecision::blockwise8) {
        throw Error(fmt::format("cudarc::optim::Optimizer: unknown state precision {}",
                                static_cast<int>(options.precision)));
    }
    if (options.placement != StatePlacement::device && options.placement != StatePlacement::managed) {
        throw Error(fmt::format("cudarc::optim::Optimizer: unknown state placement {}",
                                static_cast<int>(options.placement)));
    }
    if (options.max_chunk_elements <= 0) {
        throw Error(fmt::format("cudarc::optim::Optimizer: max_chunk_elements = {} must be positive",
                                options.max_chunk_elements));
    }
}

}  // namespace cudarc::optim::detail

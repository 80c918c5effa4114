// The public option helpers (cudarc/optim/options.hpp) and the checks of optim/validation.hpp.
#include <fmt/format.h>

#include "cudarc/error.hpp"
#include "cudarc/optim/options.hpp"
#include "optim/validation.hpp"

namespace cudarc::optim {

std::string_view to_string(UpdateRule rule) noexcept {
    switch (rule) {
        case UpdateRule::adam:
            return "adam";
        case UpdateRule::adamw:
            return "adamw";
        case UpdateRule::sgd:
            return "sgd";
        case UpdateRule::lion:
            return "lion";
        case UpdateRule::rmsprop:
            return "rmsprop";
        case UpdateRule::adagrad:
            return "adagrad";
        case UpdateRule::ademamix:
            return "ademamix";
        case UpdateRule::lamb:
            return "lamb";
        case UpdateRule::lars:
            return "lars";
    }
    return "unknown";
}

bool supports(UpdateRule rule, StatePrecision precision) noexcept {
    return precision == StatePrecision::fp32 || (rule != UpdateRule::lamb && rule != UpdateRule::lars);
}

std::string_view to_string(StatePrecision precision) noexcept {
    return precision == StatePrecision::blockwise8 ? "8bit" : "fp32";
}

std::string_view to_string(StatePlacement placement) noexcept {
    return placement == StatePlacement::managed ? "managed" : "device";
}

GroupOptions default_options(UpdateRule rule) noexcept {
    GroupOptions o;
    switch (rule) {
        case UpdateRule::adam:
        case UpdateRule::sgd:
            break;
        case UpdateRule::adamw:
            o.weight_decay = 1e-2;
            break;
        case UpdateRule::lion:
            o.lr = 1e-4;
            o.beta2 = 0.99;
            break;
        case UpdateRule::rmsprop:
            o.lr = 1e-2;
            break;
        case UpdateRule::adagrad:
            o.lr = 1e-2;
            o.eps = 1e-10;
            break;
        case UpdateRule::ademamix:
            o.alpha = 5.0;
            o.weight_decay = 1e-2;
            break;
        case UpdateRule::lamb:
            break;
        case UpdateRule::lars:
            o.lr = 1e-2;
            o.momentum = 0.9;
            break;
    }
    return o;
}

}  // namespace cudarc::optim

namespace cudarc::optim::detail {

abi::KernelParams kernel_params(std::string_view where, UpdateRule rule, const GroupOptions& options,
                                double grad_scale, std::int64_t step) {
    try {
        return abi::make_kernel_params(rule, options, grad_scale, step);
    } catch (const Error& error) {
        throw Error(fmt::format("{}: {}", where, error.what()));
    }
}

void validate_group_options(std::string_view where, UpdateRule rule, const GroupOptions& options) {
    static_cast<void>(kernel_params(where, rule, options, 1.0, 1));
}

void validate_optimizer_options(const OptimizerOptions& options) {
    const auto rule = static_cast<int>(options.rule);
    if (rule < 0 || rule > static_cast<int>(kLastUpdateRule)) {
        throw Error(fmt::format("cudarc::optim::Optimizer: unknown update rule {}", rule));
    }
    if (options.precision != StatePrecision::fp32 && options.precision != StatePrecision::blockwise8) {
        throw Error(fmt::format("cudarc::optim::Optimizer: unknown state precision {}",
                                static_cast<int>(options.precision)));
    }
    if (!supports(options.rule, options.precision)) {
        throw Error(
            fmt::format("cudarc::optim::Optimizer: {} keeps 32-bit state only (StatePrecision::fp32), "
                        "not {}",
                        to_string(options.rule), to_string(options.precision)));
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

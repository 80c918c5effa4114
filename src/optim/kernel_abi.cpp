#include "optim/kernel_abi.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cudarc/error.hpp"

namespace cudarc::optim::abi {

// The kernels' template arguments are the public enums' values.
static_assert(static_cast<int>(UpdateRule::adam) == cudarc_optim::kAdam &&
              static_cast<int>(UpdateRule::adamw) == cudarc_optim::kAdamW &&
              static_cast<int>(UpdateRule::sgd) == cudarc_optim::kSgd &&
              static_cast<int>(UpdateRule::lion) == cudarc_optim::kLion &&
              static_cast<int>(UpdateRule::rmsprop) == cudarc_optim::kRmsprop &&
              static_cast<int>(UpdateRule::adagrad) == cudarc_optim::kAdagrad);
static_assert(static_cast<int>(ElementType::fp32) == cudarc_optim::kFp32 &&
              static_cast<int>(ElementType::fp16) == cudarc_optim::kFp16 &&
              static_cast<int>(ElementType::bf16) == cudarc_optim::kBf16);
static_assert(static_cast<int>(StatePrecision::fp32) == cudarc_optim::kStateFp32 &&
              static_cast<int>(StatePrecision::blockwise8) == cudarc_optim::kStateBlockwise8);
namespace {

[[noreturn]] void reject(std::string_view field, double value, std::string_view constraint) {
    throw Error(
        fmt::format("cudarc: optimizer hyper-parameter {} = {} is invalid: {}", field, value, constraint));
}

// A finite double that must fit in float; returns it as float.
float checked_float(std::string_view field, double value) {
    if (!std::isfinite(value) || std::abs(value) > static_cast<double>(std::numeric_limits<float>::max())) {
        reject(field, value, "it must be finite and within float range");
    }
    return static_cast<float>(value);
}

void require(bool ok, std::string_view field, double value, std::string_view constraint) {
    if (!ok) reject(field, value, constraint);
}

bool uses_betas(UpdateRule rule) {
    return rule == UpdateRule::adam || rule == UpdateRule::adamw || rule == UpdateRule::lion;
}

}  // namespace

std::string kernel_name(UpdateRule rule, ElementType type, StatePrecision precision, KernelLayout layout,
                        KernelPass pass) {
    return fmt::format("cudarc_optim::{}<{}, {}, {}, {}>",
                       layout == KernelLayout::multi_tensor ? "multi_step" : "tensor_step",
                       static_cast<int>(rule), static_cast<int>(type), static_cast<int>(precision),
                       pass == KernelPass::update_norm ? "true" : "false");
}

std::vector<std::string> kernel_names(UpdateRule rule, ElementType type, StatePrecision precision) {
    std::vector<std::string> names;
    for (const KernelLayout layout : {KernelLayout::tensor, KernelLayout::multi_tensor}) {
        for (const KernelPass pass : {KernelPass::update, KernelPass::update_norm}) {
            names.push_back(kernel_name(rule, type, precision, layout, pass));
        }
    }
    return names;
}

KernelParams make_kernel_params(UpdateRule rule, const GroupOptions& h, double grad_scale,
                                std::int64_t step_number) {
    require(h.lr >= 0.0, "lr", h.lr, "it must be >= 0");
    require(h.eps >= 0.0, "eps", h.eps, "it must be >= 0");
    require(h.weight_decay >= 0.0, "weight_decay", h.weight_decay, "it must be >= 0");
    if (uses_betas(rule)) {
        require(h.beta1 >= 0.0 && h.beta1 < 1.0, "beta1", h.beta1, "it must be in [0, 1)");
        require(h.beta2 >= 0.0 && h.beta2 < 1.0, "beta2", h.beta2, "it must be in [0, 1)");
    }
    require(h.momentum >= 0.0, "momentum", h.momentum, "it must be >= 0");
    require(h.dampening >= 0.0 && h.dampening <= 1.0, "dampening", h.dampening, "it must be in [0, 1]");
    if (rule == UpdateRule::sgd && h.nesterov) {
        require(h.momentum > 0.0 && h.dampening == 0.0, "momentum", h.momentum,
                "Nesterov momentum needs momentum > 0 and dampening == 0");
    }
    require(h.alpha >= 0.0 && h.alpha <= 1.0, "alpha", h.alpha, "it must be in [0, 1]");
    require(h.lr_decay >= 0.0, "lr_decay", h.lr_decay, "it must be >= 0");
    require(grad_scale > 0.0, "grad_scale", grad_scale, "it must be > 0");
    require(h.max_unorm >= 0.0, "max_unorm", h.max_unorm, "it must be >= 0 (0 turns clipping off)");
    require(step_number >= 1 && step_number <= std::numeric_limits<std::int32_t>::max(), "step",
            static_cast<double>(step_number), "it must be in [1, 2^31 - 1]");

    KernelParams k{};
    k.lr = checked_float("lr", h.lr);
    k.beta1 = checked_float("beta1", h.beta1);
    k.beta2 = checked_float("beta2", h.beta2);
    k.eps = checked_float("eps", h.eps);
    k.weight_decay = checked_float("weight_decay", h.weight_decay);
    k.momentum = checked_float("momentum", h.momentum);
    k.dampening = checked_float("dampening", h.dampening);
    k.alpha = checked_float("alpha", h.alpha);
    k.lr_decay = checked_float("lr_decay", h.lr_decay);
    k.grad_scale = checked_float("grad_scale", grad_scale);
    k.max_unorm = checked_float("max_unorm", h.max_unorm);
    k.step = static_cast<std::int32_t>(step_number);
    k.nesterov = h.nesterov ? 1 : 0;

    // Derived in double from the caller's values, as torch derives them in Python.
    const double step = static_cast<double>(step_number);
    k.inv_grad_scale = checked_float("1 / grad_scale", 1.0 / grad_scale);
    require(k.inv_grad_scale > 0.0f, "grad_scale", grad_scale, "its reciprocal underflows in float");
    k.step_size = k.lr;
    k.bias_correction2_sqrt = 1.0f;
    k.decay = 1.0f;
    if (rule == UpdateRule::adam || rule == UpdateRule::adamw) {
        k.step_size = checked_float("lr / (1 - beta1^step)", h.lr / (1.0 - std::pow(h.beta1, step)));
        k.bias_correction2_sqrt =
            checked_float("sqrt(1 - beta2^step)", std::sqrt(1.0 - std::pow(h.beta2, step)));
        // beta2 so close to 1 that 1 - beta2^step vanishes would divide by zero in the kernel.
        require(k.bias_correction2_sqrt > 0.0f, "beta2", h.beta2, "1 - beta2^step underflows in float");
    } else if (rule == UpdateRule::adagrad) {
        k.step_size =
            checked_float("lr / (1 + (step - 1) * lr_decay)", h.lr / (1.0 + (step - 1.0) * h.lr_decay));
    }
    if (rule == UpdateRule::adamw || rule == UpdateRule::lion) {
        k.decay = checked_float("1 - lr * weight_decay", 1.0 - h.lr * h.weight_decay);
    }
    return k;
}

MapSign state_map(UpdateRule rule, int state) noexcept {
    // The kernels choose their code search by the same rule.
    return cudarc_optim::uses_unsigned_map(static_cast<int>(rule), state) ? MapSign::unsigned_map
                                                                          : MapSign::signed_map;
}

namespace {

std::int64_t grid_cap(StatePrecision precision, int multiprocessors, int resident_per_multiprocessor) {
    return precision == StatePrecision::blockwise8
               ? std::int64_t{std::max(1, multiprocessors)} * std::max(1, resident_per_multiprocessor)
               : std::numeric_limits<std::int32_t>::max();
}

}  // namespace

std::size_t dynamic_shared_bytes(StatePrecision precision, ElementType type, int major) noexcept {
    if (precision != StatePrecision::blockwise8 || major < 9) return 0;
    return static_cast<std::size_t>(cudarc_optim::tile_pipeline_bytes(static_cast<int>(element_size(type))));
}

unsigned update_block_threads(StatePrecision precision, int major) noexcept {
    const bool copies = precision == StatePrecision::blockwise8 && major >= 9;
    return kBlockThreads + (copies ? static_cast<unsigned>(cudarc_optim::kProducerThreads) : 0u);
}

unsigned recommended_grid(std::int64_t numel, StatePrecision precision, int multiprocessors,
                          int resident_per_multiprocessor) {
    const std::int64_t tiles = std::max<std::int64_t>(1, tile_count(numel, precision));
    return static_cast<unsigned>(
        std::min(tiles, grid_cap(precision, multiprocessors, resident_per_multiprocessor)));
}

unsigned recommended_multi_grid(std::size_t chunks, StatePrecision precision, int multiprocessors,
                                int resident_per_multiprocessor) {
    const auto count = std::max<std::int64_t>(1, static_cast<std::int64_t>(chunks));
    return static_cast<unsigned>(
        std::min(count, grid_cap(precision, multiprocessors, resident_per_multiprocessor)));
}

std::vector<Chunk> make_chunks(std::span<const std::int64_t> numels, StatePrecision precision,
                               std::int64_t max_chunk_elements) {
    const std::int64_t tile = tile_elements(precision);
    if (max_chunk_elements <= 0) {
        throw Error(fmt::format("cudarc: optimizer chunk size {} must be positive", max_chunk_elements));
    }
    if (numels.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
        throw Error(
            fmt::format("cudarc: {} tensors are more than one multi-tensor launch can index", numels.size()));
    }
    // Whole tiles, at least one, and a count that fits the chunk's int.
    const std::int64_t limit =
        std::min<std::int64_t>(max_chunk_elements, std::numeric_limits<std::int32_t>::max());
    const std::int64_t chunk = std::max(tile, limit / tile * tile);
    // Count first (ceil without numel + chunk - 1, which wraps near INT64_MAX): the kernels take the
    // count as an int, and a table too long for that must fail before anything is allocated.
    constexpr std::int64_t kMaxChunks = std::numeric_limits<std::int32_t>::max();
    std::int64_t count = 0;
    for (std::size_t i = 0; i < numels.size(); ++i) {
        if (numels[i] < 0)
            throw Error(fmt::format("cudarc: tensor {} has a negative size ({})", i, numels[i]));
        count += numels[i] / chunk + (numels[i] % chunk != 0 ? 1 : 0);
        if (count > kMaxChunks) {
            throw Error(
                fmt::format("cudarc::optim: tensors 0..{} ({} elements in tensor {}) need more than {} "
                            "chunks of {} elements, "
                            "more than one multi-tensor launch can index",
                            i, numels[i], i, kMaxChunks, chunk));
        }
    }
    std::vector<Chunk> chunks;
    chunks.reserve(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < numels.size(); ++i) {
        // Note: the last step is what is left, so offset stops at numels[i] instead of stepping past it
        // (which could wrap).
        for (std::int64_t offset = 0; offset < numels[i]; offset += std::min(chunk, numels[i] - offset)) {
            chunks.push_back(Chunk{static_cast<std::int32_t>(i),
                                   static_cast<std::int32_t>(std::min(chunk, numels[i] - offset)), offset});
        }
    }
    return chunks;
}

}  // namespace cudarc::optim::abi

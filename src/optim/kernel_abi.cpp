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
              static_cast<int>(UpdateRule::adagrad) == cudarc_optim::kAdagrad &&
              static_cast<int>(UpdateRule::ademamix) == cudarc_optim::kAdemamix &&
              static_cast<int>(UpdateRule::lamb) == cudarc_optim::kLamb &&
              static_cast<int>(UpdateRule::lars) == cudarc_optim::kLars &&
              kLastUpdateRule == UpdateRule::lars);
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
    return rule == UpdateRule::adam || rule == UpdateRule::adamw || rule == UpdateRule::lion ||
           rule == UpdateRule::ademamix || rule == UpdateRule::lamb;
}

}  // namespace

std::string kernel_name(UpdateRule rule, ElementType type, StatePrecision precision, KernelLayout layout,
                        KernelPass pass) {
    const char* entry = layout == KernelLayout::multi_tensor              ? "multi_step"
                        : layout == KernelLayout::multi_tensor_capturable ? "multi_step_capturable"
                                                                          : "tensor_step";
    return fmt::format("cudarc_optim::{}<{}, {}, {}, {}>", entry, static_cast<int>(rule),
                       static_cast<int>(type), static_cast<int>(precision),
                       pass == KernelPass::update_norm ? "true" : "false");
}

std::string store_step_name(UpdateRule rule) {
    return fmt::format("cudarc_optim::store_step<{}>", static_cast<int>(rule));
}

std::vector<std::string> kernel_names(UpdateRule rule, ElementType type, StatePrecision precision,
                                      bool capturable) {
    std::vector<std::string> names;
    if (capturable) {
        for (const KernelPass pass : {KernelPass::update, KernelPass::update_norm}) {
            names.push_back(kernel_name(rule, type, precision, KernelLayout::multi_tensor_capturable, pass));
        }
        names.push_back(store_step_name(rule));
        return names;
    }
    for (const KernelLayout layout : {KernelLayout::tensor, KernelLayout::multi_tensor}) {
        for (const KernelPass pass : {KernelPass::update, KernelPass::update_norm}) {
            names.push_back(kernel_name(rule, type, precision, layout, pass));
        }
    }
    return names;
}

StepSchedule step_schedule(UpdateRule rule, const GroupOptions& options) noexcept {
    // The logarithms serve AdEMAMix's beta3 warm-up alone (which make_kernel_params accepts with positive
    // betas only); skipping them keeps the other rules' per-step host work as it was.
    const bool logs =
        rule == UpdateRule::ademamix && options.t_beta3 > 0 && options.beta1 > 0.0 && options.beta3 > 0.0;
    return StepSchedule{options.lr,
                        options.beta1,
                        options.beta2,
                        options.lr_decay,
                        options.alpha,
                        options.beta3,
                        logs ? std::log(options.beta1) : 0.0,
                        logs ? std::log(options.beta3) : 0.0,
                        static_cast<double>(options.t_alpha),
                        static_cast<double>(options.t_beta3)};
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
    if (rule == UpdateRule::rmsprop)
        require(h.alpha >= 0.0 && h.alpha <= 1.0, "alpha", h.alpha, "it must be in [0, 1]");
    require(h.lr_decay >= 0.0, "lr_decay", h.lr_decay, "it must be >= 0");
    require(grad_scale > 0.0, "grad_scale", grad_scale, "it must be > 0");
    require(h.max_unorm >= 0.0, "max_unorm", h.max_unorm, "it must be >= 0 (0 turns clipping off)");
    if (rule == UpdateRule::ademamix) {
        require(h.alpha >= 0.0, "alpha", h.alpha, "AdEMAMix's weight of the slow EMA must be >= 0");
        require(h.beta3 >= 0.0 && h.beta3 < 1.0, "beta3", h.beta3, "it must be in [0, 1)");
        require(h.t_alpha >= 0, "t_alpha", static_cast<double>(h.t_alpha), "it must be >= 0 (0: no warm-up)");
        require(h.t_beta3 >= 0, "t_beta3", static_cast<double>(h.t_beta3), "it must be >= 0 (0: no warm-up)");
        if (h.t_beta3 > 0) {
            // The warm-up interpolates the EMA's half-life from beta1's to beta3's: both need one.
            require(h.beta1 > 0.0, "beta1", h.beta1, "a beta3 warm-up (t_beta3 > 0) needs beta1 > 0");
            require(h.beta3 > 0.0, "beta3", h.beta3, "a beta3 warm-up (t_beta3 > 0) needs beta3 > 0");
        }
    }
    if (rule == UpdateRule::lamb || rule == UpdateRule::lars) {
        require(h.max_unorm == 0.0, "max_unorm", h.max_unorm,
                "LAMB and LARS scale each tensor's update by their trust ratio; it must be 0");
    }
    if (rule == UpdateRule::lars) {
        require(h.trust_coefficient > 0.0, "trust_coefficient", h.trust_coefficient, "it must be > 0");
    }
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
    if (rule == UpdateRule::lars) {
        cudarc_optim::trust_coefficient(k) = checked_float("trust_coefficient", h.trust_coefficient);
    }
    if (rule == UpdateRule::ademamix) {
        static_cast<void>(checked_float("beta3", h.beta3));  // (the step's own comes from derive_step)
    }
    k.step = static_cast<std::int32_t>(step_number);
    k.nesterov = h.nesterov ? 1 : 0;

    // Derived in double from the caller's values, as torch derives them in Python; the step's own values
    // as a capturable step derives them on the device (Note [Per-step values]).
    k.inv_grad_scale = checked_float("1 / grad_scale", 1.0 / grad_scale);
    require(k.inv_grad_scale > 0.0f, "grad_scale", grad_scale, "its reciprocal underflows in float");
    k.decay = 1.0f;
    if (rule == UpdateRule::adamw || rule == UpdateRule::lion || rule == UpdateRule::ademamix) {
        k.decay = checked_float("1 - lr * weight_decay", 1.0 - h.lr * h.weight_decay);
    }
    // The EMAs' weights of the new value, rounded once from the double options (Note [Complements]);
    // AdEMAMix's 1 - beta3 follows the step (derive_step).
    if (uses_betas(rule)) {
        k.beta1_complement = static_cast<float>(1.0 - h.beta1);
        k.beta2_complement = static_cast<float>(1.0 - h.beta2);
    } else if (rule == UpdateRule::rmsprop) {
        cudarc_optim::smoothing_complement(k) = static_cast<float>(1.0 - h.alpha);
    } else if (rule == UpdateRule::sgd) {
        cudarc_optim::dampening_complement(k) = static_cast<float>(1.0 - h.dampening);
    }
    cudarc_optim::derive_step(static_cast<int>(rule), step_schedule(rule, h), step_number, k);
    if (rule == UpdateRule::adam || rule == UpdateRule::adamw || rule == UpdateRule::ademamix ||
        rule == UpdateRule::lamb) {
        require(std::isfinite(k.step_size), "lr / (1 - beta1^step)", static_cast<double>(k.step_size),
                "it must be finite and within float range");
        // beta2 so close to 1 that 1 - beta2^step vanishes would divide by zero in the kernel.
        require(k.bias_correction2_sqrt > 0.0f, "beta2", h.beta2, "1 - beta2^step underflows in float");
    } else if (rule == UpdateRule::adagrad) {
        require(std::isfinite(k.step_size), "lr / (1 + (step - 1) * lr_decay)",
                static_cast<double>(k.step_size), "it must be finite and within float range");
    }
    return k;
}

StepSettings make_step_settings(UpdateRule rule, const GroupOptions& options, double grad_scale) {
    // Step 1 is each rule's extreme (its step size is largest, its bias correction smallest): options
    // valid there are valid at every later step.
    return StepSettings{make_kernel_params(rule, options, grad_scale, 1), step_schedule(rule, options)};
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

std::size_t dynamic_shared_bytes(UpdateRule rule, StatePrecision precision, ElementType type,
                                 int major) noexcept {
    if (precision != StatePrecision::blockwise8 || major < 9) return 0;
    return static_cast<std::size_t>(cudarc_optim::tile_pipeline_bytes(
        static_cast<int>(element_size(type)), cudarc_optim::tile_states(static_cast<int>(rule))));
}

unsigned update_block_threads(StatePrecision precision, int major) noexcept {
    const bool copies = precision == StatePrecision::blockwise8 && major >= 9;
    return kBlockThreads + (copies ? static_cast<unsigned>(cudarc_optim::kProducerThreads) : 0u);
}

StreamSerialization pass_serialization(int major) noexcept {
    return major >= 9 ? StreamSerialization::programmatic : StreamSerialization::full;
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

std::int64_t chunk_elements(StatePrecision precision, ElementType type, bool third_state,
                            std::int64_t max_chunk_elements) noexcept {
    if (precision != StatePrecision::blockwise8 ||
        !cudarc_optim::hands_out_chunks(static_cast<int>(element_size(type)), third_state))
        return max_chunk_elements;
    return std::min<std::int64_t>(max_chunk_elements,
                                  std::int64_t{cudarc_optim::kDynamicChunkTiles} * cudarc_optim::kTile8);
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

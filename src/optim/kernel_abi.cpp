#include "optim/kernel_abi.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cudarc/error.hpp"
// Note: the kernels' own rules, compiled for the host, so host and device cannot disagree.
#include "../../kernels/optim_common.cuh"

namespace cudarc::optim {

std::string_view to_string(Algorithm algorithm) noexcept {
    switch (algorithm) {
        case Algorithm::adam:
            return "adam";
        case Algorithm::adamw:
            return "adamw";
        case Algorithm::sgd:
            return "sgd";
        case Algorithm::lion:
            return "lion";
        case Algorithm::rmsprop:
            return "rmsprop";
        case Algorithm::adagrad:
            return "adagrad";
    }
    return "unknown";
}

std::string_view to_string(DType dtype) noexcept {
    switch (dtype) {
        case DType::f32:
            return "f32";
        case DType::f16:
            return "f16";
        case DType::bf16:
            return "bf16";
    }
    return "unknown";
}

std::size_t element_bytes(DType dtype) noexcept {
    return dtype == DType::f32 ? 4 : 2;
}

HyperParams default_hyper_params(Algorithm algorithm) {
    HyperParams h;
    switch (algorithm) {
        case Algorithm::adam:
            break;
        case Algorithm::adamw:
            h.weight_decay = 1e-2;
            break;
        case Algorithm::sgd:
            h.lr = 1e-3;
            break;
        case Algorithm::lion:
            h.lr = 1e-4;
            h.beta2 = 0.99;
            break;
        case Algorithm::rmsprop:
            h.lr = 1e-2;
            break;
        case Algorithm::adagrad:
            h.lr = 1e-2;
            h.eps = 1e-10;
            break;
    }
    return h;
}

}  // namespace cudarc::optim

namespace cudarc::optim::abi {
namespace {

[[noreturn]] void reject(std::string_view field, double value, std::string_view rule) {
    throw Error(fmt::format("cudarc: optimizer hyper-parameter {} = {} is invalid: {}", field, value, rule));
}

// A finite double that must fit in float; returns it as float.
float checked_float(std::string_view field, double value) {
    if (!std::isfinite(value) || std::abs(value) > static_cast<double>(std::numeric_limits<float>::max())) {
        reject(field, value, "it must be finite and within float range");
    }
    return static_cast<float>(value);
}

void require(bool ok, std::string_view field, double value, std::string_view rule) {
    if (!ok) reject(field, value, rule);
}

bool uses_betas(Algorithm a) {
    return a == Algorithm::adam || a == Algorithm::adamw || a == Algorithm::lion;
}

}  // namespace

std::string_view kernel_source(StateFormat format) noexcept {
    return format == StateFormat::blockwise8 ? "optim_8bit.cu" : "optim_32bit.cu";
}

std::string kernel_name(Algorithm algorithm, DType dtype, StateFormat format, KernelLayout layout,
                        KernelPass pass) {
    return fmt::format("cudarc_optim_{}_{}_{}_{}_{}", to_string(algorithm), to_string(dtype),
                       format == StateFormat::blockwise8 ? "8bit" : "32bit",
                       layout == KernelLayout::multi_tensor ? "multi" : "tensor",
                       pass == KernelPass::update_norm ? "unorm" : "update");
}

std::vector<std::pair<std::string, std::string>> compile_defines(Algorithm algorithm, DType dtype) {
    return {{"CUDARC_OPTIM_ALGORITHM", std::to_string(static_cast<int>(algorithm))},
            {"CUDARC_OPTIM_DTYPE", std::to_string(static_cast<int>(dtype))}};
}

KernelParams make_kernel_params(Algorithm algorithm, const HyperParams& h) {
    require(h.lr >= 0.0, "lr", h.lr, "it must be >= 0");
    require(h.eps >= 0.0, "eps", h.eps, "it must be >= 0");
    require(h.weight_decay >= 0.0, "weight_decay", h.weight_decay, "it must be >= 0");
    if (uses_betas(algorithm)) {
        require(h.beta1 >= 0.0 && h.beta1 < 1.0, "beta1", h.beta1, "it must be in [0, 1)");
        require(h.beta2 >= 0.0 && h.beta2 < 1.0, "beta2", h.beta2, "it must be in [0, 1)");
    }
    require(h.momentum >= 0.0, "momentum", h.momentum, "it must be >= 0");
    require(h.dampening >= 0.0 && h.dampening <= 1.0, "dampening", h.dampening, "it must be in [0, 1]");
    if (algorithm == Algorithm::sgd && h.nesterov) {
        require(h.momentum > 0.0 && h.dampening == 0.0, "momentum", h.momentum,
                "Nesterov momentum needs momentum > 0 and dampening == 0");
    }
    require(h.alpha >= 0.0 && h.alpha <= 1.0, "alpha", h.alpha, "it must be in [0, 1]");
    require(h.lr_decay >= 0.0, "lr_decay", h.lr_decay, "it must be >= 0");
    require(h.grad_scale > 0.0, "grad_scale", h.grad_scale, "it must be > 0");
    require(h.max_unorm >= 0.0, "max_unorm", h.max_unorm, "it must be >= 0 (0 turns clipping off)");
    require(h.step >= 1 && h.step <= std::numeric_limits<std::int32_t>::max(), "step",
            static_cast<double>(h.step), "it must be in [1, 2^31 - 1]");

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
    k.grad_scale = checked_float("grad_scale", h.grad_scale);
    k.max_unorm = checked_float("max_unorm", h.max_unorm);
    k.step = static_cast<std::int32_t>(h.step);
    k.nesterov = h.nesterov ? 1 : 0;

    // Derived in double from the caller's values, as torch derives them in Python.
    const double step = static_cast<double>(h.step);
    k.inv_grad_scale = checked_float("1 / grad_scale", 1.0 / h.grad_scale);
    require(k.inv_grad_scale > 0.0f, "grad_scale", h.grad_scale, "its reciprocal underflows in float");
    k.step_size = k.lr;
    k.bias_correction2_sqrt = 1.0f;
    k.decay = 1.0f;
    if (algorithm == Algorithm::adam || algorithm == Algorithm::adamw) {
        k.step_size = checked_float("lr / (1 - beta1^step)", h.lr / (1.0 - std::pow(h.beta1, step)));
        k.bias_correction2_sqrt =
            checked_float("sqrt(1 - beta2^step)", std::sqrt(1.0 - std::pow(h.beta2, step)));
        // beta2 so close to 1 that 1 - beta2^step vanishes would divide by zero in the kernel.
        require(k.bias_correction2_sqrt > 0.0f, "beta2", h.beta2, "1 - beta2^step underflows in float");
    } else if (algorithm == Algorithm::adagrad) {
        k.step_size =
            checked_float("lr / (1 + (step - 1) * lr_decay)", h.lr / (1.0 + (step - 1.0) * h.lr_decay));
    }
    if (algorithm == Algorithm::adamw || algorithm == Algorithm::lion) {
        k.decay = checked_float("1 - lr * weight_decay", 1.0 - h.lr * h.weight_decay);
    }
    return k;
}

int state_count(Algorithm algorithm, const HyperParams& hyper) noexcept {
    switch (algorithm) {
        case Algorithm::adam:
        case Algorithm::adamw:
            return 2;
        case Algorithm::sgd:
            return hyper.momentum != 0.0 ? 1 : 0;
        case Algorithm::lion:
        case Algorithm::rmsprop:
        case Algorithm::adagrad:
            return 1;
    }
    return 0;
}

MapSign state_map(Algorithm algorithm, int state) noexcept {
    // The kernels choose their code search by the same rule.
    return cudarc_optim::uses_unsigned_map(static_cast<int>(algorithm), state) ? MapSign::unsigned_map
                                                                               : MapSign::signed_map;
}

namespace {

std::int64_t grid_cap(StateFormat format, int multiprocessors, int resident_per_multiprocessor) {
    return format == StateFormat::blockwise8
               ? std::int64_t{std::max(1, multiprocessors)} * std::max(1, resident_per_multiprocessor)
               : std::numeric_limits<std::int32_t>::max();
}

}  // namespace

std::size_t dynamic_shared_bytes(StateFormat format, DType dtype, int major) noexcept {
    if (format != StateFormat::blockwise8 || major < 9) return 0;
    return static_cast<std::size_t>(
        cudarc_optim::tile_pipeline_bytes(static_cast<int>(element_bytes(dtype))));
}

unsigned update_block_threads(StateFormat format, int major) noexcept {
    const bool copies = format == StateFormat::blockwise8 && major >= 9;
    return kBlockThreads + (copies ? static_cast<unsigned>(cudarc_optim::kProducerThreads) : 0u);
}

unsigned recommended_grid(std::int64_t numel, StateFormat format, int multiprocessors,
                          int resident_per_multiprocessor) {
    const std::int64_t tiles = std::max<std::int64_t>(1, tile_count(numel, format));
    return static_cast<unsigned>(
        std::min(tiles, grid_cap(format, multiprocessors, resident_per_multiprocessor)));
}

unsigned recommended_multi_grid(std::size_t chunks, StateFormat format, int multiprocessors,
                                int resident_per_multiprocessor) {
    const auto count = std::max<std::int64_t>(1, static_cast<std::int64_t>(chunks));
    return static_cast<unsigned>(
        std::min(count, grid_cap(format, multiprocessors, resident_per_multiprocessor)));
}

std::vector<Chunk> make_chunks(std::span<const std::int64_t> numels, StateFormat format,
                               std::int64_t max_chunk_elements) {
    const std::int64_t tile = tile_elements(format);
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

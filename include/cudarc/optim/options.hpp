/// @file
/// cudarc::optim options: which update rule, how the state is stored, and each group's hyper-parameters.
#pragma once

#include <cstdint>
#include <string_view>

#include "cudarc/export.hpp"

namespace cudarc::optim {

/// The update rules: torch.optim's definitions; Lion, AdEMAMix, LAMB and LARS as in their papers (with
/// bitsandbytes' defaults). docs/optimizers.md has the formulas and where each comes from. LAMB and LARS keep
/// 32-bit state only (StatePrecision::fp32).
enum class UpdateRule : int {
    adam = 0,      ///< Adam (L2 weight decay)
    adamw = 1,     ///< AdamW (decoupled weight decay)
    sgd = 2,       ///< SGD, with optional momentum, dampening and Nesterov
    lion = 3,      ///< Lion
    rmsprop = 4,   ///< RMSprop
    adagrad = 5,   ///< Adagrad
    ademamix = 6,  ///< AdEMAMix: a fast and a slow EMA
    lamb = 7,      ///< LAMB: Adam's direction scaled by a per-tensor trust ratio
    lars = 8       ///< LARS: momentum SGD whose step is scaled by a per-tensor trust ratio
};
/// The last UpdateRule, for loops over every rule.
inline constexpr UpdateRule kLastUpdateRule = UpdateRule::lars;

/// How the optimizer state is stored: fp32, or 8-bit codes with one absmax per block of 256 elements
/// (bitsandbytes' blockwise dynamic quantization).
enum class StatePrecision : int { fp32 = 0, blockwise8 = 1 };

/// Where the state lives. `managed` (paged) state is unified memory that the driver may page out under
/// memory pressure; each step prefetches it to the device on the step's own stream. Where the device
/// lacks concurrent managed access the optimizer falls back to device memory (Optimizer::state_placement).
enum class StatePlacement : int { device = 0, managed = 1 };

/// The rule's name in lower case: "adam", "adamw", "sgd", ...
[[nodiscard]] CUDARC_API std::string_view to_string(UpdateRule rule) noexcept;
/// Whether `rule` can keep its state at `precision` (LAMB and LARS: fp32 only).
[[nodiscard]] CUDARC_API bool supports(UpdateRule rule, StatePrecision precision) noexcept;
/// "fp32" or "8bit".
[[nodiscard]] CUDARC_API std::string_view to_string(StatePrecision precision) noexcept;
/// "device" or "managed".
[[nodiscard]] CUDARC_API std::string_view to_string(StatePlacement placement) noexcept;

/// One parameter group's hyper-parameters (torch.optim's names and meanings). Fields a rule does not
/// use are ignored. Validated when given to the optimizer; an invalid value throws cudarc::Error naming it.
struct GroupOptions {
    /// The learning rate (every rule).
    double lr = 1e-3;
    double beta1 = 0.9;    ///< Adam, AdamW, Lion, AdEMAMix, LAMB
    double beta2 = 0.999;  ///< Adam, AdamW, Lion, AdEMAMix, LAMB
    double eps = 1e-8;     ///< Adam, AdamW, RMSprop, Adagrad, AdEMAMix, LAMB
    /// L2 for Adam, SGD, RMSprop, Adagrad and LARS; decoupled for AdamW, Lion and AdEMAMix; LAMB adds it to
    /// its update direction.
    double weight_decay = 0.0;
    double momentum = 0.0;   ///< SGD, LARS
    double dampening = 0.0;  ///< SGD
    bool nesterov = false;   ///< SGD (needs momentum > 0 and dampening == 0)
    double alpha = 0.99;     ///< RMSprop's smoothing constant; AdEMAMix's weight of the slow EMA (default 5)
    double lr_decay = 0.0;   ///< Adagrad
    /// When above 0, each tensor's update is scaled by min(1, max_unorm / ||update||_2), computed on the
    /// device. LAMB and LARS scale by their trust ratios instead: 0 for them.
    double max_unorm = 0.0;
    double beta3 = 0.9999;  ///< AdEMAMix: the slow EMA's decay
    /// AdEMAMix: warm-up steps of alpha (from 0) and of beta3 (from beta1, linearly in the EMA's half-life);
    /// 0: none (bitsandbytes' t_alpha and t_beta3, None there).
    std::int64_t t_alpha = 0;
    std::int64_t t_beta3 = 0;  ///< AdEMAMix: warm-up steps of beta3 (see t_alpha); 0: none
    double trust_coefficient = 0.02;  ///< LARS: eta, the trust ratio's coefficient
};

/// The defaults of `rule`: torch.optim's (Lion: lr 1e-4, betas 0.9 / 0.99; AdamW: weight decay 1e-2);
/// bitsandbytes' for AdEMAMix (alpha 5, beta3 0.9999, weight decay 1e-2), LAMB (as Adam's) and LARS (lr 1e-2,
/// trust coefficient 0.02), and LARS' paper's momentum 0.9.
[[nodiscard]] CUDARC_API GroupOptions default_options(UpdateRule rule) noexcept;

/// What an Optimizer is made with: the rule, the state's precision and placement, the chunking, and whether
/// steps can be captured. Fixed for the optimizer's life.
struct OptimizerOptions {
    /// The update rule.
    UpdateRule rule = UpdateRule::adamw;
    /// How the state is stored; supports(rule, precision) must hold.
    StatePrecision precision = StatePrecision::fp32;
    /// Where the state lives.
    StatePlacement placement = StatePlacement::device;
    /// Multi-tensor steps cut tensors into chunks of at most this many elements, each taken by one CUDA
    /// block. (8-bit state with fp32 parameters cuts at most 4096, docs/optimizers.md: Kernel ABI.)
    std::int64_t max_chunk_elements = 16384;
    /// Keeps each group's step count and hyper-parameters in device memory, like torch's capturable=True,
    /// so that a step captured into a graph is a new step at every replay (the kernels advance the count).
    /// Its setters then take a stream (set_options(stream, ...), an asynchronous upload), its step count is
    /// read back with step_count(stream, group), and its groups are stepped whole. Without it a step
    /// cannot be captured (every replay would repeat the captured step).
    bool capturable = false;
};

}  // namespace cudarc::optim

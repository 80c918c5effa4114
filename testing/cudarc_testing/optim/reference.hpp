// float64 CPU references of the optimizer kernels, for tests: the same update per element as
// kernels/optim_common.cuh, computed in double (docs/optimizers.md has the formulas).
//
// The reference takes the kernel's own parameter struct (abi::KernelParams, from make_kernel_params),
// so both sides start from the same float hyper-parameters and the same host-derived bias
// corrections and complements (1 - beta, Note [Complements]); only the arithmetic differs (double here, float
// on the device). The 8-bit path dequantizes in double, updates in double, and quantizes with the same code
// maps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cudarc/optim/element_type.hpp"
#include "cudarc/optim/options.hpp"
#include "optim/kernel_abi.hpp"
#include "optim/quantization.hpp"

namespace cudarc::optim::reference {

// --- fp16 / bf16 -------------------------------------------------------------------------------
// Rounds a double straight to the format (one rounding, to nearest, ties to even; overflow to
// infinity; NaN to a quiet NaN of the same sign). Note: going through float first could round twice.
[[nodiscard]] std::uint16_t to_half_bits(double value) noexcept;
[[nodiscard]] std::uint16_t to_bf16_bits(double value) noexcept;
[[nodiscard]] double from_half_bits(std::uint16_t bits) noexcept;
[[nodiscard]] double from_bf16_bits(std::uint16_t bits) noexcept;
// Rounds to `type`'s bits (fp32: the float's 32 bits; fp16/bf16: the 16 bits in the low half).
[[nodiscard]] std::uint32_t to_bits(ElementType type, double value) noexcept;
[[nodiscard]] double from_bits(ElementType type, std::uint32_t bits) noexcept;
// How many representable values apart two non-NaN values of `type` are (0: equal; +0 and -0 are 0 apart).
[[nodiscard]] std::int64_t ulp_distance(ElementType type, std::uint32_t a, std::uint32_t b) noexcept;

// --- One element ----------------------------------------------------------------------------------
struct ElementResult {
    double param = 0.0;   // the new parameter (unclipped: scale 1; LAMB's: lr and trust ratio 1)
    double state1 = 0.0;  // new states (unchanged when !applied)
    double state2 = 0.0;
    double state3 = 0.0;   // AdEMAMix's slow EMA
    double update = 0.0;   // the amount subtracted after decoupled decay: param * decay - update
    bool applied = false;  // false: grad / grad_scale was not finite; nothing changed
};

// One element's step. `grad` is the stored (loss-scaled) gradient. The finiteness test is the
// kernel's, in float: float(grad) * inv_grad_scale must be finite. LAMB's `update` is its direction (the
// bias-corrected Adam ratio plus weight decay), which the tensor's lr times trust ratio scales; LARS'
// momentum takes `factor`, its lr times trust ratio (step() computes both from the tensor's norms).
[[nodiscard]] ElementResult update_element(UpdateRule rule, const abi::KernelParams& params, double param,
                                           double grad, double state1, double state2, double state3 = 0.0,
                                           double factor = 1.0) noexcept;

// --- Whole tensors ----------------------------------------------------------------------------------
struct StepReport {
    bool nonfinite = false;     // some element's scaled gradient was NaN or infinite
    double update_norm = 0.0;   // sqrt(sum of update^2) over the applied elements, before clipping
    double update_scale = 1.0;  // min(1, max_unorm / update_norm) when max_unorm > 0, else 1
    // LAMB and LARS: the tensor's lr times trust ratio (docs/optimizers.md, "Trust ratios"), from the norm
    // of the parameter (all elements) and of LAMB's direction or LARS' unscaled gradient (applied elements).
    double trust_scale = 0.0;
};

// One step with fp32 state, in place. Arrays a rule does not use (detail::state_arrays) may be
// empty; used ones must have param.size() elements (else cudarc::Error, nothing changed). state3 is
// AdEMAMix's slow EMA.
StepReport step(UpdateRule rule, const abi::KernelParams& params, std::span<double> param,
                std::span<const double> grad, std::span<double> state1, std::span<double> state2,
                std::span<double> state3 = {});

// 8-bit blockwise state in the kernels' storage format, plus what the last step computed before
// rounding (for telling a midpoint tie from a real disagreement).
struct QuantizedState {
    MapSign sign = MapSign::signed_map;
    std::vector<std::uint8_t> codes;
    std::vector<float> absmax;
    std::vector<double> normalized;  // last step: new value / absmax, before choosing the code

    QuantizedState() = default;
    // The zero state, as zero-filled device memory holds it (codes 0, absmax 0).
    QuantizedState(MapSign map_sign, std::size_t numel);
    [[nodiscard]] const QuantMap& map() const { return dynamic_map(sign); }
    // map[code] * absmax, in double.
    [[nodiscard]] double value(std::size_t index) const;
};

// One step with 8-bit state, in place, in the kernels' order per block of 256 elements: dequantize
// (double), update each element (double), absmax = float(max |new state|) over the block (kept
// values included), parameters from the unquantized new state, codes = nearest code (double search)
// of new state / absmax. Unused states may be null; used ones must match param's size.
StepReport step_8bit(UpdateRule rule, const abi::KernelParams& params, std::span<double> param,
                     std::span<const double> grad, QuantizedState* state1, QuantizedState* state2,
                     QuantizedState* state3 = nullptr);

// The nearest code to `normalized` in double, by the kernels' rule (binary search for the last
// code <= x, upper neighbour if strictly nearer, ties to the lower code).
[[nodiscard]] std::uint8_t nearest_code(const QuantMap& map, double normalized) noexcept;

// Whether a device code agrees with the reference's: equal, or adjacent with the reference's
// normalized value within `tolerance` of the midpoint between the two codes' values.
[[nodiscard]] bool codes_agree(const QuantMap& map, std::uint8_t device_code, std::uint8_t reference_code,
                               double normalized, double tolerance = 1e-6) noexcept;

}  // namespace cudarc::optim::reference

#include "cudarc_testing/optim/reference.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "cudarc/error.hpp"

namespace cudarc::optim::reference {
namespace {

// A binary floating-point format with `mantissa_bits` stored fraction bits and `exponent_bits`
// exponent bits, in the low bits of a 16-bit word with the sign at bit 15.
struct Format16 {
    int mantissa_bits;
    int exponent_bits;
    [[nodiscard]] int bias() const { return (1 << (exponent_bits - 1)) - 1; }
    [[nodiscard]] std::uint32_t exponent_mask() const {
        return ((1u << exponent_bits) - 1u) << mantissa_bits;
    }
};
constexpr Format16 kHalf{10, 5};
constexpr Format16 kBf16{7, 8};

std::uint16_t round_to(const Format16& f, double value) {
    const std::uint32_t sign = std::signbit(value) ? 0x8000u : 0u;
    if (std::isnan(value))
        return static_cast<std::uint16_t>(sign | f.exponent_mask() | (1u << (f.mantissa_bits - 1)));
    const double a = std::abs(value);
    const int emin = 1 - f.bias();
    const int emax = f.bias();
    // At or past the midpoint between the largest finite value and 2^(emax + 1): infinity.
    const double overflow = std::ldexp(2.0 - std::ldexp(1.0, -(f.mantissa_bits + 1)), emax);
    if (a >= overflow) return static_cast<std::uint16_t>(sign | f.exponent_mask());
    if (a < std::ldexp(1.0, emin)) {
        // Subnormal: whole units of 2^(emin - mantissa_bits); a result of 2^mantissa_bits units is the
        // smallest normal number, whose encoding is that same integer.
        const double units = std::nearbyint(std::ldexp(a, f.mantissa_bits - emin));
        return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(units));
    }
    int e = 0;
    static_cast<void>(std::frexp(a, &e));
    const int exponent = e - 1;  // a in [2^exponent, 2^(exponent + 1))
    const auto significand =
        static_cast<std::uint32_t>(std::nearbyint(std::ldexp(a, f.mantissa_bits - exponent)));
    // A significand rounded up to 2^(mantissa_bits + 1) carries into the exponent by itself.
    const std::uint32_t bits = (static_cast<std::uint32_t>(exponent + f.bias()) << f.mantissa_bits) +
                               (significand - (1u << f.mantissa_bits));
    return static_cast<std::uint16_t>(sign | bits);
}

double decode(const Format16& f, std::uint16_t bits) {
    const bool negative = (bits & 0x8000u) != 0;
    const std::uint32_t exponent = (bits & f.exponent_mask()) >> f.mantissa_bits;
    const std::uint32_t fraction = bits & ((1u << f.mantissa_bits) - 1u);
    double magnitude = 0.0;
    if (exponent == (1u << f.exponent_bits) - 1u) {
        magnitude = fraction == 0 ? std::numeric_limits<double>::infinity()
                                  : std::numeric_limits<double>::quiet_NaN();
    } else if (exponent == 0) {
        magnitude = std::ldexp(static_cast<double>(fraction), 1 - f.bias() - f.mantissa_bits);
    } else {
        magnitude = std::ldexp(static_cast<double>(fraction + (1u << f.mantissa_bits)),
                               static_cast<int>(exponent) - f.bias() - f.mantissa_bits);
    }
    return negative ? -magnitude : magnitude;
}

// Sign-magnitude bits mapped to integers that order like the values (+0 and -0 both 0).
std::int64_t ordered(std::uint32_t bits, int width) {
    const std::uint32_t sign_bit = 1u << (width - 1);
    const auto magnitude = static_cast<std::int64_t>(bits & (sign_bit - 1u));
    return (bits & sign_bit) != 0 ? -magnitude : magnitude;
}

bool decoupled(UpdateRule a) {
    return a == UpdateRule::adamw || a == UpdateRule::lion || a == UpdateRule::ademamix;
}

bool trust_rule(UpdateRule a) {
    return a == UpdateRule::lamb || a == UpdateRule::lars;
}

void check_size(std::size_t expected, std::size_t actual, const char* what) {
    if (expected != actual) {
        throw Error(fmt::format("cudarc: optimizer reference: {} has {} elements, the parameter {}", what,
                                actual, expected));
    }
}

bool uses_state1(UpdateRule a, const abi::KernelParams& k) {
    return a != UpdateRule::sgd || k.momentum != 0.0f;
}
bool uses_state2(UpdateRule a) {
    return a == UpdateRule::adam || a == UpdateRule::adamw || a == UpdateRule::ademamix ||
           a == UpdateRule::lamb;
}
bool uses_state3(UpdateRule a) {
    return a == UpdateRule::ademamix;
}

double clip_scale(const abi::KernelParams& k, double norm) {
    const double max_unorm = k.max_unorm;
    return max_unorm > 0.0 && norm > max_unorm ? max_unorm / norm : 1.0;
}

// The new parameter; `scale` is max_unorm's, or LAMB's lr times trust ratio (LARS' is in its update).
double apply(UpdateRule a, const abi::KernelParams& k, double param, double update, double scale) {
    if (a == UpdateRule::lars) return param - update;
    const double decayed = decoupled(a) ? param * static_cast<double>(k.decay) : param;
    return decayed - scale * update;
}

// lr times the trust ratio of LAMB (||p|| / ||direction||) or LARS (eta ||p|| / (||g|| + wd ||p||)), 1
// times lr where a norm is 0 (docs/optimizers.md, "Trust ratios").
double trust_scale(UpdateRule a, const abi::KernelParams& k, double first_norm, double param_norm) {
    const double lr = k.lr;
    if (!(first_norm > 0.0 && param_norm > 0.0)) return lr;
    if (a == UpdateRule::lamb) return lr * param_norm / first_norm;
    const double eta = cudarc_optim::trust_coefficient(k);
    return lr * eta * param_norm / (first_norm + static_cast<double>(k.weight_decay) * param_norm);
}

}  // namespace

std::uint16_t to_half_bits(double value) noexcept {
    return round_to(kHalf, value);
}
std::uint16_t to_bf16_bits(double value) noexcept {
    return round_to(kBf16, value);
}
double from_half_bits(std::uint16_t bits) noexcept {
    return decode(kHalf, bits);
}
double from_bf16_bits(std::uint16_t bits) noexcept {
    return decode(kBf16, bits);
}

std::uint32_t to_bits(ElementType type, double value) noexcept {
    switch (type) {
        case ElementType::fp16:
            return to_half_bits(value);
        case ElementType::bf16:
            return to_bf16_bits(value);
        case ElementType::fp32:
            break;
    }
    return std::bit_cast<std::uint32_t>(static_cast<float>(value));
}

double from_bits(ElementType type, std::uint32_t bits) noexcept {
    switch (type) {
        case ElementType::fp16:
            return from_half_bits(static_cast<std::uint16_t>(bits));
        case ElementType::bf16:
            return from_bf16_bits(static_cast<std::uint16_t>(bits));
        case ElementType::fp32:
            break;
    }
    return std::bit_cast<float>(bits);
}

std::int64_t ulp_distance(ElementType type, std::uint32_t a, std::uint32_t b) noexcept {
    const int width = type == ElementType::fp32 ? 32 : 16;
    const std::int64_t d = ordered(a, width) - ordered(b, width);
    return d < 0 ? -d : d;
}

ElementResult update_element(UpdateRule rule, const abi::KernelParams& k, double param, double grad,
                             double state1, double state2, double state3, double factor) noexcept {
    ElementResult r{param, state1, state2, state3, 0.0, false};
    if (!std::isfinite(static_cast<float>(grad) * k.inv_grad_scale)) return r;
    r.applied = true;
    double g = grad * static_cast<double>(k.inv_grad_scale);
    const double wd = k.weight_decay;
    if (!decoupled(rule) && rule != UpdateRule::lamb && wd != 0.0) g += wd * param;
    // The EMAs' weights are the kernels' (Note [Complements]): the complements rounded once from the
    // caller's double betas, not 1 minus the float betas.
    const double beta1 = k.beta1;
    const double beta2 = k.beta2;
    const double beta1_complement = k.beta1_complement;
    const double beta2_complement = k.beta2_complement;
    const double eps = k.eps;
    const double lr = k.lr;
    switch (rule) {
        case UpdateRule::adam:
        case UpdateRule::adamw: {
            r.state1 = beta1 * state1 + beta1_complement * g;
            r.state2 = beta2 * state2 + beta2_complement * g * g;
            const double denom = std::sqrt(r.state2) / static_cast<double>(k.bias_correction2_sqrt) + eps;
            r.update = static_cast<double>(k.step_size) * r.state1 / denom;
            break;
        }
        case UpdateRule::sgd: {
            double direction = g;
            const double momentum = k.momentum;
            if (momentum != 0.0) {
                r.state1 = k.step <= 1 ? g
                                       : momentum * state1 +
                                             static_cast<double>(cudarc_optim::dampening_complement(k)) * g;
                direction = k.nesterov != 0 ? g + momentum * r.state1 : r.state1;
            }
            r.update = lr * direction;
            break;
        }
        case UpdateRule::lion: {
            const double c = beta1 * state1 + beta1_complement * g;
            r.update = c > 0.0 ? lr : (c < 0.0 ? -lr : 0.0);
            r.state1 = beta2 * state1 + beta2_complement * g;
            break;
        }
        case UpdateRule::rmsprop: {
            const double alpha = k.alpha;
            r.state1 = alpha * state1 + static_cast<double>(cudarc_optim::smoothing_complement(k)) * g * g;
            r.update = lr * g / (std::sqrt(r.state1) + eps);
            break;
        }
        case UpdateRule::adagrad: {
            r.state1 = state1 + g * g;
            r.update = static_cast<double>(k.step_size) * g / (std::sqrt(r.state1) + eps);
            break;
        }
        case UpdateRule::ademamix: {
            // lr (m1 / (1 - b1^t) + alpha m2) / (sqrt(nu) / sqrt(1 - b2^t) + eps), with this step's alpha and
            // beta3 (k.alpha, slow_decay(k)) and step_size = lr / (1 - b1^t).
            const double beta3 = cudarc_optim::slow_decay(k);
            const double beta3_complement = cudarc_optim::slow_decay_complement(k);
            r.state1 = beta1 * state1 + beta1_complement * g;
            r.state3 = beta3 * state3 + beta3_complement * g;
            r.state2 = beta2 * state2 + beta2_complement * g * g;
            const double denom = std::sqrt(r.state2) / static_cast<double>(k.bias_correction2_sqrt) + eps;
            r.update =
                (static_cast<double>(k.step_size) * r.state1 + lr * static_cast<double>(k.alpha) * r.state3) /
                denom;
            break;
        }
        case UpdateRule::lamb: {
            // The direction: m / (1 - b1^t) / (sqrt(v) / sqrt(1 - b2^t) + eps) + wd p (step_size = 1 / (1 -
            // b1^t)).
            r.state1 = beta1 * state1 + beta1_complement * g;
            r.state2 = beta2 * state2 + beta2_complement * g * g;
            const double denom = std::sqrt(r.state2) / static_cast<double>(k.bias_correction2_sqrt) + eps;
            r.update = static_cast<double>(k.step_size) * r.state1 / denom + wd * param;
            break;
        }
        case UpdateRule::lars: {
            // v = momentum v + lr local_lr (g + wd p); the parameter moves by v.
            r.state1 = static_cast<double>(k.momentum) * state1 + factor * g;
            r.update = r.state1;
            break;
        }
    }
    r.param = apply(rule, k, param, r.update, 1.0);
    return r;
}

StepReport step(UpdateRule rule, const abi::KernelParams& k, std::span<double> param,
                std::span<const double> grad, std::span<double> state1, std::span<double> state2,
                std::span<double> state3) {
    const bool with1 = uses_state1(rule, k);
    const bool with2 = uses_state2(rule);
    const bool with3 = uses_state3(rule);
    check_size(param.size(), grad.size(), "the gradient");
    if (with1) check_size(param.size(), state1.size(), "state1");
    if (with2) check_size(param.size(), state2.size(), "state2");
    if (with3) check_size(param.size(), state3.size(), "state3");

    StepReport report;
    // LARS' momentum takes its trust ratio: the norms come first, from the parameter and the gradient.
    double factor = 1.0;
    if (rule == UpdateRule::lars) {
        double grad_squares = 0.0;
        double param_squares = 0.0;
        for (std::size_t i = 0; i < param.size(); ++i) {
            param_squares += param[i] * param[i];
            if (!std::isfinite(static_cast<float>(grad[i]) * k.inv_grad_scale)) continue;
            const double g = grad[i] * static_cast<double>(k.inv_grad_scale);
            grad_squares += g * g;
        }
        factor = trust_scale(rule, k, std::sqrt(grad_squares), std::sqrt(param_squares));
        report.trust_scale = factor;
    }
    std::vector<ElementResult> results(param.size());
    double sum_squares = 0.0;
    double param_squares = 0.0;
    for (std::size_t i = 0; i < param.size(); ++i) {
        results[i] = update_element(rule, k, param[i], grad[i], with1 ? state1[i] : 0.0,
                                    with2 ? state2[i] : 0.0, with3 ? state3[i] : 0.0, factor);
        param_squares += param[i] * param[i];
        if (results[i].applied) {
            sum_squares += results[i].update * results[i].update;
        } else {
            report.nonfinite = true;
        }
    }
    report.update_norm = std::sqrt(sum_squares);
    report.update_scale = clip_scale(k, report.update_norm);
    if (rule == UpdateRule::lamb) {
        report.trust_scale = trust_scale(rule, k, report.update_norm, std::sqrt(param_squares));
        report.update_scale = report.trust_scale;
    }
    for (std::size_t i = 0; i < param.size(); ++i) {
        const ElementResult& r = results[i];
        if (!r.applied) continue;
        param[i] = apply(rule, k, param[i], r.update, report.update_scale);
        if (with1) state1[i] = r.state1;
        if (with2) state2[i] = r.state2;
        if (with3) state3[i] = r.state3;
    }
    return report;
}

QuantizedState::QuantizedState(MapSign map_sign, std::size_t numel)
    : sign(map_sign), codes(numel, 0), absmax((numel + kQuantBlockSize - 1) / kQuantBlockSize, 0.0f) {}

double QuantizedState::value(std::size_t index) const {
    return static_cast<double>(map()[codes[index]]) * static_cast<double>(absmax[index / kQuantBlockSize]);
}

std::uint8_t nearest_code(const QuantMap& map, double x) noexcept {
    int lo = 0;
    for (int step = 128; step > 0; step >>= 1) {
        if (static_cast<double>(map[static_cast<std::size_t>(lo + step)]) <= x) lo += step;
    }
    const auto at = [&map](int i) { return static_cast<double>(map[static_cast<std::size_t>(i)]); };
    if (lo < 255 && at(lo + 1) - x < x - at(lo)) ++lo;
    return static_cast<std::uint8_t>(lo);
}

bool codes_agree(const QuantMap& map, std::uint8_t device_code, std::uint8_t reference_code,
                 double normalized, double tolerance) noexcept {
    if (device_code == reference_code) return true;
    const int low = std::min(device_code, reference_code);
    if (std::max(device_code, reference_code) != low + 1) return false;
    const double midpoint = (static_cast<double>(map[static_cast<std::size_t>(low)]) +
                             static_cast<double>(map[static_cast<std::size_t>(low + 1)])) /
                            2.0;
    return std::abs(normalized - midpoint) <= tolerance;
}

StepReport step_8bit(UpdateRule rule, const abi::KernelParams& k, std::span<double> param,
                     std::span<const double> grad, QuantizedState* state1, QuantizedState* state2,
                     QuantizedState* state3) {
    if (trust_rule(rule)) throw Error("cudarc: optimizer reference: LAMB and LARS keep 32-bit state only");
    const bool with1 = uses_state1(rule, k);
    const bool with2 = uses_state2(rule);
    const bool with3 = uses_state3(rule);
    const std::size_t n = param.size();
    check_size(n, grad.size(), "the gradient");
    const std::size_t blocks = (n + kQuantBlockSize - 1) / kQuantBlockSize;
    for (auto [state, used, name] : {std::tuple{state1, with1, "state1"}, std::tuple{state2, with2, "state2"},
                                     std::tuple{state3, with3, "state3"}}) {
        if (!used) continue;
        if (state == nullptr) throw Error(fmt::format("cudarc: optimizer reference: {} is missing", name));
        check_size(n, state->codes.size(), name);
        if (state->absmax.size() != blocks) {
            throw Error(fmt::format("cudarc: optimizer reference: {} has {} absmax values for {} blocks",
                                    name, state->absmax.size(), blocks));
        }
    }

    // Pass 1 (all elements, nothing written): the new state values and updates.
    std::vector<ElementResult> results(n);
    StepReport report;
    double sum_squares = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        const double s1 = with1 ? state1->value(i) : 0.0;
        const double s2 = with2 ? state2->value(i) : 0.0;
        const double s3 = with3 ? state3->value(i) : 0.0;
        results[i] = update_element(rule, k, param[i], grad[i], s1, s2, s3);
        if (results[i].applied) {
            sum_squares += results[i].update * results[i].update;
        } else {
            report.nonfinite = true;
        }
    }
    report.update_norm = std::sqrt(sum_squares);
    report.update_scale = clip_scale(k, report.update_norm);

    // Pass 2: parameters from the unquantized state, then requantize block by block.
    for (std::size_t i = 0; i < n; ++i) {
        if (results[i].applied) param[i] = apply(rule, k, param[i], results[i].update, report.update_scale);
    }
    const auto requantize = [&](QuantizedState& state, double ElementResult::*field) {
        state.normalized.assign(n, 0.0);
        for (std::size_t block = 0; block < blocks; ++block) {
            const std::size_t begin = block * kQuantBlockSize;
            const std::size_t end = std::min(n, begin + kQuantBlockSize);
            double absmax = 0.0;
            for (std::size_t i = begin; i < end; ++i) absmax = std::max(absmax, std::abs(results[i].*field));
            state.absmax[block] = static_cast<float>(absmax);
            const double stored = state.absmax[block];
            for (std::size_t i = begin; i < end; ++i) {
                const double x = stored > 0.0 ? results[i].*field / stored : 0.0;
                state.normalized[i] = x;
                state.codes[i] = nearest_code(state.map(), x);
            }
        }
    };
    if (with1) requantize(*state1, &ElementResult::state1);
    if (with2) requantize(*state2, &ElementResult::state2);
    if (with3) requantize(*state3, &ElementResult::state3);
    return report;
}

}  // namespace cudarc::optim::reference

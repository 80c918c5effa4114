// The optimizer front end on a GPU: every rule x element type x state precision against the float64
// references (src/optim/reference.hpp), bitwise agreement between every way of running the same step
// (per tensor, multi-tensor, legacy, graph replay, a wrapped foreign stream, paged state), the gradient
// written behind pending work, non-finite gradients, and zero host synchronizations per step.
//
// Sizes are small (about 10^5 elements per problem) so the suite also runs under compute-sanitizer.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cudarc/optim/optimizer.hpp"
#include "cudarc_testing/optim/legacy_step.hpp"
#include "cudarc_testing/optim/reference.hpp"
#include "gpu_test.hpp"
#include "optim/group_layout.hpp"
#include "optim/kernel_abi.hpp"
#include "optim/quantization.hpp"
#include "optim/validation.hpp"

namespace {

using namespace cudarc;
using optim::ElementType;
using optim::GroupId;
using optim::GroupOptions;
using optim::StatePrecision;
using optim::TensorState;
using optim::UpdateRule;
namespace reference = optim::reference;
namespace abi = optim::abi;

constexpr UpdateRule kRules[] = {UpdateRule::adam,     UpdateRule::adamw,   UpdateRule::sgd,
                                 UpdateRule::lion,     UpdateRule::rmsprop, UpdateRule::adagrad,
                                 UpdateRule::ademamix, UpdateRule::lamb,    UpdateRule::lars};
constexpr ElementType kTypes[] = {ElementType::fp32, ElementType::fp16, ElementType::bf16};
constexpr StatePrecision kPrecisions[] = {StatePrecision::fp32, StatePrecision::blockwise8};

std::mt19937_64& rng() {
    return test::rng();
}
double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng());
}
std::size_t pick(std::size_t n) {
    return static_cast<std::size_t>(rng()() % n);
}

// NaN patterns no kernel writes by accident, per element type (in the low bits of a word).
std::uint32_t poison_word(ElementType type) {
    switch (type) {
        case ElementType::fp32:
            return test::kPoison;
        case ElementType::fp16:
            return 0x7d5au;
        case ElementType::bf16:
            return 0x7fa5u;
    }
    return 0;
}
std::uint32_t infinity_word(ElementType type, bool negative) {
    switch (type) {
        case ElementType::fp32:
            return negative ? 0xff800000u : 0x7f800000u;
        case ElementType::fp16:
            return negative ? 0xfc00u : 0x7c00u;
        case ElementType::bf16:
            return negative ? 0xff80u : 0x7f80u;
    }
    return 0;
}
std::uint32_t nan_word(ElementType type) {
    switch (type) {
        case ElementType::fp32:
            return 0x7fc00000u;
        case ElementType::fp16:
            return 0x7e00u;
        case ElementType::bf16:
            return 0x7fc0u;
    }
    return 0;
}

// --- One problem: a group of tensors, its hyper-parameters and its starting state --------------------

struct Problem {
    UpdateRule rule = UpdateRule::adamw;
    StatePrecision precision = StatePrecision::fp32;
    GroupOptions options;
    double grad_scale = 1.0;
    std::int64_t steps_before = 0;  // the step tested is steps_before + 1
    std::vector<ElementType> types;
    std::vector<std::vector<std::uint32_t>> params;  // element bits (fp16/bf16 in the low half)
    std::vector<std::vector<std::uint32_t>> grads;   // stored (scaled) gradients
    std::vector<TensorState> states;                 // starting state (all empty: zero state)

    [[nodiscard]] std::string describe() const {
        return fmt::format("{} {} state, step {}, grad_scale {}, max_unorm {}", optim::to_string(rule),
                           optim::to_string(precision), steps_before + 1, grad_scale, options.max_unorm);
    }
    [[nodiscard]] int state_count() const { return optim::detail::state_arrays(rule, options.momentum); }
};

GroupOptions random_options(UpdateRule rule) {
    GroupOptions o = optim::default_options(rule);
    o.lr = std::exp(uniform(std::log(1e-4), std::log(1e-2)));
    o.beta1 = uniform(0.8, 0.95);
    o.beta2 = rule == UpdateRule::lion ? uniform(0.9, 0.99) : uniform(0.95, 0.999);
    o.eps = std::exp(uniform(std::log(1e-8), std::log(1e-6)));
    o.weight_decay = pick(3) == 0 ? 0.0 : uniform(0.0, 0.1);
    if (rule == UpdateRule::sgd) {
        o.momentum = pick(4) == 0 ? 0.0 : uniform(0.5, 0.95);
        o.nesterov = o.momentum > 0.0 && pick(2) == 0;
        o.dampening = o.nesterov ? 0.0 : uniform(0.0, 0.3);
    }
    o.alpha = uniform(0.9, 0.99);
    o.lr_decay = pick(2) == 0 ? 0.0 : uniform(0.0, 0.01);
    if (rule == UpdateRule::ademamix) {
        // The slow EMA's weight and decay, and warm-ups that are under way, over, or absent at the step
        // tested (steps_before is at most 40).
        o.alpha = uniform(1.0, 8.0);
        o.beta3 = uniform(0.99, 0.9999);
        o.t_alpha = pick(3) == 0 ? 0 : static_cast<std::int64_t>(1 + pick(60));
        o.t_beta3 = pick(3) == 0 ? 0 : static_cast<std::int64_t>(1 + pick(60));
    }
    if (rule == UpdateRule::lars) {
        o.momentum = pick(4) == 0 ? 0.0 : uniform(0.5, 0.95);
        o.trust_coefficient = uniform(0.005, 0.05);
    }
    return o;
}

bool uses_trust_ratio(UpdateRule rule) {
    return rule == UpdateRule::lamb || rule == UpdateRule::lars;
}

// A random starting state in the ranges training produces (second moments are never negative). AdEMAMix's
// slow EMA follows its fast one in state1 (codes1, absmax1), as TensorState stacks them.
TensorState random_state(UpdateRule rule, StatePrecision precision, int state_count, std::size_t n) {
    TensorState s;
    const bool second_moment_first = rule == UpdateRule::rmsprop || rule == UpdateRule::adagrad;
    const bool third = rule == UpdateRule::ademamix;
    auto values = [&](bool nonnegative, double scale) {
        std::vector<float> v(n);
        for (auto& x : v) x = static_cast<float>(nonnegative ? uniform(0.0, scale) : uniform(-scale, scale));
        return v;
    };
    const std::vector<float> s1 = state_count >= 1
                                      ? values(second_moment_first, second_moment_first ? 1e-2 : 0.05)
                                      : std::vector<float>{};
    const std::vector<float> s2 = state_count >= 2 ? values(true, 1e-3) : std::vector<float>{};
    const std::vector<float> s3 = third ? values(false, 0.05) : std::vector<float>{};
    if (precision == StatePrecision::fp32) {
        s.state1 = s1;
        s.state1.insert(s.state1.end(), s3.begin(), s3.end());
        s.state2 = s2;
        return s;
    }
    if (state_count >= 1) {
        auto q = optim::quantize_blockwise(s1, optim::dynamic_map(abi::state_map(rule, 1)));
        s.codes1 = std::move(q.codes);
        s.absmax1 = std::move(q.absmax);
    }
    if (third) {
        auto q = optim::quantize_blockwise(s3, optim::dynamic_map(abi::state_map(rule, 3)));
        s.codes1.insert(s.codes1.end(), q.codes.begin(), q.codes.end());
        s.absmax1.insert(s.absmax1.end(), q.absmax.begin(), q.absmax.end());
    }
    if (state_count >= 2) {
        auto q = optim::quantize_blockwise(s2, optim::dynamic_map(abi::state_map(rule, 2)));
        s.codes2 = std::move(q.codes);
        s.absmax2 = std::move(q.absmax);
    }
    return s;
}

std::uint32_t random_word(ElementType type, double lo, double hi) {
    return reference::to_bits(type, uniform(lo, hi));
}

Problem make_problem(UpdateRule rule, StatePrecision precision, std::vector<ElementType> types, bool clip) {
    Problem p;
    p.rule = rule;
    p.precision = precision;
    p.options = random_options(rule);
    p.types = std::move(types);
    const bool has_half = std::find(p.types.begin(), p.types.end(), ElementType::fp16) != p.types.end();
    const double scales[] = {1.0, 4.0, 1024.0, 0.125};
    p.grad_scale = scales[pick(has_half ? 3 : 4)];
    p.steps_before = pick(3) == 0 ? 0 : static_cast<std::int64_t>(1 + pick(40));
    std::size_t total = 0;
    for (std::size_t i = 0; i < p.types.size(); ++i) {
        // Odd sizes, one spanning several chunks, one tiny.
        const std::size_t n = i == 0 ? 40000 + pick(30000) : (i == 1 ? 1 + pick(300) : 1 + pick(9000));
        total += n;
        std::vector<std::uint32_t> param(n);
        std::vector<std::uint32_t> grad(n);
        for (std::size_t k = 0; k < n; ++k) {
            param[k] = random_word(p.types[i], -1.0, 1.0);
            grad[k] = random_word(p.types[i], -p.grad_scale, p.grad_scale);
        }
        p.params.push_back(std::move(param));
        p.grads.push_back(std::move(grad));
        p.states.push_back(p.steps_before == 0 ? TensorState{}
                                               : random_state(rule, precision, p.state_count(), n));
    }
    if (clip && !uses_trust_ratio(rule)) {
        // A fraction of the update norm the step would have (about lr per element for most rules), so the
        // clipping is active for the large tensor and maybe not for the tiny one. (LAMB and LARS scale by
        // their trust ratios instead.)
        p.options.max_unorm = p.options.lr * std::sqrt(static_cast<double>(total)) * uniform(0.02, 0.2);
    }
    return p;
}

// --- Device side ------------------------------------------------------------------------------------------

// One tensor's parameter and gradient on the device, of a run-time element type. With offset 1 the
// tensor is a view that starts one element into its buffers, so no kernel can use vector accesses.
struct DeviceTensor {
    ElementType type = ElementType::fp32;
    std::size_t offset = 0;
    std::size_t numel = 0;
    DeviceSlice<float> f32_param, f32_grad;
    DeviceSlice<optim::half_bits> f16_param, f16_grad;
    DeviceSlice<optim::bf16_bits> bf16_param, bf16_grad;

    DeviceTensor(Stream& stream, ElementType t, const std::vector<std::uint32_t>& param,
                 const std::vector<std::uint32_t>& grad, std::size_t start = 0)
        : type(t), offset(start), numel(param.size()) {
        std::vector<std::uint32_t> padded_param(offset, 0u);
        std::vector<std::uint32_t> padded_grad(offset, 0u);
        padded_param.insert(padded_param.end(), param.begin(), param.end());
        padded_grad.insert(padded_grad.end(), grad.begin(), grad.end());
        switch (type) {
            case ElementType::fp32:
                f32_param = DeviceSlice<float>::from_host(stream, to<float>(padded_param));
                f32_grad = DeviceSlice<float>::from_host(stream, to<float>(padded_grad));
                break;
            case ElementType::fp16:
                f16_param =
                    DeviceSlice<optim::half_bits>::from_host(stream, to<optim::half_bits>(padded_param));
                f16_grad =
                    DeviceSlice<optim::half_bits>::from_host(stream, to<optim::half_bits>(padded_grad));
                break;
            case ElementType::bf16:
                bf16_param =
                    DeviceSlice<optim::bf16_bits>::from_host(stream, to<optim::bf16_bits>(padded_param));
                bf16_grad =
                    DeviceSlice<optim::bf16_bits>::from_host(stream, to<optim::bf16_bits>(padded_grad));
                break;
        }
    }

    [[nodiscard]] optim::ParamTensor tensor() {
        switch (type) {
            case ElementType::fp16:
                return {f16_param.view(offset, numel), f16_grad.view(offset, numel)};
            case ElementType::bf16:
                return {bf16_param.view(offset, numel), bf16_grad.view(offset, numel)};
            case ElementType::fp32:
                break;
        }
        return {f32_param.view(offset, numel), f32_grad.view(offset, numel)};
    }

    [[nodiscard]] std::vector<std::uint32_t> param_words(Stream& stream) const {
        std::vector<std::uint32_t> all;
        switch (type) {
            case ElementType::fp16:
                all = words(f16_param.to_vector(stream));
                break;
            case ElementType::bf16:
                all = words(bf16_param.to_vector(stream));
                break;
            case ElementType::fp32:
                all = words(f32_param.to_vector(stream));
                break;
        }
        return {all.begin() + static_cast<std::ptrdiff_t>(offset), all.end()};
    }

    // Copies `source`'s gradient into this one on `stream`: a device-to-device copy, fully asynchronous
    // (no pageable staging that could wait for the stream), tracked as a write on `stream`.
    void copy_grad_from(Stream& stream, const DeviceTensor& source) {
        switch (type) {
            case ElementType::fp32:
                copy(stream, f32_grad.view(), source.f32_grad.view());
                break;
            case ElementType::fp16:
                copy(stream, f16_grad.view(), source.f16_grad.view());
                break;
            case ElementType::bf16:
                copy(stream, bf16_grad.view(), source.bf16_grad.view());
                break;
        }
    }

    // The gradient's device address and size in bytes, for a kernel that writes it unseen by hazard
    // tracking, as another framework's would.
    [[nodiscard]] DevicePtr grad_address() const {
        switch (type) {
            case ElementType::fp16:
                return f16_grad.device_ptr();
            case ElementType::bf16:
                return bf16_grad.device_ptr();
            case ElementType::fp32:
                break;
        }
        return f32_grad.device_ptr();
    }
    [[nodiscard]] std::size_t grad_bytes() const {
        return (offset + numel) * (type == ElementType::fp32 ? 4u : 2u);
    }

    template <typename T>
    static std::vector<T> to(const std::vector<std::uint32_t>& w) {
        std::vector<T> out(w.size());
        for (std::size_t i = 0; i < w.size(); ++i) {
            if constexpr (std::is_same_v<T, float>) {
                out[i] = std::bit_cast<float>(w[i]);
            } else {
                out[i] = T{static_cast<std::uint16_t>(w[i])};
            }
        }
        return out;
    }
    template <typename T>
    static std::vector<std::uint32_t> words(const std::vector<T>& v) {
        std::vector<std::uint32_t> out(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) {
            if constexpr (std::is_same_v<T, float>) {
                out[i] = std::bit_cast<std::uint32_t>(v[i]);
            } else {
                out[i] = v[i].bits;
            }
        }
        return out;
    }
};

struct Outcome {
    std::vector<std::vector<std::uint32_t>> params;
    std::vector<TensorState> states;
};

enum class Variant { multi_tensor, per_tensor, legacy, graph, foreign_stream, paged_state, misaligned };

const char* to_string(Variant v) {
    switch (v) {
        case Variant::multi_tensor:
            return "multi-tensor";
        case Variant::per_tensor:
            return "per-tensor";
        case Variant::legacy:
            return "legacy";
        case Variant::graph:
            return "graph replay";
        case Variant::foreign_stream:
            return "foreign stream";
        case Variant::paged_state:
            return "paged state";
        case Variant::misaligned:
            return "misaligned parameters";
    }
    return "?";
}

// A fresh optimizer for `p` (capturable or not), its state set to p's starting state.
struct Setup {
    std::vector<DeviceTensor> device;
    std::vector<optim::ParamTensor> tensors;
    optim::Optimizer optimizer;
    GroupId group;

    Setup(Stream& stream, const Problem& p, optim::StatePlacement placement = optim::StatePlacement::device,
          std::size_t offset = 0, bool capturable = false)
        : device(upload(stream, p, offset)),
          tensors(views(device)),
          optimizer(stream, optim::OptimizerOptions{p.rule, p.precision, placement, 16384, capturable}),
          group(optimizer.add_group(stream, p.options, tensors)) {
        // (The setters with a stream serve both kinds of optimizer.)
        optimizer.set_grad_scale(stream, p.grad_scale);
        if (p.steps_before > 0) optimizer.set_step_count(stream, group, p.steps_before);
        for (std::size_t i = 0; i < p.states.size(); ++i) {
            if (p.steps_before > 0) optimizer.write_state(stream, group, i, p.states[i]);
        }
    }

    static std::vector<DeviceTensor> upload(Stream& stream, const Problem& p, std::size_t offset = 0) {
        std::vector<DeviceTensor> out;
        out.reserve(p.types.size());
        for (std::size_t i = 0; i < p.types.size(); ++i)
            out.emplace_back(stream, p.types[i], p.params[i], p.grads[i], offset);
        return out;
    }
    static std::vector<optim::ParamTensor> views(std::vector<DeviceTensor>& device) {
        std::vector<optim::ParamTensor> out;
        for (auto& d : device) out.push_back(d.tensor());
        return out;
    }

    [[nodiscard]] Outcome read(Stream& stream) {
        Outcome o;
        for (std::size_t i = 0; i < device.size(); ++i) {
            o.params.push_back(device[i].param_words(stream));
            o.states.push_back(optimizer.read_state(stream, group, i));
        }
        return o;
    }
};

void check_no_host_synchronization(const Counters& delta, bool kernels_launched = true) {
    CHECK(delta.host_synchronizations() == 0);
    CHECK(delta.blocking_copies == 0);
    if (kernels_launched) CHECK(delta.kernel_launches > 0);
}

// Runs one step of `p` as `variant` and returns what it left.
Outcome run(Device& device, const Problem& p, Variant variant) {
    CAPTURE(to_string(variant));
    Stream stream = device.create_stream();
    Stream foreign_owner = device.create_stream();  // stands for another framework's stream
    Stream foreign = Stream::wrap(device, foreign_owner.native());
    const auto placement =
        variant == Variant::paged_state ? optim::StatePlacement::managed : optim::StatePlacement::device;
    Setup s(stream, p, placement, variant == Variant::misaligned ? 1 : 0, variant == Variant::graph);
    if (variant == Variant::paged_state) {
        const bool supported = device.attribute(89) != 0;  // CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS
        CHECK(s.optimizer.state_placement() ==
              (supported ? optim::StatePlacement::managed : optim::StatePlacement::device));
    }

    Counters before = device.counters();
    switch (variant) {
        case Variant::multi_tensor:
        case Variant::paged_state:
        case Variant::misaligned:
            s.optimizer.step(stream, s.group, s.tensors);
            break;
        case Variant::per_tensor:
            for (std::size_t i = 0; i < s.tensors.size(); ++i)
                s.optimizer.step(stream, s.group, i, s.tensors[i]);
            break;
        case Variant::foreign_stream:
            s.optimizer.step(foreign, s.group, s.tensors);
            break;
        case Variant::legacy: {
            testing::LegacyStepper legacy(device);
            device.synchronize();  // start from an idle device, as the benchmark's legacy rounds do
            before = device.counters();
            for (std::size_t i = 0; i < s.tensors.size(); ++i)
                legacy.step(s.optimizer, s.group, i, s.tensors[i]);
            break;
        }
        case Variant::graph: {
            // A capturable optimizer's step, captured and replayed once.
            stream.synchronize();
            Graph graph =
                capture(stream, [&](Stream& captured) { s.optimizer.step(captured, s.group, s.tensors); });
            before = device.counters();
            graph.launch(stream);
            check_no_host_synchronization(device.counters() - before, false);  // a replay is no kernel launch
            Outcome o = s.read(stream);
            CHECK(s.optimizer.step_count(stream, s.group) == p.steps_before + 1);
            return o;
        }
    }
    const Counters delta = device.counters() - before;
    if (variant == Variant::legacy) {
        CHECK(delta.context_synchronizes == s.tensors.size());
    } else {
        check_no_host_synchronization(delta);
    }
    CHECK(s.optimizer.step_count(stream, s.group) == p.steps_before + 1);
    return s.read(stream);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void check_identical(const Outcome& a, const Outcome& b) {
    REQUIRE(a.params.size() == b.params.size());
    for (std::size_t i = 0; i < a.params.size(); ++i) {
        CAPTURE(i);
        CHECK(a.params[i] == b.params[i]);
        CHECK(same_bits(a.states[i].state1, b.states[i].state1));
        CHECK(same_bits(a.states[i].state2, b.states[i].state2));
        CHECK(a.states[i].codes1 == b.states[i].codes1);
        CHECK(a.states[i].codes2 == b.states[i].codes2);
        CHECK(same_bits(a.states[i].absmax1, b.states[i].absmax1));
        CHECK(same_bits(a.states[i].absmax2, b.states[i].absmax2));
    }
}

// --- The float64 reference
// ----------------------------------------------------------------------------------

struct ReferenceTensor {
    std::vector<double> param;           // new parameters
    std::vector<double> state1, state2;  // fp32 state
    reference::QuantizedState q1, q2;    // 8-bit state
    reference::StepReport report;
};

// Counts mismatches and remembers the first few, so a failure says where and by how much.
struct Mismatches {
    std::size_t count = 0;
    std::string first;
    void add(const std::string& what) {
        if (count++ < 5) first += what + "\n";
    }
};

// Lion moves each parameter by +-lr by the sign of c = beta1 m + (1 - beta1) g. Where c is zero to within
// float rounding, float and double may disagree on its sign: such (rare) elements are not compared.
bool lion_sign_is_ambiguous(const Problem& p, std::size_t t, std::size_t i, const abi::KernelParams& kp) {
    if (p.rule != UpdateRule::lion) return false;
    const double g = reference::from_bits(p.types[t], p.grads[t][i]) * static_cast<double>(kp.inv_grad_scale);
    double m = 0.0;
    if (p.steps_before > 0) {
        const TensorState& s = p.states[t];
        if (p.precision == StatePrecision::fp32) {
            m = s.state1[i];
        } else {
            const auto& map = optim::dynamic_map(abi::state_map(UpdateRule::lion, 1));
            m = static_cast<double>(map[s.codes1[i]]) * static_cast<double>(s.absmax1[i / 256]);
        }
    }
    const double b1 = kp.beta1;
    const double c1 = kp.beta1_complement;  // the kernels' 1 - beta1 (Note [Complements])
    const double c = b1 * m + c1 * g;
    return std::abs(c) <= 1e-6 * (std::abs(b1 * m) + std::abs(c1 * g));
}

void compare_with_reference(const Problem& p, const Outcome& device, bool expect_clipping) {
    const abi::KernelParams kp =
        optim::detail::kernel_params("test", p.rule, p.options, p.grad_scale, p.steps_before + 1);
    const int states = p.state_count();
    bool clipped_somewhere = false;
    for (std::size_t t = 0; t < p.types.size(); ++t) {
        CAPTURE(t);
        const ElementType dtype = p.types[t];
        const std::size_t n = p.params[t].size();
        std::vector<double> param(n);
        std::vector<double> grad(n);
        for (std::size_t i = 0; i < n; ++i) {
            param[i] = reference::from_bits(dtype, p.params[t][i]);
            grad[i] = reference::from_bits(dtype, p.grads[t][i]);
        }
        const std::vector<double> old_param = param;
        const TensorState& start = p.states[t];
        const bool zero_start = p.steps_before == 0;
        Mismatches bad;

        // AdEMAMix's slow EMA: state1's (codes1's, absmax1's) second half on the device.
        const bool third = p.rule == UpdateRule::ademamix;
        if (p.precision == StatePrecision::fp32) {
            std::vector<double> s1(states >= 1 ? n : 0, 0.0);
            std::vector<double> s2(states >= 2 ? n : 0, 0.0);
            std::vector<double> s3(third ? n : 0, 0.0);
            if (!zero_start) {
                for (std::size_t i = 0; i < s1.size(); ++i) s1[i] = start.state1[i];
                for (std::size_t i = 0; i < s2.size(); ++i) s2[i] = start.state2[i];
                for (std::size_t i = 0; i < s3.size(); ++i) s3[i] = start.state1[n + i];
            }
            const std::vector<double> old1 = s1;
            const std::vector<double> old2 = s2;
            const std::vector<double> old3 = s3;
            const reference::StepReport report = reference::step(p.rule, kp, param, grad, s1, s2, s3);
            clipped_somewhere = clipped_somewhere || report.update_scale < 1.0;
            REQUIRE(device.states[t].state1.size() == s1.size() + s3.size());
            REQUIRE(device.states[t].state2.size() == s2.size());
            const double wd = kp.weight_decay;
            for (std::size_t i = 0; i < n; ++i) {
                const double scaled = grad[i] * static_cast<double>(kp.inv_grad_scale);
                const double g = std::isfinite(scaled) ? scaled : 0.0;
                // Magnitudes a float computation of this element rounds against.
                const double magnitude = std::abs(g) + g * g + wd * std::abs(old_param[i]);
                auto check_state = [&](const std::vector<float>& dev, std::size_t at, double old,
                                       double expected, const char* name) {
                    const double tol = 2e-5 * (std::abs(old) + magnitude + std::abs(expected)) + 1e-30;
                    if (!(std::abs(static_cast<double>(dev[at]) - expected) <= tol)) {
                        bad.add(fmt::format("{}[{}]: device {} reference {} (was {}, g {})", name, i, dev[at],
                                            expected, old, g));
                    }
                };
                if (states >= 1) check_state(device.states[t].state1, i, old1[i], s1[i], "state1");
                if (states >= 2) check_state(device.states[t].state2, i, old2[i], s2[i], "state2");
                if (third) check_state(device.states[t].state1, n + i, old3[i], s3[i], "state3");
            }
        } else {
            reference::QuantizedState q1(abi::state_map(p.rule, 1), n);
            reference::QuantizedState q2(abi::state_map(p.rule, 2), n);
            reference::QuantizedState q3(abi::state_map(p.rule, 3), n);
            const std::size_t blocks = q1.absmax.size();
            if (!zero_start && states >= 1) {  // (a rule without state, SGD without momentum, has no codes)
                REQUIRE(start.codes1.size() >= n);
                REQUIRE(start.absmax1.size() >= blocks);
                q1.codes.assign(start.codes1.begin(), start.codes1.begin() + static_cast<std::ptrdiff_t>(n));
                q1.absmax.assign(start.absmax1.begin(),
                                 start.absmax1.begin() + static_cast<std::ptrdiff_t>(blocks));
                q2.codes = start.codes2;
                q2.absmax = start.absmax2;
                if (third) {
                    q3.codes.assign(start.codes1.begin() + static_cast<std::ptrdiff_t>(n),
                                    start.codes1.end());
                    q3.absmax.assign(start.absmax1.begin() + static_cast<std::ptrdiff_t>(blocks),
                                     start.absmax1.end());
                }
            }
            const reference::StepReport report =
                reference::step_8bit(p.rule, kp, param, grad, states >= 1 ? &q1 : nullptr,
                                     states >= 2 ? &q2 : nullptr, third ? &q3 : nullptr);
            clipped_somewhere = clipped_somewhere || report.update_scale < 1.0;
            auto check_quantized = [&](const reference::QuantizedState& q,
                                       const std::vector<std::uint8_t>& codes,
                                       const std::vector<float>& absmax, const char* name) {
                REQUIRE(codes.size() == n);
                REQUIRE(absmax.size() == q.absmax.size());
                for (std::size_t b = 0; b < absmax.size(); ++b) {
                    const double expected = q.absmax[b];
                    if (!(std::abs(static_cast<double>(absmax[b]) - expected) <= 2e-6 * expected)) {
                        bad.add(fmt::format("{} absmax[{}]: device {} reference {}", name, b, absmax[b],
                                            expected));
                    }
                }
                for (std::size_t i = 0; i < n; ++i) {
                    if (!reference::codes_agree(q.map(), codes[i], q.codes[i], q.normalized[i], 2e-6)) {
                        bad.add(fmt::format("{} code[{}]: device {} reference {} (normalized {})", name, i,
                                            codes[i], q.codes[i], q.normalized[i]));
                    }
                }
            };
            // (The device's codes1 and absmax1 hold AdEMAMix's slow EMA after its fast one.)
            auto half = [&](const auto& v, std::size_t count, bool second) {
                const auto first = v.begin() + static_cast<std::ptrdiff_t>(second ? count : 0);
                return std::vector<typename std::decay_t<decltype(v)>::value_type>(
                    first, first + static_cast<std::ptrdiff_t>(std::min(count, v.size())));
            };
            if (third) {
                REQUIRE(device.states[t].codes1.size() == 2 * n);
                REQUIRE(device.states[t].absmax1.size() == 2 * blocks);
            }
            if (states >= 1) {
                check_quantized(q1, half(device.states[t].codes1, n, false),
                                half(device.states[t].absmax1, blocks, false), "state1");
            }
            if (states >= 2) check_quantized(q2, device.states[t].codes2, device.states[t].absmax2, "state2");
            if (third) {
                check_quantized(q3, half(device.states[t].codes1, n, true),
                                half(device.states[t].absmax1, blocks, true), "state3");
            }
        }

        // Parameters: within float rounding of the magnitudes involved (the old value and the update); fp16
        // and bf16 also within one unit in the last place of the rounded reference. (A new value that
        // nearly cancels, old value minus update, keeps the float error of its operands, which can be
        // several units of its own last place in 16 bits.)
        for (std::size_t i = 0; i < n; ++i) {
            if (lion_sign_is_ambiguous(p, t, i, kp)) continue;
            const std::uint32_t got = device.params[t][i];
            const double change = std::abs(param[i] - old_param[i]);
            const double tol =
                1e-6 * std::abs(old_param[i]) + 2e-5 * change + 1e-6 * std::abs(param[i]) + 1e-30;
            if (p.types[t] == ElementType::fp32) {
                const double value = static_cast<double>(std::bit_cast<float>(got));
                if (!(std::abs(value - param[i]) <= tol)) {
                    bad.add(fmt::format("param[{}]: device {} reference {} (was {})", i, value, param[i],
                                        old_param[i]));
                }
            } else {
                const std::uint32_t expected = reference::to_bits(dtype, param[i]);
                const double value = reference::from_bits(dtype, got);
                if (reference::ulp_distance(dtype, got, expected) > 1 &&
                    !(std::abs(value - param[i]) <= tol)) {
                    bad.add(fmt::format("param[{}]: device bits {:#x} reference {:#x} ({})", i, got, expected,
                                        param[i]));
                }
            }
        }
        CAPTURE(bad.first);
        CHECK(bad.count == 0);
    }
    if (expect_clipping) CHECK(clipped_somewhere);
}

std::string case_name(UpdateRule rule, ElementType type, StatePrecision precision) {
    return fmt::format("{} {} {}", optim::to_string(rule), optim::to_string(type),
                       optim::to_string(precision));
}

}  // namespace

TEST_CASE("optim.every_rule_type_and_precision_matches_the_reference") {
    auto device = Device::open(0);
    for (const UpdateRule rule : kRules) {
        for (const ElementType type : kTypes) {
            for (const StatePrecision precision : kPrecisions) {
                if (!optim::supports(rule, precision)) continue;  // (LAMB and LARS: 32-bit state only)
                for (const bool clip : {false, true}) {
                    if (clip && uses_trust_ratio(rule)) continue;  // (they scale by their trust ratios)
                    const std::string name = case_name(rule, type, precision);
                    CAPTURE(name);
                    const Problem p = make_problem(rule, precision, {type, type, type}, clip);
                    const std::string description = p.describe();
                    CAPTURE(description);
                    const Outcome multi = run(device, p, Variant::multi_tensor);
                    compare_with_reference(p, multi, clip);
                    // The same step tensor by tensor: bitwise the same.
                    check_identical(multi, run(device, p, Variant::per_tensor));
                }
            }
        }
    }
}

TEST_CASE("optim.all_ways_of_running_a_step_agree_bitwise") {
    auto device = Device::open(0);
    // (Misaligned parameters take the kernels' element-by-element path, aligned ones their vector loads
    // and, for 8-bit state on sm_90 and later, the tile copies.)
    const Variant variants[] = {Variant::per_tensor,     Variant::legacy,      Variant::graph,
                                Variant::foreign_stream, Variant::paged_state, Variant::misaligned};
    struct Case {
        UpdateRule rule;
        std::vector<ElementType> types;  // a mixed group: one multi-tensor launch per element type
        StatePrecision precision;
        bool clip;
    };
    const Case cases[] = {
        {UpdateRule::adamw,
         {ElementType::fp32, ElementType::bf16, ElementType::fp32},
         StatePrecision::fp32,
         false},
        {UpdateRule::adamw,
         {ElementType::bf16, ElementType::fp16, ElementType::fp32},
         StatePrecision::blockwise8,
         true},
        {UpdateRule::lion,
         {ElementType::fp16, ElementType::fp16, ElementType::bf16},
         StatePrecision::blockwise8,
         false},
        {UpdateRule::sgd,
         {ElementType::fp32, ElementType::fp16, ElementType::fp16},
         StatePrecision::fp32,
         true},
        {UpdateRule::adagrad,
         {ElementType::bf16, ElementType::bf16, ElementType::bf16},
         StatePrecision::fp32,
         true},
        {UpdateRule::ademamix,
         {ElementType::bf16, ElementType::fp32, ElementType::fp16},
         StatePrecision::blockwise8,
         true},
        {UpdateRule::ademamix,
         {ElementType::fp32, ElementType::bf16, ElementType::fp32},
         StatePrecision::fp32,
         false},
        {UpdateRule::lamb,
         {ElementType::fp32, ElementType::bf16, ElementType::fp16},
         StatePrecision::fp32,
         false},
        {UpdateRule::lars,
         {ElementType::bf16, ElementType::fp32, ElementType::fp32},
         StatePrecision::fp32,
         false},
    };
    for (const Case& c : cases) {
        const Problem p = make_problem(c.rule, c.precision, c.types, c.clip);
        const std::string description = p.describe();
        CAPTURE(description);
        const Outcome expected = run(device, p, Variant::multi_tensor);
        compare_with_reference(p, expected, c.clip);
        for (const Variant variant : variants) {
            CAPTURE(to_string(variant));
            check_identical(expected, run(device, p, variant));
        }
    }
}

TEST_CASE("optim.step_reads_the_gradient_written_behind_pending_work") {
    auto device = Device::open(0);
    test::SpinKernel spin(device);
    for (const UpdateRule rule :
         {UpdateRule::adamw, UpdateRule::ademamix, UpdateRule::lamb, UpdateRule::lars}) {
        for (const StatePrecision precision : kPrecisions) {
            if (!optim::supports(rule, precision)) continue;
            for (const ElementType type : {ElementType::fp32, ElementType::bf16}) {
                // (LAMB's and LARS' first pass reads the gradient too.)
                const Problem p =
                    make_problem(rule, precision, {type, type, type}, precision == StatePrecision::fp32);
                const std::string description = p.describe();
                CAPTURE(description);
                const Outcome ungated = run(device, p, Variant::multi_tensor);

                // The gradient buffers hold poison until the delayed write lands; reading poison would skip
                // every element (NaN) and set the non-finite flag.
                Problem poisoned = p;
                for (std::size_t t = 0; t < p.grads.size(); ++t) {
                    std::fill(poisoned.grads[t].begin(), poisoned.grads[t].end(), poison_word(type));
                }
                for (const bool other_stream : {false, true}) {
                    CAPTURE(other_stream);
                    Stream stream = device.create_stream();
                    Stream writer = device.create_stream();
                    Setup s(stream, poisoned);
                    Stream& producer = other_stream ? writer : stream;
                    std::vector<DeviceTensor> fresh = Setup::upload(producer, p);  // the new gradients
                    device.synchronize();
                    spin.launch(producer, spin.cycles_for_ms(200.0));
                    for (std::size_t t = 0; t < s.device.size(); ++t)
                        s.device[t].copy_grad_from(producer, fresh[t]);
                    const Counters before = device.counters();
                    s.optimizer.step(stream, s.group, s.tensors);
                    check_no_host_synchronization(device.counters() - before);
                    // The step was enqueued while the gradient was still being produced. Note: a warning, not
                    // a check: under compute-sanitizer a launch may return only once the kernel has finished.
                    WARN_FALSE(producer.query());
                    const Outcome gated = s.read(stream);
                    check_identical(ungated, gated);
                    CHECK_FALSE(s.optimizer.nonfinite_seen(stream));
                }
            }
        }
    }
}

// Lets the launch after it start at once (griddepcontrol, sm_90 and newer), spins for `cycles`, then
// copies three byte ranges: a backward pass that writes the gradients while the step behind it has long
// started (Note [Early launch], kernels/optim_device.cuh).
constexpr const char* kLateGradientSource = R"(
extern "C" __global__ void write_gradients_late(unsigned long long to0, unsigned long long from0,
                                                unsigned long long bytes0, unsigned long long to1,
                                                unsigned long long from1, unsigned long long bytes1,
                                                unsigned long long to2, unsigned long long from2,
                                                unsigned long long bytes2, long long cycles) {
    asm volatile("griddepcontrol.launch_dependents;");
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
    const unsigned long long to[3] = {to0, to1, to2};
    const unsigned long long from[3] = {from0, from1, from2};
    const unsigned long long bytes[3] = {bytes0, bytes1, bytes2};
    const unsigned long long first = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = 0; k < 3; ++k) {
        for (unsigned long long i = first; i < bytes[k]; i += gridDim.x * blockDim.x)
            reinterpret_cast<unsigned char*>(to[k])[i] = reinterpret_cast<const unsigned char*>(from[k])[i];
    }
}
)";

TEST_CASE("optim.a_step_that_starts_early_waits_for_the_kernel_ahead") {
    auto device = Device::open(0);
    if (device.compute_capability() < ComputeCapability{9, 0}) {
        test::skip_test("steps start early only on compute capability 9.0 and newer; this device is " +
                        device.arch());
        return;
    }
    const Module module = Module::compile(device, Program(kLateGradientSource, "late_gradients.cu"));
    using Address = unsigned long long;
    const auto write_late = module.kernel<void(Address, Address, Address, Address, Address, Address, Address,
                                               Address, Address, long long)>("write_gradients_late");
    test::SpinKernel spin(device);  // (for its clock rate)
    for (const UpdateRule rule : {UpdateRule::adamw, UpdateRule::ademamix, UpdateRule::lamb}) {
        for (const StatePrecision precision : kPrecisions) {
            if (!optim::supports(rule, precision)) continue;
            for (const ElementType type : kTypes) {
                // (LAMB's first pass reads the gradient too.)
                const Problem p =
                    make_problem(rule, precision, {type, type, type}, precision == StatePrecision::fp32);
                const std::string description = p.describe();
                CAPTURE(description);
                CAPTURE(optim::to_string(type));
                const Outcome ungated = run(device, p, Variant::multi_tensor);
                // Reading the poison instead of the late gradient would skip every element (NaN) and set
                // the non-finite flag.
                Problem poisoned = p;
                for (auto& grad : poisoned.grads) std::fill(grad.begin(), grad.end(), poison_word(type));
                for (const Variant variant : {Variant::multi_tensor, Variant::per_tensor}) {
                    CAPTURE(to_string(variant));
                    Stream stream = device.create_stream();
                    Setup s(stream, poisoned);
                    const std::vector<DeviceTensor> fresh = Setup::upload(stream, p);
                    device.synchronize();
                    launch(stream, LaunchConfig{64, 256}, write_late, s.device[0].grad_address(),
                           fresh[0].grad_address(), s.device[0].grad_bytes(), s.device[1].grad_address(),
                           fresh[1].grad_address(), s.device[1].grad_bytes(), s.device[2].grad_address(),
                           fresh[2].grad_address(), s.device[2].grad_bytes(), spin.cycles_for_ms(0.2));
                    if (variant == Variant::multi_tensor) {
                        s.optimizer.step(stream, s.group, s.tensors);
                    } else {
                        for (std::size_t i = 0; i < s.tensors.size(); ++i)
                            s.optimizer.step(stream, s.group, i, s.tensors[i]);
                    }
                    check_identical(ungated, s.read(stream));
                    CHECK_FALSE(s.optimizer.nonfinite_seen(stream));
                }
            }
        }
    }
}

TEST_CASE("optim.nonfinite_gradient_leaves_its_element_and_sets_the_flag") {
    auto device = Device::open(0);
    struct Case {
        UpdateRule rule;
        ElementType type;
        StatePrecision precision;
    };
    const Case cases[] = {{UpdateRule::adam, ElementType::fp32, StatePrecision::fp32},
                          {UpdateRule::lion, ElementType::bf16, StatePrecision::blockwise8},
                          {UpdateRule::sgd, ElementType::fp16, StatePrecision::fp32},
                          {UpdateRule::rmsprop, ElementType::fp32, StatePrecision::blockwise8},
                          {UpdateRule::adamw, ElementType::fp16, StatePrecision::blockwise8},
                          {UpdateRule::ademamix, ElementType::bf16, StatePrecision::blockwise8},
                          {UpdateRule::ademamix, ElementType::fp32, StatePrecision::fp32},
                          {UpdateRule::lamb, ElementType::fp32, StatePrecision::fp32},
                          {UpdateRule::lars, ElementType::fp16, StatePrecision::fp32}};
    for (const Case& c : cases) {
        const std::string name = case_name(c.rule, c.type, c.precision);
        CAPTURE(name);
        Problem p = make_problem(c.rule, c.precision, {c.type, c.type, c.type}, false);
        std::vector<std::pair<std::size_t, std::size_t>> spoiled;
        for (int k = 0; k < 12; ++k) {
            const std::size_t t = pick(p.grads.size());
            const std::size_t i = pick(p.grads[t].size());
            p.grads[t][i] = k % 3 == 0 ? nan_word(c.type) : infinity_word(c.type, k % 3 == 1);
            spoiled.emplace_back(t, i);
        }
        Stream stream = device.create_stream();
        Setup s(stream, p);
        CHECK_FALSE(s.optimizer.nonfinite_seen(stream));
        const Counters before = device.counters();
        s.optimizer.step(stream, s.group, s.tensors);
        check_no_host_synchronization(device.counters() - before);
        const Outcome o = s.read(stream);
        for (const auto& [t, i] : spoiled) CHECK(o.params[t][i] == p.params[t][i]);
        compare_with_reference(p, o, false);
        CHECK(s.optimizer.nonfinite_seen(stream));
        CHECK(s.optimizer.nonfinite_seen(stream, s.group));
        s.optimizer.reset_nonfinite(stream);
        CHECK_FALSE(s.optimizer.nonfinite_seen(stream));

        // A clean step leaves the flag clear.
        Problem clean = p;
        for (auto& grad : clean.grads) {
            for (auto& w : grad) w = random_word(c.type, -1.0, 1.0);
        }
        const std::vector<DeviceTensor> fresh = Setup::upload(stream, clean);
        for (std::size_t t = 0; t < p.grads.size(); ++t) s.device[t].copy_grad_from(stream, fresh[t]);
        s.optimizer.step(stream, s.group, s.tensors);
        CHECK_FALSE(s.optimizer.nonfinite_seen(stream));
    }
}

TEST_CASE("optim.tensors_stepped_alone_then_together_keep_their_own_step_numbers") {
    auto device = Device::open(0);
    for (const StatePrecision precision : kPrecisions) {
        Problem p = make_problem(UpdateRule::adam, precision,
                                 {ElementType::fp32, ElementType::fp32, ElementType::bf16}, false);
        p.steps_before = 0;
        p.states.assign(p.types.size(), TensorState{});
        Stream stream = device.create_stream();
        Setup s(stream, p);
        // Tensor 0 alone (its step 1), then the group: tensor 0 takes step 2, the others step 1.
        s.optimizer.step(stream, s.group, 0, s.tensors[0]);
        CHECK(s.optimizer.step_count(s.group, 0) == 1);
        CHECK(s.optimizer.step_count(s.group, 1) == 0);
        const Counters before = device.counters();
        s.optimizer.step(stream, s.group, s.tensors);
        check_no_host_synchronization(device.counters() - before);
        CHECK(s.optimizer.step_count(s.group, 0) == 2);
        CHECK(s.optimizer.step_count(s.group, 2) == 1);
        CHECK(s.optimizer.step_count(s.group) == 2);
        const Outcome o = s.read(stream);

        // Against the group stepped once (tensors 1, 2), and once more from there (tensor 0).
        const Outcome after_one = run(device, p, Variant::multi_tensor);
        for (std::size_t t = 1; t < p.types.size(); ++t) {
            CHECK(o.params[t] == after_one.params[t]);
            CHECK(o.states[t].codes1 == after_one.states[t].codes1);
            CHECK(same_bits(o.states[t].state1, after_one.states[t].state1));
        }
        Problem second = p;
        second.steps_before = 1;
        second.params[0] = after_one.params[0];
        second.states[0] = after_one.states[0];
        // The other tensors of `second` only fill the group; tensor 0 is what is compared.
        for (std::size_t t = 1; t < p.types.size(); ++t) second.states[t] = after_one.states[t];
        const Outcome twice = run(device, second, Variant::multi_tensor);
        CHECK(o.params[0] == twice.params[0]);
        CHECK(same_bits(o.states[0].state1, twice.states[0].state1));
        CHECK(same_bits(o.states[0].state2, twice.states[0].state2));
        CHECK(o.states[0].codes1 == twice.states[0].codes1);
        CHECK(o.states[0].codes2 == twice.states[0].codes2);
    }
}

TEST_CASE("optim.new_buffers_between_steps_update_the_tables") {
    auto device = Device::open(0);
    const Problem p = make_problem(UpdateRule::adamw, StatePrecision::fp32,
                                   {ElementType::fp32, ElementType::fp32, ElementType::fp32}, false);
    const Outcome expected = run(device, p, Variant::per_tensor);
    Stream stream = device.create_stream();
    Setup s(stream, p);
    // The same values in other buffers: the group's descriptor table must follow them.
    std::vector<DeviceTensor> moved = Setup::upload(stream, p);
    const std::vector<optim::ParamTensor> tensors = Setup::views(moved);
    const Counters before = device.counters();
    s.optimizer.step(stream, s.group, tensors);
    check_no_host_synchronization(device.counters() - before);
    for (std::size_t t = 0; t < moved.size(); ++t) {
        CHECK(moved[t].param_words(stream) == expected.params[t]);
        CHECK(s.device[t].param_words(stream) == p.params[t]);  // the registered buffers are untouched
    }
}

TEST_CASE("optim.bad_input_leaves_the_optimizer_as_it_was") {
    auto device = Device::open(0);
    const Problem p = make_problem(UpdateRule::sgd, StatePrecision::fp32,
                                   {ElementType::fp32, ElementType::fp16, ElementType::fp32}, false);
    Stream stream = device.create_stream();
    Setup s(stream, p);
    const std::int64_t steps = s.optimizer.step_count(s.group);
    const GroupOptions options = s.optimizer.options(s.group);

    CHECK_THROWS_AS(static_cast<void>(s.optimizer.add_group(stream, p.options, {})), Error);
    CHECK(s.optimizer.group_count() == 1);

    const std::vector<optim::ParamTensor> too_few(s.tensors.begin(), s.tensors.end() - 1);
    CHECK_THROWS_AS(s.optimizer.step(stream, s.group, too_few), Error);
    std::vector<optim::ParamTensor> swapped = s.tensors;
    std::swap(swapped[0], swapped[1]);
    CHECK_THROWS_AS(s.optimizer.step(stream, s.group, swapped), Error);
    CHECK_THROWS_AS(s.optimizer.step(stream, s.group, 1, s.tensors[0]), Error);
    CHECK_THROWS_AS(s.optimizer.step(stream, GroupId{7}, s.tensors), Error);
    CHECK(s.optimizer.step_count(s.group) == steps);
    for (std::size_t t = 0; t < s.device.size(); ++t) CHECK(s.device[t].param_words(stream) == p.params[t]);

    GroupOptions bad = options;
    bad.lr = -1.0;
    CHECK_THROWS_AS(s.optimizer.set_options(s.group, bad), Error);
    CHECK_THROWS_AS(s.optimizer.set_grad_scale(0.0), Error);
    CHECK(s.optimizer.grad_scale() == p.grad_scale);
    CHECK(s.optimizer.options(s.group).lr == options.lr);
    if (options.momentum == 0.0) {
        GroupOptions with_momentum = options;
        with_momentum.momentum = 0.9;
        CHECK_THROWS_AS(s.optimizer.set_options(s.group, with_momentum), Error);
    }
    TensorState wrong = s.optimizer.read_state(stream, s.group, 0);
    wrong.state1.push_back(0.0f);
    wrong.state2.push_back(0.0f);
    CHECK_THROWS_AS(s.optimizer.write_state(stream, s.group, 0, wrong), Error);

    // Still usable, and the step is the one it would have been.
    s.optimizer.step(stream, s.group, s.tensors);
    check_identical(run(device, p, Variant::multi_tensor), s.read(stream));
}

TEST_CASE("optim.groups_keep_their_own_hyper_parameters_and_step_counts") {
    auto device = Device::open(0);
    for (const StatePrecision precision : kPrecisions) {
        const Problem a = make_problem(UpdateRule::adamw, precision,
                                       {ElementType::fp32, ElementType::bf16, ElementType::fp32}, false);
        Problem b = make_problem(UpdateRule::adamw, precision, {ElementType::fp16, ElementType::fp16}, true);
        b.grad_scale = a.grad_scale;  // the loss scale is the optimizer's, not a group's
        const std::string description = a.describe() + " / " + b.describe();
        CAPTURE(description);
        const Outcome expected_a = run(device, a, Variant::multi_tensor);
        const Outcome expected_b = run(device, b, Variant::multi_tensor);

        Stream stream = device.create_stream();
        std::vector<DeviceTensor> device_a = Setup::upload(stream, a);
        std::vector<DeviceTensor> device_b = Setup::upload(stream, b);
        const std::vector<optim::ParamTensor> tensors_a = Setup::views(device_a);
        const std::vector<optim::ParamTensor> tensors_b = Setup::views(device_b);
        optim::Optimizer optimizer(stream, {.rule = UpdateRule::adamw, .precision = precision});
        optimizer.set_grad_scale(a.grad_scale);
        const GroupId group_a = optimizer.add_group(stream, a.options, tensors_a);
        const GroupId group_b = optimizer.add_group(stream, b.options, tensors_b);
        CHECK(optimizer.group_count() == 2);
        CHECK(optimizer.tensor_count(group_b) == 2);
        for (const auto& [problem, group] : {std::pair<const Problem*, GroupId>{&a, group_a},
                                             std::pair<const Problem*, GroupId>{&b, group_b}}) {
            if (problem->steps_before == 0) continue;
            optimizer.set_step_count(group, problem->steps_before);
            for (std::size_t i = 0; i < problem->states.size(); ++i) {
                optimizer.write_state(stream, group, i, problem->states[i]);
            }
        }
        const Counters before = device.counters();
        optimizer.step(stream, group_b, tensors_b);
        optimizer.step(stream, group_a, tensors_a);
        check_no_host_synchronization(device.counters() - before);
        CHECK(optimizer.step_count(group_a) == a.steps_before + 1);
        CHECK(optimizer.step_count(group_b) == b.steps_before + 1);
        for (std::size_t i = 0; i < device_a.size(); ++i) {
            CHECK(device_a[i].param_words(stream) == expected_a.params[i]);
            CHECK(optimizer.read_state(stream, group_a, i).codes1 == expected_a.states[i].codes1);
            CHECK(same_bits(optimizer.read_state(stream, group_a, i).state2, expected_a.states[i].state2));
        }
        for (std::size_t i = 0; i < device_b.size(); ++i) {
            CHECK(device_b[i].param_words(stream) == expected_b.params[i]);
            CHECK(optimizer.read_state(stream, group_b, i).codes2 == expected_b.states[i].codes2);
            CHECK(same_bits(optimizer.read_state(stream, group_b, i).state1, expected_b.states[i].state1));
        }
        CHECK_FALSE(optimizer.nonfinite_seen(stream));
        CHECK(optimizer.state_bytes() > 0);
    }
}

// --- Capturable steps (issue 13, item 5) ----------------------------------------------------------------

namespace {

// Steps of one problem with new gradients at every step and, before step `change_at`, new options and a new
// grad scale: what a training loop does between replays.
struct StepPlan {
    std::vector<std::vector<std::vector<std::uint32_t>>> grads;  // per step, per tensor
    std::size_t change_at = 0;
    GroupOptions changed;
    double changed_scale = 1.0;
};

StepPlan make_step_plan(const Problem& p, std::size_t steps, bool with_nonfinite) {
    StepPlan plan;
    for (std::size_t k = 0; k < steps; ++k) {
        std::vector<std::vector<std::uint32_t>> grads = p.grads;
        for (std::size_t t = 0; t < grads.size(); ++t) {
            for (auto& w : grads[t]) w = random_word(p.types[t], -p.grad_scale, p.grad_scale);
        }
        plan.grads.push_back(std::move(grads));
    }
    if (with_nonfinite) plan.grads[1][0][pick(plan.grads[1][0].size())] = nan_word(p.types[0]);
    plan.change_at = 2 + pick(steps - 2);
    // New hyper-parameters of the same shape: SGD's momentum stays zero or non-zero (its buffer), and
    // max_unorm stays on or off (a capturable group keeps its launches).
    plan.changed = random_options(p.rule);
    plan.changed.momentum = p.options.momentum == 0.0 ? 0.0 : uniform(0.5, 0.95);
    plan.changed.nesterov = plan.changed.momentum > 0.0 && pick(2) == 0;
    plan.changed.dampening = plan.changed.nesterov ? 0.0 : uniform(0.0, 0.3);
    plan.changed.max_unorm = p.options.max_unorm == 0.0 ? 0.0 : p.options.max_unorm * uniform(0.5, 2.0);
    plan.changed_scale = p.grad_scale == 1.0 ? 4.0 : 1.0;
    return plan;
}

struct PlanResult {
    Outcome outcome;
    std::int64_t step_count = 0;
    bool nonfinite = false;
};

// Runs `plan` as direct steps of an ordinary optimizer, or (`replay`) as replays of one captured step of a
// capturable optimizer, its last step a direct one.
PlanResult run_plan(Device& device, const Problem& p, const StepPlan& plan, bool replay) {
    CAPTURE(replay);
    Stream stream = device.create_stream();
    Setup s(stream, p, optim::StatePlacement::device, 0, replay);
    std::vector<std::vector<DeviceTensor>> grads;  // each step's gradients, copied in before the step
    for (const auto& step_grads : plan.grads) {
        Problem q = p;
        q.grads = step_grads;
        grads.push_back(Setup::upload(stream, q));
    }
    std::optional<Graph> graph;
    if (replay) {
        stream.synchronize();
        graph.emplace(
            capture(stream, [&](Stream& captured) { s.optimizer.step(captured, s.group, s.tensors); }));
    }
    const Counters before = device.counters();
    for (std::size_t k = 0; k < plan.grads.size(); ++k) {
        for (std::size_t t = 0; t < s.device.size(); ++t) s.device[t].copy_grad_from(stream, grads[k][t]);
        if (k == plan.change_at) {
            s.optimizer.set_options(stream, s.group, plan.changed);
            s.optimizer.set_grad_scale(stream, plan.changed_scale);
        }
        if (replay && k + 1 < plan.grads.size()) {
            graph->launch(stream);
        } else {
            s.optimizer.step(stream, s.group, s.tensors);
        }
    }
    const Counters delta = device.counters() - before;
    CHECK(delta.host_synchronizations() == 0);  // uploads and replays: nothing waits on the host
    CHECK(delta.blocking_copies == 0);
    PlanResult result;
    result.step_count = s.optimizer.step_count(stream, s.group);
    result.nonfinite = s.optimizer.nonfinite_seen(stream);
    result.outcome = s.read(stream);
    return result;
}

}  // namespace

TEST_CASE("optim.replays_of_a_captured_step_equal_direct_steps_bitwise") {
    auto device = Device::open(0);
    constexpr std::size_t kSteps = 5;
    int case_index = 0;
    for (const UpdateRule rule : kRules) {
        for (const StatePrecision precision : kPrecisions) {
            if (!optim::supports(rule, precision)) continue;
            for (const ElementType type : {ElementType::fp32, ElementType::bf16}) {
                const std::string name = case_name(rule, type, precision);
                CAPTURE(name);
                // Clipping in half the cases (it adds the max_unorm pass to every replay), a non-finite
                // gradient element in a third.
                const bool clip = case_index % 2 == 1;
                const bool nonfinite = case_index % 3 == 0;
                ++case_index;
                const Problem p = make_problem(rule, precision, {type, type, type}, clip);
                const std::string description = p.describe();
                CAPTURE(description);
                const StepPlan plan = make_step_plan(p, kSteps, nonfinite);
                CAPTURE(plan.change_at);
                const PlanResult direct = run_plan(device, p, plan, false);
                const PlanResult replayed = run_plan(device, p, plan, true);
                check_identical(direct.outcome, replayed.outcome);
                // The kernels advanced the count at every replay.
                CHECK(direct.step_count == p.steps_before + static_cast<std::int64_t>(kSteps));
                CHECK(replayed.step_count == direct.step_count);
                CHECK(direct.nonfinite == nonfinite);
                CHECK(replayed.nonfinite == nonfinite);
            }
        }
    }
}

TEST_CASE("optim.capturable_replays_follow_the_step_count_and_options_written_between_them") {
    // Adam's bias corrections change with every step: N replays must not repeat one step's update. One
    // group, fp32 state, lr changed between replays: each replay's parameters equal the direct ones.
    auto device = Device::open(0);
    Problem p = make_problem(UpdateRule::adam, StatePrecision::fp32, {ElementType::fp32}, false);
    Stream stream = device.create_stream();
    Stream reference_stream = device.create_stream();
    Setup replayed(stream, p, optim::StatePlacement::device, 0, true);
    Setup direct(reference_stream, p);
    stream.synchronize();
    Graph graph =
        capture(stream, [&](Stream& s) { replayed.optimizer.step(s, replayed.group, replayed.tensors); });
    std::vector<std::uint32_t> previous = p.params[0];
    for (int k = 0; k < 4; ++k) {
        CAPTURE(k);
        if (k == 2) {
            GroupOptions faster = p.options;
            faster.lr *= 10.0;
            replayed.optimizer.set_options(stream, replayed.group, faster);
            direct.optimizer.set_options(reference_stream, direct.group, faster);
        }
        graph.launch(stream);
        direct.optimizer.step(reference_stream, direct.group, direct.tensors);
        const std::vector<std::uint32_t> now = replayed.device[0].param_words(stream);
        CHECK(now == direct.device[0].param_words(reference_stream));
        CHECK(now != previous);
        previous = now;
        CHECK(replayed.optimizer.step_count(stream, replayed.group) == p.steps_before + k + 1);
    }
    // Setting the count between replays takes effect at the next one too.
    replayed.optimizer.set_step_count(stream, replayed.group, 1000);
    direct.optimizer.set_step_count(reference_stream, direct.group, 1000);
    graph.launch(stream);
    direct.optimizer.step(reference_stream, direct.group, direct.tensors);
    check_identical(direct.read(reference_stream), replayed.read(stream));
    CHECK(replayed.optimizer.step_count(stream, replayed.group) == 1001);
}

TEST_CASE("optim.capture_needs_a_capturable_optimizer_and_capturable_ones_refuse_host_only_setters") {
    auto device = Device::open(0);
    const Problem p = make_problem(UpdateRule::adamw, StatePrecision::blockwise8,
                                   {ElementType::bf16, ElementType::bf16, ElementType::bf16}, false);
    const Outcome expected = run(device, p, Variant::multi_tensor);

    // An ordinary optimizer's step cannot be captured: the capture is abandoned, nothing ran or changed, and
    // the stream and the optimizer work afterwards.
    {
        Stream stream = device.create_stream();
        Setup s(stream, p);
        stream.synchronize();
        const std::string message = [&] {
            try {
                static_cast<void>(
                    capture(stream, [&](Stream& c) { s.optimizer.step(c, s.group, s.tensors); }));
            } catch (const Error& e) {
                return std::string(e.what());
            }
            return std::string();
        }();
        CHECK(message.find("capturable") != std::string::npos);
        CHECK_FALSE(stream.is_capturing());
        CHECK(s.optimizer.step_count(s.group) == p.steps_before);
        s.optimizer.step(stream, s.group, s.tensors);
        check_identical(expected, s.read(stream));
    }

    // A capturable optimizer: setters without a stream, per-tensor steps and a max_unorm switch are refused
    // with a message naming what to use, and leave it as it was.
    Stream stream = device.create_stream();
    Setup s(stream, p, optim::StatePlacement::device, 0, true);
    auto message_of = [](auto&& body) {
        try {
            body();
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(message_of([&] { s.optimizer.set_options(s.group, p.options); }).find("set_options(stream") !=
          std::string::npos);
    CHECK(message_of([&] { s.optimizer.set_grad_scale(2.0); }).find("set_grad_scale(stream") !=
          std::string::npos);
    CHECK(message_of([&] { s.optimizer.set_step_count(s.group, 3); }).find("set_step_count(stream") !=
          std::string::npos);
    CHECK(message_of([&] { static_cast<void>(s.optimizer.step_count(s.group)); }).find("step_count(stream") !=
          std::string::npos);
    CHECK(message_of([&] { s.optimizer.step(stream, s.group, 0, s.tensors[0]); }).find("whole groups") !=
          std::string::npos);
    GroupOptions clipping = p.options;
    clipping.max_unorm = 0.5;
    CHECK(message_of([&] { s.optimizer.set_options(stream, s.group, clipping); }).find("max_unorm") !=
          std::string::npos);
    GroupOptions bad = p.options;
    bad.lr = -1.0;
    CHECK(message_of([&] { s.optimizer.set_options(stream, s.group, bad); }).find("lr") != std::string::npos);
    CHECK(s.optimizer.options(s.group).lr == p.options.lr);
    CHECK(s.optimizer.grad_scale() == p.grad_scale);
    CHECK(s.optimizer.step_count(stream, s.group) == p.steps_before);
    // A group of empty tensors would launch nothing, so nothing would advance its count.
    DeviceSlice<optim::bf16_bits> empty_param = DeviceSlice<optim::bf16_bits>::zeros(stream, 0);
    DeviceSlice<optim::bf16_bits> empty_grad = DeviceSlice<optim::bf16_bits>::zeros(stream, 0);
    const std::vector<optim::ParamTensor> empty{{empty_param, empty_grad}};
    CHECK(message_of([&] {
              static_cast<void>(s.optimizer.add_group(stream, p.options, empty));
          }).find("at least one element") != std::string::npos);
    CHECK(s.optimizer.group_count() == 1);
    // Still the step it would have been.
    const Counters before = device.counters();
    s.optimizer.step(stream, s.group, s.tensors);
    check_no_host_synchronization(device.counters() - before);
    check_identical(expected, s.read(stream));
}

TEST_CASE("optim.paged_state_serves_every_rule_bitwise") {
    // Paged (managed) state for every rule and state precision: the same bits as device memory.
    auto device = Device::open(0);
    for (const UpdateRule rule : kRules) {
        for (const StatePrecision precision : kPrecisions) {
            if (!optim::supports(rule, precision)) continue;
            const std::string name = case_name(rule, ElementType::bf16, precision);
            CAPTURE(name);
            const Problem p = make_problem(rule, precision,
                                           {ElementType::bf16, ElementType::fp32, ElementType::fp16}, false);
            check_identical(run(device, p, Variant::multi_tensor), run(device, p, Variant::paged_state));
        }
    }
}

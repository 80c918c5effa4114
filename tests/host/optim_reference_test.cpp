// The float64 optimizer references against hand-derived closed forms, and the kernels' own float
// element arithmetic (kernels/optim_common.cuh, compiled for the host) against the references.
#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "../../kernels/optim_common.cuh"
#include "cudarc/error.hpp"
#include "cudarc_testing/optim/reference.hpp"
#include "optim/kernel_abi.hpp"
#include "optim_test_support.hpp"

namespace {

using cudarc::optim::MapSign;
using cudarc::optim::UpdateRule;
using cudarc::optim::abi::KernelParams;
using cudarc::optim::test::kernel_params_of;
using cudarc::optim::test::step_inputs;
using cudarc::optim::test::StepInputs;
namespace reference = cudarc::optim::reference;

std::mt19937_64& rng() {
    static std::mt19937_64 engine{std::random_device{}()};
    return engine;
}

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Hyper-parameters whose float values are exact, so closed forms can use them as written.
StepInputs exact_hyper() {
    StepInputs h;
    h.lr = 0.125;
    h.beta1 = 0.75;
    h.beta2 = 0.9375;
    h.eps = 0.0;
    h.weight_decay = 0.0;
    h.momentum = 0.5;
    h.dampening = 0.25;
    h.alpha = 0.875;
    h.lr_decay = 0.5;
    return h;
}

double sign(double x) {
    return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
}

// One reference step over fp32 state, from the given state.
struct Run {
    std::vector<double> param, state1, state2, state3;
    reference::StepReport report;
};
// (AdEMAMix's slow EMA, state3, starts at 0.1 per element.)
Run run_step(UpdateRule a, const StepInputs& h, std::vector<double> param, const std::vector<double>& grad,
             std::vector<double> state1, std::vector<double> state2) {
    std::vector<double> state3(a == UpdateRule::ademamix ? param.size() : 0, 0.1);
    Run r{std::move(param), std::move(state1), std::move(state2), std::move(state3), {}};
    r.report = reference::step(a, kernel_params_of(a, h), r.param, grad, r.state1, r.state2, r.state3);
    return r;
}

}  // namespace

TEST_CASE("optim.reference_adam_closed_form") {
    StepInputs h = exact_hyper();
    h.eps = 1e-8;
    // Step 1: m = (1-b1) g, v = (1-b2) g^2, bias-corrected m_hat = g, v_hat = g^2, so each weight moves
    // by lr * g / (|g| + eps): almost exactly lr * sign(g), whatever the gradient's size.
    const std::vector<double> p0 = {1.0, -2.0, 0.5, 3.0};
    const std::vector<double> g1 = {0.3, -7.0, 1e-3, -0.25};
    Run r = run_step(UpdateRule::adam, h, p0, g1, {0, 0, 0, 0}, {0, 0, 0, 0});
    for (std::size_t i = 0; i < p0.size(); ++i) {
        CAPTURE(i);
        CHECK(r.state1[i] == doctest::Approx(0.25 * g1[i]).epsilon(1e-15));
        CHECK(r.state2[i] == doctest::Approx(0.0625 * g1[i] * g1[i]).epsilon(1e-15));
        CHECK(r.param[i] == doctest::Approx(p0[i] - 0.125 * g1[i] / (std::abs(g1[i]) + 1e-8)).epsilon(1e-12));
        // ... which is lr * sign(g) up to lr * eps / |g|.
        CHECK(std::abs(r.param[i] - (p0[i] - 0.125 * sign(g1[i]))) <= 1.01 * 0.125 * 1e-8 / std::abs(g1[i]));
    }
    // Step 2 from there, with a new gradient: m2 = b1 m1 + (1-b1) g2, v2 = b2 v1 + (1-b2) g2^2,
    // p -= lr / (1 - b1^2) * m2 / (sqrt(v2) / sqrt(1 - b2^2) + eps).
    h.step = 2;
    const std::vector<double> g2 = {-0.1, 2.0, 1e-3, 0.5};
    Run r2 = run_step(UpdateRule::adam, h, r.param, g2, r.state1, r.state2);
    for (std::size_t i = 0; i < p0.size(); ++i) {
        const double m = 0.75 * (0.25 * g1[i]) + 0.25 * g2[i];
        const double v = 0.9375 * (0.0625 * g1[i] * g1[i]) + 0.0625 * g2[i] * g2[i];
        const double expected = r.param[i] - 0.125 / (1 - 0.75 * 0.75) * m /
                                                 (std::sqrt(v) / std::sqrt(1 - 0.9375 * 0.9375) + 1e-8);
        CAPTURE(i);
        // The kernel parameters carry lr / (1 - b1^2) and sqrt(1 - b2^2) rounded to float.
        CHECK(r2.param[i] == doctest::Approx(expected).epsilon(1e-7));
    }
}

TEST_CASE("optim.reference_adam_weight_decay_is_l2_and_adamw_is_decoupled") {
    StepInputs h = exact_hyper();
    h.weight_decay = 0.5;
    const double p = 2.0;
    const double g = 0.25;
    // Adam: the decay enters the gradient (g + wd p = 1.25), so step 1 moves by lr * sign(1.25).
    Run adam = run_step(UpdateRule::adam, h, {p}, {g}, {0}, {0});
    CHECK(adam.state1[0] == doctest::Approx(0.25 * 1.25));
    CHECK(adam.param[0] == doctest::Approx(p - 0.125));
    // AdamW, torch's order: p <- p (1 - lr wd) first, then the plain Adam step on the raw gradient.
    Run adamw = run_step(UpdateRule::adamw, h, {p}, {g}, {0}, {0});
    CHECK(adamw.state1[0] == doctest::Approx(0.25 * g));
    CHECK(adamw.param[0] == doctest::Approx(p * (1 - 0.125 * 0.5) - 0.125));
    // Decay after the step would give (p - 0.125) * (1 - lr wd) instead: the two orders differ.
    CHECK(adamw.param[0] != doctest::Approx((p - 0.125) * (1 - 0.125 * 0.5)));
}

TEST_CASE("optim.reference_sgd_momentum_dampening_nesterov") {
    StepInputs h = exact_hyper();  // lr 1/8, momentum 1/2, dampening 1/4
    const double p0 = 1.0;
    const double g1 = 0.5;
    const double g2 = -0.25;
    // Plain SGD (momentum 0): p - lr g, and no state.
    StepInputs plain = h;
    plain.momentum = 0.0;
    plain.dampening = 0.0;
    Run r0 = run_step(UpdateRule::sgd, plain, {p0}, {g1}, {}, {});
    CHECK(r0.param[0] == p0 - 0.125 * g1);
    // Step 1: the buffer starts as the gradient itself, undampened.
    Run r1 = run_step(UpdateRule::sgd, h, {p0}, {g1}, {0.0}, {});
    CHECK(r1.state1[0] == g1);
    CHECK(r1.param[0] == p0 - 0.125 * g1);
    // Step 2: buf = momentum buf + (1 - dampening) g.
    h.step = 2;
    Run r2 = run_step(UpdateRule::sgd, h, r1.param, {g2}, r1.state1, {});
    const double buf2 = 0.5 * g1 + 0.75 * g2;
    CHECK(r2.state1[0] == buf2);
    CHECK(r2.param[0] == r1.param[0] - 0.125 * buf2);
    // Nesterov (dampening 0): the step uses g + momentum * buf.
    StepInputs n = h;
    n.dampening = 0.0;
    n.nesterov = true;
    const double g3 = -0.125;
    Run rn = run_step(UpdateRule::sgd, n, {p0}, {g3}, {g1}, {});
    const double nbuf = 0.5 * g1 + g3;  // 0.125
    CHECK(rn.state1[0] == nbuf);
    CHECK(rn.param[0] == p0 - 0.125 * (g3 + 0.5 * nbuf));
    CHECK(rn.param[0] != p0 - 0.125 * nbuf);  // what plain momentum would give
    // Weight decay is L2: g + wd p.
    StepInputs wd = plain;
    wd.weight_decay = 0.25;
    Run rw = run_step(UpdateRule::sgd, wd, {p0}, {g1}, {}, {});
    CHECK(rw.param[0] == p0 - 0.125 * (g1 + 0.25 * p0));
}

TEST_CASE("optim.reference_lion_closed_form") {
    StepInputs h = exact_hyper();  // lr 1/8, beta1 3/4, beta2 15/16
    h.weight_decay = 0.5;
    const std::vector<double> p = {1.0, 1.0, 1.0};
    const std::vector<double> g = {0.5, -0.5, 0.75};
    const std::vector<double> m = {-1.0, 1.0, -0.25};  // the last makes beta1 m + (1-beta1) g == 0 exactly
    Run r = run_step(UpdateRule::lion, h, p, g, m, {});
    for (std::size_t i = 0; i < p.size(); ++i) {
        const double c = 0.75 * m[i] + 0.25 * g[i];
        CAPTURE(i);
        CHECK(r.param[i] == doctest::Approx(p[i] * (1 - 0.125 * 0.5) - 0.125 * sign(c)));
        CHECK(r.state1[i] == doctest::Approx(0.9375 * m[i] + 0.0625 * g[i]));
    }
    CHECK(r.param[0] == doctest::Approx(0.9375 + 0.125));  // c = -0.625: the weight moves up
    CHECK(r.param[2] == doctest::Approx(0.9375));          // c = 0: decay only
}

TEST_CASE("optim.reference_rmsprop_and_adagrad_closed_form") {
    StepInputs h = exact_hyper();  // alpha 7/8, lr 1/8, lr_decay 1/2, eps 0
    h.eps = 1e-10;
    // RMSprop: v = (1 - alpha) g^2, p -= lr g / (sqrt(v) + eps) = lr sign(g) / sqrt(1 - alpha).
    Run rms = run_step(UpdateRule::rmsprop, h, {1.0}, {-0.5}, {0.0}, {});
    CHECK(rms.state1[0] == 0.125 * 0.25);
    CHECK(rms.param[0] == doctest::Approx(1.0 + 0.125 / std::sqrt(0.125)));
    // Adagrad at step 3 with lr_decay 1/2: clr = lr / (1 + 2 * 0.5) = lr / 2; sum += g^2.
    h.step = 3;
    Run ada = run_step(UpdateRule::adagrad, h, {1.0}, {0.5}, {0.75}, {});
    CHECK(ada.state1[0] == 1.0);
    CHECK(ada.param[0] == doctest::Approx(1.0 - 0.0625 * 0.5 / (1.0 + 1e-10)));
}

TEST_CASE("optim.reference_ademamix_closed_form") {
    // Step 1 from the zero state: m1 = (1-b1) g, m2 = (1-b3) g, nu = (1-b2) g^2; bias-corrected m1 = g and
    // sqrt(nu) / sqrt(1 - b2) = |g|: p <- p (1 - lr wd) - lr (g + alpha (1-b3) g) / (|g| + eps).
    StepInputs h = exact_hyper();  // lr 1/8, beta1 3/4, beta2 15/16
    h.beta3 = 0.5;
    h.alpha = 2.0;
    h.eps = 1e-8;
    h.weight_decay = 0.5;
    const std::vector<double> p = {1.0, -2.0};
    const std::vector<double> g = {0.25, -0.5};
    std::vector<double> param = p, m1 = {0, 0}, nu = {0, 0}, m2 = {0, 0};
    static_cast<void>(reference::step(UpdateRule::ademamix, kernel_params_of(UpdateRule::ademamix, h), param,
                                      g, m1, nu, m2));
    for (std::size_t i = 0; i < p.size(); ++i) {
        CAPTURE(i);
        CHECK(m1[i] == doctest::Approx(0.25 * g[i]));
        CHECK(m2[i] == doctest::Approx(0.5 * g[i]));
        CHECK(nu[i] == doctest::Approx(0.0625 * g[i] * g[i]));
        const double expected =
            p[i] * (1 - 0.125 * 0.5) - 0.125 * (g[i] + 2.0 * 0.5 * g[i]) / (std::abs(g[i]) + 1e-8);
        CHECK(param[i] == doctest::Approx(expected).epsilon(1e-7));
    }
    // With alpha warming up over 4 steps, step 1 mixes in a quarter of alpha; beta3 warming up starts at
    // beta1's half-life.
    h.t_alpha = 4;
    const KernelParams warm = kernel_params_of(UpdateRule::ademamix, h);
    CHECK(warm.alpha == 0.5f);
}

TEST_CASE("optim.reference_lamb_scales_by_the_trust_ratio") {
    // One tensor p = (3, 4), ||p|| = 5. Step 1 from the zero state: the direction is g / (|g| + eps) + wd p,
    // about sign(g) + wd p; the update is lr ||p|| / ||direction|| times the direction.
    StepInputs h = exact_hyper();  // lr 1/8
    h.eps = 1e-12;
    const std::vector<double> p = {3.0, 4.0};
    const std::vector<double> g = {0.5, -0.25};
    std::vector<double> param = p, m = {0, 0}, v = {0, 0};
    reference::StepReport r =
        reference::step(UpdateRule::lamb, kernel_params_of(UpdateRule::lamb, h), param, g, m, v);
    CHECK(r.trust_scale == doctest::Approx(0.125 * 5.0 / std::sqrt(2.0)));
    CHECK(param[0] == doctest::Approx(3.0 - 0.125 * 5.0 / std::sqrt(2.0)));
    CHECK(param[1] == doctest::Approx(4.0 + 0.125 * 5.0 / std::sqrt(2.0)));
    // Weight decay enters the direction (and its norm): u = (1 + 0.3, -1 + 0.4).
    h.weight_decay = 0.1;
    param = p, m = {0, 0}, v = {0, 0};
    r = reference::step(UpdateRule::lamb, kernel_params_of(UpdateRule::lamb, h), param, g, m, v);
    const double norm = std::sqrt(1.3 * 1.3 + 0.6 * 0.6);
    CHECK(param[0] == doctest::Approx(3.0 - 0.125 * 5.0 / norm * 1.3));
    CHECK(param[1] == doctest::Approx(4.0 - 0.125 * 5.0 / norm * -0.6));
    // A zero parameter tensor: ratio 1.
    std::vector<double> zero = {0.0, 0.0};
    m = {0, 0}, v = {0, 0};
    h.weight_decay = 0.0;
    r = reference::step(UpdateRule::lamb, kernel_params_of(UpdateRule::lamb, h), zero, g, m, v);
    CHECK(r.trust_scale == doctest::Approx(0.125));
    CHECK(zero[0] == doctest::Approx(-0.125));
}

TEST_CASE("optim.reference_lars_scales_its_momentum_by_the_trust_ratio") {
    // p = (3, 4), ||p|| = 5; g = (0.6, 0.8), ||g|| = 1; eta 0.02, wd 0: local lr = 0.02 * 5 / 1 = 0.1.
    StepInputs h = step_inputs(UpdateRule::lars);  // lr 0.01, momentum 0.9, eta 0.02
    const std::vector<double> p = {3.0, 4.0};
    const std::vector<double> g = {0.6, 0.8};
    std::vector<double> param = p, v = {0, 0};
    reference::StepReport r =
        reference::step(UpdateRule::lars, kernel_params_of(UpdateRule::lars, h), param, g, v, {});
    const double factor =
        static_cast<double>(static_cast<float>(0.01)) * static_cast<double>(static_cast<float>(0.02)) * 5.0;
    CHECK(r.trust_scale == doctest::Approx(factor));
    CHECK(v[0] == doctest::Approx(factor * 0.6));
    CHECK(param[1] == doctest::Approx(4.0 - factor * 0.8));
    // Step 2 with weight decay 0.5: local lr = eta ||p|| / (||g|| + wd ||p||); v = 0.9 v + lr local (g + wd
    // p).
    h.weight_decay = 0.5;
    h.step = 2;
    const std::vector<double> p2 = param;
    const double pn = std::sqrt(p2[0] * p2[0] + p2[1] * p2[1]);
    const double factor2 = static_cast<double>(static_cast<float>(0.01)) *
                           static_cast<double>(static_cast<float>(0.02)) * pn / (1.0 + 0.5 * pn);
    const std::vector<double> v1 = v;
    r = reference::step(UpdateRule::lars, kernel_params_of(UpdateRule::lars, h), param, g, v, {});
    for (std::size_t i = 0; i < 2; ++i) {
        const double expected_v =
            static_cast<double>(static_cast<float>(0.9)) * v1[i] + factor2 * (g[i] + 0.5 * p2[i]);
        CHECK(v[i] == doctest::Approx(expected_v));
        CHECK(param[i] == doctest::Approx(p2[i] - expected_v));
    }
    // A zero gradient: ratio 1 (local lr 1), so only the momentum moves the weights.
    std::vector<double> still = {1.0, 1.0}, momentum = {0.5, 0.5};
    h.weight_decay = 0.0;
    const std::vector<double> no_gradient = {0.0, 0.0};
    r = reference::step(UpdateRule::lars, kernel_params_of(UpdateRule::lars, h), still, no_gradient, momentum,
                        {});
    CHECK(r.trust_scale == doctest::Approx(0.01));
    CHECK(still[0] == doctest::Approx(1.0 - 0.9 * 0.5).epsilon(1e-6));
}

TEST_CASE("optim.reference_grad_scale_divides_the_gradient") {
    StepInputs unscaled = exact_hyper();
    StepInputs scaled = unscaled;
    scaled.grad_scale = 1024.0;
    for (UpdateRule a :
         {UpdateRule::adam, UpdateRule::sgd, UpdateRule::rmsprop, UpdateRule::adagrad, UpdateRule::lion}) {
        Run r1 = run_step(a, unscaled, {0.5, -1.0}, {0.25, -3.0}, {0.1, 0.2}, {0.3, 0.4});
        Run r2 = run_step(a, scaled, {0.5, -1.0}, {256.0, -3072.0}, {0.1, 0.2}, {0.3, 0.4});
        CAPTURE(static_cast<int>(a));
        CHECK(r1.param == r2.param);
        CHECK(r1.state1 == r2.state1);
    }
}

TEST_CASE("optim.reference_nonfinite_gradient_changes_nothing") {
    for (UpdateRule a : {UpdateRule::adam, UpdateRule::adamw, UpdateRule::sgd, UpdateRule::lion,
                         UpdateRule::rmsprop, UpdateRule::adagrad, UpdateRule::ademamix}) {
        StepInputs h = exact_hyper();
        h.weight_decay = 0.25;
        h.max_unorm = 1e6;
        const std::vector<double> p = {1.0, 2.0, 3.0, 4.0};
        const std::vector<double> s1 = {0.1, 0.2, 0.3, 0.4};
        const std::vector<double> s2 = {0.5, 0.6, 0.7, 0.8};
        const std::vector<double> g = {0.5, kNan, kInf, -0.5};
        Run r = run_step(a, h, p, g, s1, s2);
        CAPTURE(static_cast<int>(a));
        CHECK(r.report.nonfinite);
        for (std::size_t i : {1u, 2u}) {
            CHECK(r.param[i] == p[i]);  // decoupled decay is skipped too
            CHECK(r.state1[i] == s1[i]);
            CHECK(r.state2[i] == s2[i]);
        }
        CHECK(r.param[0] != p[0]);
        CHECK(r.param[3] != p[3]);
        // The finite elements are exactly what a step without the bad ones gives.
        Run clean = run_step(a, h, {p[0], p[3]}, {g[0], g[3]}, {s1[0], s1[3]}, {s2[0], s2[3]});
        CHECK(r.param[0] == clean.param[0]);
        CHECK(r.param[3] == clean.param[1]);
        CHECK(r.report.update_norm == clean.report.update_norm);
        CHECK_FALSE(clean.report.nonfinite);
    }
    // A finite stored gradient that overflows float once scaled counts as non-finite, as in the kernel.
    StepInputs tiny_scale = exact_hyper();
    tiny_scale.grad_scale = 1.0 / 1024.0;
    Run r = run_step(UpdateRule::sgd, tiny_scale, {1.0}, {3e38}, {0.0}, {});
    CHECK(r.report.nonfinite);
    CHECK(r.param[0] == 1.0);
}

TEST_CASE("optim.reference_max_unorm_clips_the_update_norm") {
    StepInputs h = exact_hyper();
    h.momentum = 0.0;
    h.dampening = 0.0;
    // SGD updates lr * g = (0.375, 0.5): norm 0.625.
    const std::vector<double> p = {1.0, 1.0};
    const std::vector<double> g = {3.0, 4.0};
    h.max_unorm = 0.25;
    Run clipped = run_step(UpdateRule::sgd, h, p, g, {}, {});
    CHECK(clipped.report.update_norm == doctest::Approx(0.625));
    CHECK(clipped.report.update_scale == doctest::Approx(0.4));
    CHECK(clipped.param[0] == doctest::Approx(1.0 - 0.375 * 0.4));
    CHECK(clipped.param[1] == doctest::Approx(1.0 - 0.5 * 0.4));
    h.max_unorm = 1.0;  // above the norm: untouched
    Run loose = run_step(UpdateRule::sgd, h, p, g, {}, {});
    CHECK(loose.report.update_scale == 1.0);
    CHECK(loose.param[0] == 1.0 - 0.375);
    // AdamW: the clip scales the Adam update, not the decoupled decay.
    StepInputs w = exact_hyper();
    w.weight_decay = 0.5;
    w.max_unorm = 0.0625;  // each of the two updates is ~lr = 0.125: norm ~0.177
    Run adamw = run_step(UpdateRule::adamw, w, p, {0.5, -0.5}, {0, 0}, {0, 0});
    const double scale = 0.0625 / std::sqrt(2 * 0.125 * 0.125);
    CHECK(adamw.report.update_scale == doctest::Approx(scale));
    CHECK(adamw.param[0] == doctest::Approx(1.0 * (1 - 0.0625) - 0.125 * scale));
    CHECK(adamw.param[1] == doctest::Approx(1.0 * (1 - 0.0625) + 0.125 * scale));
}

TEST_CASE("optim.reference_8bit_follows_the_32bit_math_then_quantizes") {
    const StepInputs h = step_inputs(UpdateRule::adam);
    const KernelParams k = kernel_params_of(UpdateRule::adam, h);
    std::normal_distribution<double> normal(0.0, 1e-2);
    const std::size_t n = 600;  // 2 full blocks and a short one
    std::vector<double> param(n), grad(n);
    for (auto& x : param) x = normal(rng());
    for (auto& x : grad) x = normal(rng());
    grad[5] = kNan;  // block 0 keeps updating its other elements

    reference::QuantizedState m(MapSign::signed_map, n);
    reference::QuantizedState v(MapSign::unsigned_map, n);
    std::vector<double> p8 = param;
    const reference::StepReport r8 = reference::step_8bit(UpdateRule::adam, k, p8, grad, &m, &v);
    std::vector<double> p32 = param, m32(n, 0.0), v32(n, 0.0);
    const reference::StepReport r32 = reference::step(UpdateRule::adam, k, p32, grad, m32, v32);
    CHECK(r8.nonfinite);
    // From the zero state, dequantized state is exactly 0, so the parameters match fp32 state exactly.
    CHECK(p8 == p32);
    CHECK(r8.update_norm == r32.update_norm);
    for (std::size_t block = 0; block < 3; ++block) {
        double max1 = 0.0, max2 = 0.0;
        for (std::size_t i = block * 256; i < std::min(n, block * 256 + 256); ++i) {
            max1 = std::max(max1, std::abs(m32[i]));
            max2 = std::max(max2, std::abs(v32[i]));
        }
        CHECK(m.absmax[block] == static_cast<float>(max1));
        CHECK(v.absmax[block] == static_cast<float>(max2));
    }
    for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(i);
        CHECK(m.codes[i] == reference::nearest_code(m.map(), m32[i] / m.absmax[i / 256]));
        CHECK(v.codes[i] == reference::nearest_code(v.map(), v32[i] / v.absmax[i / 256]));
        // Dequantized within half the local code spacing: at most ~1% of the block's absmax.
        CHECK(std::abs(m.value(i) - m32[i]) <= 0.01 * m.absmax[i / 256]);
    }
    CHECK(p8[5] == param[5]);
    CHECK(m.value(5) == 0.0);  // its state stays the zero it was
    // Another step continues from the dequantized state.
    StepInputs h2 = h;
    h2.step = 2;
    std::vector<double> p8b = p8;
    const std::vector<double> m_before = [&] {
        std::vector<double> out(n);
        for (std::size_t i = 0; i < n; ++i) out[i] = m.value(i);
        return out;
    }();
    static_cast<void>(
        reference::step_8bit(UpdateRule::adam, kernel_params_of(UpdateRule::adam, h2), p8b, grad, &m, &v));
    for (std::size_t i : {0u, 300u, 599u}) {
        const double expected_m = 0.9 * m_before[i] + (1 - 0.9) * grad[i];
        CHECK(std::abs(m.value(i) - expected_m) <= 0.01 * m.absmax[i / 256]);
    }
}

TEST_CASE("optim.reference_rejects_mismatched_sizes") {
    const KernelParams k = kernel_params_of(UpdateRule::adam, StepInputs{});
    std::vector<double> p(4, 1.0), g(3, 0.1), s(4, 0.0);
    const std::vector<double> p_before = p;
    CHECK_THROWS_AS(static_cast<void>(reference::step(UpdateRule::adam, k, p, g, s, s)), cudarc::Error);
    CHECK(p == p_before);
    g.resize(4);
    std::vector<double> short_state(2, 0.0);
    CHECK_THROWS_AS(static_cast<void>(reference::step(UpdateRule::adam, k, p, g, s, short_state)),
                    cudarc::Error);
    CHECK(p == p_before);
    reference::QuantizedState m(MapSign::signed_map, 4);
    CHECK_THROWS_AS(static_cast<void>(reference::step_8bit(UpdateRule::adam, k, p, g, &m, nullptr)),
                    cudarc::Error);
    CHECK(p == p_before);
}

// The kernels' float arithmetic, run on the host, agrees with the double reference to within a
// few float roundings for every algorithm, on fresh random data and hyper-parameters. Parameter,
// gradient and state share a sign per element, so no sum inside the update cancels and a bound
// relative to the magnitudes involved is sound.
TEST_CASE("optim.kernel_element_math_matches_reference") {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::bernoulli_distribution negative(0.5);
    constexpr double kUlps = 8 * 0x1p-24;
    const auto check_algorithm = [&](UpdateRule a, auto algorithm_tag) {
        constexpr int A = decltype(algorithm_tag)::value;
        for (int trial = 0; trial < 20; ++trial) {
            StepInputs h;
            h.lr = std::pow(10.0, -4.0 + 3.0 * unit(rng()));
            h.beta1 = 0.8 + 0.19 * unit(rng());
            h.beta2 = 0.9 + 0.0999 * unit(rng());
            h.eps = std::pow(10.0, -10.0 + 4.0 * unit(rng()));
            h.weight_decay = unit(rng()) < 0.5 ? 0.0 : 0.1 * unit(rng());
            h.momentum = unit(rng()) < 0.2 ? 0.0 : 0.5 + 0.49 * unit(rng());
            h.dampening = unit(rng()) < 0.5 ? 0.0 : 0.5 * unit(rng());
            h.nesterov = h.momentum > 0.0 && h.dampening == 0.0 && unit(rng()) < 0.5;
            h.alpha = 0.9 + 0.099 * unit(rng());
            h.lr_decay = 0.01 * unit(rng());
            h.grad_scale = unit(rng()) < 0.5 ? 1.0 : std::pow(2.0, 1 + static_cast<int>(16 * unit(rng())));
            h.step = 1 + static_cast<std::int64_t>(1000 * unit(rng()));
            if (A == cudarc_optim::kAdemamix) {
                h.alpha = 8.0 * unit(rng());
                h.beta3 = 0.99 + 0.0099 * unit(rng());
                h.t_alpha = unit(rng()) < 0.5 ? 0 : static_cast<std::int64_t>(2000 * unit(rng()));
                h.t_beta3 = unit(rng()) < 0.5 ? 0 : static_cast<std::int64_t>(2000 * unit(rng()));
            }
            if (A == cudarc_optim::kLars) h.trust_coefficient = 0.001 + 0.05 * unit(rng());
            const KernelParams k = kernel_params_of(a, h);
            const auto hp = std::bit_cast<cudarc_optim::OptimParams>(k);
            // LARS' momentum takes the tensor's lr times trust ratio.
            const float factor = static_cast<float>(h.lr * (0.1 + 10.0 * unit(rng())));
            for (int i = 0; i < 200; ++i) {
                const float s = negative(rng()) ? -1.0f : 1.0f;
                const float p = s * std::abs(normal(rng()));
                const float g = s * std::abs(normal(rng())) * static_cast<float>(h.grad_scale) * 0.1f;
                // RMSprop's and Adagrad's state1 is a second moment: never negative.
                const bool second_moment = A == cudarc_optim::kRmsprop || A == cudarc_optim::kAdagrad;
                const float m0 = (second_moment ? 1.0f : s) * std::abs(normal(rng())) * 0.01f;
                const float v0 = std::abs(normal(rng())) * 1e-4f;
                const float w0 = s * std::abs(normal(rng())) * 0.01f;  // AdEMAMix's slow EMA
                float m = m0, v = v0, w = w0, update = 0.0f;
                REQUIRE(cudarc_optim::update_element<A>(hp, p, g, m, v, w, update, factor));
                const float p_new = cudarc_optim::apply_update<A>(hp, p, update, 1.0f);
                const reference::ElementResult r = reference::update_element(a, k, p, g, m0, v0, w0, factor);
                CAPTURE(static_cast<int>(a));
                CAPTURE(trial);
                CAPTURE(i);
                REQUIRE(std::abs(static_cast<double>(p_new) - r.param) <=
                        kUlps * (std::abs(p) + std::abs(r.update)));
                REQUIRE(std::abs(static_cast<double>(update) - r.update) <= kUlps * std::abs(r.update));
                REQUIRE(std::abs(static_cast<double>(m) - r.state1) <= kUlps * std::abs(r.state1));
                REQUIRE(std::abs(static_cast<double>(v) - r.state2) <= kUlps * std::abs(r.state2));
                REQUIRE(std::abs(static_cast<double>(w) - r.state3) <= kUlps * std::abs(r.state3));
            }
        }
    };
    check_algorithm(UpdateRule::adam, std::integral_constant<int, cudarc_optim::kAdam>{});
    check_algorithm(UpdateRule::adamw, std::integral_constant<int, cudarc_optim::kAdamW>{});
    check_algorithm(UpdateRule::sgd, std::integral_constant<int, cudarc_optim::kSgd>{});
    check_algorithm(UpdateRule::lion, std::integral_constant<int, cudarc_optim::kLion>{});
    check_algorithm(UpdateRule::rmsprop, std::integral_constant<int, cudarc_optim::kRmsprop>{});
    check_algorithm(UpdateRule::adagrad, std::integral_constant<int, cudarc_optim::kAdagrad>{});
    check_algorithm(UpdateRule::ademamix, std::integral_constant<int, cudarc_optim::kAdemamix>{});
    check_algorithm(UpdateRule::lamb, std::integral_constant<int, cudarc_optim::kLamb>{});
    check_algorithm(UpdateRule::lars, std::integral_constant<int, cudarc_optim::kLars>{});
}

// The 8-bit kernels' AdEMAMix update (approximate square root and reciprocal) against the reference.
TEST_CASE("optim.kernel_8bit_element_math_matches_reference_for_ademamix") {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    StepInputs h = step_inputs(UpdateRule::ademamix);
    h.step = 17;
    h.t_alpha = 100;
    h.t_beta3 = 100;
    const KernelParams k = kernel_params_of(UpdateRule::ademamix, h);
    const auto hp = std::bit_cast<cudarc_optim::OptimParams>(k);
    for (int i = 0; i < 1000; ++i) {
        const float s = normal(rng()) < 0 ? -1.0f : 1.0f;
        const float p = s * std::abs(normal(rng()));
        const float g = s * std::abs(normal(rng())) * 0.1f;
        const float m0 = s * std::abs(normal(rng())) * 0.01f;
        const float v0 = std::abs(normal(rng())) * 1e-4f;
        const float w0 = s * std::abs(normal(rng())) * 0.01f;
        float m = m0, v = v0, w = w0;
        const float update = cudarc_optim::update_8bit<cudarc_optim::kAdemamix>(hp, p, g, m, v, w);
        const reference::ElementResult r =
            reference::update_element(UpdateRule::ademamix, k, p, g, m0, v0, w0);
        CAPTURE(i);
        // (On the host the approximate operations are the rounded ones; a few roundings either way.)
        CHECK(std::abs(static_cast<double>(update) - r.update) <= 8 * 0x1p-24 * std::abs(r.update));
        CHECK(std::abs(static_cast<double>(m) - r.state1) <= 8 * 0x1p-24 * std::abs(r.state1));
        CHECK(std::abs(static_cast<double>(v) - r.state2) <= 8 * 0x1p-24 * std::abs(r.state2));
        CHECK(std::abs(static_cast<double>(w) - r.state3) <= 8 * 0x1p-24 * std::abs(r.state3));
    }
}

TEST_CASE("optim.kernel_element_math_skips_nonfinite_gradients") {
    const KernelParams k = kernel_params_of(UpdateRule::adamw, step_inputs(UpdateRule::adamw));
    const auto hp = std::bit_cast<cudarc_optim::OptimParams>(k);
    for (float g : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
        float m = 0.25f, v = 0.5f, w = 0.75f, update = 7.0f;
        CHECK_FALSE(cudarc_optim::update_element<cudarc_optim::kAdamW>(hp, 1.0f, g, m, v, w, update));
        CHECK(m == 0.25f);
        CHECK(v == 0.5f);
        CHECK(update == 0.0f);
    }
}

// Note [Complements]: every rule weights the new value of its EMAs by 1 - beta rounded once from the double
// option, in the 32-bit and the 8-bit arithmetic. From a zero state with g = 1 each state is that weight
// exactly (1.0f minus the float beta would be off by beta's rounding: 1.3e-5 relative for 0.999).
TEST_CASE("optim.kernel_element_math_weights_new_values_by_the_rounded_complements") {
    const auto zero_state_step = [](UpdateRule a, auto algorithm_tag, StepInputs h, bool eight_bit) {
        constexpr int A = decltype(algorithm_tag)::value;
        h.weight_decay = 0.0;
        const auto hp = std::bit_cast<cudarc_optim::OptimParams>(kernel_params_of(a, h));
        std::array<float, 3> s{0.0f, 0.0f, 0.0f};
        float update = 0.0f;
        if constexpr (!cudarc_optim::uses_trust_ratio(A)) {  // (LAMB and LARS keep 32-bit state only)
            if (eight_bit) update = cudarc_optim::update_8bit<A>(hp, 1.0f, 1.0f, s[0], s[1], s[2]);
        }
        if (!eight_bit) {
            REQUIRE(cudarc_optim::update_element<A>(hp, 1.0f, 1.0f, s[0], s[1], s[2], update));
        }
        return s;
    };
    for (const bool eight_bit : {false, true}) {
        CAPTURE(eight_bit);
        StepInputs adam = step_inputs(UpdateRule::adamw);  // betas 0.9, 0.999
        const auto sa = zero_state_step(UpdateRule::adamw,
                                        std::integral_constant<int, cudarc_optim::kAdamW>{}, adam, eight_bit);
        CHECK(sa[0] == static_cast<float>(1.0 - 0.9));
        CHECK(sa[1] == static_cast<float>(1.0 - 0.999));
        CHECK(sa[1] != 1.0f - static_cast<float>(0.999));

        StepInputs lion = step_inputs(UpdateRule::lion);
        lion.beta2 = 0.999;
        const auto sl = zero_state_step(UpdateRule::lion, std::integral_constant<int, cudarc_optim::kLion>{},
                                        lion, eight_bit);
        CHECK(sl[0] == static_cast<float>(1.0 - 0.999));

        StepInputs rms = step_inputs(UpdateRule::rmsprop);
        rms.alpha = 0.999;
        const auto sr = zero_state_step(
            UpdateRule::rmsprop, std::integral_constant<int, cudarc_optim::kRmsprop>{}, rms, eight_bit);
        CHECK(sr[0] == static_cast<float>(1.0 - 0.999));

        StepInputs sgd = step_inputs(UpdateRule::sgd);
        sgd.momentum = 0.5;
        sgd.dampening = 0.3;
        sgd.step = 2;  // (step 1 copies the gradient)
        const auto ss = zero_state_step(UpdateRule::sgd, std::integral_constant<int, cudarc_optim::kSgd>{},
                                        sgd, eight_bit);
        CHECK(ss[0] == static_cast<float>(1.0 - 0.3));

        StepInputs ademamix = step_inputs(UpdateRule::ademamix);  // betas 0.9, 0.999, 0.9999
        const auto se =
            zero_state_step(UpdateRule::ademamix, std::integral_constant<int, cudarc_optim::kAdemamix>{},
                            ademamix, eight_bit);
        CHECK(se[0] == static_cast<float>(1.0 - 0.9));
        CHECK(se[1] == static_cast<float>(1.0 - 0.999));
        CHECK(se[2] == static_cast<float>(1.0 - 0.9999));
    }
    // LAMB (32-bit state only).
    const auto sb = zero_state_step(UpdateRule::lamb, std::integral_constant<int, cudarc_optim::kLamb>{},
                                    step_inputs(UpdateRule::lamb), false);
    CHECK(sb[1] == static_cast<float>(1.0 - 0.999));
}

// The optimizer kernels' host-side ABI (src/optim/kernel_abi.hpp) against the kernel header itself.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../kernels/optim_common.cuh"
#include "cudarc/error.hpp"
#include "optim/group_layout.hpp"
#include "optim/kernel_abi.hpp"
#include "optim_test_support.hpp"

namespace {

using cudarc::optim::ElementType;
using cudarc::optim::MapSign;
using cudarc::optim::StatePrecision;
using cudarc::optim::UpdateRule;
using cudarc::optim::abi::KernelLayout;
using cudarc::optim::abi::KernelPass;
using cudarc::optim::test::kernel_params_of;
using cudarc::optim::test::step_inputs;
using cudarc::optim::test::StepInputs;
namespace abi = cudarc::optim::abi;
using cudarc::optim::detail::state_arrays;

constexpr UpdateRule kRules[] = {UpdateRule::adam,     UpdateRule::adamw,   UpdateRule::sgd,
                                 UpdateRule::lion,     UpdateRule::rmsprop, UpdateRule::adagrad,
                                 UpdateRule::ademamix, UpdateRule::lamb,    UpdateRule::lars};
constexpr ElementType kTypes[] = {ElementType::fp32, ElementType::fp16, ElementType::bf16};

// Runs `make_kernel_params` and returns the error message, or "" if it did not throw.
std::string rejection(UpdateRule a, const StepInputs& h) {
    try {
        static_cast<void>(kernel_params_of(a, h));
    } catch (const cudarc::Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("optim.abi_uses_the_kernel_header_and_the_public_numbering") {
    // No mirror: the host passes the kernels' own structs, with the sizes docs/optimizers.md gives.
    static_assert(std::is_same_v<abi::KernelParams, cudarc_optim::OptimParams>);
    static_assert(std::is_same_v<abi::TensorDesc, cudarc_optim::OptimTensor>);
    static_assert(std::is_same_v<abi::Chunk, cudarc_optim::OptimChunk>);
    CHECK(sizeof(abi::KernelParams) == 76);
    CHECK(sizeof(abi::TensorDesc) == 64);
    CHECK(sizeof(abi::Chunk) == 16);
    static_assert(std::is_same_v<abi::StepState, cudarc_optim::OptimStepState>);
    CHECK(offsetof(abi::StepState, params) == 0);
    CHECK(offsetof(abi::StepState, count) == 80);
    CHECK(sizeof(abi::StepState) == 168);
    // The work decomposition.
    CHECK(abi::tile_elements(StatePrecision::fp32) == 1024);
    CHECK(abi::tile_elements(StatePrecision::blockwise8) == 2048);
    CHECK(abi::kBlockThreads == 256u);
    CHECK(abi::kQuantBlock == 256);
    // The kernel templates' arguments are the public enums' values.
    CHECK(static_cast<int>(UpdateRule::adam) == cudarc_optim::kAdam);
    CHECK(static_cast<int>(UpdateRule::adamw) == cudarc_optim::kAdamW);
    CHECK(static_cast<int>(UpdateRule::sgd) == cudarc_optim::kSgd);
    CHECK(static_cast<int>(UpdateRule::lion) == cudarc_optim::kLion);
    CHECK(static_cast<int>(UpdateRule::rmsprop) == cudarc_optim::kRmsprop);
    CHECK(static_cast<int>(UpdateRule::adagrad) == cudarc_optim::kAdagrad);
    CHECK(static_cast<int>(UpdateRule::ademamix) == cudarc_optim::kAdemamix);
    CHECK(static_cast<int>(UpdateRule::lamb) == cudarc_optim::kLamb);
    CHECK(static_cast<int>(UpdateRule::lars) == cudarc_optim::kLars);
    CHECK(static_cast<int>(ElementType::fp32) == cudarc_optim::kFp32);
    CHECK(static_cast<int>(ElementType::fp16) == cudarc_optim::kFp16);
    CHECK(static_cast<int>(ElementType::bf16) == cudarc_optim::kBf16);
    CHECK(static_cast<int>(StatePrecision::fp32) == cudarc_optim::kStateFp32);
    CHECK(static_cast<int>(StatePrecision::blockwise8) == cudarc_optim::kStateBlockwise8);
}

TEST_CASE("optim.abi_kernel_names") {
    CHECK(abi::kernel_name(UpdateRule::adamw, ElementType::bf16, StatePrecision::blockwise8,
                           KernelLayout::multi_tensor,
                           KernelPass::update) == "cudarc_optim::multi_step<1, 2, 1, false>");
    CHECK(abi::kernel_name(UpdateRule::sgd, ElementType::fp32, StatePrecision::fp32, KernelLayout::tensor,
                           KernelPass::update_norm) == "cudarc_optim::tensor_step<2, 0, 0, true>");
    CHECK(abi::kKernelSource == "optim.cu");
    std::set<std::string> names;
    for (UpdateRule a : kRules) {
        for (ElementType d : kTypes) {
            for (StatePrecision f : {StatePrecision::fp32, StatePrecision::blockwise8}) {
                for (KernelLayout l : {KernelLayout::tensor, KernelLayout::multi_tensor}) {
                    for (KernelPass p : {KernelPass::update, KernelPass::update_norm}) {
                        names.insert(abi::kernel_name(a, d, f, l, p));
                    }
                }
            }
        }
    }
    CHECK(names.size() == 216);  // (LAMB's and LARS' 8-bit ones are spelled, never compiled)
    using Names = std::vector<std::string>;
    CHECK(abi::kernel_names(UpdateRule::lion, ElementType::fp16, StatePrecision::fp32) ==
          Names{"cudarc_optim::tensor_step<3, 1, 0, false>", "cudarc_optim::tensor_step<3, 1, 0, true>",
                "cudarc_optim::multi_step<3, 1, 0, false>", "cudarc_optim::multi_step<3, 1, 0, true>"});
    // A capturable optimizer's module: the capturable layout's two passes and the step state's writer.
    CHECK(abi::kernel_names(UpdateRule::adamw, ElementType::bf16, StatePrecision::blockwise8, true) ==
          Names{"cudarc_optim::multi_step_capturable<1, 2, 1, false>",
                "cudarc_optim::multi_step_capturable<1, 2, 1, true>", "cudarc_optim::store_step<1>"});
    CHECK(abi::store_step_name(UpdateRule::adagrad) == "cudarc_optim::store_step<5>");
}

TEST_CASE("optim.abi_step_values_follow_the_documented_derivation") {
    // Note [Per-step values]: beta^step by binary powering with each product rounded, within the float
    // rounding of std::pow's value, and exactly the documented sequence of double operations.
    std::mt19937_64 rng{std::random_device{}()};
    for (int round = 0; round < 2000; ++round) {
        const double beta = std::uniform_real_distribution<double>(0.5, 0.99999)(rng);
        const auto step = static_cast<std::int64_t>(1 + rng() % (round < 1000 ? 100 : 10000000));
        CAPTURE(beta);
        CAPTURE(step);
        double expected = 1.0;
        double base = beta;
        for (std::int64_t e = step; e > 0; e >>= 1) {  // the same binary powering, spelled out
            if ((e & 1) != 0) expected *= base;
            base *= base;
        }
        CHECK(cudarc_optim::fp64::power(beta, step) == expected);
        // Each squaring doubles the relative error so far: at most (2 step + 64) roundings' worth, which
        // keeps 1 - beta^step within 2^-52 / (1 - beta) relative (the note's bound).
        const double exact = std::pow(beta, static_cast<double>(step));
        const double error = std::abs(cudarc_optim::fp64::power(beta, step) - exact);
        CHECK(error <= (2.0 * static_cast<double>(step) + 66.0) * 0x1p-53 * exact);
        CHECK(error <= 0x1p-52 / (1.0 - beta) * (1.0 - exact));
    }
    CHECK(cudarc_optim::fp64::power(0.9, 0) == 1.0);
    CHECK(cudarc_optim::fp64::power(0.9, 1) == 0.9);

    StepInputs h = step_inputs(UpdateRule::adamw);
    h.beta1 = 0.8;
    h.beta2 = 0.99;
    h.lr = 3e-3;
    for (const std::int64_t step : {std::int64_t{1}, std::int64_t{2}, std::int64_t{77}, std::int64_t{100000},
                                    std::int64_t{2147483647}}) {
        CAPTURE(step);
        h.step = step;
        const abi::KernelParams k = kernel_params_of(UpdateRule::adamw, h);
        const double b1 = cudarc_optim::fp64::power(0.8, step);
        const double b2 = cudarc_optim::fp64::power(0.99, step);
        CHECK(k.step == static_cast<int>(step));
        CHECK(k.step_size == static_cast<float>(3e-3 / (1.0 - b1)));
        CHECK(k.bias_correction2_sqrt == static_cast<float>(std::sqrt(1.0 - b2)));
        // The step state a capturable step starts from derives the same values on the device.
        abi::KernelParams derived = abi::make_step_settings(UpdateRule::adamw, h, h.grad_scale).params;
        cudarc_optim::derive_step(cudarc_optim::kAdamW, abi::step_schedule(UpdateRule::adamw, h), step,
                                  derived);
        CHECK(std::memcmp(&derived, &k, sizeof(k)) == 0);
    }
    // AdEMAMix's warm-ups follow the step too (alpha, beta3 and 1 - beta3): the same floats either way.
    StepInputs a = step_inputs(UpdateRule::ademamix);
    a.t_alpha = 300;
    a.t_beta3 = 500;
    for (const std::int64_t step : {std::int64_t{1}, std::int64_t{2}, std::int64_t{299}, std::int64_t{499},
                                    std::int64_t{500}, std::int64_t{100000}}) {
        CAPTURE(step);
        a.step = step;
        const abi::KernelParams k = kernel_params_of(UpdateRule::ademamix, a);
        abi::KernelParams derived = abi::make_step_settings(UpdateRule::ademamix, a, a.grad_scale).params;
        cudarc_optim::derive_step(cudarc_optim::kAdemamix, abi::step_schedule(UpdateRule::ademamix, a), step,
                                  derived);
        CHECK(std::memcmp(&derived, &k, sizeof(k)) == 0);
    }
    // Past the int range of OptimParams::step (a capturable step count only), step saturates; the derived
    // values still follow the count.
    abi::KernelParams far{};
    abi::StepSchedule schedule{};
    schedule.lr = 1e-2;
    schedule.lr_decay = 1e-3;
    cudarc_optim::derive_step(cudarc_optim::kAdagrad, schedule, std::int64_t{1} << 40, far);
    CHECK(far.step == 2147483647);
    CHECK(far.step_size ==
          static_cast<float>(1e-2 / (1.0 + (static_cast<double>(std::int64_t{1} << 40) - 1.0) * 1e-3)));
}

TEST_CASE("optim.abi_kernel_params_are_derived_in_double") {
    StepInputs h = step_inputs(UpdateRule::adamw);
    h.step = 10;
    h.grad_scale = 65536.0;
    const abi::KernelParams k = kernel_params_of(UpdateRule::adamw, h);
    CHECK(k.lr == static_cast<float>(h.lr));
    CHECK(k.step == 10);
    CHECK(k.inv_grad_scale == 1.0f / 65536.0f);
    CHECK(k.step_size == static_cast<float>(1e-3 / (1.0 - std::pow(0.9, 10))));
    CHECK(k.bias_correction2_sqrt == static_cast<float>(std::sqrt(1.0 - std::pow(0.999, 10))));
    CHECK(k.decay == static_cast<float>(1.0 - 1e-3 * 1e-2));
    // Note [Complements]: 1 - beta rounded once from the double beta, not 1 minus the float beta (for
    // 0.999 those differ by 1.3e-5 relative).
    CHECK(k.beta1_complement == static_cast<float>(1.0 - 0.9));
    CHECK(k.beta2_complement == static_cast<float>(1.0 - 0.999));
    CHECK(k.beta2_complement != 1.0f - static_cast<float>(0.999));
    // Adam's weight decay is L2: no decoupled decay factor.
    CHECK(kernel_params_of(UpdateRule::adam, h).decay == 1.0f);
    // Adagrad: clr = lr / (1 + (step - 1) lr_decay).
    StepInputs ada = step_inputs(UpdateRule::adagrad);
    ada.lr_decay = 0.5;
    ada.step = 5;
    CHECK(kernel_params_of(UpdateRule::adagrad, ada).step_size == static_cast<float>(1e-2 / 3.0));
    // SGD: nothing derived beyond the flag.
    StepInputs sgd = step_inputs(UpdateRule::sgd);
    sgd.momentum = 0.9;
    sgd.nesterov = true;
    const abi::KernelParams ks = kernel_params_of(UpdateRule::sgd, sgd);
    CHECK(ks.nesterov == 1);
    CHECK(ks.step_size == ks.lr);
    CHECK(ks.bias_correction2_sqrt == 1.0f);
    // SGD's dampening and RMSprop's alpha enter only through their complements.
    sgd.nesterov = false;
    sgd.dampening = 0.1;
    CHECK(cudarc_optim::dampening_complement(kernel_params_of(UpdateRule::sgd, sgd)) ==
          static_cast<float>(1.0 - 0.1));
    StepInputs rms = step_inputs(UpdateRule::rmsprop);
    rms.alpha = 0.99;
    CHECK(cudarc_optim::smoothing_complement(kernel_params_of(UpdateRule::rmsprop, rms)) ==
          static_cast<float>(1.0 - 0.99));
    // Lion's decay is decoupled, like AdamW's.
    StepInputs lion = step_inputs(UpdateRule::lion);
    lion.weight_decay = 0.5;
    CHECK(kernel_params_of(UpdateRule::lion, lion).decay == static_cast<float>(1.0 - 1e-4 * 0.5));
    lion.beta2 = 0.99;
    CHECK(kernel_params_of(UpdateRule::lion, lion).beta2_complement == static_cast<float>(1.0 - 0.99));
}

TEST_CASE("optim.abi_kernel_params_reject_bad_input") {
    const StepInputs good = step_inputs(UpdateRule::adam);
    CHECK(rejection(UpdateRule::adam, good).empty());
    const auto rejected_for = [&](UpdateRule a, auto change, const std::string& field) {
        StepInputs h = step_inputs(a);
        change(h);
        const std::string message = rejection(a, h);
        CAPTURE(message);
        CHECK(message.find(field) != std::string::npos);
    };
    rejected_for(
        UpdateRule::adam, [](StepInputs& h) { h.lr = -1.0; }, "lr");
    rejected_for(
        UpdateRule::adam, [](StepInputs& h) { h.beta1 = 1.0; }, "beta1");
    rejected_for(
        UpdateRule::lion, [](StepInputs& h) { h.beta2 = -0.1; }, "beta2");
    rejected_for(
        UpdateRule::adam, [](StepInputs& h) { h.eps = std::nan(""); }, "eps");
    rejected_for(
        UpdateRule::adam, [](StepInputs& h) { h.weight_decay = -0.1; }, "weight_decay");
    rejected_for(
        UpdateRule::sgd, [](StepInputs& h) { h.nesterov = true; }, "Nesterov");
    rejected_for(
        UpdateRule::sgd,
        [](StepInputs& h) {
            h.nesterov = true;
            h.momentum = 0.9;
            h.dampening = 0.1;
        },
        "Nesterov");
    rejected_for(
        UpdateRule::rmsprop, [](StepInputs& h) { h.alpha = 1.5; }, "alpha");
    rejected_for(
        UpdateRule::adagrad, [](StepInputs& h) { h.lr_decay = -1.0; }, "lr_decay");
    rejected_for(
        UpdateRule::adam, [](StepInputs& h) { h.grad_scale = 0.0; }, "grad_scale");
    rejected_for(
        UpdateRule::adam, [](StepInputs& h) { h.grad_scale = 1e-300; }, "grad_scale");
    rejected_for(
        UpdateRule::adam, [](StepInputs& h) { h.max_unorm = -1.0; }, "max_unorm");
    rejected_for(
        UpdateRule::adam, [](StepInputs& h) { h.step = 0; }, "step");
    rejected_for(
        UpdateRule::adam, [](StepInputs& h) { h.lr = 1e39; }, "lr");
    // Betas are not Adagrad's business: any value passes there.
    StepInputs ada = step_inputs(UpdateRule::adagrad);
    ada.beta1 = 7.0;
    CHECK(rejection(UpdateRule::adagrad, ada).empty());
}

TEST_CASE("optim.abi_chunks_cover_every_element_once") {
    std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<std::int64_t> size(0, 300000);
    for (StatePrecision format : {StatePrecision::fp32, StatePrecision::blockwise8}) {
        const std::int64_t tile = abi::tile_elements(format);
        std::vector<std::int64_t> numels = {0, 1, tile - 1, tile, tile + 1, 65536, 65537, 3 * 65536 + 5};
        for (int i = 0; i < 20; ++i) numels.push_back(size(rng));
        for (std::int64_t max_chunk : {std::int64_t{65536}, std::int64_t{5000}, std::int64_t{1}}) {
            const std::vector<abi::Chunk> chunks = abi::make_chunks(numels, format, max_chunk);
            std::vector<std::int64_t> covered(numels.size(), 0);
            const std::int64_t limit = std::max(tile, max_chunk / tile * tile);
            for (std::size_t c = 0; c < chunks.size(); ++c) {
                const abi::Chunk& chunk = chunks[c];
                CAPTURE(c);
                REQUIRE(chunk.tensor >= 0);
                REQUIRE(static_cast<std::size_t>(chunk.tensor) < numels.size());
                CHECK(chunk.offset == covered[static_cast<std::size_t>(chunk.tensor)]);  // in order, no gap
                CHECK(chunk.offset % tile == 0);
                CHECK(chunk.count > 0);
                CHECK(chunk.count <= limit);
                const bool last =
                    chunk.offset + chunk.count == numels[static_cast<std::size_t>(chunk.tensor)];
                if (!last) CHECK(chunk.count % tile == 0);
                covered[static_cast<std::size_t>(chunk.tensor)] += chunk.count;
            }
            CHECK(covered == numels);
        }
    }
    const std::vector<std::int64_t> negative = {5, -1};
    CHECK_THROWS_AS(static_cast<void>(abi::make_chunks(negative, StatePrecision::fp32)), cudarc::Error);
    const std::vector<std::int64_t> one = {5};
    CHECK_THROWS_AS(static_cast<void>(abi::make_chunks(one, StatePrecision::fp32, 0)), cudarc::Error);
}

TEST_CASE("optim.abi_state_workspace_and_grid") {
    StepInputs h;
    CHECK(state_arrays(UpdateRule::adam, h.momentum) == 2);
    CHECK(state_arrays(UpdateRule::lion, h.momentum) == 1);
    CHECK(state_arrays(UpdateRule::sgd, h.momentum) == 0);
    h.momentum = 0.9;
    CHECK(state_arrays(UpdateRule::sgd, h.momentum) == 1);
    CHECK(abi::state_map(UpdateRule::adam, 1) == MapSign::signed_map);
    CHECK(abi::state_map(UpdateRule::adam, 2) == MapSign::unsigned_map);
    CHECK(abi::state_map(UpdateRule::sgd, 1) == MapSign::signed_map);
    CHECK(abi::state_map(UpdateRule::rmsprop, 1) == MapSign::unsigned_map);
    CHECK(abi::state_map(UpdateRule::adagrad, 1) == MapSign::unsigned_map);
    // AdEMAMix: both EMAs signed (the slow one, state 3, shares state 1's map), its second moment unsigned.
    CHECK(abi::state_map(UpdateRule::ademamix, 1) == MapSign::signed_map);
    CHECK(abi::state_map(UpdateRule::ademamix, 2) == MapSign::unsigned_map);
    CHECK(abi::state_map(UpdateRule::ademamix, 3) == MapSign::signed_map);
    CHECK(state_arrays(UpdateRule::ademamix, 0.0) == 2);
    CHECK(state_arrays(UpdateRule::lamb, 0.0) == 2);
    CHECK(state_arrays(UpdateRule::lars, 0.0) == 1);
    // The trust-ratio rules' first pass keeps two sums per tile and tensor.
    CHECK(abi::norm_count(UpdateRule::lamb) == 2);
    CHECK(abi::norm_count(UpdateRule::lars) == 2);
    CHECK(abi::norm_count(UpdateRule::ademamix) == 1);
    CHECK(abi::always_two_passes(UpdateRule::lars));
    CHECK_FALSE(abi::always_two_passes(UpdateRule::adam));
    CHECK(abi::unorm_workspace_floats(1025, StatePrecision::fp32, 2) == 6);
    CHECK(abi::absmax_count(0) == 0);
    CHECK(abi::absmax_count(257) == 2);
    CHECK(abi::unorm_workspace_floats(1024, StatePrecision::fp32) == 2);
    CHECK(abi::unorm_workspace_floats(1025, StatePrecision::fp32) == 3);
    CHECK(abi::unorm_workspace_floats(4096, StatePrecision::blockwise8) == 3);
    CHECK(abi::recommended_grid(0, StatePrecision::fp32, 132, 4) == 1);
    CHECK(abi::recommended_grid(5000, StatePrecision::fp32, 132, 4) == 5);
    CHECK(abi::recommended_grid(std::int64_t{1} << 28, StatePrecision::fp32, 132, 4) ==
          262144);  // one block per tile
    CHECK(abi::recommended_grid(5000, StatePrecision::blockwise8, 132, 4) == 3);
    CHECK(abi::recommended_grid(std::int64_t{1} << 28, StatePrecision::blockwise8, 132, 4) ==
          132 * 4);  // one wave
    CHECK(abi::recommended_grid(std::int64_t{1} << 28, StatePrecision::blockwise8, 132, 0) == 132);
    CHECK(abi::recommended_grid(std::int64_t{1} << 50, StatePrecision::fp32, 132, 4) == 2147483647u);
    CHECK(abi::recommended_multi_grid(0, StatePrecision::blockwise8, 132, 3) == 1);
    CHECK(abi::recommended_multi_grid(100, StatePrecision::blockwise8, 132, 3) == 100);
    CHECK(abi::recommended_multi_grid(16384, StatePrecision::blockwise8, 132, 3) == 396);
    CHECK(abi::recommended_multi_grid(16384, StatePrecision::fp32, 132, 3) == 16384);  // one block per chunk
}

TEST_CASE("optim.abi_8bit_updates_on_sm90_and_later_bring_a_producer_warp") {
    // 256 computing threads, and 32 more whose first issues the tile copies.
    CHECK(abi::update_block_threads(StatePrecision::blockwise8, 9) == 288u);
    CHECK(abi::update_block_threads(StatePrecision::blockwise8, 10) == 288u);
    CHECK(abi::update_block_threads(StatePrecision::blockwise8, 8) == abi::kBlockThreads);
    CHECK(abi::update_block_threads(StatePrecision::blockwise8, 0) == abi::kBlockThreads);  // HIP
    CHECK(abi::update_block_threads(StatePrecision::fp32, 9) == abi::kBlockThreads);
}

TEST_CASE("optim.abi_dynamic_shared_memory_is_the_8bit_tile_buffers_on_sm90_and_later") {
    // Buffers of a tile each: 2048 parameters, gradients and two codes, and 2 x 8 absmax values; four of
    // them for 16-bit parameters, three for fp32.
    const UpdateRule adamw = UpdateRule::adamw;
    CHECK(abi::dynamic_shared_bytes(adamw, StatePrecision::blockwise8, ElementType::bf16, 9) ==
          4 * (2048 * 6 + 64));
    CHECK(abi::dynamic_shared_bytes(adamw, StatePrecision::blockwise8, ElementType::fp16, 10) ==
          4 * (2048 * 6 + 64));
    CHECK(abi::dynamic_shared_bytes(adamw, StatePrecision::blockwise8, ElementType::fp32, 9) ==
          3 * (2048 * 10 + 64));
    // Two blocks of them and their 40 KB of code maps fit an H200 SM (228 KB, 1 KB of it per block
    // reserved).
    for (const ElementType type : {ElementType::fp32, ElementType::fp16, ElementType::bf16}) {
        for (const UpdateRule rule : {adamw, UpdateRule::ademamix}) {
            CHECK(2 * (abi::dynamic_shared_bytes(rule, StatePrecision::blockwise8, type, 9) + 42 * 1024) <=
                  228 * 1024);
        }
    }
    // None before sm_90 (no tensor memory accelerator), on HIP (major 0), or for 32-bit state.
    CHECK(abi::dynamic_shared_bytes(adamw, StatePrecision::blockwise8, ElementType::bf16, 8) == 0);
    CHECK(abi::dynamic_shared_bytes(adamw, StatePrecision::blockwise8, ElementType::bf16, 0) == 0);
    CHECK(abi::dynamic_shared_bytes(adamw, StatePrecision::fp32, ElementType::fp32, 9) == 0);
    // AdEMAMix's buffers hold its third state (the slow EMA's codes and absmax).
    CHECK(abi::dynamic_shared_bytes(UpdateRule::ademamix, StatePrecision::blockwise8, ElementType::fp32, 9) ==
          3 * (2048 * 11 + 96));
    CHECK(abi::dynamic_shared_bytes(UpdateRule::ademamix, StatePrecision::blockwise8, ElementType::bf16, 9) ==
          4 * (2048 * 7 + 96));
}

TEST_CASE("optim.abi_new_rules_derive_their_step_values") {
    // AdEMAMix: Adam's bias corrections, decoupled decay, and the warm-ups of the paper (bitsandbytes'
    // t_alpha and t_beta3): alpha = min(t alpha / T_alpha, alpha); beta3 from beta1, linear in half-life.
    StepInputs a = step_inputs(UpdateRule::ademamix);
    CHECK(a.alpha == 5.0);
    CHECK(a.beta3 == 0.9999);
    CHECK(a.weight_decay == 1e-2);
    a.t_alpha = 1000;
    a.t_beta3 = 2000;
    for (const std::int64_t step : {std::int64_t{1}, std::int64_t{10}, std::int64_t{999}, std::int64_t{1000},
                                    std::int64_t{1999}, std::int64_t{2000}, std::int64_t{50000}}) {
        CAPTURE(step);
        a.step = step;
        const abi::KernelParams k = kernel_params_of(UpdateRule::ademamix, a);
        const double t = static_cast<double>(step);
        const double alpha = std::min(t * 5.0 / 1000.0, 5.0);
        CHECK(k.alpha == static_cast<float>(alpha));
        const double l1 = std::log(0.9);
        const double l3 = std::log(0.9999);
        const double s = t / 2000.0;
        const double beta3 =
            step < 2000 ? std::min(std::exp(l1 * l3 / ((1 - s) * l3 + s * l1)), 0.9999) : 0.9999;
        // (The kernels' exp is its own, within a few units of 2^-53 of std::exp: the floats agree up to the
        // rare value at a rounding boundary.)
        const float derived = cudarc_optim::slow_decay(k);
        CHECK(std::abs(static_cast<double>(derived) - beta3) <= 0x1p-24 * beta3);
        // Its complement is rounded from the double 1 - beta3 (Note [Complements]): within float rounding of
        // it (the exp's few units of 2^-53 are far below), where 1.0f - derived could be 2^-24 / (1 - beta3)
        // off.
        const double complement = cudarc_optim::slow_decay_complement(k);
        CHECK(std::abs(complement - (1.0 - beta3)) <= 0x1p-23 * (1.0 - beta3));
        CHECK(k.step_size == static_cast<float>(a.lr / (1.0 - cudarc_optim::fp64::power(0.9, step))));
        CHECK(k.decay == static_cast<float>(1.0 - a.lr * a.weight_decay));
    }
    // The warm-up starts near beta1 (half-lives of 6.6 and 6931 steps: at t = 1 about 10, beta3 0.933).
    a.step = 1;
    const float early = cudarc_optim::slow_decay(kernel_params_of(UpdateRule::ademamix, a));
    CHECK(early > 0.9f);
    CHECK(early < 0.94f);
    a.t_alpha = 0;
    a.t_beta3 = 0;
    const abi::KernelParams fixed = kernel_params_of(UpdateRule::ademamix, a);
    CHECK(fixed.alpha == 5.0f);
    CHECK(cudarc_optim::slow_decay(fixed) == static_cast<float>(0.9999));
    CHECK(cudarc_optim::slow_decay_complement(fixed) == static_cast<float>(1.0 - 0.9999));

    // LAMB: lr stays outside the direction, whose step size is 1 / (1 - beta1^t); no decoupled decay.
    StepInputs l = step_inputs(UpdateRule::lamb);
    l.step = 3;
    l.weight_decay = 0.01;
    const abi::KernelParams kl = kernel_params_of(UpdateRule::lamb, l);
    CHECK(kl.step_size == static_cast<float>(1.0 / (1.0 - cudarc_optim::fp64::power(0.9, 3))));
    CHECK(kl.bias_correction2_sqrt ==
          static_cast<float>(std::sqrt(1.0 - cudarc_optim::fp64::power(0.999, 3))));
    CHECK(kl.decay == 1.0f);
    // LARS: its trust coefficient in the field it shares with SGD's dampening.
    StepInputs r = step_inputs(UpdateRule::lars);
    CHECK(r.momentum == 0.9);
    CHECK(r.trust_coefficient == 0.02);
    r.trust_coefficient = 0.001;
    const abi::KernelParams kr = kernel_params_of(UpdateRule::lars, r);
    CHECK(cudarc_optim::trust_coefficient(kr) == 0.001f);
    CHECK(kr.decay == 1.0f);
}

TEST_CASE("optim.abi_exp_is_the_same_function_on_host_and_device") {
    // exp_nonpositive uses correctly rounded operations only; here: within a few units of 2^-53 of std::exp.
    std::mt19937_64 rng{std::random_device{}()};
    for (int i = 0; i < 20000; ++i) {
        const double x = -std::uniform_real_distribution<double>(0.0, i % 2 == 0 ? 1.0 : 700.0)(rng);
        const double expected = std::exp(x);
        CAPTURE(x);
        CHECK(std::abs(cudarc_optim::fp64::exp_nonpositive(x) - expected) <= 8 * 0x1p-53 * expected);
    }
    CHECK(cudarc_optim::fp64::exp_nonpositive(0.0) == 1.0);
    CHECK(cudarc_optim::fp64::exp_nonpositive(-800.0) == 0.0);
}

TEST_CASE("optim.abi_new_rules_reject_bad_options") {
    const auto rejected_for = [&](UpdateRule a, auto change, const std::string& field) {
        StepInputs h = step_inputs(a);
        CHECK(rejection(a, h).empty());
        change(h);
        const std::string message = rejection(a, h);
        CAPTURE(message);
        CHECK(message.find(field) != std::string::npos);
    };
    rejected_for(
        UpdateRule::ademamix, [](StepInputs& h) { h.beta3 = 1.0; }, "beta3");
    rejected_for(
        UpdateRule::ademamix, [](StepInputs& h) { h.alpha = -1.0; }, "alpha");
    rejected_for(
        UpdateRule::ademamix, [](StepInputs& h) { h.t_alpha = -5; }, "t_alpha");
    rejected_for(
        UpdateRule::ademamix,
        [](StepInputs& h) {
            h.t_beta3 = 100;
            h.beta1 = 0.0;
        },
        "beta1");
    rejected_for(
        UpdateRule::lamb, [](StepInputs& h) { h.max_unorm = 1.0; }, "max_unorm");
    rejected_for(
        UpdateRule::lars, [](StepInputs& h) { h.trust_coefficient = 0.0; }, "trust_coefficient");
    rejected_for(
        UpdateRule::lars, [](StepInputs& h) { h.max_unorm = 0.5; }, "max_unorm");
    // AdEMAMix's alpha is no smoothing constant: 5 is fine there, and RMSprop's stays within [0, 1].
    StepInputs rms = step_inputs(UpdateRule::rmsprop);
    rms.alpha = 5.0;
    CHECK(rejection(UpdateRule::rmsprop, rms).find("alpha") != std::string::npos);
}

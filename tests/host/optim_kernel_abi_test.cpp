// The optimizer kernels' host-side ABI (src/optim/kernel_abi.hpp) against the kernel header itself.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../../kernels/optim_common.cuh"
#include "cudarc/error.hpp"
#include "optim/kernel_abi.hpp"

namespace {

using cudarc::optim::Algorithm;
using cudarc::optim::DType;
using cudarc::optim::HyperParams;
using cudarc::optim::KernelLayout;
using cudarc::optim::KernelPass;
using cudarc::optim::MapSign;
using cudarc::optim::StateFormat;
namespace abi = cudarc::optim::abi;

constexpr Algorithm kAlgorithms[] = {Algorithm::adam, Algorithm::adamw,   Algorithm::sgd,
                                     Algorithm::lion, Algorithm::rmsprop, Algorithm::adagrad};
constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

// Runs `make_kernel_params` and returns the error message, or "" if it did not throw.
std::string rejection(Algorithm a, const HyperParams& h) {
    try {
        static_cast<void>(abi::make_kernel_params(a, h));
    } catch (const cudarc::Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("optim.abi_structs_match_the_kernel_header") {
    using cudarc_optim::OptimChunk;
    using cudarc_optim::OptimParams;
    using cudarc_optim::OptimTensor;
    static_assert(sizeof(OptimParams) == sizeof(abi::KernelParams));
    static_assert(sizeof(OptimTensor) == sizeof(abi::TensorDesc));
    static_assert(sizeof(OptimChunk) == sizeof(abi::Chunk));
    CHECK(offsetof(OptimParams, lr) == offsetof(abi::KernelParams, lr));
    CHECK(offsetof(OptimParams, beta1) == offsetof(abi::KernelParams, beta1));
    CHECK(offsetof(OptimParams, beta2) == offsetof(abi::KernelParams, beta2));
    CHECK(offsetof(OptimParams, eps) == offsetof(abi::KernelParams, eps));
    CHECK(offsetof(OptimParams, weight_decay) == offsetof(abi::KernelParams, weight_decay));
    CHECK(offsetof(OptimParams, momentum) == offsetof(abi::KernelParams, momentum));
    CHECK(offsetof(OptimParams, dampening) == offsetof(abi::KernelParams, dampening));
    CHECK(offsetof(OptimParams, alpha) == offsetof(abi::KernelParams, alpha));
    CHECK(offsetof(OptimParams, lr_decay) == offsetof(abi::KernelParams, lr_decay));
    CHECK(offsetof(OptimParams, grad_scale) == offsetof(abi::KernelParams, grad_scale));
    CHECK(offsetof(OptimParams, max_unorm) == offsetof(abi::KernelParams, max_unorm));
    CHECK(offsetof(OptimParams, step) == offsetof(abi::KernelParams, step));
    CHECK(offsetof(OptimParams, nesterov) == offsetof(abi::KernelParams, nesterov));
    CHECK(offsetof(OptimParams, inv_grad_scale) == offsetof(abi::KernelParams, inv_grad_scale));
    CHECK(offsetof(OptimParams, step_size) == offsetof(abi::KernelParams, step_size));
    CHECK(offsetof(OptimParams, bias_correction2_sqrt) == offsetof(abi::KernelParams, bias_correction2_sqrt));
    CHECK(offsetof(OptimParams, decay) == offsetof(abi::KernelParams, decay));
    CHECK(offsetof(OptimTensor, param) == offsetof(abi::TensorDesc, param));
    CHECK(offsetof(OptimTensor, grad) == offsetof(abi::TensorDesc, grad));
    CHECK(offsetof(OptimTensor, state1) == offsetof(abi::TensorDesc, state1));
    CHECK(offsetof(OptimTensor, state2) == offsetof(abi::TensorDesc, state2));
    CHECK(offsetof(OptimTensor, absmax1) == offsetof(abi::TensorDesc, absmax1));
    CHECK(offsetof(OptimTensor, absmax2) == offsetof(abi::TensorDesc, absmax2));
    CHECK(offsetof(OptimTensor, unorm) == offsetof(abi::TensorDesc, unorm));
    CHECK(offsetof(OptimTensor, numel) == offsetof(abi::TensorDesc, numel));
    CHECK(offsetof(OptimChunk, tensor) == offsetof(abi::Chunk, tensor));
    CHECK(offsetof(OptimChunk, count) == offsetof(abi::Chunk, count));
    CHECK(offsetof(OptimChunk, offset) == offsetof(abi::Chunk, offset));
    // The work decomposition constants agree too.
    CHECK(abi::tile_elements(StateFormat::fp32) == cudarc_optim::kTile32);
    CHECK(abi::tile_elements(StateFormat::blockwise8) == cudarc_optim::kTile8);
    CHECK(abi::kBlockThreads == static_cast<unsigned>(cudarc_optim::kThreads));
    CHECK(abi::kQuantBlock == cudarc_optim::kQuantBlock);
    // And the algorithm numbering (compile_defines passes it to the kernels' #if selection).
    CHECK(static_cast<int>(Algorithm::adamw) == cudarc_optim::kAdamW);
    CHECK(static_cast<int>(Algorithm::adagrad) == cudarc_optim::kAdagrad);
}

TEST_CASE("optim.abi_kernel_names") {
    CHECK(abi::kernel_name(Algorithm::adamw, DType::bf16, StateFormat::blockwise8, KernelLayout::multi_tensor,
                           KernelPass::update) == "cudarc_optim_adamw_bf16_8bit_multi_update");
    CHECK(abi::kernel_name(Algorithm::sgd, DType::f32, StateFormat::fp32, KernelLayout::tensor,
                           KernelPass::update_norm) == "cudarc_optim_sgd_f32_32bit_tensor_unorm");
    CHECK(abi::kernel_source(StateFormat::fp32) == "optim_32bit.cu");
    CHECK(abi::kernel_source(StateFormat::blockwise8) == "optim_8bit.cu");
    std::set<std::string> names;
    for (Algorithm a : kAlgorithms) {
        for (DType d : kDTypes) {
            for (StateFormat f : {StateFormat::fp32, StateFormat::blockwise8}) {
                for (KernelLayout l : {KernelLayout::tensor, KernelLayout::multi_tensor}) {
                    for (KernelPass p : {KernelPass::update, KernelPass::update_norm}) {
                        names.insert(abi::kernel_name(a, d, f, l, p));
                    }
                }
            }
        }
    }
    CHECK(names.size() == 144);
    using Defines = std::vector<std::pair<std::string, std::string>>;
    CHECK(abi::compile_defines(Algorithm::lion, DType::f16) ==
          Defines{{"CUDARC_OPTIM_ALGORITHM", "3"}, {"CUDARC_OPTIM_DTYPE", "1"}});
}

TEST_CASE("optim.abi_kernel_params_are_derived_in_double") {
    HyperParams h = cudarc::optim::default_hyper_params(Algorithm::adamw);
    h.step = 10;
    h.grad_scale = 65536.0;
    const abi::KernelParams k = abi::make_kernel_params(Algorithm::adamw, h);
    CHECK(k.lr == static_cast<float>(h.lr));
    CHECK(k.step == 10);
    CHECK(k.inv_grad_scale == 1.0f / 65536.0f);
    CHECK(k.step_size == static_cast<float>(1e-3 / (1.0 - std::pow(0.9, 10))));
    CHECK(k.bias_correction2_sqrt == static_cast<float>(std::sqrt(1.0 - std::pow(0.999, 10))));
    CHECK(k.decay == static_cast<float>(1.0 - 1e-3 * 1e-2));
    // Adam's weight decay is L2: no decoupled decay factor.
    CHECK(abi::make_kernel_params(Algorithm::adam, h).decay == 1.0f);
    // Adagrad: clr = lr / (1 + (step - 1) lr_decay).
    HyperParams ada = cudarc::optim::default_hyper_params(Algorithm::adagrad);
    ada.lr_decay = 0.5;
    ada.step = 5;
    CHECK(abi::make_kernel_params(Algorithm::adagrad, ada).step_size == static_cast<float>(1e-2 / 3.0));
    // SGD: nothing derived beyond the flag.
    HyperParams sgd = cudarc::optim::default_hyper_params(Algorithm::sgd);
    sgd.momentum = 0.9;
    sgd.nesterov = true;
    const abi::KernelParams ks = abi::make_kernel_params(Algorithm::sgd, sgd);
    CHECK(ks.nesterov == 1);
    CHECK(ks.step_size == ks.lr);
    CHECK(ks.bias_correction2_sqrt == 1.0f);
    // Lion's decay is decoupled, like AdamW's.
    HyperParams lion = cudarc::optim::default_hyper_params(Algorithm::lion);
    lion.weight_decay = 0.5;
    CHECK(abi::make_kernel_params(Algorithm::lion, lion).decay == static_cast<float>(1.0 - 1e-4 * 0.5));
}

TEST_CASE("optim.abi_kernel_params_reject_bad_input") {
    const HyperParams good = cudarc::optim::default_hyper_params(Algorithm::adam);
    CHECK(rejection(Algorithm::adam, good).empty());
    const auto rejected_for = [&](Algorithm a, auto change, const std::string& field) {
        HyperParams h = cudarc::optim::default_hyper_params(a);
        change(h);
        const std::string message = rejection(a, h);
        CAPTURE(message);
        CHECK(message.find(field) != std::string::npos);
    };
    rejected_for(
        Algorithm::adam, [](HyperParams& h) { h.lr = -1.0; }, "lr");
    rejected_for(
        Algorithm::adam, [](HyperParams& h) { h.beta1 = 1.0; }, "beta1");
    rejected_for(
        Algorithm::lion, [](HyperParams& h) { h.beta2 = -0.1; }, "beta2");
    rejected_for(
        Algorithm::adam, [](HyperParams& h) { h.eps = std::nan(""); }, "eps");
    rejected_for(
        Algorithm::adam, [](HyperParams& h) { h.weight_decay = -0.1; }, "weight_decay");
    rejected_for(
        Algorithm::sgd, [](HyperParams& h) { h.nesterov = true; }, "Nesterov");
    rejected_for(
        Algorithm::sgd,
        [](HyperParams& h) {
            h.nesterov = true;
            h.momentum = 0.9;
            h.dampening = 0.1;
        },
        "Nesterov");
    rejected_for(
        Algorithm::rmsprop, [](HyperParams& h) { h.alpha = 1.5; }, "alpha");
    rejected_for(
        Algorithm::adagrad, [](HyperParams& h) { h.lr_decay = -1.0; }, "lr_decay");
    rejected_for(
        Algorithm::adam, [](HyperParams& h) { h.grad_scale = 0.0; }, "grad_scale");
    rejected_for(
        Algorithm::adam, [](HyperParams& h) { h.grad_scale = 1e-300; }, "grad_scale");
    rejected_for(
        Algorithm::adam, [](HyperParams& h) { h.max_unorm = -1.0; }, "max_unorm");
    rejected_for(
        Algorithm::adam, [](HyperParams& h) { h.step = 0; }, "step");
    rejected_for(
        Algorithm::adam, [](HyperParams& h) { h.lr = 1e39; }, "lr");
    // Betas are not Adagrad's business: any value passes there.
    HyperParams ada = cudarc::optim::default_hyper_params(Algorithm::adagrad);
    ada.beta1 = 7.0;
    CHECK(rejection(Algorithm::adagrad, ada).empty());
}

TEST_CASE("optim.abi_chunks_cover_every_element_once") {
    std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<std::int64_t> size(0, 300000);
    for (StateFormat format : {StateFormat::fp32, StateFormat::blockwise8}) {
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
    CHECK_THROWS_AS(static_cast<void>(abi::make_chunks(negative, StateFormat::fp32)), cudarc::Error);
    const std::vector<std::int64_t> one = {5};
    CHECK_THROWS_AS(static_cast<void>(abi::make_chunks(one, StateFormat::fp32, 0)), cudarc::Error);
}

TEST_CASE("optim.abi_state_workspace_and_grid") {
    HyperParams h;
    CHECK(abi::state_count(Algorithm::adam, h) == 2);
    CHECK(abi::state_count(Algorithm::lion, h) == 1);
    CHECK(abi::state_count(Algorithm::sgd, h) == 0);
    h.momentum = 0.9;
    CHECK(abi::state_count(Algorithm::sgd, h) == 1);
    CHECK(abi::state_map(Algorithm::adam, 1) == MapSign::signed_map);
    CHECK(abi::state_map(Algorithm::adam, 2) == MapSign::unsigned_map);
    CHECK(abi::state_map(Algorithm::sgd, 1) == MapSign::signed_map);
    CHECK(abi::state_map(Algorithm::rmsprop, 1) == MapSign::unsigned_map);
    CHECK(abi::state_map(Algorithm::adagrad, 1) == MapSign::unsigned_map);
    CHECK(abi::absmax_count(0) == 0);
    CHECK(abi::absmax_count(257) == 2);
    CHECK(abi::unorm_workspace_floats(1024, StateFormat::fp32) == 2);
    CHECK(abi::unorm_workspace_floats(1025, StateFormat::fp32) == 3);
    CHECK(abi::unorm_workspace_floats(4096, StateFormat::blockwise8) == 3);
    CHECK(abi::recommended_grid(0, StateFormat::fp32, 132, 4) == 1);
    CHECK(abi::recommended_grid(5000, StateFormat::fp32, 132, 4) == 5);
    CHECK(abi::recommended_grid(std::int64_t{1} << 28, StateFormat::fp32, 132, 4) ==
          262144);  // one block per tile
    CHECK(abi::recommended_grid(5000, StateFormat::blockwise8, 132, 4) == 3);
    CHECK(abi::recommended_grid(std::int64_t{1} << 28, StateFormat::blockwise8, 132, 4) ==
          132 * 4);  // one wave
    CHECK(abi::recommended_grid(std::int64_t{1} << 28, StateFormat::blockwise8, 132, 0) == 132);
    CHECK(abi::recommended_grid(std::int64_t{1} << 50, StateFormat::fp32, 132, 4) == 2147483647u);
    CHECK(abi::recommended_multi_grid(0, StateFormat::blockwise8, 132, 3) == 1);
    CHECK(abi::recommended_multi_grid(100, StateFormat::blockwise8, 132, 3) == 100);
    CHECK(abi::recommended_multi_grid(16384, StateFormat::blockwise8, 132, 3) == 396);
    CHECK(abi::recommended_multi_grid(16384, StateFormat::fp32, 132, 3) == 16384);  // one block per chunk
}

TEST_CASE("optim.abi_8bit_updates_on_sm90_and_later_bring_a_producer_warp") {
    // 256 computing threads, and 32 more whose first issues the tile copies.
    CHECK(abi::update_block_threads(StateFormat::blockwise8, 9) == 288u);
    CHECK(abi::update_block_threads(StateFormat::blockwise8, 10) == 288u);
    CHECK(abi::update_block_threads(StateFormat::blockwise8, 8) == abi::kBlockThreads);
    CHECK(abi::update_block_threads(StateFormat::blockwise8, 0) == abi::kBlockThreads);  // HIP
    CHECK(abi::update_block_threads(StateFormat::fp32, 9) == abi::kBlockThreads);
}

TEST_CASE("optim.abi_dynamic_shared_memory_is_the_8bit_tile_buffers_on_sm90_and_later") {
    // Three buffers, each a tile of 2048 parameters, gradients and two codes, and 2 x 8 absmax values.
    CHECK(abi::dynamic_shared_bytes(StateFormat::blockwise8, DType::bf16, 9) == 3 * (2048 * 6 + 64));
    CHECK(abi::dynamic_shared_bytes(StateFormat::blockwise8, DType::f16, 10) == 3 * (2048 * 6 + 64));
    CHECK(abi::dynamic_shared_bytes(StateFormat::blockwise8, DType::f32, 9) == 3 * (2048 * 10 + 64));
    // Two blocks of them and their 40 KB of code maps fit an H200 SM (228 KB).
    CHECK(2 * (abi::dynamic_shared_bytes(StateFormat::blockwise8, DType::f32, 9) + 41 * 1024) <= 228 * 1024);
    // None before sm_90 (no tensor memory accelerator), on HIP (major 0), or for 32-bit state.
    CHECK(abi::dynamic_shared_bytes(StateFormat::blockwise8, DType::bf16, 8) == 0);
    CHECK(abi::dynamic_shared_bytes(StateFormat::blockwise8, DType::bf16, 0) == 0);
    CHECK(abi::dynamic_shared_bytes(StateFormat::fp32, DType::f32, 9) == 0);
}

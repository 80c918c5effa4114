// cudarc as a library inside a PyTorch (libtorch) program.
//
// PyTorch owns the parameters and computes their gradients with its own ops on its current CUDA stream (a
// non-default one from its pool). cudarc steps them in place with its 32-bit and 8-bit AdamW on that same
// stream, wrapped with Stream::wrap, borrowing the memory through DLPack (at::toDLPack -> from_dlpack): no
// copy, and no host synchronization from cudarc. The result is checked against torch's AdamW run on
// copies of the parameters with the same gradients.
//
// Built only when CMake finds Torch (see CMakeLists.txt). Exit status 0 when the results agree.
#include <ATen/DLConvertor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include <cudarc/cudarc.hpp>

namespace optim = cudarc::optim;

namespace {

constexpr int kSteps = 20;
constexpr double kLr = 1e-2;
constexpr double kBeta1 = 0.9;
constexpr double kBeta2 = 0.999;
constexpr double kEps = 1e-8;
constexpr double kWeightDecay = 1e-2;

struct Model {
    std::vector<torch::Tensor> params;  // leaves, stepped by cudarc
    std::vector<torch::Tensor> inputs;
    std::vector<torch::Tensor> targets;
};

// Gradients of a least-squares loss, with torch ops (autograd) on torch's current stream.
std::vector<torch::Tensor> gradients(const Model& model) {
    torch::Tensor loss = torch::zeros({}, model.params[0].options());
    for (std::size_t i = 0; i < model.params.size(); ++i) {
        loss = loss + (model.params[i] * model.inputs[i] - model.targets[i]).pow(2).mean();
    }
    return torch::autograd::grad({loss}, model.params);
}

// One cudarc step of every parameter: each tensor and gradient is borrowed through DLPack for the step.
// The borrowed slices name the torch stream as their owner: cudarc works on that same stream, so nothing
// waits, and each DLPack deleter runs once cudarc's use has completed (polled by later cudarc calls).
void cudarc_step(cudarc::Device& device, cudarc::Stream& stream, optim::Optimizer& optimizer,
                 optim::GroupId group, const Model& model, const std::vector<torch::Tensor>& grads) {
    std::vector<cudarc::BorrowedSlice<float>> params;
    std::vector<cudarc::BorrowedSlice<const float>> grad_slices;
    std::vector<optim::ParamTensor> tensors;
    params.reserve(model.params.size());
    grad_slices.reserve(model.params.size());
    for (std::size_t i = 0; i < model.params.size(); ++i) {
        params.push_back(cudarc::from_dlpack<float>(device, at::toDLPack(model.params[i].detach()), stream));
        grad_slices.push_back(cudarc::from_dlpack<const float>(device, at::toDLPack(grads[i]), stream));
    }
    for (std::size_t i = 0; i < params.size(); ++i)
        tensors.emplace_back(params[i].view(), grad_slices[i].view());
    optimizer.step(stream, group, tensors);
}

Model make_model(const std::vector<std::vector<std::int64_t>>& shapes, torch::TensorOptions options) {
    Model model;
    for (const auto& shape : shapes) {
        model.params.push_back(torch::randn(shape, options).requires_grad_(true));
        model.inputs.push_back(torch::randn(shape, options));
        model.targets.push_back(torch::randn(shape, options));
    }
    return model;
}

Model clone(const Model& model) {
    Model out;
    for (std::size_t i = 0; i < model.params.size(); ++i) {
        out.params.push_back(model.params[i].detach().clone().requires_grad_(true));
        out.inputs.push_back(model.inputs[i]);
        out.targets.push_back(model.targets[i]);
    }
    return out;
}

struct Comparison {
    double max_error = 0;        // max |p - p_torch|
    double mean_error = 0;       // mean |p - p_torch|
    double mean_movement = 0;    // mean |p_torch - p0|
    double mean_moved = 0;       // mean |p - p0|
    std::size_t over_bound = 0;  // elements outside the fp32 bound
    std::size_t over_8bit = 0;   // elements more than 4 lr per step from torch's (the 8-bit bound)
    std::size_t count = 0;
};

// fp32 bound: a few float roundings of the magnitudes involved per step (docs/optimizers.md): the
// parameter (rounded at each update) and the update (at most about lr per step for Adam's m / sqrt(v)).
Comparison compare(const Model& cudarc_model, const Model& torch_model, const Model& initial) {
    Comparison c;
    std::size_t n = 0;
    for (std::size_t i = 0; i < cudarc_model.params.size(); ++i) {
        const auto got = cudarc_model.params[i].detach().cpu().contiguous();
        const auto want = torch_model.params[i].detach().cpu().contiguous();
        const auto start = initial.params[i].detach().cpu().contiguous();
        const float* g = got.data_ptr<float>();
        const float* w = want.data_ptr<float>();
        const float* s = start.data_ptr<float>();
        for (std::int64_t k = 0; k < got.numel(); ++k, ++n) {
            const double error = std::abs(static_cast<double>(g[k]) - w[k]);
            const double bound = 8.0 * kSteps * FLT_EPSILON * (std::abs(static_cast<double>(w[k])) + kLr);
            if (!(error <= bound)) ++c.over_bound;
            if (!(error <= 4.0 * kSteps * kLr)) ++c.over_8bit;
            c.max_error = std::max(c.max_error, error);
            c.mean_error += error;
            c.mean_movement += std::abs(static_cast<double>(w[k]) - s[k]);
            c.mean_moved += std::abs(static_cast<double>(g[k]) - s[k]);
        }
    }
    c.count = n;
    c.mean_error /= static_cast<double>(n);
    c.mean_movement /= static_cast<double>(n);
    c.mean_moved /= static_cast<double>(n);
    return c;
}

}  // namespace

int main() {
    if (!torch::cuda::is_available()) {
        std::printf("torch_interop: no CUDA device visible to PyTorch: nothing to do\n");
        return 0;
    }
    torch::manual_seed(static_cast<std::uint64_t>(std::random_device{}()));
    auto device = cudarc::Device::open(0);

    // PyTorch's current stream: a non-default stream from its pool, wrapped once by cudarc.
    c10::cuda::CUDAStream torch_stream = c10::cuda::getStreamFromPool(false, 0);
    c10::cuda::CUDAStreamGuard guard(torch_stream);
    cudarc::Stream stream = cudarc::Stream::wrap(device, c10::cuda::getCurrentCUDAStream().stream());

    const auto options = torch::TensorOptions().device(torch::kCUDA, 0).dtype(torch::kFloat32);
    const std::vector<std::vector<std::int64_t>> shapes = {{512, 257}, {4099}, {64, 3, 3, 3}, {1}};
    const Model initial = make_model(shapes, options);
    Model fp32 = clone(initial);
    Model int8 = clone(initial);
    Model reference = clone(initial);

    optim::GroupOptions group_options = optim::default_options(optim::UpdateRule::adamw);
    group_options.lr = kLr;
    group_options.beta1 = kBeta1;
    group_options.beta2 = kBeta2;
    group_options.eps = kEps;
    group_options.weight_decay = kWeightDecay;
    optim::Optimizer adamw32(stream,
                             {.rule = optim::UpdateRule::adamw, .precision = optim::StatePrecision::fp32});
    optim::Optimizer adamw8(
        stream, {.rule = optim::UpdateRule::adamw, .precision = optim::StatePrecision::blockwise8});
    // Registration needs the tensors once (sizes, element types); the steps borrow them afresh.
    optim::GroupId group32{};
    optim::GroupId group8{};
    {
        const auto g32 = gradients(fp32);
        const auto g8 = gradients(int8);
        std::vector<cudarc::BorrowedSlice<float>> p32, p8;
        std::vector<cudarc::BorrowedSlice<const float>> q32, q8;
        std::vector<optim::ParamTensor> t32, t8;
        for (std::size_t i = 0; i < shapes.size(); ++i) {
            p32.push_back(cudarc::from_dlpack<float>(device, at::toDLPack(fp32.params[i].detach()), stream));
            q32.push_back(cudarc::from_dlpack<const float>(device, at::toDLPack(g32[i]), stream));
            p8.push_back(cudarc::from_dlpack<float>(device, at::toDLPack(int8.params[i].detach()), stream));
            q8.push_back(cudarc::from_dlpack<const float>(device, at::toDLPack(g8[i]), stream));
        }
        for (std::size_t i = 0; i < shapes.size(); ++i) {
            t32.emplace_back(p32[i].view(), q32[i].view());
            t8.emplace_back(p8[i].view(), q8[i].view());
        }
        group32 = adamw32.add_group(stream, group_options, t32);
        group8 = adamw8.add_group(stream, group_options, t8);
    }
    torch::optim::AdamW torch_adamw(
        reference.params,
        torch::optim::AdamWOptions(kLr).betas({kBeta1, kBeta2}).eps(kEps).weight_decay(kWeightDecay));

    const cudarc::Counters before = device.counters();
    for (int step = 0; step < kSteps; ++step) {
        // torch's AdamW gets the gradients of cudarc's fp32 run (the two stay within rounding of each other).
        const auto g32 = gradients(fp32);
        const auto g8 = gradients(int8);
        for (std::size_t i = 0; i < shapes.size(); ++i) reference.params[i].mutable_grad() = g32[i].clone();
        cudarc_step(device, stream, adamw32, group32, fp32, g32);
        cudarc_step(device, stream, adamw8, group8, int8, g8);
        torch_adamw.step();
    }
    const cudarc::Counters delta = device.counters() - before;
    torch::cuda::synchronize();

    const Comparison c32 = compare(fp32, reference, initial);
    const Comparison c8 = compare(int8, reference, initial);
    std::printf("torch_interop: %d AdamW steps of %zu PyTorch tensors on torch's stream through DLPack\n",
                kSteps, shapes.size());
    std::printf("  cudarc host synchronizations: %llu, cross-stream waits: %llu, kernel launches: %llu\n",
                static_cast<unsigned long long>(delta.host_synchronizations()),
                static_cast<unsigned long long>(delta.cross_stream_waits),
                static_cast<unsigned long long>(delta.kernel_launches));
    std::printf("  32-bit vs torch AdamW: max |diff| %.3g, mean %.3g, %zu elements over the fp32 bound\n",
                c32.max_error, c32.mean_error, c32.over_bound);
    std::printf(
        "  8-bit vs torch AdamW:  max |diff| %.3g, mean %.3g (mean movement %.3g, 8-bit moved %.3g), %zu of "
        "%zu elements over 4 lr per step\n",
        c8.max_error, c8.mean_error, c8.mean_movement, c8.mean_moved, c8.over_8bit, c8.count);

    bool ok = true;
    if (delta.host_synchronizations() != 0) {
        std::printf("FAIL: cudarc made host synchronizations\n");
        ok = false;
    }
    if (c32.over_bound != 0) {
        std::printf("FAIL: the 32-bit result differs from torch's AdamW by more than float rounding\n");
        ok = false;
    }
    // 8-bit state: the update differs by the state's quantization (docs/optimizers.md, "8-bit state
    // against fp32 AdamW"): mean within 5% of the total movement budget, and the parameters really moved.
    // Per element, Adam's |m / sqrt(v)| stays below (1 - b1) / sqrt(1 - b2) ~ 3.2 in exact arithmetic, so
    // within 4 lr per step; with 8-bit state an element whose block holds much larger values can decode a
    // second moment far below its first moment's square and step further (seen on the H200: one element
    // 2.4 away after 20 steps at lr 1e-2), so that bound is asked of all but 0.1% of the elements.
    if (!(c8.mean_error <= 0.05 * kSteps * kLr) || !(c8.over_8bit * 1000 <= c8.count) ||
        !(c8.mean_moved >= 0.5 * c8.mean_movement)) {
        std::printf("FAIL: the 8-bit result is outside the 8-bit bounds\n");
        ok = false;
    }
    std::printf(ok ? "torch_interop: OK\n" : "torch_interop: FAILED\n");
    return ok ? 0 : 1;
}

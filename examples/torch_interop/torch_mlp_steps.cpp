// What stepping a real PyTorch model with cudarc costs (issue 27). A libtorch MLP of 128 Linear layers (256
// parameter tensors) computes its gradients with autograd on torch's current stream; cudarc's AdamW steps
// them in place through DLPack, four ways:
//   - on torch's own stream, or on a stream of cudarc's (which waits for torch's backward, and which torch's
//     next forward must wait for);
//   - borrowing every tensor afresh each step (from_dlpack, released after the step: torch's at::toDLPack and
//     the deleters included), or borrowing them once (BorrowedSlice::owner_wrote before a step,
//     sync_owner after it: a borrow that lasts).
// For each it prints the host time of cudarc's part of a step (median after warm-up) and of its three phases,
// the events and cross-stream waits cudarc made per step. The four runs start from one model and must end
// bitwise equal: ordering is the same, only its cost differs. libtorch's own C++ AdamW on the same model is
// timed beside.
//
// Built only when CMake finds Torch (see CMakeLists.txt). Exit status 0 when the four runs agree.
#include <ATen/DLConvertor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include <cudarc/cudarc.hpp>

namespace optim = cudarc::optim;

namespace {

constexpr int kLayers = 128;
constexpr int kWidth = 128;
constexpr int kBatch = 64;
constexpr int kWarmup = 5;
constexpr int kSteps = 25;

struct Mlp : torch::nn::Module {
    Mlp() {
        for (int i = 0; i < kLayers; ++i)
            layers.push_back(register_module("l" + std::to_string(i), torch::nn::Linear(kWidth, kWidth)));
    }
    torch::Tensor forward(torch::Tensor x) {
        for (auto& layer : layers) x = torch::tanh(layer->forward(x));
        return x;
    }
    std::vector<torch::nn::Linear> layers;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Mode {
    const char* name;
    bool own_stream;  // step on a stream of cudarc's
    bool lasting;     // borrow once
};

struct Result {
    std::vector<torch::Tensor> params;
    double host_us = 0;
    // Its three phases: the borrows (or owner_wrote calls), the step, the releases (or sync_owner calls).
    double borrow_us = 0;
    double step_us = 0;
    double release_us = 0;
    // torch's share of a step that borrows afresh: its at::toDLPack calls and deleters, timed alone.
    double torch_us = 0;
    double events = 0;
    double waits = 0;
};

Result run(const Mode& mode, const Mlp& initial, const torch::Tensor& input, const torch::Tensor& target,
           cudarc::Device& device, cudarc::Stream& torch_stream) {
    Mlp model;
    {
        torch::NoGradGuard no_grad;
        const auto from = initial.parameters();
        const auto to = model.parameters();
        for (std::size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
    }
    model.to(torch::kCUDA);
    std::vector<torch::Tensor> params = model.parameters();
    for (auto& p : params) p.mutable_grad() = torch::zeros_like(p);  // gradients stay where they are
    std::optional<cudarc::Stream> own;
    if (mode.own_stream) own.emplace(device.create_stream());
    cudarc::Stream& stream = mode.own_stream ? *own : torch_stream;

    // Registration needs the tensors once; each step is given them afresh (or the lasting borrows).
    const auto borrow = [&](std::vector<cudarc::BorrowedSlice<float>>& p,
                            std::vector<cudarc::BorrowedSlice<const float>>& g) {
        p.clear();
        g.clear();
        for (auto& t : params) {
            p.push_back(cudarc::from_dlpack<float>(device, at::toDLPack(t.detach()), torch_stream));
            g.push_back(cudarc::from_dlpack<const float>(device, at::toDLPack(t.grad()), torch_stream));
        }
    };
    const auto tensors_of = [&](std::vector<cudarc::BorrowedSlice<float>>& p,
                                std::vector<cudarc::BorrowedSlice<const float>>& g) {
        std::vector<optim::ParamTensor> out;
        out.reserve(p.size());
        for (std::size_t i = 0; i < p.size(); ++i) out.emplace_back(p[i].view(), g[i].view());
        return out;
    };
    std::vector<cudarc::BorrowedSlice<float>> p;
    std::vector<cudarc::BorrowedSlice<const float>> g;
    p.reserve(params.size());
    g.reserve(params.size());
    borrow(p, g);
    optim::Optimizer adamw(stream,
                           {.rule = optim::UpdateRule::adamw, .precision = optim::StatePrecision::fp32});
    const optim::GroupId group =
        adamw.add_group(stream, optim::default_options(optim::UpdateRule::adamw), tensors_of(p, g));
    if (mode.lasting) {
        for (auto& b : p) b.sync_owner();
        for (auto& b : g) b.sync_owner();
    } else {
        p.clear();
        g.clear();
    }

    Result result;
    std::vector<double> host;
    std::vector<double> borrowing;
    std::vector<double> stepping;
    std::vector<double> releasing;
    std::vector<double> torch_share;
    for (int step = 0; step < kWarmup + kSteps; ++step) {
        for (auto& t : params) t.mutable_grad().zero_();
        torch::mse_loss(model.forward(input), target).backward();
        if (!mode.lasting) {
            const auto start = std::chrono::steady_clock::now();
            for (auto& t : params) {
                DLManagedTensor* p_tensor = at::toDLPack(t.detach());
                DLManagedTensor* g_tensor = at::toDLPack(t.grad());
                p_tensor->deleter(p_tensor);
                g_tensor->deleter(g_tensor);
            }
            torch_share.push_back(
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
        }
        const cudarc::Counters before = device.counters();
        const auto t0 = std::chrono::steady_clock::now();
        std::chrono::steady_clock::time_point borrowed;
        std::chrono::steady_clock::time_point stepped;
        if (mode.lasting) {
            for (auto& b : p) b.owner_wrote();
            for (auto& b : g) b.owner_wrote();
            borrowed = std::chrono::steady_clock::now();
            adamw.step(stream, group, tensors_of(p, g));
            stepped = std::chrono::steady_clock::now();
            for (auto& b : p) b.sync_owner();
            for (auto& b : g) b.sync_owner();
        } else {
            borrow(p, g);
            borrowed = std::chrono::steady_clock::now();
            adamw.step(stream, group, tensors_of(p, g));
            stepped = std::chrono::steady_clock::now();
            p.clear();  // released: torch's stream waits for cudarc's uses; the deleters run later
            g.clear();
        }
        const auto t1 = std::chrono::steady_clock::now();
        const cudarc::Counters delta = device.counters() - before;
        if (step < kWarmup) continue;
        host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        borrowing.push_back(std::chrono::duration<double, std::micro>(borrowed - t0).count());
        stepping.push_back(std::chrono::duration<double, std::micro>(stepped - borrowed).count());
        releasing.push_back(std::chrono::duration<double, std::micro>(t1 - stepped).count());
        result.events += static_cast<double>(delta.events_recorded);
        result.waits += static_cast<double>(delta.cross_stream_waits);
    }
    p.clear();
    g.clear();
    torch::cuda::synchronize();
    result.host_us = median(host);
    result.borrow_us = median(borrowing);
    result.step_us = median(stepping);
    result.release_us = median(releasing);
    if (!torch_share.empty()) result.torch_us = median(torch_share);
    result.events /= kSteps;
    result.waits /= kSteps;
    for (auto& t : params) result.params.push_back(t.detach().cpu());
    return result;
}

}  // namespace

int main() {
    if (!torch::cuda::is_available()) {
        std::printf("torch_mlp_steps: no CUDA device visible to PyTorch: nothing to do\n");
        return 0;
    }
    torch::manual_seed(1);
    auto device = cudarc::Device::open(0);
    c10::cuda::CUDAStream pool_stream = c10::cuda::getStreamFromPool(false, 0);
    c10::cuda::CUDAStreamGuard guard(pool_stream);
    cudarc::Stream torch_stream = cudarc::Stream::wrap(device, c10::cuda::getCurrentCUDAStream().stream());

    Mlp initial;
    const auto options = torch::TensorOptions().device(torch::kCUDA, 0);
    const torch::Tensor input = torch::randn({kBatch, kWidth}, options);
    const torch::Tensor target = torch::randn({kBatch, kWidth}, options);

    const Mode modes[] = {{"torch's stream, borrowed each step", false, false},
                          {"torch's stream, lasting borrows", false, true},
                          {"cudarc's stream, borrowed each step", true, false},
                          {"cudarc's stream, lasting borrows", true, true}};
    std::printf("torch_mlp_steps: AdamW over %d Linear layers (%d parameter tensors), %d steps after %d\n",
                kLayers, 2 * kLayers, kSteps, kWarmup);
    std::vector<Result> results;
    for (const Mode& mode : modes) {
        results.push_back(run(mode, initial, input, target, device, torch_stream));
        const Result& r = results.back();
        std::printf("  %-38s cudarc's part %8.1f us per step, %.1f events, %.1f waits\n", mode.name,
                    r.host_us, r.events, r.waits);
        std::printf("  %-38s   (medians: %s %.1f us, step %.1f us, %s %.1f us)\n", "",
                    mode.lasting ? "owner_wrote" : "borrows", r.borrow_us, r.step_us,
                    mode.lasting ? "sync_owner" : "releases", r.release_us);
        if (!mode.lasting)
            std::printf("  %-38s   (torch's share, timed alone: toDLPack + deleters %.1f us)\n", "",
                        r.torch_us);
    }
    // libtorch's own AdamW on the same model, same stream (the host time of its step).
    {
        Mlp model;
        model.to(torch::kCUDA);
        torch::optim::AdamW adamw(model.parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-2));
        std::vector<double> host;
        for (int step = 0; step < kWarmup + kSteps; ++step) {
            adamw.zero_grad();
            torch::mse_loss(model.forward(input), target).backward();
            const auto t0 = std::chrono::steady_clock::now();
            adamw.step();
            const auto t1 = std::chrono::steady_clock::now();
            if (step >= kWarmup) host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        torch::cuda::synchronize();
        std::printf("  %-38s %8.1f us per step\n", "libtorch's AdamW (for scale)", median(host));
    }
    bool equal = true;
    for (std::size_t m = 1; m < results.size(); ++m) {
        for (std::size_t i = 0; i < results[0].params.size(); ++i)
            equal = equal && torch::equal(results[0].params[i], results[m].params[i]);
    }
    std::printf("  the four runs' parameters are %s\n", equal ? "bitwise equal" : "NOT bitwise equal");
    std::printf(equal ? "torch_mlp_steps: OK\n" : "torch_mlp_steps: FAILED\n");
    return equal ? 0 : 1;
}

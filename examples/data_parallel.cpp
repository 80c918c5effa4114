// Data-parallel training of a linear model on every GPU present (at least one). One host thread per device
// computes the gradients on its shard of the data (kernels compiled at run time), all-reduces them with
// NCCL on its step stream (the average over the ranks, the loss riding along), and steps 8-bit AdamW. The
// replicas start equal and receive equal gradients, so their parameters stay bitwise equal; the steps make
// no host synchronization. With one GPU the communicator has one rank.
//
// Exits non-zero if the loss did not fall, the replicas differ, or a step made the host wait. Without a GPU
// or without NCCL it says so and exits 0.
#include <cudarc/cudarc.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

// Parameters and gradients are packed: p = [w_0 .. w_{d-1}, b], g = [grad_w.., grad_b, loss]; the loss rides
// in the gradients' buffer so that one all-reduce per step averages both over the ranks.
//   residuals: one thread per sample, r = x . w + b - y.
//   gradients: one block per feature; the extra block gives grad_b = 2/n sum r and the loss 1/n sum r^2
//   (fixed-order sums: reproducible, so equal inputs give equal bits on every device).
constexpr const char* kSource = R"(
extern "C" __global__ void residuals(float* r, const float* x, const float* y, const float* p, int n, int d) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = p[d];
    for (int j = 0; j < d; ++j) s += x[i * d + j] * p[j];
    r[i] = s - y[i];
}

__device__ float block_sum(float value, float* scratch) {
    scratch[threadIdx.x] = value;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
        __syncthreads();
    }
    const float total = scratch[0];
    __syncthreads();
    return total;
}

extern "C" __global__ void gradients(float* g, const float* r, const float* x, int n, int d) {
    __shared__ float scratch[256];
    const int j = blockIdx.x;
    float along = 0.0f;
    float squares = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float ri = r[i];
        along += j < d ? ri * x[i * d + j] : ri;
        squares += ri * ri;
    }
    const float total = block_sum(along, scratch);
    const float total_squares = block_sum(squares, scratch);
    if (threadIdx.x != 0) return;
    g[j] = 2.0f * total / n;
    if (j == d) g[d + 1] = total_squares / n;
}
)";

constexpr int kSamplesPerRank = 8192;
constexpr int kFeatures = 64;
constexpr int kSteps = 400;
constexpr int kPrintEvery = 50;

struct RankResult {
    std::vector<float> parameters;
    float first_loss = 0.0f;
    float last_loss = 0.0f;
    std::uint64_t step_synchronizations = 0;
    std::exception_ptr failure;
};

// One rank: its device, its communicator, its shard of (x, y).
void train(cudarc::nccl::Communicator& comm, std::span<const float> x, std::span<const float> y,
           RankResult& result) {
    namespace optim = cudarc::optim;
    const cudarc::Device device = comm.device();
    cudarc::Stream stream = device.create_stream();  // the step stream
    const auto x_dev = cudarc::DeviceSlice<float>::from_host(stream, x);
    const auto y_dev = cudarc::DeviceSlice<float>::from_host(stream, y);
    auto parameters = cudarc::DeviceSlice<float>::zeros(stream, kFeatures + 1);  // equal on every rank
    auto gradients = cudarc::DeviceSlice<float>::zeros(stream, kFeatures + 2);
    auto r = cudarc::DeviceSlice<float>::uninitialized(stream, kSamplesPerRank);

    const auto module = cudarc::Module::compile(device, cudarc::Program(kSource, "data_parallel.cu"));
    const auto residuals =
        module.kernel<void(float*, const float*, const float*, const float*, int, int)>("residuals");
    const auto gradient = module.kernel<void(float*, const float*, const float*, int, int)>("gradients");

    optim::Optimizer optimizer(
        stream, {.rule = optim::UpdateRule::adamw, .precision = optim::StatePrecision::blockwise8});
    optim::GroupOptions hyper = optim::default_options(optim::UpdateRule::adamw);
    hyper.lr = 0.05;
    hyper.weight_decay = 0.0;
    const std::vector<optim::ParamTensor> tensors = {{parameters.view(), gradients.view(0, kFeatures + 1)}};
    const optim::GroupId group = optimizer.add_group(stream, hyper, tensors);

    for (int step = 0; step <= kSteps; ++step) {
        const auto before = device.counters();
        cudarc::launch(stream, cudarc::LaunchConfig{(kSamplesPerRank + 255) / 256, 256}, residuals, r, x_dev,
                       y_dev, parameters, kSamplesPerRank, kFeatures);
        cudarc::launch(stream, cudarc::LaunchConfig{kFeatures + 1, 256}, gradient, gradients, r, x_dev,
                       kSamplesPerRank, kFeatures);
        comm.all_reduce(stream, gradients, cudarc::nccl::ReduceOp::avg);  // in place, on the step stream
        if (step < kSteps) optimizer.step(stream, group, tensors);
        result.step_synchronizations += (device.counters() - before).host_synchronizations();
        if (step % kPrintEvery == 0 || step == kSteps) {
            // The only host waits: reading the (averaged) loss to print it, outside the counted step.
            float loss = 0.0f;
            cudarc::copy(stream, std::span<float>(&loss, 1), gradients.view(kFeatures + 1, 1));
            if (step == 0) result.first_loss = loss;
            result.last_loss = loss;
            if (comm.rank() == 0) std::printf("step %4d  loss %.6f\n", step, static_cast<double>(loss));
        }
    }
    result.parameters = parameters.to_vector(stream);
    comm.check_async_error();
    device.rethrow_deferred_error();
}

}  // namespace

int main() {
    // NVLink multicast stays off (docs/multi-gpu.md says why), whatever the caller's environment.
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);
    if (!cudarc::Device::available()) {
        std::printf("data_parallel: no GPU: skipped\n");
        return 0;
    }
    if (!cudarc::nccl::available()) {
        std::printf("data_parallel: NCCL is not available: skipped (%s)\n",
                    cudarc::nccl::load_failure().c_str());
        return 0;
    }
    try {
        const int ranks = cudarc::Device::count();
        std::vector<cudarc::Device> devices;
        for (int i = 0; i < ranks; ++i) devices.push_back(cudarc::Device::open(i));
        auto comms = cudarc::nccl::Communicator::init_all(devices);
        const auto nccl_version = cudarc::nccl::version();
        std::printf("data_parallel: %d rank(s), NCCL %d.%d.%d from %s\n", ranks, nccl_version.major,
                    nccl_version.minor, nccl_version.patch, cudarc::nccl::library_path().c_str());

        // Synthetic data, y = x . w_true + b_true + noise; rank k trains on samples [k n, (k + 1) n).
        std::mt19937 rng(12345);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        const std::size_t samples =
            static_cast<std::size_t>(kSamplesPerRank) * static_cast<std::size_t>(ranks);
        std::vector<float> x(samples * kFeatures);
        std::vector<float> y(samples);
        std::vector<float> w_true(kFeatures);
        for (auto& value : x) value = normal(rng);
        for (auto& value : w_true) value = normal(rng);
        for (std::size_t i = 0; i < samples; ++i) {
            float s = 0.5f + 0.01f * normal(rng);
            for (int j = 0; j < kFeatures; ++j)
                s += x[i * kFeatures + static_cast<std::size_t>(j)] * w_true[j];
            y[i] = s;
        }

        std::vector<RankResult> results(static_cast<std::size_t>(ranks));
        std::vector<std::thread> threads;
        for (int k = 0; k < ranks; ++k) {
            threads.emplace_back([&, k] {
                const auto slot = static_cast<std::size_t>(k);
                const std::size_t first = slot * kSamplesPerRank;
                try {
                    train(comms[slot],
                          std::span<const float>(x).subspan(first * kFeatures, kSamplesPerRank * kFeatures),
                          std::span<const float>(y).subspan(first, kSamplesPerRank), results[slot]);
                } catch (...) {
                    results[slot].failure = std::current_exception();
                }
            });
        }
        for (auto& thread : threads) thread.join();
        for (auto& result : results) {
            if (result.failure) std::rethrow_exception(result.failure);
        }

        const RankResult& lead = results.front();
        const bool fell = lead.last_loss < 0.05f * lead.first_loss;
        bool equal = true;
        std::uint64_t synchronizations = 0;
        for (const auto& result : results) {
            equal = equal && result.parameters.size() == lead.parameters.size() &&
                    std::memcmp(result.parameters.data(), lead.parameters.data(),
                                lead.parameters.size() * sizeof(float)) == 0;
            synchronizations += result.step_synchronizations;
        }
        std::printf(
            "loss %.6f -> %.6f over %d steps of 8-bit AdamW on %d rank(s) (%s); replicas %s; host "
            "synchronizations "
            "made by the steps: %llu\n",
            static_cast<double>(lead.first_loss), static_cast<double>(lead.last_loss), kSteps, ranks,
            fell ? "fell" : "DID NOT FALL", equal ? "bitwise equal" : "DIFFER",
            static_cast<unsigned long long>(synchronizations));
        return fell && equal && synchronizations == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "data_parallel: %s\n", e.what());
        return 1;
    }
}

// Trains a linear regression on synthetic data: the gradient comes from a small kernel compiled at run time
// (cudarc::Program + Module + launch), the update from cudarc's 8-bit AdamW, all on a forked (non-default)
// stream. The host reads the loss back only when it prints it; the training steps themselves never make
// the host wait. Exits non-zero if the loss did not fall.
#include <cudarc/cudarc.hpp>

#include <cstdio>
#include <random>
#include <vector>

namespace {

// One thread per sample: r = x . w + b - y. Then one block per feature: grad_w[j] = 2/n sum r_i x_ij; the
// extra block gives grad_b = 2/n sum r_i and the loss, 1/n sum r_i^2 (fixed-order sums: reproducible).
constexpr const char* kSource = R"(
extern "C" __global__ void residuals(float* r, const float* x, const float* y, const float* w, const float* b,
                                     int n, int d) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = b[0];
    for (int j = 0; j < d; ++j) s += x[i * d + j] * w[j];
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

extern "C" __global__ void gradients(float* grad_w, float* grad_b, float* loss, const float* r, const float* x,
                                     int n, int d) {
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
    if (j < d) {
        grad_w[j] = 2.0f * total / n;
    } else {
        grad_b[0] = 2.0f * total / n;
        loss[0] = total_squares / n;
    }
}
)";

constexpr int kSamples = 16384;
constexpr int kFeatures = 64;
constexpr int kSteps = 400;
constexpr int kPrintEvery = 50;

}  // namespace

int main() {
    if (!cudarc::Device::available()) {
        std::printf("train_linear_regression: no GPU: skipped\n");
        return 0;
    }
    try {
        namespace optim = cudarc::optim;
        auto device = cudarc::Device::open(0);
        cudarc::Stream stream = device.default_stream().fork();  // training runs on its own stream

        // Synthetic data: y = x . w_true + b_true + noise.
        std::mt19937 rng(12345);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> x(static_cast<std::size_t>(kSamples) * kFeatures);
        std::vector<float> w_true(kFeatures);
        std::vector<float> y(kSamples);
        for (auto& v : x) v = normal(rng);
        for (auto& v : w_true) v = normal(rng);
        const float b_true = 0.5f;
        for (int i = 0; i < kSamples; ++i) {
            float s = b_true + 0.01f * normal(rng);
            for (int j = 0; j < kFeatures; ++j)
                s += x[static_cast<std::size_t>(i) * kFeatures + j] * w_true[j];
            y[i] = s;
        }
        const auto x_dev = cudarc::DeviceSlice<float>::from_host(stream, x);
        const auto y_dev = cudarc::DeviceSlice<float>::from_host(stream, y);
        auto w = cudarc::DeviceSlice<float>::zeros(stream, kFeatures);
        auto b = cudarc::DeviceSlice<float>::zeros(stream, 1);
        auto grad_w = cudarc::DeviceSlice<float>::zeros(stream, kFeatures);
        auto grad_b = cudarc::DeviceSlice<float>::zeros(stream, 1);
        auto r = cudarc::DeviceSlice<float>::uninitialized(stream, kSamples);
        auto loss = cudarc::DeviceSlice<float>::zeros(stream, 1);

        const auto module = cudarc::Module::compile(device, cudarc::Program(kSource, "linear_regression.cu"));
        const auto residuals =
            module.kernel<void(float*, const float*, const float*, const float*, const float*, int, int)>(
                "residuals");
        const auto gradients =
            module.kernel<void(float*, float*, float*, const float*, const float*, int, int)>("gradients");

        // 8-bit AdamW: its state lives in the optimizer, zero-initialized on `stream`.
        optim::Optimizer optimizer(
            stream, {.rule = optim::UpdateRule::adamw, .precision = optim::StatePrecision::blockwise8});
        optim::GroupOptions hyper = optim::default_options(optim::UpdateRule::adamw);
        hyper.lr = 0.05;
        hyper.weight_decay = 0.0;
        const std::vector<optim::ParamTensor> tensors = {{w, grad_w}, {b, grad_b}};
        const optim::GroupId group = optimizer.add_group(stream, hyper, tensors);

        float first_loss = 0.0f;
        float last_loss = 0.0f;
        std::uint64_t step_synchronizations = 0;
        for (int step = 0; step <= kSteps; ++step) {
            cudarc::launch(stream, cudarc::LaunchConfig{(kSamples + 255) / 256, 256}, residuals, r, x_dev,
                           y_dev, w, b, kSamples, kFeatures);
            cudarc::launch(stream, cudarc::LaunchConfig{kFeatures + 1, 256}, gradients, grad_w, grad_b, loss,
                           r, x_dev, kSamples, kFeatures);
            if (step % kPrintEvery == 0) {
                last_loss = loss.to_vector(stream)[0];  // the only host wait: reading the loss to print it
                if (step == 0) first_loss = last_loss;
                std::printf("step %4d  loss %.6f\n", step, static_cast<double>(last_loss));
            }
            if (step == kSteps) break;
            const auto before = device.counters();
            optimizer.step(stream, group, tensors);
            step_synchronizations += (device.counters() - before).host_synchronizations();
        }
        const bool fell = last_loss < 0.05f * first_loss;
        std::printf(
            "loss %.6f -> %.6f over %d steps of 8-bit AdamW on a forked stream (%s); host synchronizations "
            "made by the steps: %llu\n",
            static_cast<double>(first_loss), static_cast<double>(last_loss), kSteps,
            fell ? "fell" : "DID NOT FALL", static_cast<unsigned long long>(step_synchronizations));
        return fell && step_synchronizations == 0 ? 0 : 1;
    } catch (const cudarc::Error& e) {
        std::fprintf(stderr, "train_linear_regression: %s\n", e.what());
        return 1;
    }
}

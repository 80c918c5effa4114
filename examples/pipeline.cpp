// A pipeline: N batches, each uploaded, computed by a run-time compiled kernel and downloaded, on K streams
// in turn, all staged through one page-locked buffer. Batch b's chunk of that buffer is copied on stream
// b % K; hazard tracking sees that the chunks are disjoint, so the streams never wait on each other, and
// batch b + 1's upload overlaps batch b's kernel and download. A CompletionQueue hands each finished batch
// to the host, which checks it against a float64 CPU reference while the other streams keep working.
// Timing events on the device show the overlap: with K = 4 batches on different streams run at once.
#include <cudarc/cudarc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

namespace {

constexpr const char* kSource = R"(
extern "C" __global__ void iterate(float* y, const float* x, float a, float b, int iterations,
                                   unsigned long long n) {
    const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
    for (unsigned long long i = 1ull * blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        for (int k = 0; k < iterations; ++k) v = fmaf(v, a, b);
        y[i] = v;
    }
})";

constexpr float kA = 0.999f;
constexpr float kB = 0.001f;

double reference(float x, int iterations) {
    double v = x;
    for (int k = 0; k < iterations; ++k) v = v * static_cast<double>(kA) + static_cast<double>(kB);
    return v;
}

struct Run {
    double total_ms = 0;
    int overlapping_pairs = 0;  // batches on different streams whose device intervals intersect
    int pairs = 0;
    bool ok = true;
    unsigned long long cross_stream_waits = 0;
    unsigned long long host_syncs = 0;
};

Run run(cudarc::Device& device,
        cudarc::Kernel<void(float*, const float*, float, float, int, unsigned long long)>& kernel,
        std::size_t streams_count, std::size_t batches, std::size_t n, int iterations) {
    std::vector<cudarc::Stream> streams;
    for (std::size_t k = 0; k < streams_count; ++k) streams.push_back(device.create_stream());
    std::vector<cudarc::DeviceSlice<float>> x;
    std::vector<cudarc::DeviceSlice<float>> y;
    for (std::size_t k = 0; k < streams_count; ++k) {
        x.push_back(cudarc::DeviceSlice<float>::uninitialized(streams[k], n));
        y.push_back(cudarc::DeviceSlice<float>::uninitialized(streams[k], n));
    }
    // One staging buffer: batch b's input, and later its output, in chunk b. Fresh random data each run.
    cudarc::PinnedBuffer<float> staging(device, batches * n);
    std::mt19937 rng(std::random_device{}());
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> inputs(batches * n);
    for (float& v : inputs) v = dist(rng);
    std::copy(inputs.begin(), inputs.end(), staging.data());

    std::vector<cudarc::Event> starts;
    std::vector<cudarc::Event> ends;
    for (std::size_t b = 0; b < batches; ++b) {
        starts.emplace_back(device, cudarc::EventTiming::enabled);
        ends.emplace_back(device, cudarc::EventTiming::enabled);
    }
    cudarc::Event origin(device, cudarc::EventTiming::enabled);
    for (auto& s : streams) s.join(device.default_stream());
    origin.record(device.default_stream());
    for (auto& s : streams) s.wait(origin);

    cudarc::CompletionQueue finished;
    const auto before = device.counters();
    const auto config = cudarc::LaunchConfig::for_elements(n, device);
    for (std::size_t b = 0; b < batches; ++b) {
        const std::size_t k = b % streams_count;
        cudarc::Stream& s = streams[k];
        auto chunk = staging.view(b * n, n);
        starts[b].record(s);
        cudarc::copy(s, x[k].view(), cudarc::PinnedView<const float>(chunk));
        cudarc::launch(s, config, kernel, y[k], x[k], kA, kB, iterations, static_cast<unsigned long long>(n));
        cudarc::copy(s, chunk, std::as_const(y[k]).view());
        ends[b].record(s);
        finished.notify(s, b);
    }
    const auto enqueued = device.counters() - before;

    Run result;
    result.cross_stream_waits = enqueued.cross_stream_waits;
    result.host_syncs = enqueued.host_synchronizations();
    // The host checks each batch as soon as its download has landed, in completion order.
    for (std::size_t done = 0; done < batches; ++done) {
        const std::size_t b = finished.wait();
        const auto out = staging.wait(std::as_const(staging).view(b * n, n));  // returns at once
        for (std::size_t i = 0; i < n; i += 97) {
            const double want = reference(inputs[b * n + i], iterations);
            if (std::abs(out[i] - want) > 1e-4 * (1.0 + std::abs(want))) result.ok = false;
        }
    }
    std::vector<double> begin_ms(batches);
    std::vector<double> end_ms(batches);
    for (std::size_t b = 0; b < batches; ++b) {
        begin_ms[b] = cudarc::Event::elapsed_ms(origin, starts[b]);
        end_ms[b] = cudarc::Event::elapsed_ms(origin, ends[b]);
        result.total_ms = std::max(result.total_ms, end_ms[b]);
    }
    for (std::size_t i = 0; i < batches; ++i) {
        for (std::size_t j = i + 1; j < batches; ++j) {
            if (i % streams_count == j % streams_count) continue;
            ++result.pairs;
            if (begin_ms[i] < end_ms[j] && begin_ms[j] < end_ms[i]) ++result.overlapping_pairs;
        }
    }
    return result;
}

}  // namespace

int main() {
    if (!cudarc::Device::available()) {
        std::printf("pipeline: no GPU available: skipped\n");
        return 0;
    }
    try {
        auto device = cudarc::Device::open(0);
        auto module = cudarc::Module::compile(device, cudarc::Program(kSource, "pipeline.cu"));
        auto kernel =
            module.kernel<void(float*, const float*, float, float, int, unsigned long long)>("iterate");
        constexpr std::size_t kBatches = 16;
        constexpr std::size_t kElements = std::size_t{1} << 21;  // 8 MiB a batch each way
        constexpr int kIterations = 1500;
        bool ok = true;
        double one_stream_ms = 0;
        for (const std::size_t k : {std::size_t{1}, std::size_t{4}}) {
            const Run r = run(device, kernel, k, kBatches, kElements, kIterations);
            if (k == 1) one_stream_ms = r.total_ms;
            std::printf(
                "pipeline: %zu batches of %zu floats on %zu stream(s): %.2f ms on the device (%.2fx one "
                "stream), "
                "%d of %d batch pairs on different streams overlapped, %llu cross-stream waits and %llu host "
                "syncs while enqueuing, results %s\n",
                kBatches, kElements, k, r.total_ms, one_stream_ms / r.total_ms, r.overlapping_pairs, r.pairs,
                r.cross_stream_waits, r.host_syncs, r.ok ? "match the float64 reference" : "WRONG");
            ok = ok && r.ok && (k == 1 || r.overlapping_pairs > 0);
        }
        device.rethrow_deferred_error();
        return ok ? 0 : 1;
    } catch (const cudarc::Error& e) {
        std::fprintf(stderr, "pipeline: %s\n", e.what());
        return 1;
    }
}

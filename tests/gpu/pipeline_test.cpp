// Issue 29 on a real GPU: pinned views tracked per byte range (Note [Pinned memory]), host functions in
// stream order, and a pipeline of batches on several streams through one pinned staging buffer whose
// stages overlap (proved with %globaltimer stamps), checked against float64 references on fresh data.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cudarc/completion_queue.hpp"
#include "launch_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

// timed_affine: y = a * x + b over n elements (grid-stride), after thread 0 of block 0 spins `cycles`;
// stamps[0] = that thread's start, stamps[1] = the end of block 0 (%globaltimer, ns).
constexpr const char* kTimedAffine = R"(
extern "C" __global__ void timed_affine(float* y, const float* x, float a, float b, unsigned long long n,
                                        long long cycles, unsigned long long* stamps) {
    unsigned long long t = 0;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        stamps[0] = t;
        const long long start = clock64();
        while (clock64() - start < cycles) {
        }
    }
    __syncthreads();
    const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
    for (unsigned long long i = 1ull * blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = a * x[i] + b;
    __syncthreads();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        stamps[1] = t;
    }
}
)";
using TimedAffine =
    Kernel<void(float*, const float*, float, float, unsigned long long, long long, unsigned long long*)>;

}  // namespace

TEST_CASE("pipeline.batches_on_four_streams_from_one_pinned_buffer_overlap_and_match_float64") {
    auto device = Device::open(0);
    const Module module = Module::compile(device, Program(kTimedAffine, "timed_affine.cu"));
    const auto kernel = module.kernel<TimedAffine::signature>("timed_affine");
    constexpr std::size_t kStreams = 4;
    constexpr std::size_t kBatches = 12;
    constexpr std::size_t n = (std::size_t{1} << 18) + 5;  // odd sizes: chunk edges inside cache lines
    const float a = 1.0f + random_floats(1, 0.0f, 1.0f)[0];
    const float b = random_floats(1)[0];
    const std::vector<float> input = random_floats(kBatches * n);

    PinnedBuffer<float> staging(device, kBatches * n);
    std::copy(input.begin(), input.end(), staging.data());
    std::vector<Stream> streams;
    std::vector<DeviceSlice<float>> x;
    std::vector<DeviceSlice<float>> y;
    for (std::size_t k = 0; k < kStreams; ++k) {
        streams.push_back(device.create_stream());
        x.push_back(DeviceSlice<float>::from_host(streams[k], poisoned(n)));
        y.push_back(DeviceSlice<float>::from_host(streams[k], poisoned(n)));
    }
    auto stamps = DeviceSlice<unsigned long long>::zeros(device.default_stream(), 2 * kBatches);
    device.synchronize();
    const long long cycles = spin_cycles(device, 5.0);

    const Counters before = device.counters();
    for (std::size_t batch = 0; batch < kBatches; ++batch) {
        const std::size_t k = batch % kStreams;
        auto chunk = staging.view(batch * n, n);
        copy(streams[k], x[k].view(), PinnedView<const float>(chunk));
        launch(streams[k], LaunchConfig::for_elements(n, device), kernel, y[k], x[k], a, b,
               static_cast<unsigned long long>(n), cycles, stamps.view(2 * batch, 2));
        copy(streams[k], chunk, std::as_const(y[k]).view());  // back into the same chunk
    }
    const Counters enqueued = device.counters() - before;
    CHECK(enqueued.host_synchronizations() == 0);
    CHECK(enqueued.blocking_copies == 0);
    // The stamps slice is written by every stream (disjoint pairs); the first launch of each stream waits
    // once for the zero fill on the default stream, and nothing else crosses streams.
    CHECK(enqueued.cross_stream_waits <= kStreams);

    for (std::size_t batch = 0; batch < kBatches; ++batch) {
        const auto out = staging.wait(std::as_const(staging).view(batch * n, n));
        std::vector<double> want(n);
        for (std::size_t i = 0; i < n; ++i)
            want[i] =
                static_cast<double>(a) * static_cast<double>(input[batch * n + i]) + static_cast<double>(b);
        CAPTURE(batch);
        const auto tolerance = [&](std::size_t i) {
            return fp32_tolerance(std::abs(static_cast<double>(a) * input[batch * n + i]) + std::abs(b));
        };
        CHECK(count_mismatches(std::vector<float>(out.begin(), out.end()), want, tolerance, "batch") == 0);
    }
    const auto times = stamps.to_vector(device.default_stream());
    // Batches on different streams ran at once: the kernels of the first kStreams batches all overlap.
    unsigned long long latest_start = 0;
    unsigned long long earliest_end = ~0ull;
    for (std::size_t batch = 0; batch < kStreams; ++batch) {
        latest_start = std::max(latest_start, times[2 * batch]);
        earliest_end = std::min(earliest_end, times[2 * batch + 1]);
    }
    MESSAGE("latest start - earliest end: "
            << static_cast<double>(latest_start) - static_cast<double>(earliest_end) << " ns");
    if (kernels_serialized_by_a_tool()) {
        MESSAGE("kernels are serialized by an injected tool (compute-sanitizer): overlap not checked");
    } else {
        CHECK(latest_start < earliest_end);
    }
    device.rethrow_deferred_error();
}

TEST_CASE("pinned.a_chunk_copied_back_on_another_stream_waits_for_the_copy_that_wrote_it") {
    auto device = Device::open(0);
    const BenchSpin spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    auto writer = device.create_stream();
    auto reader = device.create_stream();
    constexpr std::size_t n = (std::size_t{1} << 20) + 3;
    const std::vector<float> values = random_floats(n);
    auto source = DeviceSlice<float>::from_host(writer, values);
    auto target = DeviceSlice<float>::from_host(reader, poisoned(n));
    PinnedBuffer<float> staging(device, 2 * n);
    std::fill(staging.data(), staging.data() + 2 * n, poison_float());
    device.synchronize();
    // The writer is held back; its download into chunk 0 must land before the reader uploads chunk 0.
    launch(writer, LaunchConfig{1, 1}, spin, spin_cycles(device, 50.0), nullptr);
    copy(writer, staging.view(0, n), std::as_const(source).view());
    const Counters before = device.counters();
    copy(reader, target.view(), std::as_const(staging).view(0, n));
    CHECK((device.counters() - before).cross_stream_waits == 1);
    CHECK((device.counters() - before).host_synchronizations() == 0);
    // Chunk 1 is untouched and ready at once; chunk 0 waits for the held writer.
    CHECK(staging.ready(staging.view(n, n)));
    CHECK(target.to_vector(reader) == values);
    const auto chunk = staging.wait(std::as_const(staging).view(0, n));
    CHECK(std::equal(chunk.begin(), chunk.end(), values.begin()));
    device.rethrow_deferred_error();
}

TEST_CASE("pinned.registered_memory_round_trips_and_unregisters_after_its_copies") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    constexpr std::size_t n = (std::size_t{1} << 20) + 7;
    std::vector<float> host = random_floats(n);
    const std::vector<float> original = host;
    auto slice = DeviceSlice<float>::from_host(stream, poisoned(n));
    {
        auto registered = PinnedBuffer<float>::register_memory(device, std::span<float>(host));
        copy(stream, slice.view(), std::as_const(registered).view());
        std::vector<float> back(n);
        slice.copy_to_host(stream, back);
        CHECK(back == original);
        std::fill(host.begin(), host.end(), poison_float());
        copy(stream, registered.view(), std::as_const(slice).view());
    }  // waits for the copy, then unregisters
    CHECK(host == original);
    device.rethrow_deferred_error();
}

TEST_CASE("pipeline.host_functions_run_in_stream_order_and_hand_batches_to_the_host") {
    auto device = Device::open(0);
    const BenchSpin spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    auto stream = device.create_stream();
    std::atomic<int> ran{0};
    launch(stream, LaunchConfig{1, 1}, spin, spin_cycles(device, 30.0), nullptr);
    stream.host_function([&ran] { ran.store(1); });
    CHECK(ran.load() == 0);  // still behind the spin kernel
    stream.synchronize();
    CHECK(ran.load() == 1);

    CompletionQueue done;
    constexpr std::size_t n = 4096;
    std::vector<Stream> streams;
    for (int k = 0; k < 2; ++k) streams.push_back(device.create_stream());
    PinnedBuffer<float> out(device, 4 * n);
    std::vector<DeviceSlice<float>> slices;
    std::vector<std::vector<float>> expected;
    for (std::size_t b = 0; b < 4; ++b) {
        expected.push_back(random_floats(n));
        slices.push_back(DeviceSlice<float>::from_host(streams[b % 2], expected.back()));
        copy(streams[b % 2], out.view(b * n, n), std::as_const(slices.back()).view());
        done.notify(streams[b % 2], b);
    }
    std::vector<bool> seen(4, false);
    for (int i = 0; i < 4; ++i) {
        const std::uint64_t b = done.wait();
        seen[b] = true;
        // The notification follows the batch's download on its stream: the data is there.
        CHECK(std::equal(out.data() + b * n, out.data() + (b + 1) * n, expected[b].begin()));
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](bool s) { return s; }));

    stream.host_function([] { throw std::runtime_error("host function failed on purpose"); });
    stream.synchronize();
    CHECK_THROWS_WITH_AS(device.rethrow_deferred_error(), doctest::Contains("failed on purpose"), Error);
}

// Range-aware hazard tracking on a real GPU (Note [Range hazards]): disjoint sub-views of one buffer on
// different streams run concurrently (proved with device-side timestamps), overlapping ones are ordered
// (a held-back writer), and one launch may read one half of a buffer while writing the other.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "launch_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

// timed_fill: one block; thread 0 stamps the start (%globaltimer, ns), spins `cycles`, then every thread
// fills `out`, and thread 0 stamps the end. stamps[0] = start, stamps[1] = end.
constexpr const char* kTimedFill = R"(
extern "C" __global__ void timed_fill(float* out, unsigned long long n, float value, long long cycles,
                                      unsigned long long* stamps) {
    unsigned long long t = 0;
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        stamps[0] = t;
        const long long start = clock64();
        while (clock64() - start < cycles) {
        }
    }
    __syncthreads();
    for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) out[i] = value;
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        stamps[1] = t;
    }
}
)";
using TimedFill = Kernel<void(float*, unsigned long long, float, long long, unsigned long long*)>;

}  // namespace

TEST_CASE("core.disjoint_subviews_on_k_streams_overlap") {
    auto device = Device::open(0);
    constexpr std::size_t kStreams = 8;
    constexpr std::size_t kItem = (std::size_t{1} << 16) + 3;
    const Module module = Module::compile(device, Program(kTimedFill, "timed_fill.cu"));
    const auto fill = module.kernel<TimedFill::signature>("timed_fill");
    auto& home = device.default_stream();
    auto batch = DeviceSlice<float>::from_host(home, poisoned(kStreams * kItem));
    auto stamps = DeviceSlice<unsigned long long>::zeros(home, 2 * kStreams);
    home.synchronize();
    std::vector<Stream> streams;
    for (std::size_t k = 0; k < kStreams; ++k) streams.push_back(device.create_stream());
    const long long cycles = spin_cycles(device, 40.0);

    const auto before = device.counters();
    for (std::size_t k = 0; k < kStreams; ++k) {
        launch(streams[k], LaunchConfig{1, 256}, fill, batch.view(k * kItem, kItem),
               static_cast<unsigned long long>(kItem), static_cast<float>(k + 1), cycles,
               stamps.view(2 * k, 2));
    }
    const auto delta = device.counters() - before;
    // Each item stream waits once for the home stream's uploads of both buffers (one source stream: one
    // wait), on one event home records for all of them; no item stream waits for another. Each launch then
    // records one event after itself, for both buffers (Note [Stream timelines]).
    CHECK(delta.cross_stream_waits == kStreams);
    CHECK(delta.events_recorded == 1 + kStreams);
    CHECK(delta.kernel_launches == kStreams);

    // Reading back on home orders after every item (one event and one wait per item stream).
    const auto values = batch.to_vector(home);
    const auto times = stamps.to_vector(home);
    for (std::size_t k = 0; k < kStreams; ++k) {
        CAPTURE(k);
        const auto first = values.begin() + static_cast<std::ptrdiff_t>(k * kItem);
        CHECK(std::all_of(first, first + static_cast<std::ptrdiff_t>(kItem),
                          [&](float x) { return x == static_cast<float>(k + 1); }));
        CHECK(times[2 * k] != 0);
        CHECK(times[2 * k + 1] > times[2 * k]);
    }
    // All K kernels were running at one moment: the latest start precedes the earliest end.
    unsigned long long latest_start = 0;
    unsigned long long earliest_end = ~0ull;
    for (std::size_t k = 0; k < kStreams; ++k) {
        latest_start = std::max(latest_start, times[2 * k]);
        earliest_end = std::min(earliest_end, times[2 * k + 1]);
    }
    MESSAGE("latest start - earliest end: "
            << static_cast<double>(latest_start) - static_cast<double>(earliest_end)
            << " ns; one kernel: " << times[1] - times[0] << " ns");
    if (kernels_serialized_by_a_tool()) {
        MESSAGE("kernels are serialized by an injected tool (compute-sanitizer): overlap not checked");
    } else {
        CHECK(latest_start < earliest_end);
    }
}

TEST_CASE("core.overlapping_subviews_on_two_streams_are_ordered") {
    auto device = Device::open(0);
    const BenchFill fill = bench_module(device).kernel<BenchFill::signature>("bench_fill");
    const BenchSpin spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    auto writer = device.create_stream();
    auto reader = device.create_stream();
    constexpr std::size_t n = (std::size_t{1} << 20) + 4;
    const auto original = random_floats(n);
    const float value = 1.0f + random_floats(1, 0.0f, 1.0f)[0];
    auto buffer = DeviceSlice<float>::from_host(writer, original);
    auto out = DeviceSlice<float>::from_host(reader, poisoned(n / 2));

    // The writer, held back, fills [0, 3n/4); the reader copies [n/2, n): the overlap [n/2, 3n/4) must show
    // the new value, the rest the original data.
    launch(writer, LaunchConfig{1, 1}, spin, spin_cycles(device, 100.0), nullptr);
    launch(writer, LaunchConfig::for_elements(3 * n / 4, device), fill, buffer.view(0, 3 * n / 4), value,
           static_cast<unsigned long long>(3 * n / 4));
    const auto before = device.counters();
    copy(reader, out.view(), buffer.view(n / 2, n / 2));
    const auto delta = device.counters() - before;
    CHECK(delta.cross_stream_waits == 1);
    CHECK(delta.events_recorded == 2);  // the writer's for the wait, the reader's after its read
    const auto got = out.to_vector(reader);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n / 2; ++i) {
        const std::size_t at = n / 2 + i;
        const float want = at < 3 * n / 4 ? value : original[at];
        if (std::memcmp(&got[i], &want, sizeof(float)) != 0) ++wrong;
    }
    CHECK(wrong == 0);

    // A later write by the reader's stream to [0, n/4) must wait for the writer's fill (write after write)
    // and must land last.
    const float late = -value;
    launch(writer, LaunchConfig{1, 1}, spin, spin_cycles(device, 100.0), nullptr);
    launch(writer, LaunchConfig::for_elements(n / 4, device), fill, buffer.view(0, n / 4), value,
           static_cast<unsigned long long>(n / 4));
    launch(reader, LaunchConfig::for_elements(n / 4, device), fill, buffer.view(0, n / 4), late,
           static_cast<unsigned long long>(n / 4));
    const auto all = buffer.to_vector(reader);
    CHECK(std::all_of(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n / 4),
                      [&](float x) { return x == late; }));
}

TEST_CASE("core.one_launch_reads_one_half_and_writes_the_other") {
    auto device = Device::open(0);
    const BenchCopy copy_kernel = bench_module(device).kernel<BenchCopy::signature>("bench_copy");
    const BenchSpin spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    auto producer = device.create_stream();
    auto consumer = device.create_stream();
    constexpr std::size_t half = (std::size_t{1} << 19) + 1;
    const auto data = random_floats(half);
    auto buffer = DeviceSlice<float>::from_host(producer, poisoned(2 * half));

    // The producer, held back, writes the first half; the consumer copies it over the second half in one
    // launch (reads [0, half), writes [half, 2 half)).
    launch(producer, LaunchConfig{1, 1}, spin, spin_cycles(device, 100.0), nullptr);
    copy(producer, buffer.view(0, half), std::span<const float>(data));
    const auto before = device.counters();
    launch(consumer, LaunchConfig::for_elements(half, device), copy_kernel, buffer.view(half, half),
           buffer.view(0, half), static_cast<unsigned long long>(half));
    const auto delta = device.counters() - before;
    // One event on the producer serves both accesses; one on the consumer after its launch.
    CHECK(delta.events_recorded == 2);
    CHECK(delta.cross_stream_waits >= 1);
    const auto all = buffer.to_vector(consumer);
    CHECK(std::memcmp(all.data(), data.data(), half * sizeof(float)) == 0);
    CHECK(std::memcmp(all.data() + half, data.data(), half * sizeof(float)) == 0);

    // On one stream the same launches record nothing and wait for nothing.
    auto local = DeviceSlice<float>::from_host(consumer, poisoned(2 * half));
    copy(consumer, local.view(0, half), std::span<const float>(data));
    const auto before_single = device.counters();
    launch(consumer, LaunchConfig::for_elements(half, device), copy_kernel, local.view(half, half),
           local.view(0, half), static_cast<unsigned long long>(half));
    launch(consumer, LaunchConfig::for_elements(half, device), copy_kernel, local.view(0, half),
           local.view(half, half), static_cast<unsigned long long>(half));
    const auto single = device.counters() - before_single;
    CHECK(single.cross_stream_waits == 0);
    CHECK(single.events_recorded == 0);
    const auto back = local.to_vector(consumer);
    CHECK(std::memcmp(back.data() + half, data.data(), half * sizeof(float)) == 0);
}

// Launch configurations beyond grid and block: dynamic shared memory above 48 KB, thread block clusters
// (sm_90) and cooperative launches; and the grid helpers that read the device and the kernel's occupancy.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>

#include "cudarc/nvrtc.hpp"
#include "launch_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

constexpr const char* kSource = R"(
// Reverses `count` floats of `in` through dynamic shared memory (one block), so every byte of the shared
// allocation is written and read.
extern "C" __global__ void reverse_through_shared(float* out, const float* in, unsigned count) {
    extern __shared__ float staging[];
    for (unsigned i = threadIdx.x; i < count; i += blockDim.x) staging[i] = in[i];
    __syncthreads();
    for (unsigned i = threadIdx.x; i < count; i += blockDim.x) out[i] = staging[count - 1 - i];
}

// A grid-wide barrier made of an atomic counter: it completes only if every block is resident at once,
// which only a cooperative launch guarantees. A timeout turns a hang into a wrong answer (0).
extern "C" __global__ void grid_barrier(unsigned* arrived, unsigned* seen, long long timeout_cycles) {
    __syncthreads();
    if (threadIdx.x != 0) return;
    atomicAdd(arrived, 1u);
    const long long start = clock64();
    unsigned now = 0;
    while ((now = atomicAdd(arrived, 0u)) < gridDim.x) {
        if (clock64() - start > timeout_cycles) {
            now = 0;
            break;
        }
    }
    seen[blockIdx.x] = now;
}
)";

// Compiled only for sm_90 and newer: the cluster registers do not exist before.
constexpr const char* kClusterSource = R"(
// Each block reports its rank within its cluster and the cluster's size (PTX special registers).
extern "C" __global__ void cluster_ranks(unsigned* rank, unsigned* size) {
    if (threadIdx.x != 0) return;
    unsigned r = 0;
    unsigned n = 0;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    rank[blockIdx.x] = r;
    size[blockIdx.x] = n;
}
)";

// Compiled only for sm_90 and newer: griddepcontrol (programmatic dependent launch) does not exist before.
constexpr const char* kProgrammaticSource = R"(
__device__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Lets the launch after it start at once, spins for `cycles`, then writes `value` to out[0..n) and the
// time it ended to *ended.
extern "C" __global__ void write_late(unsigned* out, unsigned n, unsigned value, long long cycles,
                                      unsigned long long* ended) {
    asm volatile("griddepcontrol.launch_dependents;");
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) out[i] = value;
    __syncthreads();
    if (threadIdx.x == 0) *ended = now_ns();
}

// Writes the time it started to *started, waits for the kernel ahead, then copies in[0..n) to out.
extern "C" __global__ void copy_after_wait(unsigned* out, const unsigned* in, unsigned n,
                                           unsigned long long* started) {
    if (threadIdx.x == 0) *started = now_ns();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i];
}
)";

const Module& test_module(const Device& device) {
    static const Module module = Module::compile(device, Program(kSource, "launch_attributes_test.cu"));
    return module;
}

}  // namespace

TEST_CASE("launch.dynamic_shared_memory_above_48k") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    const auto reverse =
        test_module(device).kernel<void(float*, const float*, unsigned)>("reverse_through_shared");

    const int opt_in = device.attribute(sys::attr::kMaxSharedMemoryPerBlockOptin);
    REQUIRE(opt_in > 48 * 1024);
    // Somewhere between 48 KB and the device's limit, in whole floats.
    const unsigned count = static_cast<unsigned>(std::min<std::int64_t>(
        opt_in / 4, 12 * 1024 + 1 + static_cast<std::int64_t>(rng()() % (opt_in / 4 - 12 * 1024 - 1))));
    const unsigned bytes = count * 4;
    REQUIRE(bytes > 48 * 1024);

    const auto in_host = random_floats(count);
    const auto in = DeviceSlice<float>::from_host(stream, in_host);
    auto out = DeviceSlice<float>::from_host(stream, poisoned(count));
    const LaunchConfig config = LaunchConfig{1, 256}.with_shared_memory(bytes);

    // Without raising the limit the launch is refused, with a message that says what to do.
    CHECK_THROWS_WITH_AS(launch(stream, config, reverse, out, in, count),
                         doctest::Contains("set_max_dynamic_shared_memory"), Error);
    // More than the device allows is refused before the driver is asked.
    CHECK_THROWS_WITH_AS(reverse.set_max_dynamic_shared_memory(static_cast<std::size_t>(opt_in) + 4),
                         doctest::Contains("cannot use"), Error);

    reverse.set_max_dynamic_shared_memory(bytes);
    CHECK(reverse.attributes().max_dynamic_shared_bytes == bytes);
    launch(stream, config, reverse, out, in, count);
    const auto got = out.to_vector(stream);
    std::vector<double> want(count);
    for (unsigned i = 0; i < count; ++i) want[i] = in_host[count - 1 - i];
    CHECK(count_mismatches(
              got, want, [](std::size_t) { return 0.0; }, "reverse") == 0);
}

TEST_CASE("launch.cluster_launch") {
    auto device = Device::open(0);
    if (device.compute_capability() < ComputeCapability{9, 0}) {
        MESSAGE("thread block clusters need compute capability 9.0; this device is " << device.arch());
        return;
    }
    auto& stream = device.default_stream();
    const Module cluster_module = Module::compile(device, Program(kClusterSource, "cluster_ranks.cu"));
    const auto ranks = cluster_module.kernel<void(unsigned*, unsigned*)>("cluster_ranks");
    const unsigned cluster = 2u << (rng()() % 2);  // 2 or 4
    const unsigned blocks = cluster * (8 + static_cast<unsigned>(rng()() % 8));
    auto rank = DeviceSlice<unsigned>::from_host(stream, std::vector<unsigned>(blocks, 0xdeadbeefu));
    auto size = DeviceSlice<unsigned>::from_host(stream, std::vector<unsigned>(blocks, 0xdeadbeefu));

    const auto before = device.counters();
    launch(stream, LaunchConfig{blocks, 32}.with_cluster({cluster}), ranks, rank, size);
    CHECK((device.counters() - before).kernel_launches == 1);
    const auto rank_got = rank.to_vector(stream);
    const auto size_got = size.to_vector(stream);
    std::size_t wrong = 0;
    for (unsigned b = 0; b < blocks; ++b) {
        if (size_got[b] != cluster || rank_got[b] != b % cluster) ++wrong;
    }
    CHECK_MESSAGE(wrong == 0,
                  "cluster " << cluster << ", first block: rank " << rank_got[0] << " of " << size_got[0]);

    // Without the attribute every block is its own cluster of one.
    launch(stream, LaunchConfig{blocks, 32}, ranks, rank, size);
    const auto plain = size.to_vector(stream);
    CHECK(std::all_of(plain.begin(), plain.end(), [](unsigned s) { return s == 1; }));
}

TEST_CASE("launch.cooperative_launch") {
    auto device = Device::open(0);
    if (device.attribute(sys::attr::kCooperativeLaunch) == 0) {
        MESSAGE("the device does not support cooperative launches");
        return;
    }
    auto& stream = device.default_stream();
    const auto barrier = test_module(device).kernel<void(unsigned*, unsigned*, long long)>("grid_barrier");
    const unsigned block = 128;
    const int per_sm = barrier.function().max_active_blocks_per_multiprocessor(block);
    REQUIRE(per_sm >= 1);
    // The most blocks that can all be resident: the largest grid a cooperative launch accepts.
    const unsigned resident = static_cast<unsigned>(per_sm * device.multiprocessor_count());
    const unsigned blocks = resident - static_cast<unsigned>(rng()() % std::min(resident, 16u));
    auto arrived = DeviceSlice<unsigned>::zeros(stream, 1);
    auto seen = DeviceSlice<unsigned>::from_host(stream, std::vector<unsigned>(blocks, 0xdeadbeefu));
    const long long timeout = spin_cycles(device, 2000.0);

    launch(stream, LaunchConfig{blocks, block}.with_cooperative(), barrier, arrived, seen, timeout);
    const auto got = seen.to_vector(stream);
    CHECK(std::count(got.begin(), got.end(), blocks) == static_cast<std::ptrdiff_t>(blocks));
    CHECK(arrived.to_vector(stream)[0] == blocks);

    // A grid larger than can be resident is refused for a cooperative launch (the attribute took effect).
    CHECK_THROWS_AS(
        launch(stream, LaunchConfig{resident + 1, block}.with_cooperative(), barrier, arrived, seen, timeout),
        Error);
}

TEST_CASE("launch.programmatic_serialization_starts_early_and_the_wait_sees_the_kernel_ahead") {
    auto device = Device::open(0);
    if (device.compute_capability() < ComputeCapability{9, 0}) {
        test::skip_test("programmatic dependent launch needs compute capability 9.0; this device is " +
                        device.arch());
        return;
    }
    const Module module = Module::compile(device, Program(kProgrammaticSource, "programmatic.cu"));
    const auto write_late =
        module.kernel<void(unsigned*, unsigned, unsigned, long long, unsigned long long*)>("write_late");
    const auto copy_after_wait =
        module.kernel<void(unsigned*, const unsigned*, unsigned, unsigned long long*)>("copy_after_wait");
    Stream stream = device.create_stream();
    const unsigned n = 1000 + static_cast<unsigned>(rng()() % 5000);
    const long long cycles = spin_cycles(device, 0.2);

    for (const StreamSerialization serialization :
         {StreamSerialization::programmatic, StreamSerialization::full}) {
        const bool programmatic = serialization == StreamSerialization::programmatic;
        CAPTURE(programmatic);
        const unsigned value = static_cast<unsigned>(rng()());
        auto data = DeviceSlice<unsigned>::from_host(stream, std::vector<unsigned>(n, kPoison));
        auto copied = DeviceSlice<unsigned>::from_host(stream, std::vector<unsigned>(n, kPoison));
        auto times = DeviceSlice<unsigned long long>::zeros(stream, 2);  // [0] ended, [1] started
        const auto before = device.counters();
        launch(stream, LaunchConfig{1, 256}, write_late, data, n, value, cycles, times.view(0, 1));
        launch(stream, LaunchConfig{1, 256}.with_serialization(serialization), copy_after_wait, copied, data,
               n, times.view(1, 1));
        CHECK((device.counters() - before).kernel_launches == 2);
        const auto got = copied.to_vector(stream);
        CHECK(std::count(got.begin(), got.end(), value) == static_cast<std::ptrdiff_t>(n));
        const auto t = times.to_vector(stream);
        REQUIRE(t[0] != 0);
        REQUIRE(t[1] != 0);
        // Device timestamps: the programmatic launch started while the kernel ahead still spun (about
        // 200 us); the fully ordered one only after it had ended.
        if (programmatic && kernels_serialized_by_a_tool()) {
            MESSAGE(
                "kernels are serialized by an injected tool (compute-sanitizer): the early start not "
                "checked");
        } else if (programmatic) {
            CHECK(t[1] < t[0]);
        } else {
            CHECK(t[1] >= t[0]);
        }
    }
}

TEST_CASE("launch.for_elements_from_device_and_occupancy") {
    auto device = Device::open(0);
    const auto sum = bench_module(device).kernel<BenchSum::signature>("bench_sum");
    const auto sms = static_cast<unsigned>(device.multiprocessor_count());
    const auto threads_per_sm =
        static_cast<unsigned>(device.attribute(sys::attr::kMaxThreadsPerMultiprocessor));

    const auto small = LaunchConfig::for_elements(1000, device);
    CHECK(small.grid.x == 4);
    CHECK(small.block.x == 256);
    const auto large = LaunchConfig::for_elements(std::size_t{1} << 32, device);
    CHECK(large.grid.x == sms * (threads_per_sm / 256));
    const auto from_occupancy = LaunchConfig::for_elements(std::size_t{1} << 32, sum.function(), 256);
    const int per_sm = sum.function().max_active_blocks_per_multiprocessor(256);
    CHECK(per_sm >= 1);
    CHECK(per_sm <= static_cast<int>(threads_per_sm / 256));
    CHECK(from_occupancy.grid.x == sms * static_cast<unsigned>(per_sm));
    CHECK_THROWS_WITH_AS(static_cast<void>(LaunchConfig::for_elements(10, device, 4096)),
                         doctest::Contains("block size 4096"), Error);
}

// Graphs that keep hazard tracking's guarantees (issue 13; Note [Capture overlay] in src/core/capture.hpp):
// multi-stream capture whose children overlap (device timestamps), replays on other streams that the
// allocator and later work wait for, illegal work refused without breaking the capture, update, upload and
// replays on several streams. Fresh random data, poisoned outputs, float64 references.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "launch_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

// timed_axpb: one block; thread 0 stamps the start (%globaltimer, ns) and spins `cycles`; then
// out[i] = a * in[i] + b for the block's n elements, and thread 0 stamps the end.
constexpr const char* kTimedAxpb = R"(
extern "C" __global__ void timed_axpb(float* out, const float* in, unsigned long long n, float a, float b,
                                      long long cycles, unsigned long long* stamps) {
    unsigned long long t = 0;
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        stamps[0] = t;
        const long long start = clock64();
        while (clock64() - start < cycles) {
        }
    }
    __syncthreads();
    for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) out[i] = a * in[i] + b;
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        stamps[1] = t;
    }
}
)";
using TimedAxpb =
    Kernel<void(float*, const float*, unsigned long long, float, float, long long, unsigned long long*)>;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("graph.forked_children_overlap_and_replays_are_right") {
    auto device = Device::open(0);
    constexpr std::size_t kChildren = 4;
    constexpr std::size_t kItem = (std::size_t{1} << 14) + 5;
    const Module module = Module::compile(device, Program(kTimedAxpb, "timed_axpb.cu"));
    const auto axpb = module.kernel<TimedAxpb::signature>("timed_axpb");
    auto origin = device.create_stream();
    auto input = DeviceSlice<float>::from_host(origin, random_floats(kChildren * kItem));
    auto out = DeviceSlice<float>::from_host(origin, poisoned(kChildren * kItem));
    auto result = DeviceSlice<float>::from_host(origin, poisoned(kChildren * kItem));
    auto stamps = DeviceSlice<unsigned long long>::zeros(origin, 2 * kChildren);
    const long long cycles = spin_cycles(device, 20.0);
    const float a = 1.5f + random_floats(1, 0.0f, 1.0f)[0];
    const float b = random_floats(1)[0];

    // Each child reads and writes its own item; the origin then copies the whole output (it must follow
    // every child: the joins).
    auto graph = capture(origin, [&](Stream& s) {
        std::vector<Stream> children;
        for (std::size_t k = 0; k < kChildren; ++k) children.push_back(s.fork());
        for (std::size_t k = 0; k < kChildren; ++k) {
            launch(children[k], LaunchConfig{1, 256}, axpb, out.view(k * kItem, kItem),
                   input.view(k * kItem, kItem), static_cast<unsigned long long>(kItem), a, b, cycles,
                   stamps.view(2 * k, 2));
        }
        children.clear();  // joins
        copy(s, result.view(), out.view());
    });
    // Nothing ran during the capture.
    const auto untouched = out.to_vector(origin);
    CHECK(std::all_of(untouched.begin(), untouched.end(), is_poison));

    for (int replay = 0; replay < 2; ++replay) {
        CAPTURE(replay);
        const auto data = random_floats(kChildren * kItem);
        input.copy_from_host(origin, data);
        out.copy_from_host(origin, poisoned(kChildren * kItem));
        result.copy_from_host(origin, poisoned(kChildren * kItem));
        graph.launch(origin);
        const auto got = result.to_vector(origin);
        std::vector<double> want(data.size());
        for (std::size_t i = 0; i < data.size(); ++i)
            want[i] = static_cast<double>(a) * static_cast<double>(data[i]) + static_cast<double>(b);
        CHECK(count_mismatches(
                  got, want,
                  [&](std::size_t i) {
                      return fp32_tolerance(std::abs(static_cast<double>(a) * data[i]) + std::abs(b));
                  },
                  "replayed a*x+b") == 0);
        const auto times = stamps.to_vector(origin);
        unsigned long long latest_start = 0;
        unsigned long long earliest_end = ~0ull;
        for (std::size_t k = 0; k < kChildren; ++k) {
            CHECK(times[2 * k + 1] > times[2 * k]);
            latest_start = std::max(latest_start, times[2 * k]);
            earliest_end = std::min(earliest_end, times[2 * k + 1]);
        }
        MESSAGE("latest start - earliest end: "
                << static_cast<double>(latest_start) - static_cast<double>(earliest_end) << " ns");
        if (kernels_serialized_by_a_tool()) {
            MESSAGE("kernels are serialized by an injected tool (compute-sanitizer): overlap not checked");
        } else {
            CHECK(latest_start < earliest_end);  // all children were running at one moment
        }
    }

    // The capture left no event recorded inside it in the buffers' hazard state: eager work on other
    // streams uses them at once (the issue's CUDA_ERROR_INVALID_VALUE).
    auto other = device.create_stream();
    auto copy_back = DeviceSlice<float>::from_host(other, poisoned(kChildren * kItem));
    copy(other, copy_back.view(), out.view());
    CHECK(bitwise_equal(copy_back.to_vector(other), result.to_vector(origin)));
    device.rethrow_deferred_error();
}

TEST_CASE("graph.replay_on_a_held_back_stream_then_its_buffer_freed_and_reallocated") {
    auto device = Device::open(0);
    const BenchCopy copy_kernel = bench_module(device).kernel<BenchCopy::signature>("bench_copy");
    const BenchFill fill = bench_module(device).kernel<BenchFill::signature>("bench_fill");
    const BenchSpin spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    auto home = device.create_stream();
    auto replay = device.create_stream();
    constexpr std::size_t n = std::size_t{1} << 16;
    const auto data = random_floats(n);
    auto input = DeviceSlice<float>::from_host(home, data);
    auto out = DeviceSlice<float>::from_host(home, poisoned(n));
    std::optional<DeviceSlice<float>> scratch(DeviceSlice<float>::from_host(home, poisoned(n)));
    const auto config = LaunchConfig::for_elements(n, device);

    // The graph writes the scratch buffer, then copies it to the output.
    auto graph = capture(home, [&](Stream& s) {
        launch(s, config, copy_kernel, scratch->view(), input.view(), static_cast<unsigned long long>(n));
        launch(s, config, copy_kernel, out.view(), scratch->view(), static_cast<unsigned long long>(n));
    });
    home.synchronize();

    // The replay stream is held back; the scratch buffer is freed right after the launch, and a new buffer
    // of the same size on the home stream is written at once.
    launch(replay, LaunchConfig{1, 1}, spin, spin_cycles(device, 100.0), nullptr);
    graph.launch(replay);
    const DevicePtr freed = scratch->device_ptr();
    scratch.reset();
    auto fresh = DeviceSlice<float>::uninitialized(home, n);
    const float value = 2.0f + random_floats(1, 0.0f, 1.0f)[0];
    launch(home, config, fill, fresh.view(), value, static_cast<unsigned long long>(n));
    MESSAGE("freed " << freed << ", new allocation at " << fresh.device_ptr());
    CHECK(fresh.device_ptr() != freed);  // held for the replay's event

    // Both come out right: the replay's copy saw its own scratch data, and the new buffer keeps its value.
    CHECK(bitwise_equal(out.to_vector(home), data));
    const auto got = fresh.to_vector(home);
    CHECK(std::all_of(got.begin(), got.end(), [&](float x) { return x == value; }));
    device.rethrow_deferred_error();
}

TEST_CASE("graph.earlier_writer_on_another_stream_is_waited_for_by_each_replay") {
    auto device = Device::open(0);
    const BenchSpin spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    auto writer = device.create_stream();
    auto replayer = device.create_stream();
    constexpr std::size_t n = (std::size_t{1} << 18) + 3;
    auto x = DeviceSlice<float>::from_host(writer, poisoned(n));
    auto y = DeviceSlice<float>::from_host(replayer, poisoned(n));
    writer.synchronize();
    auto graph = capture(replayer, [&](Stream& s) { copy(s, y.view(), x.view()); });

    for (int round = 0; round < 2; ++round) {
        CAPTURE(round);
        // The writer, held back, writes x; the replay must read the new data.
        const auto data = random_floats(n);
        launch(writer, LaunchConfig{1, 1}, spin, spin_cycles(device, 50.0), nullptr);
        x.copy_from_host(writer, data);
        graph.launch(replayer);
        CHECK(bitwise_equal(y.to_vector(replayer), data));
    }
}

TEST_CASE("graph.illegal_work_inside_a_capture_throws_and_the_stream_stays_usable") {
    auto device = Device::open(0);
    const BenchFill fill = bench_module(device).kernel<BenchFill::signature>("bench_fill");
    auto s = device.create_stream();
    auto other = device.create_stream();
    constexpr std::size_t n = 4096;
    auto x = DeviceSlice<float>::from_host(s, poisoned(n));
    { auto warm = DeviceSlice<float>::uninitialized(s, n); }  // a cached block for the capture
    Event event(device);
    event.record(other);
    PinnedBuffer<float> pinned(device, n);
    pinned.copy_from_device_async(other, x.view());
    std::vector<float> host(n, 1.0f);
    s.synchronize();
    const float value = random_floats(1)[0];
    const auto config = LaunchConfig::for_elements(n, device);
    const auto before = device.counters();

    auto graph = capture(s, [&](Stream&) {
        const char* inside = "inside a graph capture";
        CHECK_THROWS_WITH_AS((void)x.to_vector(s), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS(x.copy_from_host(s, host), doctest::Contains("pageable host memory"), Error);
        CHECK_THROWS_WITH_AS(s.synchronize(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS(other.synchronize(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS(device.synchronize(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS((void)s.query(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS((void)event.query(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS(event.synchronize(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS(pinned.synchronize(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS((void)DeviceSlice<float>::uninitialized(s, std::size_t{1} << 26),
                             doctest::Contains("new large-pool segment"), Error);
        // What is allowed: a cached block, a kernel, a copy into page-locked memory.
        auto cached = DeviceSlice<float>::uninitialized(s, n);
        launch(s, config, fill, cached.view(), value, static_cast<unsigned long long>(n));
        copy(s, x.view(), cached.view());
        pinned.copy_from_device_async(s, x.view());
    });
    const auto delta = device.counters() - before;
    CHECK(delta.driver_allocations == 0);
    CHECK(delta.stream_synchronizes == 0);
    graph.launch(s);
    const auto got = x.to_vector(s);
    CHECK(std::all_of(got.begin(), got.end(), [&](float v) { return v == value; }));
    CHECK(std::all_of(pinned.data(), pinned.data() + n, [&](float v) { return v == value; }));

    // Uncaught, the error abandons the capture; the stream works afterwards.
    CHECK_THROWS_WITH_AS((void)capture(s, [&](Stream&) { (void)x.to_vector(s); }),
                         doctest::Contains("inside a graph capture"), Error);
    s.synchronize();  // allowed again
    const auto data = random_floats(n);
    x.copy_from_host(s, data);
    CHECK(bitwise_equal(x.to_vector(s), data));
    device.rethrow_deferred_error();
}

TEST_CASE("graph.fork_alive_after_the_body_abandons_the_capture") {
    auto device = Device::open(0);
    auto s = device.create_stream();
    auto x = DeviceSlice<float>::from_host(s, poisoned(1024));
    std::optional<Stream> escaped;
    CHECK_THROWS_WITH_AS((void)capture(s,
                                       [&](Stream&) {
                                           escaped.emplace(s.fork());
                                           memset(*escaped, x.view(), 0);
                                       }),
                         doctest::Contains("forked inside the capture were still alive"), Error);
    REQUIRE(escaped.has_value());
    const auto data = random_floats(1024);
    x.copy_from_host(*escaped, data);  // eager again
    escaped.reset();                   // joins s
    CHECK(bitwise_equal(x.to_vector(s), data));
    device.rethrow_deferred_error();
}

TEST_CASE("graph.update_keeps_the_executable_for_the_same_topology") {
    auto device = Device::open(0);
    const BenchFill fill = bench_module(device).kernel<BenchFill::signature>("bench_fill");
    auto s = device.create_stream();
    constexpr std::size_t n = 1 << 16;
    auto x = DeviceSlice<float>::from_host(s, poisoned(n));
    auto y = DeviceSlice<float>::from_host(s, poisoned(n));
    const auto config = LaunchConfig::for_elements(n, device);
    const auto values = random_floats(4, 1.0f, 2.0f);
    const auto n64 = static_cast<unsigned long long>(n);
    auto all_are = [&](const DeviceSlice<float>& slice, float v) {
        const auto got = slice.to_vector(s);
        return std::all_of(got.begin(), got.end(), [&](float e) { return e == v; });
    };

    auto graph = capture(s, [&](Stream&) { launch(s, config, fill, x.view(), values[0], n64); });
    graph.launch(s);
    CHECK(all_are(x, values[0]));
    // Another value: same topology.
    CHECK(graph.update(s, [&](Stream&) { launch(s, config, fill, x.view(), values[1], n64); }) ==
          GraphUpdate::in_place);
    graph.launch(s);
    CHECK(all_are(x, values[1]));
    // Another buffer: same topology; the graph's accesses follow.
    CHECK(graph.update(s, [&](Stream&) { launch(s, config, fill, y.view(), values[2], n64); }) ==
          GraphUpdate::in_place);
    REQUIRE(graph.accesses().size() == 1);
    CHECK(graph.accesses()[0].address == y.device_ptr());
    graph.launch(s);
    CHECK(all_are(y, values[2]));
    CHECK(all_are(x, values[1]));
    // Two kernels: another topology.
    CHECK(graph.update(s, [&](Stream&) {
        launch(s, config, fill, x.view(), values[3], n64);
        launch(s, config, fill, y.view(), values[3], n64);
    }) == GraphUpdate::reinstantiated);
    graph.launch(s);
    CHECK(all_are(x, values[3]));
    CHECK(all_are(y, values[3]));
    device.rethrow_deferred_error();
}

TEST_CASE("graph.upload_then_replays_on_several_streams") {
    auto device = Device::open(0);
    const BenchSaxpy saxpy = bench_module(device).kernel<BenchSaxpy::signature>("bench_saxpy");
    const BenchSpin spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    auto home = device.create_stream();
    constexpr std::size_t n = (std::size_t{1} << 18) + 7;
    const auto xs = random_floats(n);
    const auto ys = random_floats(n);
    const float a = random_floats(1, 0.5f, 1.5f)[0];
    auto x = DeviceSlice<float>::from_host(home, xs);
    auto y = DeviceSlice<float>::from_host(home, ys);
    auto graph = capture(home, [&](Stream& s) {
        launch(s, LaunchConfig::for_elements(n, device), saxpy, y.view(), x.view(), a,
               static_cast<unsigned long long>(n));
    });
    graph.upload(home);
    std::vector<Stream> streams;
    for (int i = 0; i < 3; ++i) streams.push_back(device.create_stream());
    // The first replay is held back; the others must follow it (they update the same y).
    launch(streams[0], LaunchConfig{1, 1}, spin, spin_cycles(device, 50.0), nullptr);
    for (auto& s : streams) graph.launch(s);
    const auto got = y.to_vector(home);
    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i) {
        float v = ys[i];
        for (int r = 0; r < 3; ++r) v = a * xs[i] + v;  // three replays, in order
        want[i] = v;
    }
    CHECK(
        count_mismatches(
            got, want,
            [&](std::size_t i) { return 3.0 * fp32_tolerance(3.0 * std::abs(a * xs[i]) + std::abs(ys[i])); },
            "three replays of y = a x + y") == 0);
    device.rethrow_deferred_error();
}

TEST_CASE("graph.a_destroyed_buffer_fails_the_launch_by_name") {
    auto device = Device::open(0);
    auto s = device.create_stream();
    std::optional<DeviceSlice<float>> x(DeviceSlice<float>::from_host(s, poisoned(256)));
    auto graph = capture(s, [&](Stream&) { memset(s, x->view(), 0); });
    const DevicePtr address = x->device_ptr();
    x.reset();
    const auto before = device.counters();
    CHECK_THROWS_WITH_AS(graph.launch(s), doctest::Contains(fmt::format("{:#x}", address).c_str()), Error);
    CHECK((device.counters() - before).cross_stream_waits == 0);
    device.rethrow_deferred_error();
}

// NCCL is not captured and cuMemAllocManaged would invalidate a capture: both throw inside the body, before
// anything is done, and the capture goes on (the graph's copy is right). Outside the capture the same
// one-rank all_reduce runs (for one rank, the identity). The NCCL part needs NCCL, the managed part managed
// memory; the output says which part was left out.
TEST_CASE("graph.nccl_and_managed_memory_inside_a_capture_throw_and_the_capture_goes_on") {
    auto device = Device::open(0);
    auto s = device.create_stream();
    constexpr std::size_t n = (std::size_t{1} << 12) + 3;
    const auto data = random_floats(n);
    auto x = DeviceSlice<float>::from_host(s, data);
    auto y = DeviceSlice<float>::from_host(s, poisoned(n));
    std::vector<nccl::Communicator> comms;
    if (nccl::available()) {
        comms = nccl::Communicator::init_all(std::span<const Device>(&device, 1));
    } else {
        MESSAGE("NCCL is not available, its part is not checked: " << nccl::load_failure());
    }
    const bool managed = device.supports_managed_memory();
    if (!managed) MESSAGE("no managed memory on this device: its part is not checked");
    s.synchronize();

    auto graph = capture(s, [&](Stream&) {
        if (!comms.empty()) {
            CHECK_THROWS_WITH_AS(comms[0].all_reduce(s, x, y),
                                 doctest::Contains("nccl::Communicator::all_reduce inside a graph capture"),
                                 Error);
            CHECK_THROWS_WITH_AS((void)nccl::Communicator::init_all(std::span<const Device>(&device, 1)),
                                 doctest::Contains("inside a graph capture"), Error);
        }
        if (managed) {
            CHECK_THROWS_WITH_AS((void)DeviceSlice<float>::managed(s, n),
                                 doctest::Contains("managed memory inside a graph capture"), Error);
        }
        copy(s, y.view(), x.view());
    });
    CHECK_FALSE(s.is_capturing());
    const auto untouched = y.to_vector(s);
    CHECK(std::all_of(untouched.begin(), untouched.end(), is_poison));  // nothing ran
    graph.launch(s);
    CHECK(bitwise_equal(y.to_vector(s), data));
    if (!comms.empty()) {
        y.copy_from_host(s, poisoned(n));
        comms[0].all_reduce(s, x, y);
        CHECK(bitwise_equal(y.to_vector(s), data));
    }
    device.rethrow_deferred_error();
}

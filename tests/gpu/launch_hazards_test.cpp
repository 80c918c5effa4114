// Hazard tracking through typed and dynamic launches. Each cross-stream case holds one stream back with
// bench_spin, so that a missing wait would let the other stream's kernel run first and produce a wrong
// result; the counters must show exactly the waits (and events) the case needs, and none on one stream.
#include <doctest/doctest.h>

#include <array>
#include <cstring>

#include "core/buffer.hpp"
#include "core/device_state.hpp"
#include "launch_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

constexpr std::size_t kN = (std::size_t{1} << 20) + 7;
constexpr double kHoldMs = 50.0;  // far longer than any of the kernels below takes

bool all_equal(const std::vector<float>& v, float value) {
    for (float x : v) {
        if (!(x == value)) return false;
    }
    return true;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct BenchKernels {
    explicit BenchKernels(const Device& device)
        : fill(bench_module(device).kernel<BenchFill::signature>("bench_fill")),
          copy(bench_module(device).kernel<BenchCopy::signature>("bench_copy")),
          saxpy(bench_module(device).kernel<BenchSaxpy::signature>("bench_saxpy")),
          spin(bench_module(device).kernel<BenchSpin::signature>("bench_spin")) {}
    BenchFill fill;
    BenchCopy copy;
    BenchSaxpy saxpy;
    BenchSpin spin;
};

}  // namespace

TEST_CASE("launch.single_stream_records_and_waits_for_nothing") {
    auto device = Device::open(0);
    const BenchKernels k(device);
    auto stream = device.create_stream();
    const auto x_host = random_floats(kN);
    const auto y_host = random_floats(kN);
    const float a = random_floats(1, -2.0f, 2.0f)[0];
    const float value = random_floats(1, -2.0f, 2.0f)[0];
    const auto x = DeviceSlice<float>::from_host(stream, x_host);
    auto y = DeviceSlice<float>::from_host(stream, y_host);
    auto z = DeviceSlice<float>::from_host(stream, poisoned(kN));
    const auto config = LaunchConfig::for_elements(kN, device);

    const auto before = device.counters();
    launch(stream, config, k.saxpy, y, x, a, kN);            // y = a x + y: reads x, writes y
    launch(stream, config, k.copy, z, y, kN);                // z = y: reads y, writes z
    launch(stream, config, k.fill, y, value, kN);            // y = value: writes y after it was read
    launch(stream, config, k.saxpy, z, y.view(), 1.0f, kN);  // z = y + z
    const auto launched = device.counters() - before;
    CHECK(launched.kernel_launches == 4);
    CHECK(launched.cross_stream_waits == 0);
    CHECK(launched.events_recorded == 0);
    CHECK(launched.host_blocking_calls() == 0);

    const auto z_got = z.to_vector(stream);
    std::vector<double> want(kN);
    for (std::size_t i = 0; i < kN; ++i) {
        want[i] = (double{a} * double{x_host[i]} + double{y_host[i]}) + double{value};
    }
    auto tolerance = [&](std::size_t i) {
        return fp32_tolerance(std::abs(double{a} * double{x_host[i]}) + std::abs(double{y_host[i]}) +
                              std::abs(double{value}));
    };
    CHECK(count_mismatches(z_got, want, tolerance, "single stream") == 0);
    CHECK(all_equal(y.to_vector(stream), value));
    const auto after = device.counters() - before;
    CHECK(after.cross_stream_waits == 0);
    CHECK(after.events_recorded == 0);
    CHECK(after.host_synchronizations() == 0);  // the copies into pageable memory block by themselves
}

TEST_CASE("launch.write_after_read_waits_for_the_held_back_reader") {
    auto device = Device::open(0);
    const BenchKernels k(device);
    auto reader = device.create_stream();
    auto writer = device.create_stream();
    const auto data = random_floats(kN);
    const float value = 1.0f + random_floats(1, 0.0f, 1.0f)[0];
    auto x = DeviceSlice<float>::from_host(writer, data);          // last written by `writer`
    auto y = DeviceSlice<float>::from_host(reader, poisoned(kN));  // last written by `reader`
    const auto config = LaunchConfig::for_elements(kN, device);

    const auto before = device.counters();
    launch(reader, LaunchConfig{1, 1}, k.spin, spin_cycles(device, kHoldMs), nullptr);
    launch(reader, config, k.copy, y, x, kN);      // reads x (after writer's upload: one wait)
    launch(writer, config, k.fill, x, value, kN);  // overwrites x: must wait for the held-back read
    const auto delta = device.counters() - before;
    // Waits: reader after writer's upload of x (read after write), writer after reader's copy (write after
    // read). One event each: on `writer` for the upload, on `reader` for the copy.
    CHECK(delta.cross_stream_waits == 2);
    CHECK(delta.events_recorded == 2);
    CHECK(delta.kernel_launches == 3);

    CHECK(bitwise_equal(y.to_vector(reader), data));  // the copy saw x before the fill
    CHECK(all_equal(x.to_vector(writer), value));
    CHECK((device.counters() - before).cross_stream_waits ==
          2);  // reading back on each writer's stream: none
}

TEST_CASE("launch.read_after_write_waits_for_the_held_back_writer") {
    auto device = Device::open(0);
    const BenchKernels k(device);
    auto reader = device.create_stream();
    auto writer = device.create_stream();
    const float value = random_floats(1, -5.0f, 5.0f)[0];
    auto x = DeviceSlice<float>::from_host(writer, random_floats(kN));
    auto y = DeviceSlice<float>::from_host(reader, poisoned(kN));
    const auto config = LaunchConfig::for_elements(kN, device);

    const auto before = device.counters();
    launch(writer, LaunchConfig{1, 1}, k.spin, spin_cycles(device, kHoldMs), nullptr);
    launch(writer, config, k.fill, x, value, kN);  // same stream as x's upload: no wait
    launch(reader, config, k.copy, y, x, kN);      // must see the fill, not the upload
    const auto delta = device.counters() - before;
    CHECK(delta.cross_stream_waits == 1);
    // One event on the writer for the wait, one on the reader right after its read (Note [Eager events]).
    CHECK(delta.events_recorded == 2);
    CHECK(all_equal(y.to_vector(reader), value));
}

TEST_CASE("launch.write_after_write_waits_for_the_held_back_writer") {
    auto device = Device::open(0);
    const BenchKernels k(device);
    auto first = device.create_stream();
    auto second = device.create_stream();
    const float early = random_floats(1, -5.0f, -1.0f)[0];
    const float late = random_floats(1, 1.0f, 5.0f)[0];
    auto x = DeviceSlice<float>::from_host(first, poisoned(kN));
    const auto config = LaunchConfig::for_elements(kN, device);

    const auto before = device.counters();
    launch(first, LaunchConfig{1, 1}, k.spin, spin_cycles(device, kHoldMs), nullptr);
    launch(first, config, k.fill, x, early, kN);
    launch(second, config, k.fill, x, late, kN);  // the later write must land last
    const auto delta = device.counters() - before;
    CHECK(delta.cross_stream_waits == 1);
    CHECK(delta.events_recorded == 1);
    CHECK(all_equal(x.to_vector(second), late));
}

TEST_CASE("launch.readers_on_two_streams_then_a_writer") {
    auto device = Device::open(0);
    const BenchKernels k(device);
    auto home = device.create_stream();
    auto reader_a = device.create_stream();
    auto reader_b = device.create_stream();
    const auto data = random_floats(kN);
    auto x = DeviceSlice<float>::from_host(home, data);
    auto ya = DeviceSlice<float>::from_host(reader_a, poisoned(kN));
    auto yb = DeviceSlice<float>::from_host(reader_b, poisoned(kN));
    const auto config = LaunchConfig::for_elements(kN, device);
    const float value = random_floats(1, 2.0f, 3.0f)[0];

    const auto before = device.counters();
    launch(reader_a, LaunchConfig{1, 1}, k.spin, spin_cycles(device, kHoldMs), nullptr);
    launch(reader_a, config, k.copy, ya, x, kN);  // waits for home's upload (event 1 on home)
    launch(reader_b, LaunchConfig{1, 1}, k.spin, spin_cycles(device, kHoldMs), nullptr);
    launch(reader_b, config, k.copy, yb, x, kN);  // waits for the same upload (event 1 reused)
    launch(home, config, k.fill, x, value, kN);   // waits for both readers (events 2 and 3)
    const auto delta = device.counters() - before;
    CHECK(delta.cross_stream_waits == 4);
    CHECK(delta.events_recorded == 3);
    CHECK(bitwise_equal(ya.to_vector(reader_a), data));
    CHECK(bitwise_equal(yb.to_vector(reader_b), data));
    CHECK(all_equal(x.to_vector(home), value));
}

TEST_CASE("launch.rejected_launch_leaves_hazard_state_unchanged") {
    auto device = Device::open(0);
    const BenchKernels k(device);
    auto reader = device.create_stream();
    auto writer = device.create_stream();
    auto x = DeviceSlice<float>::from_host(writer, random_floats(1024));
    auto y = DeviceSlice<float>::from_host(reader, poisoned(1024));

    const auto before = device.counters();
    // A zero grid and a cluster that does not divide the grid are refused before any hazard bookkeeping.
    CHECK_THROWS_WITH_AS(launch(reader, LaunchConfig{0, 256}, k.copy, y, x, 1024),
                         doctest::Contains("at least 1"), Error);
    CHECK_THROWS_WITH_AS(launch(reader, LaunchConfig{3, 256}.with_cluster({2}), k.copy, y, x, 1024),
                         doctest::Contains("whole number of clusters"), Error);
    const auto delta = device.counters() - before;
    CHECK(delta.cross_stream_waits == 0);
    CHECK(delta.events_recorded == 0);
    CHECK(delta.kernel_launches == 0);
    // x is still "written as a whole by writer, nothing since": the single-stream fast path, no range table.
    const auto& hazards = cudarc::detail::Internals::buffer(x)->hazards();
    CHECK(hazards.exclusive() == &cudarc::detail::Internals::stream_state(writer).timeline());
    hazards.inspect([](auto ranges) { CHECK(ranges.empty()); });
}

TEST_CASE("launch.dynamic_launch_checks_arguments_and_tracks_hazards") {
    auto device = Device::open(0);
    auto reader = device.create_stream();
    auto writer = device.create_stream();
    const Module& bench = bench_module(device);
    const Function saxpy = bench.function("bench_saxpy");
    const auto spin = bench.kernel<BenchSpin::signature>("bench_spin");
    const auto fill = bench.function("bench_fill");

    const auto x_host = random_floats(kN);
    const auto y_host = random_floats(kN);
    const float a = random_floats(1, -2.0f, 2.0f)[0];
    auto x = DeviceSlice<float>::from_host(writer, x_host);
    auto y = DeviceSlice<float>::from_host(reader, y_host);
    const unsigned long long n = kN;
    const auto config = LaunchConfig::for_elements(kN, device);

    if (const auto sizes = saxpy.parameter_sizes()) {
        CHECK(*sizes == std::vector<std::size_t>{8, 8, 4, 8});
        const std::array too_few{KernelArg::writes(y), KernelArg::reads(x), KernelArg::value(a)};
        CHECK_THROWS_WITH_AS(launch_dynamic(reader, config, saxpy, too_few),
                             doctest::Contains("takes 4 parameter(s), 3 argument(s) given"), Error);
        const std::array wrong_size{KernelArg::writes(y), KernelArg::reads(x), KernelArg::value(a),
                                    KernelArg::value(static_cast<int>(n))};
        CHECK_THROWS_WITH_AS(launch_dynamic(reader, config, saxpy, wrong_size),
                             doctest::Contains("argument 3 of kernel 'bench_saxpy' has 4 bytes"), Error);
    } else {
        MESSAGE(
            "no parameter sizes from the driver (cuFuncGetParamInfo needs CUDA 12.4 and its table entry): "
            "argument checks not exercised");
    }

    // y = a x + y on `reader`, held back; then `writer` overwrites x, which must wait for the read.
    const auto before = device.counters();
    launch(reader, LaunchConfig{1, 1}, spin, spin_cycles(device, kHoldMs), nullptr);
    const std::array args{KernelArg::writes(y), KernelArg::reads(x), KernelArg::value(a),
                          KernelArg::value(n)};
    launch_dynamic(reader, config, saxpy, args);
    const float poison = poison_float();
    const std::array fill_args{KernelArg::writes(x), KernelArg::value(poison), KernelArg::value(n)};
    launch_dynamic(writer, config, fill, fill_args);
    const auto delta = device.counters() - before;
    CHECK(delta.cross_stream_waits == 2);  // reader after x's upload; writer after the read
    CHECK(delta.kernel_launches == 3);

    std::vector<double> want(kN);
    for (std::size_t i = 0; i < kN; ++i) want[i] = double{a} * double{x_host[i]} + double{y_host[i]};
    auto tolerance = [&](std::size_t i) {
        return fp32_tolerance(std::abs(double{a} * double{x_host[i]}) + std::abs(double{y_host[i]}));
    };
    CHECK(count_mismatches(y.to_vector(reader), want, tolerance, "dynamic saxpy") == 0);
}

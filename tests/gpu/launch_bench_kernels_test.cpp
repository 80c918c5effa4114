// The benchmark kernels of kernels/bench.cu through the typed launch, against float64 CPU references on
// fresh random data. Outputs are poisoned first and every element is checked, including the elements
// around the written window (no out-of-bounds writes). Sizes cover the vector path, the scalar tail and,
// through an offset of one element, the misaligned path; grids cover "one thread per element" and grids
// far smaller than the data (the grid-stride loop).
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>

#include "launch_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

constexpr std::size_t kSizes[] = {0, 1, 3, 4, 5, 1000, 4099, (std::size_t{1} << 20) + 3};
constexpr std::size_t kOffsets[] = {0, 1};  // 1: the view starts 4 bytes into the allocation (not 16-aligned)

// Launch shapes: the device-filling default, and a deliberately tiny grid.
std::vector<LaunchConfig> configs_for(std::size_t n, const Device& device) {
    return {LaunchConfig::for_elements(n, device), LaunchConfig{3, 64}};
}

}  // namespace

TEST_CASE("launch.bench_fill_matches_reference") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    const auto fill = bench_module(device).kernel<BenchFill::signature>("bench_fill");
    for (std::size_t n : kSizes) {
        for (std::size_t offset : kOffsets) {
            for (const auto& config : configs_for(n, device)) {
                const float value = random_floats(1, -100.0f, 100.0f)[0];
                auto out = DeviceSlice<float>::from_host(stream, poisoned(n + offset + 1));
                launch(stream, config, fill, out.view(offset, n), value, n);
                const auto got = out.to_vector(stream);
                const std::vector<float> window(got.begin() + static_cast<std::ptrdiff_t>(offset),
                                                got.begin() + static_cast<std::ptrdiff_t>(offset + n));
                const std::vector<double> want(n, static_cast<double>(value));
                CHECK_MESSAGE(count_mismatches(
                                  window, want, [](std::size_t) { return 0.0; }, "fill") == 0,
                              "n=" << n << " offset=" << offset << " grid=" << config.grid.x);
                CHECK(count_touched_outside(got, offset, n) == 0);
            }
        }
    }
}

TEST_CASE("launch.bench_copy_matches_reference") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    const auto copy = bench_module(device).kernel<BenchCopy::signature>("bench_copy");
    for (std::size_t n : kSizes) {
        for (std::size_t offset : kOffsets) {
            for (const auto& config : configs_for(n, device)) {
                // Random bit patterns (finite or not): a copy must move every bit.
                const auto words = random_words(n);
                std::vector<float> source(n);
                std::memcpy(source.data(), words.data(), n * sizeof(float));
                const auto src = DeviceSlice<float>::from_host(stream, source);
                auto dst = DeviceSlice<float>::from_host(stream, poisoned(n + offset + 1));
                launch(stream, config, copy, dst.view(offset, n), src, n);
                const auto got = dst.to_vector(stream);
                CHECK_MESSAGE(std::memcmp(got.data() + offset, source.data(), n * sizeof(float)) == 0,
                              "n=" << n << " offset=" << offset << " grid=" << config.grid.x);
                CHECK(count_touched_outside(got, offset, n) == 0);
            }
        }
    }
}

TEST_CASE("launch.bench_triad_matches_reference") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    const auto triad = bench_module(device).kernel<BenchTriad::signature>("bench_triad");
    for (std::size_t n : kSizes) {
        for (std::size_t offset : kOffsets) {
            for (const auto& config : configs_for(n, device)) {
                const auto b = random_floats(n, -10.0f, 10.0f);
                const auto c = random_floats(n, -10.0f, 10.0f);
                const float s = random_floats(1, -3.0f, 3.0f)[0];
                const auto b_dev = DeviceSlice<float>::from_host(stream, b);
                const auto c_dev = DeviceSlice<float>::from_host(stream, c);
                auto a_dev = DeviceSlice<float>::from_host(stream, poisoned(n + offset + 1));
                launch(stream, config, triad, a_dev.view(offset, n), b_dev, c_dev.view(), s, n);
                const auto got = a_dev.to_vector(stream);
                std::vector<double> want(n);
                for (std::size_t i = 0; i < n; ++i) want[i] = double{b[i]} + double{s} * double{c[i]};
                const std::vector<float> window(got.begin() + static_cast<std::ptrdiff_t>(offset),
                                                got.begin() + static_cast<std::ptrdiff_t>(offset + n));
                auto tolerance = [&](std::size_t i) {
                    return fp32_tolerance(std::abs(double{b[i]}) + std::abs(double{s} * double{c[i]}));
                };
                CHECK_MESSAGE(count_mismatches(window, want, tolerance, "triad") == 0,
                              "n=" << n << " offset=" << offset << " grid=" << config.grid.x);
                CHECK(count_touched_outside(got, offset, n) == 0);
            }
        }
    }
}

TEST_CASE("launch.bench_saxpy_matches_reference") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    const auto saxpy = bench_module(device).kernel<BenchSaxpy::signature>("bench_saxpy");
    for (std::size_t n : kSizes) {
        for (std::size_t offset : kOffsets) {
            for (const auto& config : configs_for(n, device)) {
                const auto x = random_floats(n, -10.0f, 10.0f);
                const auto y = random_floats(n, -10.0f, 10.0f);
                const float a = random_floats(1, -3.0f, 3.0f)[0];
                const auto x_dev = DeviceSlice<float>::from_host(stream, x);
                // y is read and written: it holds the data in its window and poison around it.
                auto y_host = poisoned(n + offset + 1);
                std::copy(y.begin(), y.end(), y_host.begin() + static_cast<std::ptrdiff_t>(offset));
                auto y_dev = DeviceSlice<float>::from_host(stream, y_host);
                launch(stream, config, saxpy, y_dev.view(offset, n), x_dev, a, n);
                const auto got = y_dev.to_vector(stream);
                std::vector<double> want(n);
                for (std::size_t i = 0; i < n; ++i) want[i] = double{a} * double{x[i]} + double{y[i]};
                const std::vector<float> window(got.begin() + static_cast<std::ptrdiff_t>(offset),
                                                got.begin() + static_cast<std::ptrdiff_t>(offset + n));
                auto tolerance = [&](std::size_t i) {
                    return fp32_tolerance(std::abs(double{a} * double{x[i]}) + std::abs(double{y[i]}));
                };
                CHECK_MESSAGE(count_mismatches(window, want, tolerance, "saxpy") == 0,
                              "n=" << n << " offset=" << offset << " grid=" << config.grid.x);
                CHECK(count_touched_outside(got, offset, n) == 0);
            }
        }
    }
}

TEST_CASE("launch.bench_sum_matches_reference") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    const auto sum = bench_module(device).kernel<BenchSum::signature>("bench_sum");
    // Block sizes the kernel's shared-memory tree must handle: powers of two, odd ones, the maximum.
    const unsigned block_sizes[] = {256, 96, 33, 1024};
    for (std::size_t n : kSizes) {
        for (std::size_t offset : kOffsets) {
            for (unsigned block : block_sizes) {
                const LaunchConfig config = LaunchConfig::for_elements(n, device, block);
                // Exact case: small integers, so every partial sum is exact in float; the result must equal
                // the reference exactly, which proves each element was added exactly once.
                std::vector<float> integers(n + offset);
                for (auto& v : integers) v = static_cast<float>(rng()() % 16);
                const float start = static_cast<float>(rng()() % 1000);
                const auto in = DeviceSlice<float>::from_host(stream, integers);
                auto out = DeviceSlice<float>::from_host(stream, std::vector<float>{start});
                launch(stream, config, sum, out, in.view(offset, n), n);
                const double want = std::accumulate(integers.begin() + static_cast<std::ptrdiff_t>(offset),
                                                    integers.end(), double{start});
                CHECK_MESSAGE(static_cast<double>(out.to_vector(stream)[0]) == want,
                              "exact sum: n=" << n << " offset=" << offset << " block=" << block);

                // Rounding case: random reals; the float result is within the accumulated rounding error.
                const auto reals = random_floats(n + offset, -1.0f, 1.0f);
                const auto in_reals = DeviceSlice<float>::from_host(stream, reals);
                auto out_real = DeviceSlice<float>::zeros(stream, 1);
                launch(stream, config, sum, out_real, in_reals.view(offset, n), n);
                double exact = 0.0;
                double magnitude = 0.0;
                for (std::size_t i = offset; i < n + offset; ++i) {
                    exact += reals[i];
                    magnitude += std::abs(double{reals[i]});
                }
                const double got = out_real.to_vector(stream)[0];
                // Note: float sums of n terms err by at most about n * eps * sum|x| in the worst case; the
                // tree and grid-stride order keep it far below. 1e-5 relative to sum|x| is generous yet fails
                // for a missing block or element of typical size.
                CHECK_MESSAGE(std::abs(got - exact) <= 1e-5 * magnitude + 1e-6,
                              "real sum: n=" << n << " got " << got << " want " << exact);
            }
        }
    }
}

TEST_CASE("launch.bench_empty_launches_and_counts") {
    auto device = Device::open(0);
    auto stream = device.create_stream();
    const auto empty = bench_module(device).kernel<BenchEmpty::signature>("bench_empty");
    const auto before = device.counters();
    const int launches = 10 + static_cast<int>(rng()() % 10);
    for (int i = 0; i < launches; ++i) launch(stream, LaunchConfig{1, 32}, empty);
    stream.synchronize();
    const auto delta = device.counters() - before;
    CHECK(delta.kernel_launches == static_cast<std::uint64_t>(launches));
    CHECK(delta.cross_stream_waits == 0);
    CHECK(delta.events_recorded == 0);
    CHECK(delta.stream_synchronizes == 1);
}

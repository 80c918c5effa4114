// Shared by the launch_* and rtc_* GPU tests: the benchmark kernels' signatures, poisoned buffers and the
// float64 references.
#pragma once

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::test {

// kernels/bench.cu, as documented there.
using BenchEmpty = Kernel<void()>;
using BenchFill = Kernel<void(float*, float, unsigned long long)>;
using BenchCopy = Kernel<void(float*, const float*, unsigned long long)>;
using BenchTriad = Kernel<void(float*, const float*, const float*, float, unsigned long long)>;
using BenchSaxpy = Kernel<void(float*, const float*, float, unsigned long long)>;
using BenchSum = Kernel<void(float*, const float*, unsigned long long)>;
using BenchSpin = Kernel<void(long long, long long*)>;

inline const Module& bench_module(const Device& device) {
    return Module::shipped(device, "bench.cu");
}

// Clock cycles for about `ms` milliseconds at the device's clock rate (for bench_spin).
inline long long spin_cycles(const Device& device, double ms) {
    return static_cast<long long>(ms * static_cast<double>(device.attribute(sys::attr::kClockRate)));
}

inline std::vector<float> poisoned(std::size_t n) {
    return std::vector<float>(n, poison_float());
}

inline bool is_poison(float x) {
    return std::bit_cast<std::uint32_t>(x) == kPoison;
}

// Compares `got` with a float64 reference element by element: |got - want| <= tolerance(i). Reports the
// first few mismatches and returns their count (a poisoned, unwritten element is a NaN and never matches).
template <typename Tolerance>
std::size_t count_mismatches(const std::vector<float>& got, const std::vector<double>& want,
                             Tolerance tolerance, const std::string& what) {
    REQUIRE(got.size() == want.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double error = std::abs(static_cast<double>(got[i]) - want[i]);
        if (!(error <= tolerance(i))) {  // written so that NaN counts as a mismatch
            if (bad < 5) {
                MESSAGE(what << ": element " << i << " is " << got[i]
                             << (is_poison(got[i]) ? " (poison)" : "") << ", expected " << want[i]);
            }
            ++bad;
        }
    }
    return bad;
}

// Elements outside a written window must still hold the poison (nothing written out of bounds).
inline std::size_t count_touched_outside(const std::vector<float>& all, std::size_t offset, std::size_t n) {
    std::size_t touched = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
        if ((i < offset || i >= offset + n) && !is_poison(all[i])) ++touched;
    }
    return touched;
}

// Single-precision evaluation of a + b with operands of magnitude |a| and |b| is within a few units of
// rounding of the exact (float64) value; fused or not.
inline double fp32_tolerance(double magnitude) {
    return 4.0 * static_cast<double>(std::numeric_limits<float>::epsilon()) * magnitude + 1e-30;
}

}  // namespace cudarc::test

// Helpers shared by the GPU tests: fresh random data, poison values, and a spin kernel that holds a
// stream back (compiled with NVRTC, launched through the raw driver table so core tests need no launch API).
#pragma once

#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cudarc/cudarc.hpp"

namespace cudarc::test {

// A generator seeded from the clock and the test's name, printed on failure by the caller if needed.
inline std::mt19937_64& rng() {
    static std::mt19937_64 engine{std::random_device{}()};
    return engine;
}

inline std::vector<float> random_floats(std::size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> out(n);
    for (auto& x : out) x = dist(rng());
    return out;
}

inline std::vector<std::uint32_t> random_words(std::size_t n) {
    std::vector<std::uint32_t> out(n);
    for (auto& x : out) x = static_cast<std::uint32_t>(rng()());
    return out;
}

// A signalling-NaN pattern no kernel or copy produces by accident.
inline constexpr std::uint32_t kPoison = 0x7fa5a5a5u;
inline float poison_float() {
    return std::bit_cast<float>(kPoison);
}

// compute-sanitizer runs kernels one at a time: concurrency, and a launch that starts before the kernel
// ahead has ended, cannot be observed under it. Such a tool is injected through CUDA_INJECTION64_PATH or
// preloaded; either way its library is mapped into the process.
bool kernels_serialized_by_a_tool();

// Marks the running test case as skipped for `why` (it must return right after): for tests that need what
// the machine lacks, such as a second GPU or NCCL. A run whose every case skipped exits 77 (ctest: skipped).
void skip_test(const std::string& why);

// Holds a stream back: one thread spins for `cycles` clock cycles.
class SpinKernel {
  public:
    explicit SpinKernel(const Device& device);
    SpinKernel(const SpinKernel&) = delete;
    SpinKernel& operator=(const SpinKernel&) = delete;
    ~SpinKernel();
    void launch(Stream& stream, long long cycles);
    // Cycles for roughly `ms` milliseconds on this device.
    [[nodiscard]] long long cycles_for_ms(double ms) const;

  private:
    const Device& device_;
    void* module_ = nullptr;
    void* function_ = nullptr;
    int clock_khz_ = 0;
};

}  // namespace cudarc::test

// Shared by the multi.* GPU tests: skipping when the machine lacks GPUs or NCCL, and opening devices.
#pragma once

#include <fmt/format.h>

#include <cstring>
#include <string>
#include <vector>

#include "cudarc/nccl.hpp"
#include "launch_test_support.hpp"

namespace cudarc::test {

// True when at least `needed` GPUs are visible; otherwise marks the test skipped (it must return).
inline bool have_devices(int needed) {
    const int count = Device::count();
    if (count >= needed) return true;
    skip_test(fmt::format("needs {} GPUs, {} visible", needed, count));
    return false;
}

// True when NCCL loads; otherwise marks the test skipped with the loader's explanation.
inline bool have_nccl() {
    if (nccl::available()) return true;
    skip_test("NCCL is not available: " + nccl::load_failure());
    return false;
}

inline std::vector<Device> open_all_devices() {
    std::vector<Device> devices;
    const int count = Device::count();
    for (int i = 0; i < count; ++i) devices.push_back(Device::open(i));
    return devices;
}

template <typename T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

inline bool all_equal(const std::vector<float>& values, float value) {
    for (float x : values) {
        if (!(x == value)) return false;
    }
    return true;
}

// Holds `stream` back for about `ms` milliseconds (bench_spin, one thread).
inline void hold_back(Stream& stream, double ms) {
    const Device device = stream.device();
    const auto spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    launch(stream, LaunchConfig{1, 1}, spin, spin_cycles(device, ms), nullptr);
}

}  // namespace cudarc::test

// Fuzz target: launch configuration and argument validation (Note [Fuzzing] in docs/reliability.md). A
// random LaunchConfig is accepted exactly when its extents are at least 1, its block has at most 1024
// threads and its grid is a whole number of clusters; a dynamic launch on the fake driver (whose kernel
// knows its parameter sizes) goes through exactly when that holds and every argument has its parameter's
// size (or the driver, past the device's limits, refuses it and says so), and then the driver sees the grid,
// block and bytes asked for.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cudarc/cudarc.hpp"
#include "cudarc/detail/launch_args.hpp"
#include "fake_device.hpp"

namespace {

using cudarc::Dim3;
using cudarc::KernelArg;
using cudarc::LaunchConfig;

// The kernel's parameters: a pointer, a float, a 64-bit count, a 2-byte value.
const std::vector<std::size_t> kParameterSizes{8, 4, 8, 2};

Dim3 dims(FuzzedDataProvider& in) {
    // Mostly small extents (the interesting edges: 0, 1, divisibility), sometimes anything.
    auto extent = [&] {
        return in.ConsumeBool() ? in.ConsumeIntegralInRange<unsigned>(0, 8) : in.ConsumeIntegral<unsigned>();
    };
    const unsigned x = extent();
    const unsigned y = extent();
    const unsigned z = extent();
    return Dim3{x, y, z};
}

bool should_accept(const LaunchConfig& c) {
    const auto positive = [](const Dim3& d) { return d.x >= 1 && d.y >= 1 && d.z >= 1; };
    if (!positive(c.grid) || !positive(c.block) || c.block.volume() > 1024) return false;
    if (!c.cluster) return true;
    const Dim3& k = *c.cluster;
    return positive(k) && c.grid.x % k.x == 0 && c.grid.y % k.y == 0 && c.grid.z % k.z == 0;
}

struct Kernel {
    cudarc::Module module;
    cudarc::Function function;
};

Kernel& kernel() {
    static Kernel k = [] {
        auto& gpu = cudarc::fuzz::fake_device();
        gpu.driver.define_kernel("probe", kParameterSizes);
        auto module =
            cudarc::Module::from_ptx(gpu.device, ".version 8.0\n.target sm_90\n.entry probe()\n{\n}\n");
        auto function = module.function("probe");
        return Kernel{std::move(module), std::move(function)};
    }();
    return k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    LaunchConfig config{dims(in), dims(in)};
    if (in.ConsumeBool()) config.cluster = dims(in);
    config.shared_mem_bytes = in.ConsumeIntegralInRange<unsigned>(0, 64 * 1024);
    if (in.ConsumeBool()) config.cooperative = cudarc::Cooperative::yes;
    if (in.ConsumeBool()) config.serialization = cudarc::StreamSerialization::programmatic;

    const bool valid = should_accept(config);
    bool accepted = true;
    try {
        cudarc::detail::validate_launch_config(config);
    } catch (const cudarc::Error&) {
        accepted = false;
    }
    if (accepted != valid) std::abort();

    // The same configuration in a dynamic launch with random arguments.
    auto& gpu = cudarc::fuzz::fake_device();
    Kernel& k = kernel();
    auto& stream = gpu.device.default_stream();
    static auto buffer = cudarc::DeviceSlice<float>::zeros(stream, 64);
    std::vector<KernelArg> args;
    std::vector<std::size_t> sizes;
    const std::uint64_t values[2] = {in.ConsumeIntegral<std::uint64_t>(),
                                     in.ConsumeIntegral<std::uint64_t>()};
    for (int i = in.ConsumeIntegralInRange(0, 6); i > 0; --i) {
        switch (in.ConsumeIntegralInRange(0, 6)) {
            case 0:
                args.push_back(KernelArg::writes(buffer));
                break;
            case 1:
                args.push_back(
                    KernelArg::reads(buffer.view(in.ConsumeIntegralInRange<std::size_t>(0, 64), 0)));
                break;
            case 2:
                args.push_back(KernelArg::value(in.ConsumeFloatingPoint<float>()));
                break;
            case 3:
                args.push_back(KernelArg::value(values[0]));
                break;
            case 4:
                args.push_back(KernelArg::value(in.ConsumeIntegral<std::uint16_t>()));
                break;
            case 5:
                args.push_back(KernelArg::pointer(values[1]));
                break;
            default:
                args.push_back(KernelArg::value(in.ConsumeIntegral<std::uint8_t>()));
                break;
        }
        sizes.push_back(args.back().size());
    }
    // Above 48 KB of dynamic shared memory the kernel must be allowed it first; stay below here.
    config.shared_mem_bytes %= 48 * 1024;
    const bool arguments_match = sizes == kParameterSizes;
    gpu.driver.clear_launches();
    bool launched = true;
    std::string refusal;
    try {
        cudarc::launch_dynamic(stream, config, k.function, args);
    } catch (const cudarc::DeviceLost&) {
        std::abort();  // a rejected launch never breaks the device
    } catch (const cudarc::Error& e) {
        launched = false;
        refusal = e.what();
    }
    // Past the device's limits (a grid y extent above 65535, say) the driver refuses a launch cudarc lets
    // through; that error names the driver call. cudarc's own checks must agree with the rules exactly.
    const bool driver_refused = refusal.find("cuLaunchKernel") != std::string::npos;
    if (launched != (valid && arguments_match) && !(valid && arguments_match && driver_refused)) {
        std::fprintf(stderr, "launched: %d, valid: %d, arguments match: %d, refusal: %s\n", launched, valid,
                     arguments_match, refusal.c_str());
        std::abort();
    }
    const auto records = gpu.driver.launches();
    if (records.size() != (launched ? 1U : 0U)) std::abort();
    if (launched) {
        const auto& record = records.back();
        const unsigned grid[3] = {config.grid.x, config.grid.y, config.grid.z};
        const unsigned block[3] = {config.block.x, config.block.y, config.block.z};
        if (std::memcmp(record.grid, grid, sizeof grid) != 0 ||
            std::memcmp(record.block, block, sizeof block) != 0 ||
            record.shared_mem_bytes != config.shared_mem_bytes || record.arguments.size() != args.size())
            std::abort();
        for (std::size_t i = 0; i < args.size(); ++i) {
            if (record.arguments[i].size() != args[i].size() ||
                std::memcmp(record.arguments[i].data(), args[i].data(), args[i].size()) != 0)
                std::abort();
        }
    }
    return 0;
}

// cudarc-info: lists the GPUs cudarc can see, the driver, memory and compute capability.
// Without a driver it says what it looked for and exits non-zero.
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "cudarc/cudarc.hpp"

int main() {
    try {
        const int count = cudarc::Device::count();
        const int version = cudarc::Device::driver_version();
        if (count == 0) {
            fmt::print(stderr, "cudarc-info: the driver loaded (version {}.{}) but sees no device\n",
                       version / 1000, (version % 1000) / 10);
            return 1;
        }
        for (int ordinal = 0; ordinal < count; ++ordinal) {
            const auto device = cudarc::Device::open(ordinal);
            const auto cc = device.compute_capability();
            const auto memory = device.memory_info();
            if (ordinal == 0) {
                fmt::print("backend: {}, driver version {}.{}, {} device(s)\n",
                           cudarc::to_string(device.backend()), version / 1000, (version % 1000) / 10, count);
            }
            fmt::print("device {}: {}\n", ordinal, device.name());
            fmt::print("  uuid:               {}\n", device.uuid_string());
            fmt::print("  pci bus id:         {}\n", device.pci_bus_id());
            fmt::print("  compute capability: {}.{} ({})\n", cc.major, cc.minor, device.arch());
            fmt::print("  multiprocessors:    {}\n", device.multiprocessor_count());
            fmt::print("  memory:             {:.2f} GiB total, {:.2f} GiB free\n",
                       static_cast<double>(memory.total) / (1u << 30),
                       static_cast<double>(memory.free) / (1u << 30));
        }
        return 0;
    } catch (const cudarc::Error& e) {
        fmt::print(stderr, "cudarc-info: {}\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "cudarc-info: unexpected error: {}\n", e.what());
        return 1;
    }
}

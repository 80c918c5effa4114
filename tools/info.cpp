// cudarc-info: lists the GPUs cudarc can see, the driver, memory and compute capability.
// Without a driver, or with a driver that sees no device, it says what it found and exits with status 1.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <iostream>

#include "cudarc/cudarc.hpp"
#include "cudarc/fmt.hpp"
#include "info_cli.hpp"

namespace {

int list_devices() {
    int count = 0;
    cudarc::DriverVersion driver;
    try {
        count = cudarc::Device::count();
        driver = cudarc::DriverVersion{cudarc::Device::driver_version()};
    } catch (const cudarc::Error& e) {
        fmt::print(stderr, "cudarc-info: {}\n", e.what());
        return 1;
    }
    if (count == 0) {
        fmt::print(stderr, "cudarc-info: the driver loaded (version {}) but sees no device\n", driver);
        return 1;
    }
    try {
        for (int ordinal = 0; ordinal < count; ++ordinal) {
            const auto device = cudarc::Device::open(ordinal);
            if (ordinal == 0) {
                fmt::print("cudarc {}, backend {}, driver version {}, {} device(s)\n", cudarc::version(),
                           device.backend(), driver, count);
            }
            fmt::print("device {}: {}\n", ordinal, device.name());
            fmt::print("  uuid:               {}\n", device.uuid_string());
            fmt::print("  pci bus id:         {}\n", device.pci_bus_id());
            fmt::print("  compute capability: {} ({})\n", device.compute_capability(), device.arch());
            fmt::print("  multiprocessors:    {}\n", device.multiprocessor_count());
            fmt::print("  memory:             {}\n", device.memory_info());
        }
        return 0;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        fmt::print(stderr, "cudarc-info: {}\n", e.what());
        return 3;
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (const auto status = cudarc::tools::parse_info_command_line(argc, argv, std::cout, std::cerr))
        return *status;
    return list_devices();
}

// cudarc-info: lists the GPUs cudarc can see, the driver, memory and compute capability.
// Without a driver, or with a driver that sees no device, it says what it found and exits with status 1.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cudarc/cudarc.hpp"
#include "cudarc/fmt.hpp"

namespace {

constexpr const char* kFooter = R"(
Exit status: 0 devices listed; 1 no usable GPU (no driver, or no device: the message says which);
2 bad command line; 3 a device failed while being described.)";

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
    CLI::App app{"cudarc-info: lists the GPUs cudarc can see, with the driver, memory and compute capability",
                 "cudarc-info"};
    app.set_version_flag("--version", fmt::format("cudarc-info {}", cudarc::version()));
    app.footer(kFooter);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    return list_devices();
}

// One fake GPU (testing/fake_driver) and its Device for a whole fuzzing run: made at the first input, gone
// at exit (the Device before the driver, as the fake requires).
#pragma once

#include <optional>

#include "cudarc/device.hpp"
#include "fake_driver/fake_driver.hpp"
#include "fake_driver/fault_injector.hpp"

namespace cudarc::fuzz {

struct FakeDevice {
    fake::FakeDriver driver;
    fake::DriverOverride installed{driver.api()};
    Device device = Device::open(0);
};

inline FakeDevice& fake_device() {
    static FakeDevice gpu;
    return gpu;
}

}  // namespace cudarc::fuzz

// Helpers shared by the reliability.* host tests: a fake GPU installed for one test, wrapped in a fault
// injector (testing/fake_driver).
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <utility>

#include "cudarc/cudarc.hpp"
#include "fake_driver/fake_driver.hpp"
#include "fake_driver/fault_injector.hpp"

namespace cudarc::test {

// A fake driver, its fault injector and the override that installs them. Create it before any Device and
// let every Device, Stream and buffer go before it.
struct FakeGpu {
    explicit FakeGpu(fake::Options options = {})
        : driver(std::move(options)), faults(driver.api()), installed(faults.api()) {}

    fake::FakeDriver driver;
    fake::FaultInjector faults;
    fake::DriverOverride installed;
};

inline bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// The message of the cudarc::Error that `body` throws; fails the test when it throws nothing or something
// else.
template <typename Body>
std::string error_from(Body&& body) {
    try {
        body();
    } catch (const cudarc::Error& error) {
        return error.what();
    } catch (const std::exception& other) {
        FAIL("threw something other than cudarc::Error: " << other.what());
        return {};
    }
    FAIL("did not throw");
    return {};
}

}  // namespace cudarc::test

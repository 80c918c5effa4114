// A test seam: the driver table that sys::driver() hands out can be replaced. Internal to cudarc; only
// tests and testing targets (testing/fake_driver) use it. See Note [Driver override] in driver.cpp.
#pragma once

#include "sys/driver_api.hpp"

namespace cudarc::sys {

// From now on driver() and driver_if_loaded() return `*api` (nullptr: the vendor driver again), and
// driver_load_failure() is empty while a table is installed. Returns the table installed before.
// Install it before any Device is opened and remove it only after every device state is gone: an open
// device keeps using the table it was opened with. `*api` must outlive that use.
const DriverApi* set_driver_override(const DriverApi* api) noexcept;

}  // namespace cudarc::sys

// The per-process cache behind Module::shipped, seen from inside the library.
#pragma once

namespace cudarc::detail {

class DeviceState;

// A test seam: drops the shipped modules loaded on `device` (Module::shipped keeps each one, and so its
// device state, for the rest of the process), so that a test on the fake driver can close the device.
// Every reference Module::shipped returned for this device dangles afterwards: call it only once nothing
// uses them (the optimizers that took their kernels from them are gone).
void forget_shipped_modules(const DeviceState& device) noexcept;

}  // namespace cudarc::detail

// Managed (unified) memory for DeviceSlice::managed: one address valid on the host and the device, whose
// pages the driver migrates on demand.
#pragma once

#include <memory>

#include "core/memory_source.hpp"

namespace cudarc::detail {

class DeviceState;

// cuMemAllocManaged (attached globally) per allocation; nothing is cached. Freeing waits on the host for
// the allocation's last uses, then cuMemFree: managed memory has no stream-ordered free (a wait that fails
// falls back as Note [Free after a failed record] says).
[[nodiscard]] std::unique_ptr<MemorySource> make_managed_source(DeviceState& device);

// Whether `device` can hold managed memory that the device accesses concurrently with the host
// (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS), with allocation and prefetching in the driver table.
[[nodiscard]] bool supports_managed_memory(const DeviceState& device);

}  // namespace cudarc::detail

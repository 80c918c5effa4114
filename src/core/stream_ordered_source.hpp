// Memory from the driver's stream-ordered pool (cuMemAllocAsync / cuMemFreeAsync).
#pragma once

#include <memory>

#include "core/memory_source.hpp"

namespace cudarc::detail {

class DeviceState;

// Uses the device's default memory pool with its release threshold raised, so freed memory stays cached
// in the pool instead of going back to the OS at every synchronize. Falls back to cuMemAlloc/cuMemFree
// (with a host wait before each free) on devices without memory pools.
[[nodiscard]] std::unique_ptr<MemoryResource> make_stream_ordered_source(DeviceState& device);

// Figures for an out-of-memory error from the driver's view of the device.
[[nodiscard]] OutOfMemory make_out_of_memory(DeviceState& device, std::size_t requested,
                                             std::size_t allocated, std::size_t reserved);

}  // namespace cudarc::detail

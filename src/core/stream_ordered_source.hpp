// Memory from the driver's stream-ordered pool (cuMemAllocAsync / cuMemFreeAsync).
#pragma once

#include <memory>
#include <string_view>

#include "core/memory_source.hpp"

namespace cudarc::detail {

class DeviceState;

// Uses the device's default memory pool with its release threshold raised, so freed memory stays cached
// in the pool instead of going back to the OS at every synchronize; empty_cache() trims the pool
// (cuMemPoolTrimTo), and so does an allocation that runs out of memory before it retries once. Stats are
// the pool's own (reserved and used bytes). Falls back to cuMemAlloc/cuMemFree (with a host wait before
// each free) on devices without memory pools.
[[nodiscard]] std::unique_ptr<MemorySource> make_stream_ordered_source(DeviceState& device);

// Figures for an out-of-memory error from the driver's view of the device; `holder` names what holds the
// reserved and allocated bytes ("the driver's memory pool").
[[nodiscard]] OutOfMemory make_out_of_memory(DeviceState& device, std::size_t requested,
                                             std::size_t allocated, std::size_t reserved,
                                             std::string_view holder);

}  // namespace cudarc::detail

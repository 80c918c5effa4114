// The driver's virtual memory management for one device's expandable segments (Note [Expandable segments]
// in expandable_segments.hpp): address ranges, chunks of device memory mapped into them, and which devices
// may access them. What the caching source uses as its allocator backend's virtual memory.
#pragma once

#include <cstddef>
#include <mutex>
#include <optional>
#include <vector>

#include "sys/driver_api.hpp"

namespace cudarc::detail {
class DeviceState;
}

namespace cudarc::alloc {

// Every call runs in the device's context (Note [Context scope]) and counts on its counters: a chunk
// created as a driver allocation, a chunk unmapped as a driver free, the wait before unmapping as a
// context synchronize.
class VirtualMemory {
  public:
    // Throws cudarc::Error naming what is missing when the driver lacks the entry points or the device
    // does not support virtual memory management.
    explicit VirtualMemory(detail::DeviceState& device);

    // The allocation granularity (a power of two on every driver seen; the allocator checks).
    [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }
    // A range with nothing mapped, or nullopt when no address space is left.
    [[nodiscard]] std::optional<DevicePtr> reserve(std::size_t bytes, std::size_t alignment);
    void free(DevicePtr ptr, std::size_t bytes);
    // AllocatorBackend::map_chunks: one physical allocation per chunk, its handle released once mapped (the
    // mapping keeps the memory), then access for the device and its peers over the whole range.
    [[nodiscard]] bool map(DevicePtr ptr, std::size_t bytes, std::size_t chunk);
    void unmap(DevicePtr ptr, std::size_t chunk);
    void synchronize();
    // `peer` may access what is mapped from now on; set_access opens what was mapped before.
    void add_peer(sys::Device peer);
    void set_access(DevicePtr ptr, std::size_t bytes);

  private:
    [[nodiscard]] std::vector<sys::MemAccessDesc> access() const;
    // cuMemUnmap, tried once more where it fails (Note [A failed unmap or release is tried again]).
    [[nodiscard]] sys::Result unmap_chunk(DevicePtr ptr, std::size_t chunk) const;

    detail::DeviceState& device_;
    sys::MemAllocationProp prop_;
    std::size_t granularity_ = 0;
    mutable std::mutex mutex_;
    std::vector<sys::MemAccessDesc> access_;  // the device first, then its peers
};

}  // namespace cudarc::alloc

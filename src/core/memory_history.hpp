// A memory source's timeline of allocations, frees and driver memory, for AllocatorSnapshot::timeline
// (Device::record_memory_history) and tools/plot-memory.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "cudarc/allocator.hpp"

namespace cudarc::detail {

// Keeps the last `max_entries` events in a ring. Each event carries the allocated and reserved bytes after
// it: running totals that start from the source's figures when recording starts and follow every event
// recorded (so they stay right when old events fall out of the ring). Thread-safe; record() is a relaxed
// load when recording is off.
class MemoryHistory {
  public:
    using Action = AllocatorSnapshot::Event::Action;

    // Starts recording afresh, from these figures; max_entries 0 stops and drops what was recorded.
    void start(std::size_t max_entries, std::size_t allocated_bytes, std::size_t reserved_bytes);
    [[nodiscard]] bool recording() const noexcept { return recording_.load(std::memory_order_relaxed); }
    // allocate / free move the allocated total by `bytes`, segment_allocate / map and segment_free / unmap
    // the reserved one. Never throws (the ring's room was reserved at start()).
    void record(Action action, DevicePtr address, std::size_t bytes, std::uintptr_t stream = 0) noexcept;
    // For sources whose reserved memory follows its own rules (the driver's pool): the figure from now on.
    void set_reserved(std::size_t reserved_bytes) noexcept;
    // Oldest first.
    [[nodiscard]] std::vector<AllocatorSnapshot::Event> events() const;

  private:
    mutable std::mutex mutex_;
    std::atomic<bool> recording_{false};
    std::vector<AllocatorSnapshot::Event> ring_;
    std::size_t capacity_ = 0;
    std::size_t next_ = 0;  // where the next event goes once the ring is full
    std::size_t allocated_ = 0;
    std::size_t reserved_ = 0;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace cudarc::detail

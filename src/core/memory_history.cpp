#include "core/memory_history.hpp"

#include <algorithm>

namespace cudarc::detail {

void MemoryHistory::start(std::size_t max_entries, std::size_t allocated_bytes, std::size_t reserved_bytes) {
    std::vector<AllocatorSnapshot::Event> ring;
    ring.reserve(max_entries);  // may throw: nothing changed yet
    std::lock_guard lock(mutex_);
    ring_ = std::move(ring);
    capacity_ = max_entries;
    next_ = 0;
    allocated_ = allocated_bytes;
    reserved_ = reserved_bytes;
    start_ = std::chrono::steady_clock::now();
    recording_.store(max_entries != 0, std::memory_order_relaxed);
}

void MemoryHistory::record(Action action, DevicePtr address, std::size_t bytes,
                           std::uintptr_t stream) noexcept {
    if (!recording()) return;
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    if (capacity_ == 0) return;  // stopped meanwhile
    switch (action) {
        case Action::allocate:
            allocated_ += bytes;
            break;
        case Action::free:
            allocated_ -= std::min(bytes, allocated_);
            break;
        case Action::segment_allocate:
        case Action::map:
            reserved_ += bytes;
            break;
        case Action::segment_free:
        case Action::unmap:
            reserved_ -= std::min(bytes, reserved_);
            break;
    }
    AllocatorSnapshot::Event event;
    event.action = action;
    event.time_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::max(now, start_) - start_).count());
    event.address = address;
    event.size = bytes;
    event.stream = stream;
    event.allocated_bytes = allocated_;
    event.reserved_bytes = reserved_;
    if (ring_.size() < capacity_) {
        ring_.push_back(event);  // within the capacity reserved at start(): no allocation
    } else {
        ring_[next_] = event;
        next_ = (next_ + 1) % capacity_;
    }
}

void MemoryHistory::set_reserved(std::size_t reserved_bytes) noexcept {
    std::lock_guard lock(mutex_);
    reserved_ = reserved_bytes;
}

std::vector<AllocatorSnapshot::Event> MemoryHistory::events() const {
    std::lock_guard lock(mutex_);
    std::vector<AllocatorSnapshot::Event> out;
    out.reserve(ring_.size());
    out.insert(out.end(), ring_.begin() + static_cast<std::ptrdiff_t>(next_), ring_.end());
    out.insert(out.end(), ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(next_));
    return out;
}

}  // namespace cudarc::detail

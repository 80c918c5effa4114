// A per-device pool of timing-disabled events, so that hazard tracking and fork/join never pay for
// cuEventCreate on the hot path.
#pragma once

#include <mutex>
#include <vector>

#include "sys/driver_api.hpp"

namespace cudarc::detail {

class DeviceState;

class EventPool {
  public:
    explicit EventPool(DeviceState& device) noexcept : device_(device) {}
    EventPool(const EventPool&) = delete;
    EventPool& operator=(const EventPool&) = delete;
    ~EventPool();

    // A timing-disabled event; created when the pool is empty.
    [[nodiscard]] sys::Event acquire();
    // Returns an event. Safe while earlier waits on it are pending: a wait captures the event's state at
    // the time it is enqueued.
    void release(sys::Event event) noexcept;
    // Destroys every pooled event (the device is going away).
    void clear() noexcept;

  private:
    DeviceState& device_;
    std::mutex mutex_;
    std::vector<sys::Event> free_;
};

}  // namespace cudarc::detail

// A per-device pool of timing-disabled events, so that hazard tracking and fork/join never pay for
// cuEventCreate on the hot path.
//
// Note [Waits capture the event]
// cuStreamWaitEvent orders the waiting stream after the event's most recent record as it stands when the
// wait is enqueued; recording the event again, or handing it to someone else, changes nothing for waits
// already enqueued. So an event is free again as soon as its waits are enqueued: a released event goes
// back to the pool at once, and one event per stream serves every record + wait pair (fork, join,
// StreamState::order_before) without touching the pool. Only a query or a host wait needs the record it
// asks about to stay in place. (The fake driver models exactly this: testing/fake_driver.)
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
    // Returns an event. Safe while earlier waits on it are pending (Note [Waits capture the event]).
    void release(sys::Event event) noexcept;
    // Destroys every pooled event (the device is going away).
    void clear() noexcept;

  private:
    DeviceState& device_;
    std::mutex mutex_;
    std::vector<sys::Event> free_;
};

}  // namespace cudarc::detail

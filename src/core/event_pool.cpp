#include "core/event_pool.hpp"

#include "core/capture.hpp"
#include "core/device_state.hpp"

namespace cudarc::detail {

EventPool::~EventPool() {
    clear();
}

sys::Event EventPool::acquire() {
    {
        std::lock_guard lock(mutex_);
        if (!free_.empty()) {
            sys::Event event = free_.back();
            free_.pop_back();
            return event;
        }
    }
    const auto scope = device_.bind();
    sys::Event event = nullptr;
    device_.check(device_.api().event_create(&event, sys::kEventDisableTiming), sys::Entry::event_create);
    return event;
}

void EventPool::release(sys::Event event) noexcept {
    if (event == nullptr) return;
    // Note [Capture overlay]: an event given back during a capture may have been recorded inside it; the
    // capture records it again once it has ended, then returns it.
    if (captures_underway.load(std::memory_order_relaxed) != 0 && capture_keep_event(device_, event)) return;
    try {
        std::lock_guard lock(mutex_);
        free_.push_back(event);
    } catch (...) {
        device_.defer(device_.api().event_destroy(event), sys::Entry::event_destroy);
    }
}

void EventPool::clear() noexcept {
    std::vector<sys::Event> events;
    {
        std::lock_guard lock(mutex_);
        events.swap(free_);
    }
    for (sys::Event event : events)
        device_.defer(device_.api().event_destroy(event), sys::Entry::event_destroy);
}

}  // namespace cudarc::detail

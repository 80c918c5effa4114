// Note [Deferred release] (core/device_state.hpp): release hooks that wait for events without blocking.
#include <utility>

#include "core/device_state.hpp"

namespace cudarc::detail {

PollReleasesOnExit::~PollReleasesOnExit() {
    device_.releases().poll();
}

DeferredReleases::~DeferredReleases() {
    drain();
}

void DeferredReleases::finish(Entry& entry) noexcept {
    for (sys::Event event : entry.events) device_.events().release(event);
    entry.events.clear();
    if (entry.hook) entry.hook.call(entry.hook.context);
    entry.hook = {};
}

void DeferredReleases::add(std::vector<sys::Event> events, ReleaseHook hook) noexcept {
    if (events.empty()) {
        Entry entry{std::move(events), hook};
        finish(entry);
        return;
    }
    try {
        std::lock_guard lock(mutex_);
        entries_.push_back(Entry{std::move(events), hook});
        queued_.fetch_add(1, std::memory_order_relaxed);
        return;
    } catch (...) {
    }
    // No memory to queue the hook: wait for its events here (counted) rather than run it early or never.
    {
        const auto scope = device_.bind_or_defer();
        for (sys::Event event : events) {
            device_.defer(device_.api().event_synchronize(event), sys::Entry::event_synchronize);
            AtomicCounters::bump(device_.counters().event_synchronizes);
        }
    }
    Entry entry{std::move(events), hook};
    finish(entry);
}

void DeferredReleases::poll_slow() noexcept {
    std::vector<Entry> ready;
    {
        std::lock_guard lock(mutex_);
        const auto scope = device_.bind_or_defer();
        for (std::size_t i = 0; i < entries_.size();) {
            Entry& entry = entries_[i];
            bool complete = true;
            for (sys::Event event : entry.events) {
                const sys::Result r = device_.api().event_query(event);
                if (r == sys::kErrorNotReady) {
                    complete = false;
                    break;
                }
                // Note: an error here (a sticky device error, say) will never turn into completion; the
                // hook runs now rather than never, and the error is kept for rethrow_deferred_error.
                device_.defer(r, sys::Entry::event_query);
            }
            if (!complete) {
                ++i;
                continue;
            }
            try {
                ready.push_back(std::move(entry));
            } catch (...) {
                break;  // try again at the next poll
            }
            entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
            queued_.fetch_sub(1, std::memory_order_relaxed);
        }
    }
    // Outside the lock: a hook may call into cudarc (or CUDA) again.
    for (Entry& entry : ready) finish(entry);
}

void DeferredReleases::drain() noexcept {
    std::vector<Entry> all;
    {
        std::lock_guard lock(mutex_);
        all.swap(entries_);
        queued_.store(0, std::memory_order_relaxed);
    }
    if (all.empty()) return;
    {
        const auto scope = device_.bind_or_defer();
        for (Entry& entry : all) {
            for (sys::Event event : entry.events) {
                device_.defer(device_.api().event_synchronize(event), sys::Entry::event_synchronize);
                AtomicCounters::bump(device_.counters().event_synchronizes);
            }
        }
    }
    // Outside the scope: a hook runs in whatever context its caller had current.
    for (Entry& entry : all) finish(entry);
}

}  // namespace cudarc::detail

// Note [Deferred release] (core/device_state.hpp): release hooks that wait for events without blocking.
#include <algorithm>
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
    entry.events.clear();
    if (entry.hook) entry.hook.call(entry.hook.context);
    entry.hook = {};
}

void DeferredReleases::add(std::vector<EventRef> events, ReleaseHook hook) noexcept {
    if (!hook) return;
    std::erase_if(events, [](const EventRef& event) { return !event; });
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
        for (const EventRef& event : events) {
            device_.defer(device_.api().event_synchronize(event->handle()), sys::Entry::event_synchronize);
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
        // Each distinct event is queried once per poll (many hooks share one).
        std::vector<std::pair<const SharedEvent*, bool>> answers;
        const auto complete = [&](const SharedEvent* event) {
            for (const auto& [e, done] : answers) {
                if (e == event) return done;
            }
            const sys::Result r = device_.api().event_query(event->handle());
            // Note: an error here (a sticky device error, say) will never turn into completion; the hook
            // runs now rather than never, and the error is kept for rethrow_deferred_error.
            if (r != sys::kErrorNotReady) device_.defer(r, sys::Entry::event_query);
            const bool done = r != sys::kErrorNotReady;
            try {
                answers.emplace_back(event, done);
            } catch (...) {  // NOLINT(bugprone-empty-catch): it is only asked again
            }
            return done;
        };
        // Note: one pass that moves the completed entries out, then one erase (a step may queue hundreds).
        try {
            ready.reserve(entries_.size());
        } catch (...) {
            return;  // try again at the next poll
        }
        for (Entry& entry : entries_) {
            const bool done = std::all_of(entry.events.begin(), entry.events.end(),
                                          [&](const EventRef& event) { return complete(event.get()); });
            if (!done) continue;
            ready.push_back(std::move(entry));
            entry.hook = {};  // marks it for the erase below (add() queues no empty hook)
        }
        const auto removed = std::erase_if(entries_, [](const Entry& entry) { return !entry.hook; });
        queued_.fetch_sub(removed, std::memory_order_relaxed);
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
        std::vector<const SharedEvent*> waited;
        for (Entry& entry : all) {
            for (const EventRef& event : entry.events) {
                if (std::find(waited.begin(), waited.end(), event.get()) != waited.end()) continue;
                device_.defer(device_.api().event_synchronize(event->handle()),
                              sys::Entry::event_synchronize);
                AtomicCounters::bump(device_.counters().event_synchronizes);
                try {
                    waited.push_back(event.get());
                } catch (...) {  // NOLINT(bugprone-empty-catch): it is only waited for again
                }
            }
        }
    }
    // Outside the scope: a hook runs in whatever context its caller had current.
    for (Entry& entry : all) finish(entry);
}

}  // namespace cudarc::detail

// Note [Deferred release] (core/device_state.hpp): release hooks that wait for events without blocking.
#include <algorithm>
#include <iterator>
#include <utility>

#include "core/device_state.hpp"

namespace cudarc::detail {

PollReleasesOnExit::~PollReleasesOnExit() {
    device_.releases().poll_now();
}

DeferredReleases::~DeferredReleases() {
    drain();
}

void DeferredReleases::finish(Group& group) noexcept {
    group.events.clear();
    for (const ReleaseHook& hook : group.hooks) {
        if (hook) hook.call(hook.context);
    }
    group.hooks.clear();
}

namespace {
// Whether a group's events are exactly `events` less its null ones (in order): the hook joins that group.
bool same_events(const std::vector<EventRef>& group, std::span<const EventRef> events) noexcept {
    std::size_t i = 0;
    for (const EventRef& event : events) {
        if (!event) continue;
        if (i == group.size() || group[i].get() != event.get()) return false;
        ++i;
    }
    return i == group.size();
}
}  // namespace

bool DeferredReleases::queued_before(const std::vector<Group>& groups, std::size_t end,
                                     const SharedEvent* event) noexcept {
    for (std::size_t g = 0; g < end; ++g) {
        for (const EventRef& e : groups[g].events) {
            if (e.get() == event) return true;
        }
    }
    return false;
}

void DeferredReleases::add(std::span<const EventRef> events, ReleaseHook hook) noexcept {
    if (!hook) return;
    const auto waits = [](const EventRef& event) { return static_cast<bool>(event); };
    if (std::none_of(events.begin(), events.end(), waits)) {
        hook.call(hook.context);
        return;
    }
    try {
        std::lock_guard lock(mutex_);
        if (!groups_.empty() && same_events(groups_.back().events, events)) {
            groups_.back().hooks.push_back(hook);
        } else {
            Group group;
            group.hooks.push_back(hook);
            std::copy_if(events.begin(), events.end(), std::back_inserter(group.events), waits);
            groups_.push_back(std::move(group));
        }
        queued_.fetch_add(1, std::memory_order_relaxed);
        return;
    } catch (...) {  // NOLINT(bugprone-empty-catch): handled below
    }
    // No memory to queue the hook: wait for its events here (counted) rather than run it early or never.
    {
        const auto scope = device_.bind_or_defer();
        for (const EventRef& event : events) {
            if (!event) continue;
            device_.defer(device_.api().event_synchronize(event->handle()), sys::Entry::event_synchronize);
            AtomicCounters::bump(device_.counters().event_synchronizes);
        }
    }
    hook.call(hook.context);
}

void DeferredReleases::poll_slow() noexcept {
    std::vector<Group> ready;
    {
        std::lock_guard lock(mutex_);
        const auto scope = device_.bind_or_defer();
        // Each distinct event is queried once per poll (groups may share events). The answers are kept on
        // the stack; past its room an event is only asked again.
        constexpr std::size_t kAnswers = 8;
        std::pair<const SharedEvent*, bool> answers[kAnswers];
        std::size_t answered = 0;
        const auto complete = [&](const SharedEvent* event) {
            for (std::size_t i = 0; i < answered; ++i) {
                if (answers[i].first == event) return answers[i].second;
            }
            const sys::Result r = device_.api().event_query(event->handle());
            // Note: an error here (a sticky device error, say) will never turn into completion; the hooks
            // run now rather than never, and the error is kept for rethrow_deferred_error.
            if (r != sys::kErrorNotReady) device_.defer(r, sys::Entry::event_query);
            const bool done = r != sys::kErrorNotReady;
            if (answered < kAnswers) answers[answered++] = {event, done};
            return done;
        };
        std::size_t removed = 0;
        for (Group& group : groups_) {
            const bool done = std::all_of(group.events.begin(), group.events.end(),
                                          [&](const EventRef& event) { return complete(event.get()); });
            if (!done) continue;
            try {
                ready.push_back(std::move(group));
            } catch (...) {
                break;  // no memory to move it out: it waits for the next poll
            }
            removed += ready.back().hooks.size();
            group.hooks.clear();  // marks it for the erase below (a queued group is never empty)
        }
        std::erase_if(groups_, [](const Group& group) { return group.hooks.empty(); });
        queued_.fetch_sub(removed, std::memory_order_relaxed);
        skip_.store(ready.empty() ? kSkippedPolls : 0, std::memory_order_relaxed);
    }
    // Outside the lock: a hook may call into cudarc (or CUDA) again.
    for (Group& group : ready) finish(group);
}

void DeferredReleases::drain() noexcept {
    std::vector<Group> all;
    {
        std::lock_guard lock(mutex_);
        all.swap(groups_);
        queued_.store(0, std::memory_order_relaxed);
    }
    if (all.empty()) return;
    {
        const auto scope = device_.bind_or_defer();
        for (std::size_t g = 0; g < all.size(); ++g) {
            for (const EventRef& event : all[g].events) {
                if (queued_before(all, g, event.get())) continue;  // waited for already
                device_.defer(device_.api().event_synchronize(event->handle()),
                              sys::Entry::event_synchronize);
                AtomicCounters::bump(device_.counters().event_synchronizes);
            }
        }
    }
    // Outside the scope: a hook runs in whatever context its caller had current.
    for (Group& group : all) finish(group);
}

}  // namespace cudarc::detail

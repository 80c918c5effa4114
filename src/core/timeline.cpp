// Note [Stream timelines] (core/timeline.hpp).
#include "core/timeline.hpp"
#include "core/profiler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <new>

#include "core/capture.hpp"
#include "core/device_state.hpp"

namespace cudarc::detail {

namespace {
std::atomic<std::uint64_t> next_timeline_id{1};
}  // namespace

// ---- VectorClock ------------------------------------------------------------------------------------

void VectorClock::raise(std::uint64_t timeline, std::uint64_t position) {
    for (Entry& e : entries_) {
        if (e.timeline == timeline) {
            e.position = std::max(e.position, position);
            return;
        }
    }
    entries_.push_back(Entry{timeline, position});
}

void VectorClock::join(const VectorClock& other) {
    for (const Entry& e : other.entries_) raise(e.timeline, e.position);
}

// ---- SharedEvent ------------------------------------------------------------------------------------

void SharedEvent::release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    device_.events().release(handle_);
    delete this;
}

// ---- Timeline ---------------------------------------------------------------------------------------

Timeline::Timeline(StreamState& stream, CaptureSession* capture) noexcept
    : stream_(stream),
      capture_(capture),
      device_(&stream.device()),
      foreign_(stream.ownership() == StreamOwnership::foreign),
      id_(next_timeline_id.fetch_add(1, std::memory_order_relaxed)) {}

Timeline::~Timeline() = default;

bool Timeline::same_queue(const Timeline& other) const noexcept {
    // Two wrappers of one foreign stream are one queue of work. (Stream::wrap refuses the legacy and the
    // per-thread handles, whose one value names a different stream on each thread.)
    return capture_ == other.capture_ && stream_.handle() == other.stream_.handle() && !retired() &&
           !other.retired();
}

void Timeline::keep_locked(const EventRef& event) noexcept {
    if (recent_count_ < kRecentEvents) {
        recent_[(recent_first_ + recent_count_) % kRecentEvents] = event;
        ++recent_count_;
        return;
    }
    recent_[recent_first_] = event;  // the oldest goes
    recent_first_ = (recent_first_ + 1) % kRecentEvents;
}

EventRef Timeline::record_locked(bool snapshot) {
    DeviceState& device = stream_.device();
    // Note: read before the record, so that every operation counted was enqueued before it.
    const std::uint64_t covers = position();
    sys::Event handle = nullptr;
    {
        const auto scope = device.bind();
        handle = device.record_event(stream_.handle());
    }
    auto* event = new (std::nothrow) SharedEvent(device, handle, covers, stream_.key());
    if (event == nullptr) {
        device.events().release(handle);
        throw std::bad_alloc();
    }
    EventRef ref = EventRef::adopt(event);
    if (snapshot && seen_.size() != 0 && seen_.size() <= kSnapshotLimit) event->set_seen(seen_);
    keep_locked(ref);
    return ref;
}

EventRef Timeline::event_covering(std::uint64_t position) {
    // Note [Capture overlay]: a stream being captured runs nothing new; for the outside, its work is what
    // it ran before it joined the capture, which its pre-capture mark covers.
    if (capture_ == nullptr && stream_.capture() != nullptr) [[unlikely]]
        return stream_.precapture_mark();
    std::lock_guard lock(mutex_);
    if (position != kEverythingSoFar) {
        const std::uint64_t p = concrete(position);
        // The oldest kept event that covers p: it completes soonest.
        for (std::size_t i = 0; i < recent_count_; ++i) {
            const EventRef& event = recent_[(recent_first_ + i) % kRecentEvents];
            if (event->covers() >= p) return event;
        }
    }
    if (retired()) return final_;
    // Note: the clock is this stream's, and its waits were enqueued before the record: safe to teach.
    return record_locked(true);
}

void Timeline::record_after(std::uint64_t position) noexcept {
    try {
        std::lock_guard lock(mutex_);
        if (retired()) return;
        if (recent_count_ != 0 &&
            recent_[(recent_first_ + recent_count_ - 1) % kRecentEvents]->covers() >= position) {
            return;
        }
        static_cast<void>(record_locked(true));
    } catch (const Error& error) {
        // No event: a waiter records one lazily (more ordering, never less). Kept for
        // Device::rethrow_deferred_error (a sticky error loses the device).
        stream_.device().defer(error);
    } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory; a waiter records lazily
    }
}

bool Timeline::has_seen_locked(const Timeline& other, std::uint64_t position) const {
    std::lock_guard lock(mutex_);
    cache_seen_locked(other.id_);
    return seen_.get(other.id_) >= position;
}

void Timeline::cache_seen_locked(std::uint64_t timeline) const noexcept {
    // Note [Seen cache]: the writer's half of the sequence lock. The entry's release stores keep the odd
    // version before them: a reader that sees either new word sees the version odd or moved on.
    const std::uint64_t version = seen_version_.load(std::memory_order_relaxed);
    seen_version_.store(version + 1, std::memory_order_relaxed);
    seen_cached_timeline_.store(timeline, std::memory_order_release);
    seen_cached_position_.store(seen_.get(timeline), std::memory_order_release);
    seen_version_.store(version + 2, std::memory_order_release);
}

void Timeline::wait_for_unseen(Timeline& other, std::uint64_t position) {
    if (&other == this || same_queue(other)) return;
    if (capture_ != nullptr && other.capture_ != capture_) {
        throw Error(
            "cudarc: hazard tracking: a stream being captured into a graph cannot wait for work outside the "
            "capture (the driver would invalidate it). Each replay of the graph already waits for the "
            "earlier "
            "uses of the buffers its work touches; order other work before the capture begins");
    }
    std::uint64_t p = kEverythingSoFar;
    if (!covers_untracked(position)) {
        p = other.concrete(position);
        if (has_seen(other, p)) return;
    }
    const EventRef event = other.event_covering(p);
    if (!event) return;  // retired, its work known complete
    DeviceState& device = stream_.device();
    {
        // Note [Profiler ranges]
        profiler_push("cudarc: hazard wait", "cudarc: hazard wait: stream %p waits for stream %p",
                      static_cast<void*>(stream_.handle()), static_cast<void*>(other.stream_.handle()));
        const ProfilerPop pop;
        const auto scope = device.bind();
        device.wait_event(stream_.handle(), event->handle());
    }
    note_waited(other, *event);
}

void Timeline::note_waited(const Timeline& other, const SharedEvent& event) {
    std::lock_guard lock(mutex_);
    seen_.raise(other.id_, event.covers());
    seen_.join(event.seen());
    cache_seen_locked(other.id_);
}

void Timeline::note_joined(const Timeline& other, std::uint64_t position) {
    if (&other == this) return;
    std::scoped_lock lock(mutex_, other.mutex_);
    seen_.raise(other.id_, position);
    seen_.join(other.seen_);
    cache_seen_locked(other.id_);
}

void Timeline::retire(EventRef final_event) noexcept {
    std::lock_guard lock(mutex_);
    if (retired()) return;
    final_ = std::move(final_event);
    retired_.store(true, std::memory_order_release);
}

void Timeline::order_before(Timeline& waiter, sys::Event scratch) {
    DeviceState& device = stream_.device();
    EventRef final_event;
    std::uint64_t joined = 0;
    bool retired_stream = false;
    {
        // Note: under the lock for a foreign stream, so that one retired by another thread (its handle then
        // possibly destroyed by its owner) is never recorded on; cudarc's own streams retire only with
        // their device.
        std::unique_lock<std::mutex> lock;
        if (stream_.ownership() == StreamOwnership::foreign) lock = std::unique_lock(mutex_);
        retired_stream = retired();
        if (retired_stream) {
            final_event = final_;
        } else {
            joined = position();
            const auto scope = device.bind();
            device.record_into(scratch, stream_.handle());
            device.wait_event(waiter.stream_.handle(), scratch);
        }
    }
    if (retired_stream) {
        if (!final_event) return;
        {
            const auto scope = device.bind();
            device.wait_event(waiter.stream_.handle(), final_event->handle());
        }
        waiter.note_waited(*this, *final_event);
        return;
    }
    // Note [Capture overlay]: an edge inside a capture orders nothing that runs.
    if (capture_ == nullptr && waiter.capture_ == nullptr && stream_.capture() == nullptr &&
        waiter.stream_.capture() == nullptr)
        waiter.note_joined(*this, joined);
}

void Timeline::rerecord_kept(sys::Stream stream) noexcept {
    std::lock_guard lock(mutex_);
    DeviceState& device = stream_.device();
    for (std::size_t i = 0; i < recent_count_; ++i) {
        const EventRef& event = recent_[(recent_first_ + i) % kRecentEvents];
        device.defer(device.api().event_record(event->handle(), stream), sys::Entry::event_record);
    }
}

std::size_t Timeline::kept_events() const {
    std::lock_guard lock(mutex_);
    return recent_count_;
}

}  // namespace cudarc::detail

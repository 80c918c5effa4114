// detail::Timeline — one stream's position (the tracked operations enqueued on it), the events recorded on
// it, and how far it has waited for every other stream. Hazard tracking, frees, releases of borrowed
// memory, joins and cross-device waits all order streams through here.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "sys/driver_api.hpp"

namespace cudarc::detail {

class DeviceState;
class StreamState;
class CaptureSession;

// Note [Stream timelines]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Rationale: ordering work across streams costs driver calls (an event record, a wait), and what needs
// ordering follows streams, not buffers: a step over 1024 gradients written on another stream must cost
// one event and one wait, as one buffer does, and a replayed graph one more. Events recorded per buffer
// and waits issued per buffer made that cost follow the buffers (1024 events and 1024 waits).
//
// Approach (the model: Vulkan's timeline semaphores and the vector clocks of race detectors):
//  - Positions. Each stream counts the tracked operations enqueued on it: its position, advanced by the
//    stream's own thread once an operation's work is enqueued (Timeline::advance). Buffers record uses
//    as (timeline, position), never events (Note [Range hazards] in core/range_table.hpp).
//  - Shared events. An event records where a stream's work stood: it covers every position up to
//    SharedEvent::covers. A stream keeps its last few events; a waiter needing position p takes the
//    oldest one that covers p, and only when none does is one recorded (lazily, then covering the whole
//    position so far). After an operation that leaves a buffer shared with other streams, the stream
//    records one event right away (record_after), so that later waiters wait for exactly that operation,
//    not for whatever the stream runs afterwards; one event for the whole operation, however many
//    buffers and ranges it touched. Events are reference counted and go back to the pool when nothing
//    refers to them.
//  - Vector clocks. Each stream knows how far it has waited for every other stream (seen). A wait it
//    already has is skipped, and an operation enqueues at most one wait per source stream: the highest
//    position it needs over all its buffers (core/operation.hpp). A wait also teaches what the event's
//    stream had seen when the event was recorded (SharedEvent::seen): if A waited for B at p, and B had
//    waited for C at q before p, A has seen C up to q.
//  - Three "so far" positions. kTrackedSoFar stands for every tracked operation of a stream so far (a
//    buffer on the single-stream fast path names its owner so); it is made concrete (the position at that
//    moment) when another stream first needs it. kEverythingSoFar stands for everything submitted to the
//    stream, tracked or not (record_stream, prepare_indirect_access, joins): it always takes a fresh event.
//    kOwnersWork is borrowed memory's owner's own work, which cudarc never sees: another stream's access
//    waits for everything the owner submitted, as for kEverythingSoFar; a release (the owner's wait, the
//    DLPack deleter) follows cudarc's uses only, so there it counts as the owner's tracked work.
//  - Captures. During a graph capture a member stream's accesses go to a timeline of the capture's own
//    (Note [Capture overlay]), whose events are recorded inside the capture (graph edges); the stream's own
//    timeline does not move, and its last event before the capture (the pre-capture mark) covers it.
//  - Retirement. A retired stream (a foreign stream whose wrapper is gone) is never touched again: its
//    final event covers every position it ever had.
//
// Limits: a timeline keeps kRecentEvents events; a position older than all of them is covered by the
// oldest kept (an extra wait on a later point of that stream, never a missing one). Clocks propagate
// through an event only when the recording stream had waited for at most kSnapshotLimit others.
// How many graph captures are under way in the process (Note [Capture overlay] in core/capture.hpp).
// While any is, the single-stream fast path is off, so that captured accesses are seen.
extern std::atomic<unsigned> captures_underway;

// Note: ordered as they cover (any position < kTrackedSoFar < kOwnersWork < kEverythingSoFar), so that
// the larger of two uses of one timeline covers both.
inline constexpr std::uint64_t kTrackedSoFar = ~std::uint64_t{0} - 2;
inline constexpr std::uint64_t kOwnersWork = ~std::uint64_t{0} - 1;
inline constexpr std::uint64_t kEverythingSoFar = ~std::uint64_t{0};
[[nodiscard]] constexpr bool is_so_far(std::uint64_t position) noexcept {
    return position >= kTrackedSoFar;
}
// Whether a wait for `position` must take a fresh event (the stream's untracked work is in it).
[[nodiscard]] constexpr bool covers_untracked(std::uint64_t position) noexcept {
    return position == kEverythingSoFar || position == kOwnersWork;
}

// How far a stream has waited for others: the highest position of each (by Timeline::id).
class VectorClock {
  public:
    struct Entry {
        std::uint64_t timeline = 0;
        std::uint64_t position = 0;
    };
    [[nodiscard]] std::uint64_t get(std::uint64_t timeline) const noexcept {
        for (const Entry& e : entries_) {
            if (e.timeline == timeline) return e.position;
        }
        return 0;
    }
    // Raises the entry of `timeline` to at least `position`.
    void raise(std::uint64_t timeline, std::uint64_t position);
    void join(const VectorClock& other);
    [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
    [[nodiscard]] std::span<const Entry> entries() const noexcept { return entries_; }

  private:
    std::vector<Entry> entries_;
};

// An event recorded on a stream, shared by every waiter that needs a position it covers (reference
// counted; the handle goes back to the device's pool with the last reference).
class SharedEvent {
  public:
    SharedEvent(DeviceState& device, sys::Event handle, std::uint64_t covers,
                std::uintptr_t stream_key) noexcept
        : device_(device), handle_(handle), covers_(covers), stream_key_(stream_key) {}
    SharedEvent(const SharedEvent&) = delete;
    SharedEvent& operator=(const SharedEvent&) = delete;

    [[nodiscard]] sys::Event handle() const noexcept { return handle_; }
    [[nodiscard]] DeviceState& device() const noexcept { return device_; }
    // Every position up to this one of the recording timeline completes before the event does.
    [[nodiscard]] std::uint64_t covers() const noexcept { return covers_; }
    // The key of the stream the event was recorded on (Note [Stream identity]), for the allocator.
    [[nodiscard]] std::uintptr_t stream_key() const noexcept { return stream_key_; }
    // What the recording stream had waited for when the event was recorded (may be empty).
    [[nodiscard]] const VectorClock& seen() const noexcept { return seen_; }
    void set_seen(VectorClock seen) noexcept { seen_ = std::move(seen); }

    void retain() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
    void release() noexcept;

  private:
    ~SharedEvent() = default;
    DeviceState& device_;
    sys::Event handle_;
    std::uint64_t covers_;
    std::uintptr_t stream_key_;
    VectorClock seen_;
    std::atomic<std::uint32_t> refs_{1};
};

// An owning reference to a SharedEvent (null: nothing to wait for).
class EventRef {
  public:
    EventRef() noexcept = default;
    // Takes over the reference `event` holds (a new event starts with one).
    static EventRef adopt(SharedEvent* event) noexcept {
        EventRef ref;
        ref.event_ = event;
        return ref;
    }
    EventRef(const EventRef& other) noexcept : event_(other.event_) {
        if (event_ != nullptr) event_->retain();
    }
    EventRef(EventRef&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
    EventRef& operator=(EventRef other) noexcept {
        std::swap(event_, other.event_);
        return *this;
    }
    ~EventRef() {
        if (event_ != nullptr) event_->release();
    }
    [[nodiscard]] SharedEvent* get() const noexcept { return event_; }
    [[nodiscard]] SharedEvent* operator->() const noexcept { return event_; }
    [[nodiscard]] SharedEvent& operator*() const noexcept { return *event_; }
    [[nodiscard]] explicit operator bool() const noexcept { return event_ != nullptr; }
    // Gives the reference up to the caller (who releases it later).
    [[nodiscard]] SharedEvent* release() noexcept { return std::exchange(event_, nullptr); }

  private:
    SharedEvent* event_ = nullptr;
};

class Timeline {
  public:
    static constexpr std::size_t kRecentEvents = 8;
    static constexpr std::size_t kSnapshotLimit = 16;

    // A stream's own timeline, or (capture != null) the timeline of its work inside that capture.
    Timeline(StreamState& stream, CaptureSession* capture) noexcept;
    Timeline(const Timeline&) = delete;
    Timeline& operator=(const Timeline&) = delete;
    ~Timeline();

    [[nodiscard]] StreamState& stream() const noexcept { return stream_; }
    // Never reused, for the vector clocks.
    [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
    // The capture whose work this timeline counts, or null for the stream's own.
    [[nodiscard]] CaptureSession* capture() const noexcept { return capture_; }
    // The stream's device, and whether the stream is a foreign one (Stream::wrap): fixed for the
    // timeline's life, for HazardState::must_keep, which asks at every hand-over read.
    [[nodiscard]] const DeviceState* device() const noexcept { return device_; }
    [[nodiscard]] bool foreign() const noexcept { return foreign_; }

    // The tracked operations enqueued so far.
    [[nodiscard]] std::uint64_t position() const noexcept {
        return position_.load(std::memory_order_acquire);
    }
    // Called by the stream's own thread once an operation's work is enqueued; returns its position.
    std::uint64_t advance() noexcept {
        const std::uint64_t next = position_.load(std::memory_order_relaxed) + 1;
        position_.store(next, std::memory_order_release);
        return next;
    }
    // A concrete position for `position` for a free or a release (kTrackedSoFar and kOwnersWork become the
    // position now; kEverythingSoFar stays).
    [[nodiscard]] std::uint64_t concrete(std::uint64_t position) const noexcept {
        return position == kTrackedSoFar || position == kOwnersWork ? this->position() : position;
    }

    // An event that completes after the work at `position` (kTrackedSoFar: every tracked operation so
    // far; kEverythingSoFar: everything submitted so far): a kept one when one covers it, else one
    // recorded now. Null once retired with its work known complete. Throws when recording fails.
    [[nodiscard]] EventRef event_covering(std::uint64_t position);
    // After an operation at `position` that another stream may wait for: records an event now, unless one
    // covers it already (Note [Stream timelines]). The stream's own thread calls it. Never throws (a
    // failure is deferred, and a waiter then records lazily).
    void record_after(std::uint64_t position) noexcept;

    // Makes this timeline's stream wait for `other`'s work up to `position`: skipped when it has been seen
    // already (or `other` is this stream, or the same foreign stream through another wrapper). Counted.
    void wait_for(Timeline& other, std::uint64_t position) {
        // Note: the commonest answer, already seen (a feed writing buffer after buffer its reader read), is
        // found inline (Note [Seen cache]); a captured stream always asks the whole question.
        if (capture_ == nullptr && !covers_untracked(position) &&
            seen_cached(other, other.concrete(position)))
            return;
        wait_for_unseen(other, position);
    }
    // Whether this stream is known to be ordered after `other`'s work up to `position` (a concrete one).
    // Note [Seen cache]: no lock when `other` is the stream last asked about or waited for.
    [[nodiscard]] bool has_seen(const Timeline& other, std::uint64_t position) const {
        return seen_cached(other, position) || has_seen_locked(other, position);
    }
    // Notes that this stream waited for `event` of `other` (its clock learns what the event covers).
    void note_waited(const Timeline& other, const SharedEvent& event);
    // Notes that this stream waited for everything `other` had submitted when its position was
    // `position` (a join through the stream's scratch event): it has seen what `other` had seen, too.
    void note_joined(const Timeline& other, std::uint64_t position);

    // A join (same device): `waiter` waits for everything submitted to this stream so far, through
    // `scratch` (the stream's own event: Note [Waits capture the event]); once retired, for its final
    // event. Counted. Outside captures the waiter's clock learns it.
    void order_before(Timeline& waiter, sys::Event scratch);

    // The stream's own timeline only. From here on every position is covered by `final_event` (null: the
    // work is known complete); nothing is recorded on the stream again.
    void retire(EventRef final_event) noexcept;
    [[nodiscard]] bool retired() const noexcept { return retired_.load(std::memory_order_acquire); }

    // A capture's timeline, once the capture has ended: records the events it keeps again on `stream`
    // (outside the capture), so that none goes back to the pool recorded inside a graph.
    void rerecord_kept(sys::Stream stream) noexcept;

    // For diagnostics and tests.
    [[nodiscard]] std::size_t kept_events() const;

  private:
    // Note [Seen cache]: whether the cached entry says `other` was seen up to `position` (false: not known).
    [[nodiscard]] bool seen_cached(const Timeline& other, std::uint64_t position) const noexcept {
        // The reader's half of the sequence lock: acquire loads of the entry keep the version's second
        // load after them (no fence: ThreadSanitizer does not model fences).
        const std::uint64_t version = seen_version_.load(std::memory_order_acquire);
        if ((version & 1) != 0 || seen_cached_timeline_.load(std::memory_order_acquire) != other.id_)
            return false;
        const std::uint64_t seen = seen_cached_position_.load(std::memory_order_acquire);
        return seen_version_.load(std::memory_order_relaxed) == version && seen >= position;
    }
    // wait_for, past its inline check.
    void wait_for_unseen(Timeline& other, std::uint64_t position);
    // has_seen, from the clock itself; caches the answer's entry.
    [[nodiscard]] bool has_seen_locked(const Timeline& other, std::uint64_t position) const;
    // Note [Seen cache]: `timeline`'s entry of the clock, for has_seen. Holds mutex_.
    void cache_seen_locked(std::uint64_t timeline) const noexcept;
    // Records an event covering the position now; `snapshot`: keep the clock in it. Holds mutex_.
    EventRef record_locked(bool snapshot);
    void keep_locked(const EventRef& event) noexcept;
    [[nodiscard]] bool same_queue(const Timeline& other) const noexcept;

    StreamState& stream_;
    CaptureSession* capture_;
    const DeviceState* device_;
    bool foreign_;
    std::uint64_t id_;
    std::atomic<std::uint64_t> position_{0};
    std::atomic<bool> retired_{false};
    mutable std::mutex mutex_;
    // Guarded by mutex_.
    EventRef recent_[kRecentEvents];  // by recording order; covers() never decreases
    std::size_t recent_count_ = 0;
    std::size_t recent_first_ = 0;
    EventRef final_;
    VectorClock seen_;
    // Note [Seen cache]
    // A stream asks whether it has seen another at every operation that needs that other (a feed writing
    // 1024 gradients a step on another stream asks 1024 times), and the clock is guarded by mutex_ (a join
    // on another thread may raise it). So one entry of it, the one last asked about or raised, is kept where
    // its own thread reads it with no lock: a sequence lock over two words, written only under mutex_
    // (odd version: being written). An entry read stale is never too high (the clock only grows): at worst
    // has_seen takes the lock.
    mutable std::atomic<std::uint64_t> seen_version_{0};
    mutable std::atomic<std::uint64_t> seen_cached_timeline_{0};  // a Timeline::id (ids start at 1)
    mutable std::atomic<std::uint64_t> seen_cached_position_{0};
};

}  // namespace cudarc::detail

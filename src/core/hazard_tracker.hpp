// detail::HazardTracker — the slow path of a buffer's hazard state: the range table (Note [Range hazards])
// plus the streams behind its slots and the events recorded on them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/range_table.hpp"
#include "cudarc/detail/buffer.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::detail {

class StreamState;

// Note [Eager events]
// An event recorded when a waiter first needs it covers the user's stream's work so far, which may include
// work enqueued after the use (on other ranges, or other buffers). Two streams that each write their own
// items of one buffer, round after round, would then wait for one another's current round. So once a
// buffer is used by several streams (the slow path), every access records an event on its stream right
// after its work is enqueued (HazardState::after_access), and waiters reuse it. On the single-stream fast
// path nothing is recorded; the first waiter after it records lazily (the fast path stays free).
//
// Note [Cross-stream ordering]
// wait_for_use() is the one place where a stream is made to wait for another stream's use of a buffer:
// hazard tracking, frees and releases of borrowed memory all come through it. The event is recorded lazily
// on the user's stream (it then covers that stream's work so far, which includes the use; possibly more,
// which only adds ordering) and kept in `event` for the next waiter. `user` and `waiter` may belong to
// different devices: the event is recorded on the user's device and waited for on the waiter's (Note [Hazard
// tracking across devices] in core/peer_access.hpp).
void wait_for_use(StreamState& waiter, StreamState& user, sys::Event& event);

class HazardTracker {
  public:
    struct Slot {
        std::shared_ptr<StreamState> stream;  // null: free
        sys::Event event = nullptr;           // pooled; covers every use by `stream` so far when not null
        std::uint64_t last_use = 0;
    };

    // A buffer of `bytes` last written as a whole by `first_writer` (null: untouched).
    HazardTracker(std::size_t bytes, StreamState* first_writer);
    HazardTracker(const HazardTracker&) = delete;
    HazardTracker& operator=(const HazardTracker&) = delete;
    ~HazardTracker();

    [[nodiscard]] RangeTable& table() noexcept { return table_; }
    [[nodiscard]] const RangeTable& table() const noexcept { return table_; }
    [[nodiscard]] std::span<const Slot> slots() const noexcept { return slots_; }
    [[nodiscard]] StreamState* stream_of(unsigned slot) const noexcept { return slots_[slot].stream.get(); }

    // The slot of `stream`, given one if it has none. With every slot taken, the least recently used one is
    // relabeled: `stream` first waits for that slot's stream, so the uses recorded under it may count as
    // `stream`'s (conservative). Throws, changing nothing, when that wait fails.
    unsigned slot_for(StreamState& stream);
    // Makes `waiter` wait for the uses of every slot in `slots`.
    void wait_for(StreamState& waiter, RangeTable::Mask slots);
    // `slot` used the buffer again: an event recorded before no longer covers its uses.
    void note_use(unsigned slot) noexcept;
    // Records an event on `stream`'s slot after its latest use, unless one is there (Note [Eager events]).
    void record_after_use(StreamState& stream) noexcept;
    // Records every event a slot holds again on `stream`, so that none stays recorded inside a capture that
    // has ended (the pool would hand out an event the driver refuses to wait for). One that cannot be
    // recorded is destroyed.
    void rerecord_events(sys::Stream stream) noexcept;
    // One entry per slot the table names (events moved out), every slot freed.
    [[nodiscard]] std::vector<StreamUse> take_uses();

  private:
    void free_slot(Slot& slot) noexcept;

    RangeTable table_;
    std::vector<Slot> slots_;
    std::uint64_t tick_ = 0;
};

}  // namespace cudarc::detail

// detail::Operation — one tracked operation on a stream (a launch, a copy, a memset, a collective, a graph
// replay, a step's indirect accesses): the buffers it touches, at most one wait per source stream before
// its work, and what it leaves for later operations (Note [Stream timelines] in core/timeline.hpp).
//
//   Operation op(stream);
//   op.access(state, offset, bytes, Access::read);   // for each buffer range; no driver call
//   op.order();                                      // the waits
//   ... enqueue the work ...
//   op.complete();                                   // position, uses, at most one event
//
// Note [Cross-stream ordering]
// Every cross-stream wait of hazard tracking goes through Operation::order, and every other ordering
// between streams (frees, releases of borrowed memory, joins, cross-device uses) through Timeline::wait_for
// or StreamState::order_before: the vector clocks see them all, so no wait is ever enqueued twice.
//
// Note [Hand-over reads]
// The commonest cross-stream access is a hand-over: a buffer its owner wrote whole, read whole by a step
// on another stream (Note [One foreign reader] in core/hazard_state.hpp). A step over 1024 gradients makes
// 1024 of them, so each must cost little more than an access on the fast path. Such a read's needs are
// gathered as it is declared (HazardState::collect_handover: no lock, the state's cache line already at
// hand); it is kept apart, one pointer each, which order() never reads, and complete() records it
// through HazardState::apply_handover, a short case under the lock. Anything else about the buffer (a
// table, a second reader, part of it, a capture under way, tracing) takes the general path (collect,
// apply).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/hazard_state.hpp"
#include "core/timeline.hpp"

namespace cudarc::detail {

class StreamState;

class Operation {
  public:
    // Whether the library enqueues the operation's work itself (tracked), or the caller enqueues work the
    // library never sees (untracked: prepare_indirect_access, a DLPack consumer's work).
    enum class Work { tracked, untracked };

    explicit Operation(StreamState& stream, Work work = Work::tracked) noexcept;
    Operation(const Operation&) = delete;
    Operation& operator=(const Operation&) = delete;
    // An operation never completed records nothing.
    ~Operation() {
        if (more_.capacity() != 0) keep_spare();
        if (handovers_.capacity != 0) keep_spare_handovers();
    }

    // Declares an access of the operation to bytes [offset, offset + bytes) of a buffer. On the single-
    // stream fast path it is only counted (Note [Single-stream fast path]).
    void access(HazardState& state, std::size_t offset, std::size_t bytes, Access access) {
        if (bytes == 0) return;
        accessed_ = true;
        if (work_ == Work::tracked && state.owned_by(*timeline_) &&
            captures_underway.load(std::memory_order_relaxed) == 0) {
            // Note [Owner's last access] in core/hazard_state.hpp: stamped at complete().
            if (owned_count_ < kInlineOwned) {
                owned_[owned_count_++] = &state;
            } else {
                state.forget_owner_access();
            }
            return;
        }
        access_elsewhere(state, offset, bytes, access);
    }
    // Enqueues what the accesses need: at most one wait per source stream, none it has already. During a
    // capture, the accesses of a captured stream go to the capture (Note [Capture overlay]). Throws when a
    // wait cannot be enqueued (the buffers' states stay equivalent).
    void order() {
        // Note: inline, for the commonest operation, which has nothing to order.
        if (count_ != 0 || handover_count_ != 0) order_accesses();
    }
    // The work is enqueued: advances the stream's position, records the accesses at it, and records one
    // event when another stream may need to wait for them. Never throws.
    void complete() noexcept;
    // For Work::untracked: the accesses count as everything the stream submits until a tracked write
    // replaces them (kEverythingSoFar). No position, no event.
    void complete_untracked() noexcept;

    [[nodiscard]] Timeline& timeline() const noexcept { return *timeline_; }

  private:
    struct Pending {
        HazardState* real;
        HazardState* state;  // `real`, or the capture's overlay of it
        std::size_t offset;
        std::size_t bytes;
        Access access;
    };
    static constexpr std::size_t kInline = 8;
    static constexpr std::size_t kInlineOwned = 16;

    // access() past the fast path: out of line, so that the fast path stays small where it is inlined.
    void access_elsewhere(HazardState& state, std::size_t offset, std::size_t bytes, Access access);
    // access_elsewhere's general case, apart, so that its hand-over case saves few registers.
    void add_pending_elsewhere(HazardState& state, std::size_t offset, std::size_t bytes, Access access);
    // Inline while there is room (a step adds thousands): the rest out of line.
    void add_pending(HazardState& state, std::size_t offset, std::size_t bytes, Access access) {
        if (count_ < kInline) {
            inline_[count_++] = Pending{&state, &state, offset, bytes, access};
        } else if (more_.size() < more_.capacity()) {
            more_.push_back(Pending{&state, &state, offset, bytes, access});
            ++count_;
        } else {
            add_pending_growing(Pending{&state, &state, offset, bytes, access});
        }
    }
    void add_pending_growing(const Pending& pending);
    // A hand-over read, its needs already in needs_ (Note [Hand-over reads]); as add_pending.
    void add_handover(HazardState& state) {
        if (handover_count_ < handovers_.capacity) {
            handovers_.items[handover_count_++] = &state;
            return;
        }
        add_handover_growing(state);
    }
    void add_handover_growing(HazardState& state);
    // Room for hand-over reads, one pointer each.
    struct Handovers {
        std::unique_ptr<HazardState*[]> items;
        std::size_t capacity = 0;
    };
    // more_ and handovers_ come from, and go back to, spares kept per thread: a step's thousands of
    // accesses would otherwise regrow them every step.
    void keep_spare() noexcept;
    void keep_spare_handovers() noexcept;
    static std::vector<Pending>& spare() noexcept;
    static Handovers& spare_handovers() noexcept;
    [[nodiscard]] Pending& pending(std::size_t i) noexcept {
        return i < kInline ? inline_[i] : more_[i - kInline];
    }
    [[nodiscard]] HazardState& handover(std::size_t i) noexcept { return *handovers_.items[i]; }
    // Captures: whether this operation's accesses go to this thread's capture, and if so, to its overlays.
    void route_into_capture();
    void order_accesses();
    void finish(std::uint64_t position) noexcept;
    void trace_needs();  // Note [Tracing waits]

    StreamState& stream_;
    Timeline* timeline_;
    Work work_;
    CaptureSession* capture_ = nullptr;  // set when the accesses went to a capture
    bool accessed_ = false;
    std::size_t count_ = 0;
    Needs needs_;  // gathered by hand-over reads as they come, the rest by order()
    std::array<Pending, kInline> inline_;
    std::vector<Pending> more_;
    std::size_t handover_count_ = 0;
    Handovers handovers_;
    std::size_t owned_count_ = 0;
    std::array<HazardState*, kInlineOwned> owned_;  // fast-path accesses, to stamp
};

}  // namespace cudarc::detail

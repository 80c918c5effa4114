// Note [Cross-stream ordering] (core/operation.hpp).
#include "core/operation.hpp"

#include <algorithm>
#include <span>

#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/trace.hpp"

namespace cudarc::detail {

Operation::Operation(StreamState& stream, Work work) noexcept
    : stream_(stream), timeline_(&stream.timeline()), work_(work) {}

std::vector<Operation::Pending>& Operation::spare() noexcept {
    thread_local std::vector<Pending> pending;
    return pending;
}

Operation::Handovers& Operation::spare_handovers() noexcept {
    thread_local Handovers handovers;
    return handovers;
}

void Operation::access_elsewhere(HazardState& state, std::size_t offset, std::size_t bytes, Access access) {
    // Note [Hand-over reads]: what such a read needs is known now, and nothing else will be.
    if (work_ == Work::tracked && access == Access::read && offset == 0 &&
        captures_underway.load(std::memory_order_relaxed) == 0 && !trace_waits() &&
        state.collect_handover(*timeline_, bytes, needs_)) {
        add_handover(state);
        return;
    }
    add_pending_elsewhere(state, offset, bytes, access);
}

// Note: never inlined into access_elsewhere, whose hand-over case then saves no registers.
[[gnu::noinline]] void Operation::add_pending_elsewhere(HazardState& state, std::size_t offset,
                                                        std::size_t bytes, Access access) {
    add_pending(state, offset, bytes, access);
}

void Operation::add_pending_growing(const Pending& pending) {
    if (more_.capacity() == 0) more_.swap(spare());
    more_.push_back(pending);
    ++count_;
}

[[gnu::noinline]] void Operation::add_handover_growing(HazardState& state) {
    if (handovers_.capacity == 0) std::swap(handovers_, spare_handovers());
    if (handover_count_ == handovers_.capacity) {
        const std::size_t capacity = std::max<std::size_t>(64, 2 * handovers_.capacity);
        auto items = std::make_unique<HazardState*[]>(capacity);  // throws: nothing changed
        std::copy_n(handovers_.items.get(), handover_count_, items.get());
        handovers_.items = std::move(items);
        handovers_.capacity = capacity;
    }
    handovers_.items[handover_count_++] = &state;
}

void Operation::keep_spare() noexcept {
    std::vector<Pending>& kept = spare();
    if (more_.capacity() <= kept.capacity()) return;
    more_.clear();
    kept.swap(more_);
}

void Operation::keep_spare_handovers() noexcept {
    Handovers& kept = spare_handovers();
    if (handovers_.capacity > kept.capacity) std::swap(handovers_, kept);
}

void Operation::route_into_capture() {
    CaptureSession* session = CaptureSession::current();
    if (session == nullptr) return;
    if (stream_.capture() != session) {
        if (stream_.capture() != nullptr) {
            throw Error(
                "cudarc: a stream that another thread's graph capture is recording was used on this thread");
        }
        // An outsider whose access conflicts with captured work waits for it: it takes part in the capture
        // from now on (as the driver makes a stream that waits for a captured event). Otherwise its
        // accesses run at once and are tracked as usual.
        bool conflicts = false;
        for (std::size_t i = 0; i < count_ && !conflicts; ++i) {
            const Pending& p = pending(i);
            conflicts = session->conflicts_with_captured_work(*p.real, p.offset, p.bytes, p.access);
        }
        for (std::size_t i = 0; i < handover_count_ && !conflicts; ++i) {
            HazardState& state = handover(i);
            conflicts = session->conflicts_with_captured_work(state, 0, state.bytes(), Access::read);
        }
        if (!conflicts) return;
        session->join(stream_, CaptureRole::joined);
    }
    // Note [Capture overlay]: the accesses go to the capture's overlays, ordered by its own timelines.
    // Hand-over reads gathered before the capture began take the general path there (Note [Hand-over
    // reads]): their needs were the stream's own.
    needs_.clear();
    for (std::size_t i = 0; i < handover_count_; ++i) {
        HazardState& state = handover(i);
        add_pending(state, 0, state.bytes(), Access::read);
    }
    handover_count_ = 0;
    for (std::size_t i = 0; i < count_; ++i) pending(i).state = &session->overlay_for(*pending(i).real);
    timeline_ = &session->timeline_of(stream_);
    capture_ = session;
}

void Operation::order_accesses() {
    if (captures_underway.load(std::memory_order_relaxed) != 0) route_into_capture();
    if (trace_waits()) [[unlikely]]
        trace_needs();
    for (std::size_t i = 0; i < count_; ++i) {
        const Pending& p = pending(i);
        p.state->collect(*timeline_, p.offset, p.bytes, p.access, needs_);
    }
    for (std::size_t i = 0; i < needs_.size(); ++i)
        timeline_->wait_for(*needs_[i].timeline, needs_[i].position);
}

// Note [Tracing waits]: each buffer range's needs that this stream has not seen, with their reason.
void Operation::trace_needs() {
    for (std::size_t i = 0; i < count_; ++i) {
        const Pending& p = pending(i);
        Needs writers;
        p.state->collect(*timeline_, p.offset, p.bytes, Access::read, writers);
        Needs all;
        if (p.access == Access::write) p.state->collect(*timeline_, p.offset, p.bytes, Access::write, all);
        const auto report = [&](const Use& use, const char* reason) {
            if (use.timeline == nullptr ||
                timeline_->has_seen(*use.timeline, use.timeline->concrete(use.position)))
                return;
            trace_wait(*timeline_, *use.timeline, use.position, p.state->address(), p.offset, p.bytes,
                       reason);
        };
        for (std::size_t k = 0; k < writers.size(); ++k)
            report(writers[k], p.access == Access::read ? "RAW" : "WAW");
        for (std::size_t k = 0; k < all.size(); ++k) {
            const Use* writer = writers.find(all[k].timeline);
            if (writer == nullptr || writer->position < all[k].position) report(all[k], "WAR");
        }
    }
}

void Operation::finish(std::uint64_t position) noexcept {
    bool shared = false;
    // Note: the inline entries, then the rest, with the capture's check outside the loops (a step has
    // thousands). A hand-over read and another access of the same buffer by this operation share one
    // position, so whichever is recorded first, later accesses need the same.
    for (std::size_t i = 0; i < handover_count_; ++i)
        shared |= handovers_.items[i]->apply_handover(*timeline_, position);
    const auto apply = [&](const Pending& p) {
        shared |= p.state->apply(*timeline_, p.offset, p.bytes, p.access, position);
    };
    const std::span<const Pending> first(inline_.data(), std::min(count_, kInline));
    for (const Pending& p : first) apply(p);
    for (const Pending& p : more_) apply(p);
    if (capture_ != nullptr) {
        for (std::size_t i = 0; i < count_; ++i) {
            const Pending& p = pending(i);
            capture_->note_touched(*p.real, p.offset, p.bytes, p.access);
        }
    }
    if (shared && position != kEverythingSoFar) {
        if (trace_waits()) [[unlikely]]
            trace_event(*timeline_, position);
        timeline_->record_after(position);
    }
}

void Operation::complete() noexcept {
    if (!accessed_) return;
    // Note [Single-stream fast path]: the owner's accesses are "its tracked work so far", so they advance
    // its position too.
    const std::uint64_t position = timeline_->advance();
    for (std::size_t i = 0; i < owned_count_; ++i) owned_[i]->note_owner_access(*timeline_, position);
    if (count_ != 0 || handover_count_ != 0) finish(position);
}

void Operation::complete_untracked() noexcept {
    if (accessed_) finish(kEverythingSoFar);
}

}  // namespace cudarc::detail

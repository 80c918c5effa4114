// detail::PinnedState — page-locked host memory (allocated or registered) with the hazard state that orders
// its copies, at a stable address behind PinnedAllocation (so views survive a move of their buffer).
#pragma once

#include <cstddef>
#include <memory>

#include "core/hazard_state.hpp"

namespace cudarc::detail {

class DeviceState;

// Note [Pinned memory]
// ~~~~~~~~~~~~~~~~~~~~
// Rationale: a pipeline stages many batches through one page-locked buffer, each chunk copied on its own
// stream. Remembering one "last copy" per buffer made every host access wait for every stream, and made
// a copy of chunk i order nothing against the host's use of chunk j.
//
// Approach: the memory has a HazardState over its bytes, exactly as a device buffer has (Note [Range
// hazards], Note [Stream timelines]). A copy between a PinnedView and a DeviceView is one Operation that
// accesses both: the device side reads and the host side is written (device to host), or the reverse. So
// copies of disjoint chunks on different streams never wait on each other, and a copy reading chunk i
// after a copy wrote it on another stream waits for it on the device. A host access is an access by no
// stream: pinned_wait collects the uses of its range (for a host read, the copies writing it; for a host
// write, every copy touching it), takes one event covering each stream's use (Timeline::event_covering:
// a kept one, else one recorded now) and synchronizes on it, counted as an event synchronize. The state
// is left as it is: a later wait finds the same, completed, events.
//
// Destruction takes every use (one per stream) and waits for each; inside a capture on this thread it
// cannot wait, so the memory is freed (or unregistered) by the device's release queue once the events
// have completed (Note [Deferred release]). If a wait fails, the device of that stream is synchronized;
// if that fails too, the memory is leaked rather than freed under the DMA engine (its error deferred).
//
// Captures: a captured copy goes to the capture's overlay of this state like any buffer access, and each
// replay counts as the graph's accesses of it (Note [Capture overlay]), so pinned_wait after a replay
// waits for the replay.
class PinnedState {
  public:
    PinnedState(std::shared_ptr<DeviceState> device, void* data, std::size_t bytes, bool registered) noexcept;
    PinnedState(const PinnedState&) = delete;
    PinnedState& operator=(const PinnedState&) = delete;
    ~PinnedState() = default;

    [[nodiscard]] void* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
    [[nodiscard]] DeviceState& device() const noexcept { return *device_; }
    [[nodiscard]] HazardState& hazards() noexcept { return hazards_; }

    // Waits for every pending copy, then frees or unregisters the memory. Never throws.
    void release() noexcept;

  private:
    std::shared_ptr<DeviceState> device_;  // whose context allocated or registered the memory
    void* data_;
    std::size_t bytes_;
    bool registered_;
    HazardState hazards_;
};

}  // namespace cudarc::detail

// Where memory for buffers comes from: the caching allocator over cuMemAlloc segments or over expandable
// segments (src/alloc/caching_source.hpp), the driver's stream-ordered pool, or (for DeviceSlice::managed)
// managed memory. The public enum cudarc::MemorySource names which of the first three a device uses;
// detail::MemorySource is what each of them implements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/timeline.hpp"
#include "cudarc/allocator.hpp"
#include "cudarc/detail/buffer.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::detail {

class DeviceState;
class StreamState;

// One stream's use of a buffer, as a memory source or a release queue receives it. The event, when set,
// completes after the use; when not, the use is the home stream's own (it orders the free itself) or the
// receiver records one when it needs it (StreamState::mark).
struct StreamUse {
    std::shared_ptr<StreamState> stream;
    EventRef event;
};

struct MemoryBlock {
    DevicePtr ptr = 0;
    void* handle = nullptr;  // the source's own bookkeeping
};

// Names one graph capture for the source that keeps memory for it (the caching allocator).
using SourceCaptureId = std::uint64_t;

class MemorySource {
  public:
    virtual ~MemorySource() = default;
    // `bytes` > 0, ordered on `stream`. Throws cudarc::OutOfMemory or cudarc::Error.
    [[nodiscard]] virtual MemoryBlock allocate(std::size_t bytes, StreamState& stream) = 0;
    // Frees `block`, allocated on `home`, after every use in `uses` (events may still be null; the source
    // records them as needed). Never throws: see Note [Free after a failed record].
    //
    // Note [Free after a failed record]
    // Memory used on several streams is freed (or goes back to a cache) only after an event per use. When
    // one of those events cannot be recorded or waited for (or the source cannot take the free), the memory
    // would be neither freed nor pending, and would leak. Instead the source waits on the host for the
    // whole device (cuCtxSynchronize, counted): then every use has completed and the memory is free at
    // once. If even that fails the memory stays out of reach (a leak, with the error deferred) rather than
    // be reused under work that may still run, unless the device is lost, where nothing runs any more.
    virtual void deallocate(const MemoryBlock& block, std::size_t bytes, StreamState& home,
                            std::vector<StreamUse> uses) noexcept = 0;
    // Frees cached memory (no-op for sources that cache nothing).
    virtual void empty_cache() {}
    // Whether the memory is managed (unified): host and device share its addresses.
    [[nodiscard]] virtual bool managed() const noexcept { return false; }
    // Managed memory: migrates [ptr, ptr + bytes) to the device, ordered on `stream` (no-op elsewhere).
    virtual void prefetch(StreamState& /*stream*/, DevicePtr /*ptr*/, std::size_t /*bytes*/) {}
    // `stream` (foreign) was retired: nothing may name its key any more (Note [Stream identity]).
    virtual void retire_stream(StreamState& stream) noexcept { static_cast<void>(stream); }
    // What Device::allocator_stats reports (zeros for sources that keep no figures).
    [[nodiscard]] virtual AllocatorStats stats() const { return {}; }
    // Restarts the peak figures from the current ones.
    virtual void reset_peak() {}
    // What Device::allocator_snapshot reports (empty for sources that keep no segments), with the timeline
    // recorded so far.
    [[nodiscard]] virtual AllocatorSnapshot snapshot() const { return {}; }
    // Device::record_memory_history: keeps the last `max_entries` allocations, frees and driver segments
    // (or chunks) for snapshot().timeline; 0 stops and drops them. Sources that record nothing ignore it.
    virtual void record_history(std::size_t /*max_entries*/) {}
    // Device `user` may now use this source's memory (peer access was enabled for it): memory the driver
    // does not open to peers by itself (the chunks of expandable segments) is opened to it, now and as it
    // is mapped later. Throws cudarc::Error when the driver refuses.
    virtual void grant_access(sys::Device /*user*/) {}

    // Graph capture (Note [Capture overlay]). A source that keeps memory for graphs hears of each capture
    // on its device; the others keep nothing and ignore it.
    // `origin` begins a capture: the source's id for it, or nullopt when it keeps nothing.
    [[nodiscard]] virtual std::optional<SourceCaptureId> begin_capture(StreamState& /*origin*/) {
        return std::nullopt;
    }
    // `stream` takes part in capture `capture` from now on (forked from or joining a member).
    virtual void join_capture(SourceCaptureId /*capture*/, StreamState& /*stream*/) {}
    // The capture on `origin` has ended (before the releases it deferred run).
    virtual void end_capture(StreamState& /*origin*/) {}
    // Nothing will launch capture `capture`'s graph any more: what the source kept for it is reused once
    // the work `last_stream` has so far (the graph's last launch) has completed; with no stream (the graph
    // was never launched), at once. Never throws.
    virtual void release_capture(SourceCaptureId /*capture*/,
                                 const std::shared_ptr<StreamState>& /*last_stream*/) noexcept {}
};

// The device's caching allocator (defined in src/alloc/caching_source.cpp). The one name core takes from
// the layer above it, as a declaration: core includes no header of src/alloc (docs/architecture.md).
[[nodiscard]] std::unique_ptr<MemorySource> make_caching_source(DeviceState& device,
                                                                const AllocatorConfig& config);
// The same allocator over expandable segments (Note [Expandable segments] in
// src/alloc/expandable_segments.hpp), also defined in src/alloc. Throws cudarc::Error when the driver or the
// device has no virtual memory management.
[[nodiscard]] std::unique_ptr<MemorySource> make_expandable_source(DeviceState& device,
                                                                   const AllocatorConfig& config);

}  // namespace cudarc::detail

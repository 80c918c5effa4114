#include "alloc/caching_source.hpp"

#include <new>

#include "core/device_state.hpp"

namespace cudarc::alloc {
namespace {

// Note [Stream identity] (core/device_state.hpp): blocks are cached under StreamState::key().
sys::Stream stream_of_key(StreamKey key) noexcept {
    if ((key & 1u) != 0) return reinterpret_cast<const detail::StreamState*>(key & ~StreamKey{1})->handle();
    return reinterpret_cast<sys::Stream>(key);
}

// The allocator's handle for a reference to a shared event (Note [Stream timelines]), and back.
EventHandle to_handle(detail::EventRef event) noexcept {
    return reinterpret_cast<EventHandle>(event.release());
}
detail::SharedEvent& shared_of(EventHandle event) noexcept {
    return *reinterpret_cast<detail::SharedEvent*>(event);
}

}  // namespace

CachingSource::CachingSource(detail::DeviceState& device, const AllocatorConfig& config, Segments segments)
    : device_(device),
      virtual_memory_(segments == Segments::expandable ? std::optional<VirtualMemory>(std::in_place, device)
                                                       : std::nullopt),
      allocator_(*this, config, segments) {}

// ---- detail::MemorySource --------------------------------------------------------------------------

detail::MemoryBlock CachingSource::allocate(std::size_t bytes, detail::StreamState& stream) {
    // Note: no block, not even a cached one, from a lost device (Note [Lost devices]).
    if (device_.lost()) device_.throw_lost();
    // Note [Capture overlay]: no cuMemAlloc from a capturing thread (it would invalidate the capture).
    try {
        const Allocation allocation = allocator_.allocate(
            bytes, stream.key(),
            detail::capture_on_this_thread() ? NewSegments::refused : NewSegments::allowed);
        if (history_.recording())
            history_.record(detail::MemoryHistory::Action::allocate, allocation.ptr, allocation.size,
                            stream.key());
        return {allocation.ptr, allocation.block};
    } catch (...) {
        device_.rethrow_current();
    }
}

void CachingSource::deallocate(const detail::MemoryBlock& block, std::size_t bytes, detail::StreamState& home,
                               std::vector<detail::StreamUse> uses) noexcept {
    const Allocation allocation{block.ptr, bytes, static_cast<Block*>(block.handle)};
    if (history_.recording() && allocation.block != nullptr) {
        // Note: an allocated block's size and stream stay as they are until it is freed.
        history_.record(detail::MemoryHistory::Action::free, block.ptr, allocation.block->size,
                        allocation.block->stream);
    }
    if (uses.empty()) {
        // Note: the hot path: same-stream reuse needs no event and no list. (A retired foreign home's
        // blocks were moved to the default stream, which waited for its final event.)
        try {
            allocator_.free(allocation);
        } catch (...) {
            defer_current();
            free_after_host_wait(allocation);
        }
        return;
    }
    std::vector<PendingUse> pending;
    bool freed = false;
    try {
        pending.reserve(uses.size() + 1);
        for (detail::StreamUse& use : uses) {
            if (use.stream.get() == &home) continue;  // same stream: reuse is ordered by the stream itself
            if (!use.event) use.event = use.stream->mark();
            if (!use.event) continue;  // a retired stream whose work is known complete
            const StreamKey key = use.event->stream_key();
            pending.push_back({key, to_handle(std::move(use.event))});
        }
        allocator_.free(allocation, pending);
        pending.clear();  // the references passed to the allocator
        freed = true;
    } catch (...) {
        defer_current();
    }
    for (const auto& use : pending) release_event(use.event);
    if (!freed) free_after_host_wait(allocation);
}

void CachingSource::retire_stream(detail::StreamState& stream) noexcept {
    // The default stream takes the retired stream's blocks over, after waiting for its final work.
    detail::StreamState& heir = *device_.default_stream_state();
    bool ordered = false;
    try {
        stream.order_before(heir);
        ordered = true;
    } catch (...) {
        defer_current();
    }
    if (!ordered) {
        // Note [Free after a failed record] (core/memory_source.hpp): the host waits for the whole device
        // instead; if that fails too, the stream's work may still use its blocks, so they stay out of
        // reach rather than go to the heir (unless the device is lost, where nothing runs any more).
        const auto scope = device_.bind_or_defer();
        const sys::Result waited = device_.api().ctx_synchronize();
        if (waited == sys::kSuccess) {
            detail::AtomicCounters::bump(device_.counters().context_synchronizes);
        } else {
            device_.defer(waited, sys::Entry::ctx_synchronize);
            if (!device_.lost()) {
                allocator_.abandon_stream(stream.key());
                return;
            }
        }
    }
    allocator_.retire_stream(stream.key(), heir.key());
}

std::optional<detail::SourceCaptureId> CachingSource::begin_capture(detail::StreamState& origin) {
    return allocator_.notify_capture_begin(origin.key());
}

void CachingSource::join_capture(detail::SourceCaptureId capture, detail::StreamState& stream) {
    allocator_.notify_capture_join(capture, stream.key());
}

void CachingSource::end_capture(detail::StreamState& origin) {
    allocator_.notify_capture_end(origin.key());
}

void CachingSource::release_capture(detail::SourceCaptureId capture,
                                    const std::shared_ptr<detail::StreamState>& last_stream) noexcept {
    std::vector<PendingUse> after;
    const auto scope = device_.bind_or_defer();
    try {
        if (last_stream) {
            // Note: mark() first: for a stream taking part in a capture, it decides where the event is
            // recorded, which event_key() then names. Note [Stream identity]: mark() works after the
            // stream's wrapper is gone.
            detail::EventRef event = last_stream->mark();
            if (event) {
                const StreamKey key = event->stream_key();
                after.push_back({key, to_handle(std::move(event))});
            }
        }
        allocator_.release_capture(capture, after);
        return;
    } catch (...) {
        defer_current();
    }
    // No event: the kept memory may be in use by a replay; wait for the device before it is reused.
    for (const auto& use : after) release_event(use.event);
    device_.synchronize_noexcept();
    try {
        allocator_.release_capture(capture);
    } catch (...) {  // NOLINT(bugprone-empty-catch): only a capture unknown to the allocator throws here
    }
}

AllocatorSnapshot CachingSource::snapshot() const {
    AllocatorSnapshot out = allocator_.snapshot();
    out.timeline = history_.events();
    return out;
}

void CachingSource::record_history(std::size_t max_entries) {
    const AllocatorStats stats = allocator_.stats();
    history_.start(max_entries, stats.allocated_bytes, stats.reserved_bytes);
}

// Peer access covers what cuMemAlloc returns, not mapped chunks (Note [Expandable segments]).
void CachingSource::grant_access(sys::Device user) {
    if (!virtual_memory_) return;
    virtual_memory_->add_peer(user);
    allocator_.visit_mapped_ranges(
        [this](DevicePtr ptr, std::size_t bytes) { virtual_memory_->set_access(ptr, bytes); });
}

// Records the exception being handled for Device::rethrow_deferred_error.
void CachingSource::defer_current() const noexcept {
    try {
        throw;
    } catch (const Error& error) {
        device_.defer(error);
    } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory while describing the failure
    }
}

// Note [Free after a failed record] (core/memory_source.hpp): a block that could not go back gated by an
// event per use goes back after a host wait for the whole device, or (that failing) stays out of reach.
void CachingSource::free_after_host_wait(const Allocation& allocation) noexcept {
    try {
        // Note: a failure to bind is deferred, and the wait tried anyway (the context is usually current).
        const auto scope = device_.bind_or_defer();
        device_.check(device_.api().ctx_synchronize(), sys::Entry::ctx_synchronize);
        detail::AtomicCounters::bump(device_.counters().context_synchronizes);
    } catch (const Error& error) {
        device_.defer(error);
        if (!device_.lost()) return;
    } catch (...) {
        return;
    }
    try {
        allocator_.free_completed(allocation);
    } catch (...) {
        defer_current();
    }
}

// ---- AllocatorBackend ------------------------------------------------------------------------------

std::optional<DevicePtr> CachingSource::allocate_segment(std::size_t bytes) {
    const sys::DriverApi& api = device_.api();
    const auto scope = device_.bind();
    DevicePtr ptr = 0;
    const sys::Result result = sys::require(api, api.mem_alloc, sys::Entry::mem_alloc)(&ptr, bytes);
    if (result == sys::kErrorOutOfMemory) return std::nullopt;
    device_.check(result, sys::Entry::mem_alloc);
    detail::AtomicCounters::bump(device_.counters().driver_allocations);
    history_.record(detail::MemoryHistory::Action::segment_allocate, ptr, bytes);
    return ptr;
}

void CachingSource::free_segment(DevicePtr ptr, std::size_t bytes) {
    const sys::DriverApi& api = device_.api();
    const auto scope = device_.bind();
    device_.check(sys::require(api, api.mem_free, sys::Entry::mem_free)(ptr), sys::Entry::mem_free);
    detail::AtomicCounters::bump(device_.counters().driver_frees);
    history_.record(detail::MemoryHistory::Action::segment_free, ptr, bytes);
}

// The expandable segments' backend: VirtualMemory, constructed when the allocator is expandable (the only
// one that calls these).
std::size_t CachingSource::mapping_granularity() {
    return virtual_memory_->granularity();
}

std::optional<DevicePtr> CachingSource::reserve_address_range(std::size_t bytes, std::size_t alignment) {
    return virtual_memory_->reserve(bytes, alignment);
}

void CachingSource::free_address_range(DevicePtr ptr, std::size_t bytes) {
    virtual_memory_->free(ptr, bytes);
}

bool CachingSource::map_chunks(DevicePtr ptr, std::size_t bytes, std::size_t chunk) {
    if (!virtual_memory_->map(ptr, bytes, chunk)) return false;
    history_.record(detail::MemoryHistory::Action::map, ptr, bytes);
    return true;
}

void CachingSource::unmap_chunk(DevicePtr ptr, std::size_t chunk) {
    virtual_memory_->unmap(ptr, chunk);
    history_.record(detail::MemoryHistory::Action::unmap, ptr, chunk);
}

void CachingSource::synchronize_device() {
    virtual_memory_->synchronize();
}

EventHandle CachingSource::record_event(StreamKey stream) {
    const auto scope = device_.bind();
    const sys::Event event = device_.record_event(stream_of_key(stream));
    auto* shared = new (std::nothrow) detail::SharedEvent(device_, event, 0, stream);
    if (shared == nullptr) {
        device_.events().release(event);
        throw std::bad_alloc();
    }
    return to_handle(detail::EventRef::adopt(shared));
}

bool CachingSource::event_completed(EventHandle event) {
    const sys::DriverApi& api = device_.api();
    const sys::Result result =
        sys::require(api, api.event_query, sys::Entry::event_query)(shared_of(event).handle());
    if (result == sys::kErrorNotReady) return false;
    device_.check(result, sys::Entry::event_query);
    return true;
}

void CachingSource::synchronize_event(EventHandle event) {
    const sys::DriverApi& api = device_.api();
    detail::AtomicCounters::bump(device_.counters().event_synchronizes);
    device_.check(
        sys::require(api, api.event_synchronize, sys::Entry::event_synchronize)(shared_of(event).handle()),
        sys::Entry::event_synchronize);
}

void CachingSource::release_event(EventHandle event) noexcept {
    if (event != nullptr) detail::EventRef::adopt(&shared_of(event));  // the reference goes here
}

bool CachingSource::stream_capturing(StreamKey stream) {
    return sys::stream_is_capturing(device_.api(), stream_of_key(stream), device_.ordinal());
}

std::pair<std::size_t, std::size_t> CachingSource::memory_info() {
    const sys::DriverApi& api = device_.api();
    const auto scope = device_.bind();
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    device_.check(sys::require(api, api.mem_get_info, sys::Entry::mem_get_info)(&free_bytes, &total_bytes),
                  sys::Entry::mem_get_info);
    return {free_bytes, total_bytes};
}

int CachingSource::device_ordinal() const noexcept {
    return device_.ordinal();
}

Backend CachingSource::backend() const noexcept {
    return device_.api().backend;
}

}  // namespace cudarc::alloc

namespace cudarc::detail {

std::unique_ptr<MemorySource> make_caching_source(DeviceState& device, const AllocatorConfig& config) {
    return std::make_unique<alloc::CachingSource>(device, config);
}

std::unique_ptr<MemorySource> make_expandable_source(DeviceState& device, const AllocatorConfig& config) {
    return std::make_unique<alloc::CachingSource>(device, config, alloc::Segments::expandable);
}

}  // namespace cudarc::detail

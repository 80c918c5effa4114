#include "alloc/caching_allocator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "cudarc/error.hpp"

namespace cudarc {

const char* to_string(AllocatorSnapshot::BlockState state) noexcept {
    switch (state) {
        case AllocatorSnapshot::BlockState::allocated:
            return "allocated";
        case AllocatorSnapshot::BlockState::awaiting_events:
            return "awaiting events";
        case AllocatorSnapshot::BlockState::held_for_graph:
            return "held for graph";
        case AllocatorSnapshot::BlockState::free:
            return "free";
        case AllocatorSnapshot::BlockState::unmapped:
            return "unmapped";
    }
    return "unknown";
}

}  // namespace cudarc

namespace cudarc::alloc {
namespace {

constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();
// Larger requests cannot be rounded to a segment size without overflowing.
constexpr std::size_t kLargestRequest = kNoLimit - kSegmentRounding;

constexpr std::size_t round_up(std::size_t value, std::size_t multiple) noexcept {
    return (value + multiple - 1) / multiple * multiple;
}

constexpr std::size_t segment_size_for(std::size_t size) noexcept {
    if (size <= kSmallRequestLimit) return kSmallSegmentSize;
    if (size < kMidRequestLimit) return kLargeSegmentSize;
    return round_up(size, kSegmentRounding);
}

}  // namespace

CachingAllocator::CachingAllocator(AllocatorBackend& backend, const AllocatorConfig& config,
                                   Segments segments)
    : backend_(backend),
      config_(config),
      kind_(segments),
      max_split_(segments == Segments::expandable ? kNoLimit : config.max_split_size),
      reserve_limit_(kNoLimit) {
    if (!(config.memory_fraction > 0.0 && config.memory_fraction <= 1.0)) {
        throw Error(fmt::format("cudarc: AllocatorConfig::memory_fraction must be in (0, 1], got {}",
                                config.memory_fraction));
    }
    if (config.max_split_size < kLargeSegmentSize) {
        throw Error(
            fmt::format("cudarc: AllocatorConfig::max_split_size must be at least {} bytes (a large "
                        "segment), got {}",
                        kLargeSegmentSize, config.max_split_size));
    }
    if (config.memory_fraction < 1.0 || kind_ == Segments::expandable) {
        const std::size_t total = backend_.memory_info().second;
        if (config.memory_fraction < 1.0)
            reserve_limit_ = static_cast<std::size_t>(static_cast<double>(total) * config.memory_fraction);
        if (kind_ == Segments::expandable) {
            const std::size_t granularity = backend_.mapping_granularity();
            layout_ = ExpandableLayout::for_device(granularity, total);
            if (layout_.large_range == 0) {
                throw Error(fmt::format(
                    "cudarc: the driver maps device memory in multiples of {} bytes, which is not a power of "
                    "two; expandable segments need one (use MemorySource::caching_allocator)",
                    granularity));
            }
        }
    }
}

CachingAllocator::~CachingAllocator() {
    // Note: nothing can wait for events any more; their blocks' memory goes back with the segments.
    for (StreamQueue& queue : pending_) {
        for (std::size_t i = queue.head; i < queue.events.size(); ++i) {
            backend_.release_event(queue.events[i].event);
        }
    }
    // Note [Expandable segments]: unmapping does not wait for queued work on the memory; freeing does.
    if (kind_ == Segments::expandable && stats_.reserved_bytes != 0) {
        try {
            backend_.synchronize_device();
        } catch (...) {  // NOLINT(bugprone-empty-catch): a lost device runs nothing any more
        }
    }
    for (Block* head : segments_) {
        if (head->expandable) {
            destroy_expandable(head);
        } else {
            try {
                backend_.free_segment(head->ptr, head->segment_size);
            } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw; the memory is lost
            }
        }
        for (Block* block = head; block != nullptr;) delete std::exchange(block, block->next);
    }
    while (spare_blocks_ != nullptr) delete std::exchange(spare_blocks_, spare_blocks_->next);
}

// ---------------------------------------------------------------------------------------------
// Allocation

Allocation CachingAllocator::allocate(std::size_t bytes, StreamKey stream, NewSegments new_segments) {
    if (bytes == 0) return {};
    std::lock_guard lock(mutex_);
    if (bytes > kLargestRequest) throw_out_of_memory(bytes);
    const std::size_t size = round_up(bytes, kMinBlockSize);
    const bool small = size <= kSmallRequestLimit;

    if (pending_count_ != 0 && captures_underway_ == 0) process_completed_events();
    Block* block = take_cached_block(size, stream, small);
    if (block != nullptr) {
        ++stats_.cache_hits;
    } else if (new_segments == NewSegments::refused && kind_ == Segments::expandable) {
        throw Error(fmt::format(
            "cudarc: allocating {} bytes inside a graph capture needs device memory mapped into the stream's "
            "expandable {} segment, and {} / {} would invalidate the capture; allocate buffers of this size "
            "on "
            "this stream once before capturing (freed blocks stay mapped), or use "
            "MemorySource::stream_ordered",
            bytes, small ? "small-pool" : "large-pool",
            sys::entry_name(backend_.backend(), sys::Entry::mem_create),
            sys::entry_name(backend_.backend(), sys::Entry::mem_map)));
    } else if (new_segments == NewSegments::refused) {
        throw Error(fmt::format(
            "cudarc: allocating {} bytes inside a graph capture needs a new {} segment from the driver, and "
            "{} would invalidate the capture; allocate buffers of this size on this stream once before "
            "capturing (freed blocks stay cached), or use MemorySource::stream_ordered",
            bytes, small ? "small-pool" : "large-pool",
            sys::entry_name(backend_.backend(), sys::Entry::mem_alloc)));
    } else {
        ++stats_.cache_misses;
        block = allocate_with_escalation(size, stream, small);
    }
    return hand_out(block, size, stream);
}

Block* CachingAllocator::take_cached_block(std::size_t size, StreamKey stream, bool small) {
    FreeBlocks& pool = small ? small_blocks_ : large_blocks_;
    const auto it = pool.lower_bound(FreeBlockOrder::Key{stream, size});
    if (it == pool.end() || it->stream != stream) return nullptr;
    Block* block = it->block;
    // Note: an oversize block serves only oversize requests that waste little of it. Both rules reject
    // a block for being too big, so no later (larger) candidate could pass either.
    if (block->size > max_split_) {
        if (size <= max_split_) return nullptr;
        if (block->size - size >= config_.oversize_reuse_margin) return nullptr;
    }
    take(block);
    return block;
}

Block* CachingAllocator::new_memory(std::size_t size, StreamKey stream, bool small) {
    return kind_ == Segments::expandable ? grow(size, stream, small) : allocate_segment(size, stream, small);
}

Block* CachingAllocator::allocate_segment(std::size_t size, StreamKey stream, bool small) {
    const std::size_t bytes = segment_size_for(size);
    if (bytes > reserve_limit_ || stats_.reserved_bytes > reserve_limit_ - bytes) return nullptr;
    const std::optional<DevicePtr> ptr = backend_.allocate_segment(bytes);
    if (!ptr) return nullptr;

    Block* head = nullptr;
    bool registered = false;
    try {
        head = new_block();
        head->ptr = *ptr;
        head->size = bytes;
        head->segment_size = bytes;
        head->stream = stream;
        head->small_pool = small;
        segments_.insert(head);
        registered = true;
        insert_free(head);  // gives the head its set node; hand_out takes it straight out again
    } catch (...) {
        if (registered) segments_.erase(head);
        if (head != nullptr) recycle(head);
        try {
            backend_.free_segment(*ptr, bytes);
        } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one to report
        }
        throw;
    }
    take(head);
    stats_.reserved_bytes += bytes;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    ++stats_.segments;
    ++stats_.driver_allocations;
    return head;
}

// Out of memory: (1) give wholly free cached segments back and retry; (2) wait for the events of
// pending frees, reuse or give back what they release, and retry; (3) throw. While a capture is under
// way neither (1) nor (2) is allowed: no driver free, no event wait.
// Expandable segments follow the same steps (Note [Expandable segments]): what is given back is free chunks.
Block* CachingAllocator::allocate_with_escalation(std::size_t size, StreamKey stream, bool small) {
    if (Block* block = new_memory(size, stream, small)) return block;
    const bool capturing = captures_underway_ > 0 || backend_.stream_capturing(stream);
    if (!capturing) {
        if (release_cached_memory() > 0) {
            ++stats_.oom_retries;
            if (Block* block = new_memory(size, stream, small)) return block;
        }
        if (pending_count_ > 0) {
            synchronize_pending_events();
            ++stats_.oom_retries;
            if (Block* block = take_cached_block(size, stream, small)) {
                ++stats_.cache_hits;
                return block;
            }
            release_cached_memory();
            if (Block* block = new_memory(size, stream, small)) return block;
        }
    }
    throw_out_of_memory(size);
}

Allocation CachingAllocator::hand_out(Block* block, std::size_t size, StreamKey stream) {
    if (worth_splitting(*block, size)) {
        try {
            split(block, size);
        } catch (...) {
            return_to_pool(block);
            throw;
        }
    }
    block->state = BlockState::allocated;
    block->capture_id = 0;
    if (captures_underway_ > 0) {
        if (const Capture* capture = underway_capture_on(stream)) block->capture_id = capture->id;
    }
    stats_.allocated_bytes += block->size;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    ++stats_.live_allocations;
    return Allocation{block->ptr, block->size, block};
}

bool CachingAllocator::worth_splitting(const Block& block, std::size_t size) const noexcept {
    if (block.size > max_split_) return false;
    const std::size_t remainder = block.size - size;
    // Note: a large-pool remainder of 1 MiB or less would only ever serve small requests, which the
    // large pool does not take; keeping it attached avoids stranding it.
    return block.small_pool ? remainder >= kMinBlockSize : remainder > kSmallRequestLimit;
}

void CachingAllocator::split(Block* block, std::size_t size) {
    Block* rest = new_block();
    rest->ptr = block->ptr + size;
    rest->size = block->size - size;
    rest->stream = block->stream;
    rest->small_pool = block->small_pool;
    try {
        insert_free(rest);
    } catch (...) {
        recycle(rest);
        throw;
    }
    rest->prev = block;
    rest->next = block->next;
    if (block->next != nullptr) block->next->prev = rest;
    block->next = rest;
    block->size = size;
}

// ---------------------------------------------------------------------------------------------
// Free lists

void CachingAllocator::insert_free(Block* block) {
    FreeBlocks& pool = pool_of(*block);
    block->state = BlockState::free;
    const FreeEntry entry{block->stream, block->size, block->ptr, block};
    if (!block->node.empty()) {
        block->node.value() = entry;
        block->position = pool.insert(std::move(block->node)).position;
    } else {
        block->position = pool.insert(entry).first;
    }
}

void CachingAllocator::take(Block* block) noexcept {
    block->node = pool_of(*block).extract(block->position);
}

void CachingAllocator::absorb_next(Block* block) noexcept {
    Block* next = block->next;
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    recycle(next);
}

void CachingAllocator::return_to_pool(Block* block) noexcept {
    if (block->out_of_reach) {
        // abandon_stream: held for good, its neighbours kept apart.
        block->state = BlockState::held;
        held_bytes_ += block->size;
        return;
    }
    // Note: only free neighbours merge; allocated and held ones keep their boundaries.
    if (Block* prev = block->prev; prev != nullptr && prev->state == BlockState::free) {
        take(prev);
        absorb_next(prev);
        block = prev;
    }
    if (Block* next = block->next; next != nullptr && next->state == BlockState::free) {
        take(next);
        absorb_next(block);
    }
    // Every block that reaches here has been in a pool before and owns its node: no allocation.
    insert_free(block);
}

void CachingAllocator::release_hold(Block* block) noexcept {
    if (block->event_holds > 0 || block->graph_holds > 0) return;
    held_bytes_ -= block->size;
    return_to_pool(block);
}

std::size_t CachingAllocator::release_cached_memory() {
    return kind_ == Segments::expandable ? release_unused_chunks() : release_cached_segments();
}

std::size_t CachingAllocator::release_cached_segments() {
    std::size_t released = 0;
    for (auto it = segments_.begin(); it != segments_.end();) {
        Block* head = *it;
        if (head->expandable || !head->is_whole_segment() || head->state != BlockState::free) {
            ++it;
            continue;
        }
        backend_.free_segment(head->ptr, head->segment_size);  // on failure nothing has changed
        take(head);
        it = segments_.erase(it);
        stats_.reserved_bytes -= head->segment_size;
        --stats_.segments;
        ++stats_.driver_frees;
        released += head->segment_size;
        recycle(head);
    }
    return released;
}

Block* CachingAllocator::new_block() {
    if (spare_blocks_ == nullptr) return new Block{};
    Block* block = std::exchange(spare_blocks_, spare_blocks_->next);
    block->next = nullptr;
    return block;
}

void CachingAllocator::recycle(Block* block) noexcept {
    // Keep the set node and the vector's capacity: the next split reuses both.
    block->ptr = 0;
    block->size = 0;
    block->stream = 0;
    block->prev = nullptr;
    block->segment_size = 0;
    block->expandable = false;
    block->small_pool = false;
    block->state = BlockState::free;
    block->event_holds = 0;
    block->graph_holds = 0;
    block->capture_id = 0;
    block->used_streams.clear();
    block->out_of_reach = false;
    block->next = spare_blocks_;
    spare_blocks_ = block;
}

// ---------------------------------------------------------------------------------------------
// Free and stream uses

void CachingAllocator::free(const Allocation& allocation, std::span<const PendingUse> uses) {
    if (allocation.block == nullptr) {
        if (allocation.ptr == 0) return;  // a zero-byte allocation
        throw Error(fmt::format("cudarc: free of {:#x}, which the caching allocator did not hand out",
                                allocation.ptr));
    }
    std::lock_guard lock(mutex_);
    Block* block = allocation.block;
    if (block->state != BlockState::allocated || block->ptr != allocation.ptr) {
        throw Error(fmt::format("cudarc: free of {:#x}, which is not a live allocation (freed twice?)",
                                allocation.ptr));
    }
    // Fast path: no other stream used it and no capture is involved, so it is reusable at once on its
    // own stream (later work there is ordered after the earlier uses).
    if (uses.empty() && block->used_streams.empty() && captures_.empty()) {
        stats_.allocated_bytes -= block->size;
        --stats_.live_allocations;
        return_to_pool(block);
        return;
    }
    free_locked(block, uses);
}

void CachingAllocator::free_completed(const Allocation& allocation) {
    if (allocation.block == nullptr && allocation.ptr == 0) return;  // a zero-byte allocation
    std::lock_guard lock(mutex_);
    Block* block = allocation.block;
    if (block == nullptr || block->state != BlockState::allocated || block->ptr != allocation.ptr) {
        throw Error(fmt::format("cudarc: free of {:#x}, which is not a live allocation (freed twice?)",
                                allocation.ptr));
    }
    block->used_streams.clear();  // their work has completed
    if (captures_.empty()) {
        stats_.allocated_bytes -= block->size;
        --stats_.live_allocations;
        return_to_pool(block);
        return;
    }
    free_locked(block, {});
}

void CachingAllocator::free_locked(Block* block, std::span<const PendingUse> uses) {
    // Phase 1 may throw and changes nothing visible: record events for record_stream users, find the
    // captures that must keep the block, and reserve room for everything the commit will store.
    std::vector<PendingUse> recorded;
    std::vector<Capture*> holders;
    const auto add_holder = [&](Capture* capture) {
        if (capture != nullptr && std::find(holders.begin(), holders.end(), capture) == holders.end()) {
            holders.push_back(capture);
        }
    };
    try {
        if (block->capture_id != 0) add_holder(find_capture(block->capture_id));
        if (captures_underway_ > 0) {
            add_holder(underway_capture_on(block->stream));
            for (const PendingUse& use : uses) add_holder(underway_capture_on(use.stream));
            for (StreamKey stream : block->used_streams) add_holder(underway_capture_on(stream));
        }
        // Streams named by record_stream, or by a use without an event, get an event recorded now.
        // Note: none on a capturing stream (it could not be queried); the capture holds the block.
        const auto record_on = [&](StreamKey stream) {
            if (stream == block->stream || is_being_captured(stream)) return;
            for (const PendingUse& r : recorded) {
                if (r.stream == stream) return;
            }
            recorded.push_back(PendingUse{stream, backend_.record_event(stream)});
        };
        recorded.reserve(block->used_streams.size() + uses.size());
        for (StreamKey stream : block->used_streams) record_on(stream);
        for (const PendingUse& use : uses) {
            if (use.event == nullptr) record_on(use.stream);
        }
        for (Capture* capture : holders) capture->held.reserve(capture->held.size() + 1);
        reserve_queue_space(uses);
        reserve_queue_space(recorded);
    } catch (...) {
        for (const PendingUse& use : recorded) backend_.release_event(use.event);
        throw;
    }

    // Phase 2 cannot fail.
    block->used_streams.clear();  // they are covered by `recorded` now; the next owner starts afresh
    stats_.allocated_bytes -= block->size;
    --stats_.live_allocations;
    block->state = BlockState::held;
    block->event_holds = 0;
    block->graph_holds = 0;
    for (Capture* capture : holders) {
        capture->held.push_back(block);
        ++block->graph_holds;
    }
    const auto route = [&](const PendingUse& use) {
        // An event recorded inside a capture cannot be queried; the capture holds the block anyway.
        // Note: an event on the block's own stream is honoured too: the caller passes one when the
        // stream's identity may not last (a foreign stream whose handle value could be reused).
        if (is_being_captured(use.stream)) {
            backend_.release_event(use.event);
            return;
        }
        push_pending(use.stream, PendingEvent{use.event, block, nullptr});
        ++block->event_holds;
    };
    for (const PendingUse& use : uses) {
        if (use.event != nullptr) route(use);
    }
    for (const PendingUse& use : recorded) route(use);
    held_bytes_ += block->size;
    release_hold(block);
}

void CachingAllocator::record_stream(const Allocation& allocation, StreamKey stream) {
    if (allocation.block == nullptr && allocation.ptr == 0) return;  // a zero-byte allocation
    std::lock_guard lock(mutex_);
    Block* block = allocation.block;
    if (block == nullptr || block->state != BlockState::allocated || block->ptr != allocation.ptr) {
        throw Error(
            fmt::format("cudarc: record_stream on {:#x}, which is not a live allocation", allocation.ptr));
    }
    add_user_stream(block, stream);
}

void CachingAllocator::record_stream(DevicePtr ptr, StreamKey stream) {
    std::lock_guard lock(mutex_);
    Block* block = find_live_block(ptr);
    if (block == nullptr) {
        throw Error(
            fmt::format("cudarc: record_stream on {:#x}, which is not inside a live allocation", ptr));
    }
    add_user_stream(block, stream);
}

void CachingAllocator::add_user_stream(Block* block, StreamKey stream) {
    if (stream == block->stream) return;  // its own stream orders its later work already
    if (std::find(block->used_streams.begin(), block->used_streams.end(), stream) !=
        block->used_streams.end()) {
        return;
    }
    block->used_streams.push_back(stream);
}

Block* CachingAllocator::find_live_block(DevicePtr ptr) const noexcept {
    auto it = segments_.upper_bound(ptr);
    if (it == segments_.begin()) return nullptr;
    const Block* head = *std::prev(it);
    if (ptr - head->ptr >= head->segment_size) return nullptr;
    for (Block* block = *std::prev(it); block != nullptr; block = block->next) {
        if (ptr >= block->ptr && ptr - block->ptr < block->size) {
            return block->state == BlockState::allocated ? block : nullptr;
        }
    }
    return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Pending events

CachingAllocator::StreamQueue& CachingAllocator::queue_for(StreamKey stream) {
    for (StreamQueue& queue : pending_) {
        if (queue.stream == stream) return queue;
    }
    // Note: empty queues are kept (with their capacity) for the next free; streams are few.
    return pending_.emplace_back(StreamQueue{stream, {}, 0});
}

void CachingAllocator::reserve_queue_space(std::span<const PendingUse> uses) {
    for (const PendingUse& use : uses) queue_for(use.stream);  // may grow pending_: look up again below
    for (const PendingUse& use : uses) {
        std::vector<PendingEvent>& events = queue_for(use.stream).events;
        const std::size_t needed = events.size() + uses.size();
        if (events.capacity() < needed) events.reserve(std::max(needed, 2 * events.capacity()));
    }
}

void CachingAllocator::push_pending(StreamKey stream, const PendingEvent& pending) noexcept {
    for (StreamQueue& queue : pending_) {
        if (queue.stream == stream) {
            queue.events.push_back(pending);  // capacity reserved beforehand: cannot throw
            ++pending_count_;
            return;
        }
    }
}

void CachingAllocator::pop_front(StreamQueue& queue) noexcept {
    ++queue.head;
    --pending_count_;
    if (queue.empty()) {
        queue.events.clear();
        queue.head = 0;
    } else if (queue.head >= 64 && queue.head * 2 >= queue.events.size()) {
        queue.events.erase(queue.events.begin(),
                           queue.events.begin() + static_cast<std::ptrdiff_t>(queue.head));
        queue.head = 0;
    }
}

void CachingAllocator::process_completed_events() {
    for (StreamQueue& queue : pending_) {
        // Stop at the first incomplete event: later ones on the same stream cannot be complete.
        while (!queue.empty()) {
            const PendingEvent pending = queue.events[queue.head];
            if (!backend_.event_completed(pending.event)) break;
            pop_front(queue);
            backend_.release_event(pending.event);
            complete(pending);
        }
    }
    drop_retired_queues();
}

void CachingAllocator::drop_retired_queues() noexcept {
    std::erase_if(pending_, [](const StreamQueue& queue) { return queue.retired && queue.empty(); });
}

void CachingAllocator::retire_stream(StreamKey from, StreamKey to) noexcept {
    if (from == to) return;
    std::lock_guard lock(mutex_);
    for (Block* head : segments_) {
        for (Block* block = head; block != nullptr; block = block->next) {
            std::vector<StreamKey>& users = block->used_streams;
            if (const auto it = std::find(users.begin(), users.end(), from); it != users.end()) {
                // `to` waited for `from`'s work, so an event recorded on `to` at the free covers that use.
                // Note: changed in place or erased, never appended: no allocation.
                if (std::find(users.begin(), users.end(), to) != users.end()) {
                    users.erase(it);
                } else {
                    *it = to;
                }
            }
            if (block->stream == from) {
                if (block->state == BlockState::free) {
                    take(block);
                    block->stream = to;
                    insert_free(block);  // reuses the block's own node: no allocation
                } else {
                    block->stream = to;
                }
            }
            std::erase(users, block->stream);  // its own stream orders its later work anyway
        }
    }
    for (StreamQueue& queue : pending_) {
        if (queue.stream == from) queue.retired = true;
    }
    drop_retired_queues();
}

void CachingAllocator::abandon_stream(StreamKey from) noexcept {
    std::lock_guard lock(mutex_);
    for (Block* head : segments_) {
        for (Block* block = head; block != nullptr; block = block->next) {
            std::vector<StreamKey>& users = block->used_streams;
            const auto it = std::find(users.begin(), users.end(), from);
            if (block->stream != from && it == users.end()) continue;
            if (it != users.end()) users.erase(it);  // never recorded on: the handle may be gone
            block->out_of_reach = true;
            if (block->state == BlockState::free) {
                take(block);
                return_to_pool(block);  // held for good
            }
        }
    }
    for (StreamQueue& queue : pending_) {
        if (queue.stream == from) queue.retired = true;  // its events may still be queried
    }
    drop_retired_queues();
}

void CachingAllocator::synchronize_pending_events() {
    for (StreamQueue& queue : pending_) {
        while (!queue.empty()) {
            const PendingEvent pending = queue.events[queue.head];
            ++stats_.event_synchronizations;
            backend_.synchronize_event(pending.event);
            pop_front(queue);
            backend_.release_event(pending.event);
            complete(pending);
        }
    }
    drop_retired_queues();
}

void CachingAllocator::complete(const PendingEvent& pending) noexcept {
    if (pending.block != nullptr) {
        --pending.block->event_holds;
        release_hold(pending.block);
    } else if (pending.capture != nullptr && --pending.capture->pending_events == 0) {
        finish_capture(pending.capture);
    }
}

// ---------------------------------------------------------------------------------------------
// Graph capture

bool CachingAllocator::is_being_captured(StreamKey stream) const noexcept {
    return captures_underway_ > 0 && underway_capture_on(stream) != nullptr;
}

CachingAllocator::Capture* CachingAllocator::find_capture(CaptureId id) const noexcept {
    for (const auto& capture : captures_) {
        if (capture->id == id) return capture.get();
    }
    return nullptr;
}

CachingAllocator::Capture* CachingAllocator::underway_capture_on(StreamKey stream) const noexcept {
    for (const auto& capture : captures_) {
        if (!capture->underway) continue;
        if (capture->stream == stream ||
            std::find(capture->joined.begin(), capture->joined.end(), stream) != capture->joined.end()) {
            return capture.get();
        }
    }
    return nullptr;
}

CaptureId CachingAllocator::notify_capture_begin(StreamKey stream) {
    std::lock_guard lock(mutex_);
    if (underway_capture_on(stream) != nullptr) {
        throw Error(fmt::format(
            "cudarc: stream {:#x} is already being captured: end the capture under way first (let its "
            "cudarc::capture body return), or capture on another stream (stream.fork() gives one)",
            stream));
    }
    auto capture = std::make_unique<Capture>();
    capture->id = next_capture_id_;
    capture->stream = stream;
    captures_.push_back(std::move(capture));
    ++next_capture_id_;
    ++captures_underway_;
    return captures_.back()->id;
}

void CachingAllocator::notify_capture_join(CaptureId id, StreamKey stream) {
    std::lock_guard lock(mutex_);
    Capture* capture = find_capture(id);
    if (capture == nullptr || !capture->underway) {
        throw Error(fmt::format("cudarc: notify_capture_join({}): no such capture under way", id));
    }
    if (capture->stream == stream ||
        std::find(capture->joined.begin(), capture->joined.end(), stream) != capture->joined.end()) {
        return;
    }
    capture->joined.push_back(stream);
}

CaptureId CachingAllocator::notify_capture_end(StreamKey stream) {
    std::lock_guard lock(mutex_);
    Capture* capture = underway_capture_on(stream);
    if (capture == nullptr) throw Error(fmt::format("cudarc: stream {:#x} is not being captured", stream));
    capture->underway = false;
    --captures_underway_;
    return capture->id;
}

void CachingAllocator::release_capture(CaptureId id, std::span<const PendingUse> after) {
    std::lock_guard lock(mutex_);
    Capture* capture = find_capture(id);
    if (capture == nullptr || capture->released) {
        throw Error(fmt::format("cudarc: release_capture({}): no such capture, or released already", id));
    }
    if (capture->underway) {
        throw Error(
            fmt::format("cudarc: release_capture({}): the capture is still under way; end it first", id));
    }
    reserve_queue_space(after);
    capture->released = true;
    for (const PendingUse& use : after) {
        if (is_being_captured(use.stream)) {
            backend_.release_event(use.event);
            continue;
        }
        push_pending(use.stream, PendingEvent{use.event, nullptr, capture});
        ++capture->pending_events;
    }
    if (capture->pending_events == 0) finish_capture(capture);
}

void CachingAllocator::finish_capture(Capture* capture) noexcept {
    for (Block* block : capture->held) {
        --block->graph_holds;
        release_hold(block);
    }
    const auto it = std::find_if(captures_.begin(), captures_.end(),
                                 [capture](const auto& owned) { return owned.get() == capture; });
    if (it != captures_.end()) captures_.erase(it);
}

// ---------------------------------------------------------------------------------------------
// Stats and controls

void CachingAllocator::throw_out_of_memory(std::size_t size) {
    ++stats_.out_of_memory_errors;
    OutOfMemory::Figures figures;
    figures.requested = size;
    figures.allocated = stats_.allocated_bytes;
    figures.reserved = stats_.reserved_bytes;
    if (kind_ == Segments::expandable) {
        figures.mapped = stats_.reserved_bytes;
        figures.address_space = stats_.address_space_bytes;
    }
    figures.largest_free = largest_free_block();
    try {
        std::tie(figures.device_free, figures.device_total) = backend_.memory_info();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the figures stay zero; out of memory is the error
    }
    throw OutOfMemory(backend_.device_ordinal(), figures);
}

AllocatorStats CachingAllocator::stats() const {
    std::lock_guard lock(mutex_);
    AllocatorStats out = stats_;
    out.active_bytes = stats_.allocated_bytes + held_bytes_;
    return out;
}

void CachingAllocator::reset_peak() {
    std::lock_guard lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

std::size_t CachingAllocator::empty_cache() {
    std::lock_guard lock(mutex_);
    if (captures_underway_ > 0) return 0;
    if (pending_count_ != 0) process_completed_events();
    const std::size_t released = release_cached_memory();
    if (kind_ == Segments::expandable) free_unmapped_ranges();
    return released;
}

AllocatorSnapshot CachingAllocator::snapshot() const {
    std::lock_guard lock(mutex_);
    AllocatorSnapshot out;
    out.source = kind_ == Segments::expandable ? "expandable" : "caching_allocator";
    out.segments.reserve(segments_.size());
    for (const Block* head : segments_) {
        AllocatorSnapshot::Segment& segment = out.segments.emplace_back();
        segment.address = head->ptr;
        segment.size = head->segment_size;
        segment.stream = head->stream;
        segment.small_pool = head->small_pool;
        segment.expandable = head->expandable;
        segment.mapped_bytes = mapped_bytes_of(head);
        for (const Block* block = head; block != nullptr; block = block->next) {
            AllocatorSnapshot::BlockState state = AllocatorSnapshot::BlockState::free;
            if (block->state == BlockState::allocated) {
                state = AllocatorSnapshot::BlockState::allocated;
            } else if (block->state == BlockState::unmapped) {
                state = AllocatorSnapshot::BlockState::unmapped;
            } else if (block->state == BlockState::held) {
                state = block->graph_holds > 0 ? AllocatorSnapshot::BlockState::held_for_graph
                                               : AllocatorSnapshot::BlockState::awaiting_events;
            }
            segment.blocks.push_back(AllocatorSnapshot::Block{block->ptr, block->size, state, block->stream});
        }
    }
    return out;
}

}  // namespace cudarc::alloc

// The per-device caching allocator: pools of driver segments split into blocks, reused per stream,
// never handed out while another stream may still use them. docs/allocator.md has the rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <set>
#include <span>
#include <vector>

#include "alloc/backend.hpp"
#include "alloc/block.hpp"
#include "alloc/expandable_segments.hpp"
#include "cudarc/allocator.hpp"

namespace cudarc::alloc {

// Sizes that shape the pools (see docs/allocator.md).
inline constexpr std::size_t kMinBlockSize = 512;  // every request is rounded up to this
inline constexpr std::size_t kSmallRequestLimit = std::size_t{1} << 20;  // <= this: small pool
inline constexpr std::size_t kSmallSegmentSize = std::size_t{2} << 20;   // small pool's segments
inline constexpr std::size_t kLargeSegmentSize = std::size_t{20} << 20;  // for large requests below:
inline constexpr std::size_t kMidRequestLimit = std::size_t{10} << 20;
inline constexpr std::size_t kSegmentRounding = std::size_t{2} << 20;  // larger requests round to this

// What allocate() hands out. `size` is the block's size (at least the request rounded up to 512).
// Note: `block` is the allocator's own record; pass the Allocation back unchanged to free() and
// record_stream(). A zero-byte request gives {0, 0, nullptr}, whose free is a no-op.
struct Allocation {
    DevicePtr ptr = 0;
    std::size_t size = 0;
    Block* block = nullptr;
};

// Identifies one graph capture between notify_capture_begin() and release_capture().
using CaptureId = std::uint64_t;

// Whether an allocation may ask the driver for new memory (a segment, or chunks mapped into an expandable
// one). During a graph capture it may not: in the capture's thread-local mode such a call from the
// capturing thread invalidates the capture.
enum class NewSegments { allowed, refused };

// Where segments come from.
enum class Segments {
    fixed,       // one driver allocation each (AllocatorBackend::allocate_segment)
    expandable,  // address ranges that grow in place (Note [Expandable segments])
};

class CachingAllocator {
  public:
    // `backend` must outlive the allocator (its destructor still calls it). Throws cudarc::Error when the
    // configuration is invalid, or (Segments::expandable) the backend's granularity is unusable.
    explicit CachingAllocator(AllocatorBackend& backend, const AllocatorConfig& config = {},
                              Segments segments = Segments::fixed);
    CachingAllocator(const CachingAllocator&) = delete;
    CachingAllocator& operator=(const CachingAllocator&) = delete;
    // Returns every segment to the driver and every pending event to the pool. Never throws.
    // Note: allocations still live become invalid; the device destroys it only after its buffers.
    ~CachingAllocator();

    // A block of at least `bytes` for work on `stream`. Throws cudarc::OutOfMemory when the request
    // cannot be met even after freeing the cache and waiting for pending frees.
    // With NewSegments::refused, a request that no cached block can serve throws cudarc::Error (naming the
    // size and the capture) and changes nothing.
    [[nodiscard]] Allocation allocate(std::size_t bytes, StreamKey stream,
                                      NewSegments new_segments = NewSegments::allowed);

    // Gives a block back. Without uses it is reusable at once on its own stream; otherwise it waits
    // until every use's event has completed (an event on its own stream too: pass none for an owned
    // stream, whose later work is ordered anyway). A use without an event on another stream gets one
    // recorded now. Takes ownership of the events (only when it returns normally).
    // Throws cudarc::Error, changing nothing, on a double free.
    void free(const Allocation& allocation, std::span<const PendingUse> uses = {});
    // Gives a block back whose every use has completed (the caller waited for the device), so that no
    // event is needed: what record_stream named is forgotten. A capture under way may still hold it.
    // Throws cudarc::Error, changing nothing, on a double free.
    void free_completed(const Allocation& allocation);

    // Marks `stream` as a user of the allocation: at free(), an event is recorded on it and the
    // block waits for it. For raw-pointer users that hazard tracking does not see.
    void record_stream(const Allocation& allocation, StreamKey stream);
    // The same, for the live allocation that contains `ptr`; throws cudarc::Error if there is none.
    void record_stream(DevicePtr ptr, StreamKey stream);

    // `from` names a stream that is going away: its segments (free, held and allocated blocks alike) and
    // record_stream entries move to `to`, so that nothing is cached under `from` any more. The caller has
    // made `to` wait for `from`'s work first. Never throws.
    void retire_stream(StreamKey from, StreamKey to) noexcept;
    // `from` names a stream that is going away whose work could not be ordered before any other stream's,
    // nor waited for (Note [Free after a failed record] in core/memory_source.hpp): every block of its
    // segments, and every block it used through record_stream, stays out of reach, never handed out again
    // (the free ones at once, the others when freed); the memory returns to the driver only with the
    // allocator. Nothing is cached under `from` any more. Never throws.
    void abandon_stream(StreamKey from) noexcept;

    // Graph capture. While any capture is under way the allocator queries no event, synchronizes
    // nothing and frees no segment. Blocks allocated during a capture, or freed while their stream
    // or a using stream is being captured, are held until release_capture() (the graph may replay
    // work on them), then wait for `after` (events recorded after the graph's last launch).
    CaptureId notify_capture_begin(StreamKey stream);
    // `stream` takes part in capture `capture` from now on (a stream forked from or joining the capturing
    // one): what is allocated or freed on it is treated as on the capturing stream, until the capture ends.
    void notify_capture_join(CaptureId capture, StreamKey stream);
    CaptureId notify_capture_end(StreamKey stream);
    void release_capture(CaptureId capture, std::span<const PendingUse> after = {});

    [[nodiscard]] AllocatorStats stats() const;
    void reset_peak();
    // Returns wholly free segments to the driver (expandable segments: unmaps the chunks free blocks cover;
    // none while a capture is under way). Returns the number of bytes of device memory given back.
    std::size_t empty_cache();
    [[nodiscard]] AllocatorSnapshot snapshot() const;
    // Calls `visit` for every maximal mapped range of the expandable segments, under the allocator's lock
    // (so that nothing is mapped or unmapped meanwhile).
    void visit_mapped_ranges(const std::function<void(DevicePtr, std::size_t)>& visit) const;

    [[nodiscard]] const AllocatorConfig& config() const noexcept { return config_; }
    [[nodiscard]] Segments segment_kind() const noexcept { return kind_; }
    [[nodiscard]] const ExpandableLayout& layout() const noexcept { return layout_; }

  private:
    struct Capture {
        CaptureId id = 0;
        StreamKey stream = 0;
        std::vector<StreamKey> joined;  // other streams taking part
        bool underway = true;
        bool released = false;
        int pending_events = 0;    // events given to release_capture() not yet completed
        std::vector<Block*> held;  // freed blocks this capture keeps back
    };
    // An event that holds back either one freed block or every block a released capture kept.
    struct PendingEvent {
        EventHandle event = nullptr;
        Block* block = nullptr;
        Capture* capture = nullptr;
    };
    // Events recorded on one stream, oldest first: once one is incomplete, so are the later ones.
    // Note: a vector with a head index rather than a deque, so that capacity can be reserved before
    // a free commits anything (the commit then cannot fail half way).
    struct StreamQueue {
        StreamKey stream = 0;
        std::vector<PendingEvent> events;
        std::size_t head = 0;
        bool retired = false;  // its stream is gone: dropped once empty
        [[nodiscard]] bool empty() const noexcept { return head == events.size(); }
    };

    // All private members below expect mutex_ held.
    [[nodiscard]] FreeBlocks& pool_of(const Block& block) noexcept {
        return block.small_pool ? small_blocks_ : large_blocks_;
    }
    Block* take_cached_block(std::size_t size, StreamKey stream, bool small);
    // A new segment (fixed), or growth of an expandable one; nullptr when the device is out of memory.
    Block* new_memory(std::size_t size, StreamKey stream, bool small);
    Block* allocate_segment(std::size_t size, StreamKey stream, bool small);
    Block* allocate_with_escalation(std::size_t size, StreamKey stream, bool small);
    Allocation hand_out(Block* block, std::size_t size, StreamKey stream);
    [[nodiscard]] bool worth_splitting(const Block& block, std::size_t size) const noexcept;
    void split(Block* block, std::size_t size);
    void insert_free(Block* block);
    void take(Block* block) noexcept;
    // `block`'s next block (taken out of its free set) becomes part of `block`.
    void absorb_next(Block* block) noexcept;
    void return_to_pool(Block* block) noexcept;
    void release_hold(Block* block) noexcept;
    std::size_t release_cached_segments();
    // What the out-of-memory path and empty_cache() give back: wholly free segments, or free chunks.
    std::size_t release_cached_memory();

    // Expandable segments (expandable_segments.cpp; Note [Expandable segments]).
    Block* grow(std::size_t size, StreamKey stream, bool small);
    Block* reserve_range(StreamKey stream, bool small);
    Block* map_run(Block* start, std::size_t size, bool small);
    std::size_t release_unused_chunks();
    // Unmaps the chunk at `chunk_ptr` inside free block `block` (in its pool); `spare` holds two unused
    // records, replaced as they are used. Returns the block that now holds what followed the chunk (or null).
    // On failure nothing has changed.
    Block* unmap_chunk_of(Block* block, DevicePtr chunk_ptr, std::size_t chunk, Block* (&spare)[2]);
    std::size_t free_unmapped_ranges();
    void destroy_expandable(Block* head) noexcept;
    [[nodiscard]] std::size_t largest_free_block() const noexcept;
    [[nodiscard]] static std::size_t mapped_bytes_of(const Block* head) noexcept;
    void process_completed_events();
    void drop_retired_queues() noexcept;
    void synchronize_pending_events();
    void complete(const PendingEvent& pending) noexcept;
    void finish_capture(Capture* capture) noexcept;
    StreamQueue& queue_for(StreamKey stream);
    void reserve_queue_space(std::span<const PendingUse> uses);
    void push_pending(StreamKey stream, const PendingEvent& pending) noexcept;
    void pop_front(StreamQueue& queue) noexcept;
    void free_locked(Block* block, std::span<const PendingUse> uses);
    void add_user_stream(Block* block, StreamKey stream);
    [[nodiscard]] bool is_being_captured(StreamKey stream) const noexcept;
    [[nodiscard]] Capture* find_capture(CaptureId id) const noexcept;
    [[nodiscard]] Capture* underway_capture_on(StreamKey stream) const noexcept;
    [[nodiscard]] Block* find_live_block(DevicePtr ptr) const noexcept;
    [[nodiscard]] Block* new_block();
    void recycle(Block* block) noexcept;
    [[noreturn]] void throw_out_of_memory(std::size_t size);

    AllocatorBackend& backend_;
    AllocatorConfig config_;
    Segments kind_;
    ExpandableLayout layout_;    // Segments::expandable only
    std::size_t max_split_;      // config_.max_split_size; no limit for expandable segments
    std::size_t reserve_limit_;  // from memory_fraction; SIZE_MAX when uncapped

    mutable std::mutex mutex_;
    // Note: set nodes come from this pool and block records are recycled (spare_blocks_), so that a
    // warm allocator does no heap allocation on the alloc/free path. Declared before its users.
    std::pmr::unsynchronized_pool_resource node_pool_;
    FreeBlocks small_blocks_{&node_pool_};
    FreeBlocks large_blocks_{&node_pool_};
    std::pmr::set<Block*, SegmentOrder> segments_{&node_pool_};  // heads, in address order
    Block* spare_blocks_ = nullptr;                              // recycled records, chained through `next`
    std::vector<StreamQueue> pending_;
    std::size_t pending_count_ = 0;  // events in all queues
    std::vector<std::unique_ptr<Capture>> captures_;
    int captures_underway_ = 0;
    CaptureId next_capture_id_ = 1;
    AllocatorStats stats_;
    std::size_t held_bytes_ = 0;  // freed blocks held back for events or graphs
};

}  // namespace cudarc::alloc

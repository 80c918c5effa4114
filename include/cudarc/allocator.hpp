/// @file
/// The caching allocator's public face (MemorySource::caching_allocator and MemorySource::expandable): its
/// configuration, its statistics and a snapshot of what it holds, with a timeline of allocations when
/// recording is on. The allocator itself lives behind Device; these types carry no driver types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cudarc/detail/native_handles.hpp"
#include "cudarc/export.hpp"

namespace cudarc {

/// How a device's caching allocator behaves. The defaults suit most programs.
struct AllocatorConfig {
    /// Blocks larger than this are never split, and serve only requests close to their size (see
    /// oversize_reuse_margin). Lowering it fights fragmentation from a few very large buffers.
    /// Must be at least 20 MiB (the size of a large-pool segment). Default: no limit. Expandable segments
    /// ignore it (and oversize_reuse_margin): they grow in place instead of being carved up.
    std::size_t max_split_size = std::numeric_limits<std::size_t>::max();

    /// An oversize block (larger than max_split_size) serves a request only when it wastes less than
    /// this many bytes on it.
    std::size_t oversize_reuse_margin = std::size_t{20} << 20;

    /// Cap on reserved memory, as a fraction of the device's total memory, in (0, 1]. Beyond it a
    /// request is treated as out of memory. 1.0: no cap beyond the device itself.
    double memory_fraction = 1.0;
};

/// Figures that explain where device memory went. Byte counts are of whole blocks (requests rounded up
/// to 512 bytes, or larger when a block was not worth splitting).
struct AllocatorStats {
    std::size_t allocated_bytes = 0;       ///< in live allocations
    std::size_t active_bytes = 0;          ///< allocated, plus freed blocks still waiting for other streams'
                                           ///< events or for a captured graph to be released
    std::size_t reserved_bytes = 0;        ///< device memory held from the driver: every segment (expandable
                                           ///< segments: the chunks mapped into them)
    std::size_t peak_allocated_bytes = 0;  ///< highest allocated_bytes since start or reset_peak()
    std::size_t peak_reserved_bytes = 0;   ///< highest reserved_bytes since start or reset_peak()
    std::size_t live_allocations = 0;      ///< allocations not yet freed
    std::size_t segments = 0;              ///< segments held from the driver (expandable: address ranges)
    std::size_t address_space_bytes = 0;   ///< address space reserved for expandable segments (0 otherwise)

    std::uint64_t driver_allocations = 0;      ///< segments (expandable: chunks) obtained from the driver
    std::uint64_t driver_frees = 0;            ///< segments (expandable: chunks) returned to the driver
    std::uint64_t cache_hits = 0;              ///< requests served from a cached block
    std::uint64_t cache_misses = 0;            ///< requests that needed a new segment (or chunks mapped)
    std::uint64_t oom_retries = 0;             ///< retries after freeing the cache or waiting for events
    std::uint64_t out_of_memory_errors = 0;    ///< OutOfMemory thrown
    std::uint64_t event_synchronizations = 0;  ///< host-blocking event waits (only on the OOM path)
};

/// What the allocator holds, segment by segment, block by block, in address order; and, while recording is
/// on (Device::record_memory_history), what happened: a timeline of allocations, frees and the memory taken
/// from and given back to the driver. to_json() writes it for tools/plot-memory.
struct AllocatorSnapshot {
    /// What a block is doing at the time of the snapshot.
    enum class BlockState {
        allocated,        ///< handed out and not freed
        awaiting_events,  ///< freed, held until other streams' uses (events) complete
        held_for_graph,   ///< freed, held until a captured graph is released
        free,             ///< cached, ready for reuse on its stream
        unmapped,         ///< address space of an expandable segment with no memory mapped behind it
    };
    /// One block of a segment: an allocation, a freed block on its way back, or free space.
    struct Block {
        /// The block's first byte.
        DevicePtr address = 0;
        /// The block's size in bytes.
        std::size_t size = 0;
        /// What the block is doing.
        BlockState state = BlockState::free;
        std::uintptr_t stream = 0;  ///< the stream it belongs to (native handle's value)
    };
    /// One segment taken from the driver (expandable: one address range), with its blocks.
    struct Segment {
        /// The segment's first byte.
        DevicePtr address = 0;
        /// The segment's size in bytes (expandable: the address range's).
        std::size_t size = 0;
        std::uintptr_t stream = 0;     ///< the stream the segment's blocks belong to (native handle's value)
        bool small_pool = false;       ///< from the pool of small (<= 1 MiB) requests
        bool expandable = false;       ///< an address range that grows in place (MemorySource::expandable)
        std::size_t mapped_bytes = 0;  ///< backed by device memory: the whole segment, unless expandable
        /// The segment's blocks, in address order.
        std::vector<Block> blocks;
    };
    /// One entry of the timeline. Byte counts after the event: what allocations hold (whole blocks for the
    /// caching allocator, the requested bytes for the driver's pool) and what the source holds from the
    /// driver.
    struct Event {
        /// What an event of the timeline did.
        enum class Action {
            allocate,          ///< a block handed out
            free,              ///< a block given back (it may still wait for other streams)
            segment_allocate,  ///< a segment taken from the driver
            segment_free,      ///< a segment given back to the driver
            map,               ///< chunks mapped into an expandable segment
            unmap,             ///< chunks unmapped from an expandable segment
        };
        /// What happened.
        Action action = Action::allocate;
        std::uint64_t time_ns = 0;  ///< since recording began
        /// The block's or segment's first byte.
        DevicePtr address = 0;
        /// The bytes allocated, freed, taken, given back, mapped or unmapped.
        std::size_t size = 0;
        std::uintptr_t stream = 0;  ///< allocate and free: the block's stream (0 for the others)
        /// Bytes held by allocations after the event.
        std::size_t allocated_bytes = 0;
        /// Bytes the source holds from the driver after the event.
        std::size_t reserved_bytes = 0;
    };
    std::string source;  ///< the memory source: "caching_allocator", "expandable" or "stream_ordered"
    std::vector<Segment> segments;  ///< none for the driver's pool, which does not show its segments
    std::vector<Event> timeline;    ///< oldest first; empty unless recording is on
};

/// The state in words (as in "allocated", "awaiting events"); to_json writes snake case instead.
[[nodiscard]] CUDARC_API const char* to_string(AllocatorSnapshot::BlockState state) noexcept;
/// The action's name as to_json writes it (as in "allocate", "segment_free").
[[nodiscard]] CUDARC_API const char* to_string(AllocatorSnapshot::Event::Action action) noexcept;

/// The snapshot as one JSON object (the format tools/plot-memory reads; docs/allocator.md describes it).
[[nodiscard]] CUDARC_API std::string to_json(const AllocatorSnapshot& snapshot);

}  // namespace cudarc

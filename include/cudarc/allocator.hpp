// The caching allocator's public face: its configuration, its statistics and a snapshot of what it
// holds. The allocator itself lives behind Device; these types carry no driver types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "cudarc/detail/native_handles.hpp"
#include "cudarc/export.hpp"

namespace cudarc {

// How a device's caching allocator behaves. The defaults suit most programs.
struct AllocatorConfig {
    // Blocks larger than this are never split, and serve only requests close to their size (see
    // oversize_reuse_margin). Lowering it fights fragmentation from a few very large buffers.
    // Must be at least 20 MiB (the size of a large-pool segment). Default: no limit.
    std::size_t max_split_size = std::numeric_limits<std::size_t>::max();

    // An oversize block (larger than max_split_size) serves a request only when it wastes less than
    // this many bytes on it.
    std::size_t oversize_reuse_margin = std::size_t{20} << 20;

    // Cap on reserved memory, as a fraction of the device's total memory, in (0, 1]. Beyond it a
    // request is treated as out of memory. 1.0: no cap beyond the device itself.
    double memory_fraction = 1.0;
};

// Figures that explain where device memory went. Byte counts are of whole blocks (requests rounded up
// to 512 bytes, or larger when a block was not worth splitting).
struct AllocatorStats {
    std::size_t allocated_bytes = 0;       // in live allocations
    std::size_t active_bytes = 0;          // allocated, plus freed blocks still waiting for other streams'
                                           // events or for a captured graph to be released
    std::size_t reserved_bytes = 0;        // held from the driver (every segment)
    std::size_t peak_allocated_bytes = 0;  // highest allocated_bytes since start or reset_peak()
    std::size_t peak_reserved_bytes = 0;   // highest reserved_bytes since start or reset_peak()
    std::size_t live_allocations = 0;      // allocations not yet freed
    std::size_t segments = 0;              // segments held from the driver

    std::uint64_t driver_allocations = 0;      // segments obtained from the driver (cumulative)
    std::uint64_t driver_frees = 0;            // segments returned to the driver (cumulative)
    std::uint64_t cache_hits = 0;              // requests served from a cached block
    std::uint64_t cache_misses = 0;            // requests that needed a new segment
    std::uint64_t oom_retries = 0;             // retries after freeing the cache or waiting for events
    std::uint64_t out_of_memory_errors = 0;    // OutOfMemory thrown
    std::uint64_t event_synchronizations = 0;  // host-blocking event waits (only on the OOM path)
};

// What the allocator holds, segment by segment, block by block, in address order.
struct AllocatorSnapshot {
    enum class BlockState {
        allocated,        // handed out and not freed
        awaiting_events,  // freed, held until other streams' uses (events) complete
        held_for_graph,   // freed, held until a captured graph is released
        free,             // cached, ready for reuse on its stream
    };
    struct Block {
        DevicePtr address = 0;
        std::size_t size = 0;
        BlockState state = BlockState::free;
        std::uintptr_t stream = 0;  // the stream it belongs to (native handle's value)
    };
    struct Segment {
        DevicePtr address = 0;
        std::size_t size = 0;
        std::uintptr_t stream = 0;  // the stream the segment's blocks belong to (native handle's value)
        bool small_pool = false;    // from the pool of small (<= 1 MiB) requests
        std::vector<Block> blocks;
    };
    std::vector<Segment> segments;
};

[[nodiscard]] CUDARC_API const char* to_string(AllocatorSnapshot::BlockState state) noexcept;

}  // namespace cudarc

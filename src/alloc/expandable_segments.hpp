// Expandable segments: the sizes that shape them. The allocator's code for them is in
// expandable_segments.cpp (members of CachingAllocator); the driver side in virtual_memory.hpp.
//
// Note [Expandable segments]
//
// Why. Fixed segments are sized for the request that caused them (2 MiB, 20 MiB, or the request rounded
// to 2 MiB) and blocks never merge across segments. When sizes change from step to step (sequence lengths,
// a KV cache that grows) requests keep arriving that no cached block fits, so new segments pile up beside
// cached ones that are free but too small: memory reserved and not usable (1.29x the allocated peak on the
// training-like replay of cudarc-bench alloc).
//
// How. An expandable segment is a range of address space, reserved once per stream and pool (as large as
// the device's memory and an eighth more for the large pool, an eighth of it for the small pool), into
// which device memory is mapped in chunks (16 MiB in the large pool, 2 MiB in the small one, or the
// driver's granularity where that is larger) as the segment grows. Its blocks tile the whole range:
// allocated, held and free blocks where memory is mapped, `unmapped` blocks where it is not. A request first
// takes the best-fitting free block, as with fixed segments. When none fits, the allocator looks, in the
// stream's segments of that pool, for the first unmapped block that, with the free block just before it
// and the free and unmapped blocks after it, spans the request; it maps the whole chunks that run lacks
// and merges the run into one block. So a segment grows in place, and a free block at its end becomes part
// of the next large request instead of being stranded. Only when no run is large enough is a new range
// reserved.
//
// Giving memory back. empty_cache() and the out-of-memory path unmap every chunk that lies wholly inside a
// free block (the block splits; unmapped neighbours merge) and free the address range of a segment with
// nothing mapped any more. Unmapping, unlike cuMemFree, does not wait for work still queued on the memory,
// so each such pass first waits for the whole device (once, counted as a context synchronize); as for
// fixed segments, no pass is made while a capture is under way.
//
// Invariants.
// - Ranges are reserved aligned to their pool's chunk size (a power of two) and memory is mapped and
//   unmapped in whole chunks at multiples of it: every boundary between a mapped and an unmapped block
//   falls on a chunk boundary, and two unmapped blocks are never neighbours (they merge).
// - Each chunk is its own physical allocation, so any chunk can be unmapped alone. Its handle is released
//   right after it is mapped: the mapping keeps the memory alive and unmapping frees it, so nothing but the
//   blocks has to remember chunks.
// - Every chunk is made accessible to the device and to every device that enabled peer access to it
//   (the driver's context-wide peer access does not cover such memory; MemorySource::grant_access).
// - reserved_bytes counts mapped bytes; a segment's size in snapshots is its address range, and its
//   mapped_bytes what is mapped into it.
//
// Shared with fixed segments: the pools (512-byte rounding, small requests to the small pool), per-stream
// ownership and retirement, the rules for reusing a block freed after uses on other streams, graph
// capture (held_for_graph; during a capture on the calling thread nothing is mapped: a request that would
// need a mapping throws, as one that would need a new segment does) and the out-of-memory escalation. Not
// shared: max_split_size and oversize_reuse_margin, which protect fixed segments from being carved up.
//
// Limits. Mapping costs a few driver calls per chunk, paid when a segment grows, never when a cached
// block is reused. Memory mapped for one stream serves another stream only after it was unmapped
// (empty_cache, or a request that would fail otherwise). Blocks cannot be shared with other processes.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>

namespace cudarc::alloc {

// Chunk sizes before the driver's granularity is applied (see the Note).
inline constexpr std::size_t kSmallChunk = std::size_t{2} << 20;
inline constexpr std::size_t kLargeChunk = std::size_t{16} << 20;

// Chunk and range sizes of one device's expandable segments.
struct ExpandableLayout {
    std::size_t small_chunk = kSmallChunk;
    std::size_t large_chunk = kLargeChunk;
    std::size_t small_range = 0;  // address space of a small-pool segment
    std::size_t large_range = 0;  // address space of a large-pool segment

    // For a device of `device_memory` bytes whose driver maps in multiples of `granularity` (a power of
    // two). Returns a layout with no range when granularity is not a power of two.
    [[nodiscard]] static constexpr ExpandableLayout for_device(std::size_t granularity,
                                                               std::size_t device_memory) noexcept {
        ExpandableLayout layout;
        if (granularity == 0 || !std::has_single_bit(granularity)) return layout;
        layout.small_chunk = kSmallChunk > granularity ? kSmallChunk : granularity;
        layout.large_chunk = kLargeChunk > granularity ? kLargeChunk : granularity;
        layout.small_range = round_up(std::max(device_memory / 8, layout.small_chunk), layout.small_chunk);
        layout.large_range =
            round_up(std::max(device_memory + device_memory / 8, layout.large_chunk), layout.large_chunk);
        return layout;
    }
    [[nodiscard]] constexpr std::size_t chunk(bool small) const noexcept {
        return small ? small_chunk : large_chunk;
    }
    [[nodiscard]] constexpr std::size_t range(bool small) const noexcept {
        return small ? small_range : large_range;
    }

  private:
    static constexpr std::size_t round_up(std::size_t value, std::size_t multiple) noexcept {
        return (value + multiple - 1) / multiple * multiple;
    }
};

}  // namespace cudarc::alloc

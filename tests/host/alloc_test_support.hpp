// Helpers for the caching allocator's host tests: an allocator on a fake device, and a checker of the
// invariants every snapshot must satisfy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "alloc/caching_allocator.hpp"
#include "host/alloc_fake_backend.hpp"

namespace cudarc::test {

inline constexpr std::size_t kKiB = std::size_t{1} << 10;
inline constexpr std::size_t kMiB = std::size_t{1} << 20;

// An allocator whose device the test can watch and steer.
struct AllocatorOnFakeDevice {
    explicit AllocatorOnFakeDevice(std::size_t capacity = 1024 * kMiB, const AllocatorConfig& config = {},
                                   alloc::Segments segments = alloc::Segments::fixed)
        : device(std::make_shared<FakeDevice>(capacity)),
          backend(device),
          allocator(backend, config, segments) {}

    std::shared_ptr<FakeDevice> device;
    FakeBackend backend;
    alloc::CachingAllocator allocator;
};

// A fresh seed per run, to be shown with the test's failure (CAPTURE / INFO).
inline std::uint64_t fresh_seed() {
    return (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}

// Returns the first broken invariant of a snapshot's structure, or "" if none: segments in order and
// apart, blocks that tile their segment, free neighbours merged; for expandable segments (chunks of 2 and
// 16 MiB, the fake device's granularity being 2 MiB) unmapped neighbours merged, mapped ranges on chunk
// boundaries, and mapped_bytes what the blocks say. Holds even while other threads run.
inline std::string snapshot_structure_problem(const AllocatorSnapshot& snap) {
    using State = AllocatorSnapshot::BlockState;
    DevicePtr previous_end = 0;
    for (const AllocatorSnapshot::Segment& segment : snap.segments) {
        if (segment.address < previous_end) return "segments overlap or are out of order";
        previous_end = segment.address + segment.size;
        if (!segment.expandable && segment.small_pool && segment.size != 2 * kMiB)
            return "a small-pool segment that is not 2 MiB";
        if (segment.blocks.empty()) return "a segment without blocks";
        const std::size_t chunk = segment.small_pool ? 2 * kMiB : 16 * kMiB;
        if (segment.expandable && (segment.address % chunk != 0 || segment.size % chunk != 0))
            return "an expandable segment not aligned to its chunks";
        DevicePtr expected = segment.address;
        State previous = State::allocated;
        std::size_t mapped = 0;
        for (const AllocatorSnapshot::Block& block : segment.blocks) {
            if (block.address != expected) return "blocks of a segment are not contiguous";
            if (block.size == 0 || block.size % 512 != 0)
                return "a block size that is not a positive multiple of 512";
            if (block.stream != segment.stream) return "a block on another stream than its segment";
            if (block.state == State::free && previous == State::free)
                return "two adjacent free blocks were not merged";
            if (block.state == State::unmapped) {
                if (!segment.expandable) return "an unmapped block in a fixed segment";
                if (previous == State::unmapped) return "two adjacent unmapped blocks were not merged";
                if (block.address % chunk != 0 || block.size % chunk != 0)
                    return "an unmapped block off its chunk boundaries";
            } else {
                mapped += block.size;
            }
            previous = block.state;
            expected += block.size;
        }
        if (expected != segment.address + segment.size) return "blocks do not cover their segment";
        if (mapped != segment.mapped_bytes) return "mapped_bytes disagrees with the blocks";
    }
    return {};
}

// Returns the first broken invariant of a snapshot against the stats taken with it, or "" if none.
inline std::string snapshot_problem(const AllocatorSnapshot& snap, const AllocatorStats& stats) {
    if (std::string problem = snapshot_structure_problem(snap); !problem.empty()) return problem;
    using State = AllocatorSnapshot::BlockState;
    std::size_t reserved = 0;
    std::size_t allocated = 0;
    std::size_t held = 0;
    std::size_t live = 0;
    std::size_t address_space = 0;
    bool expandable = false;
    for (const AllocatorSnapshot::Segment& segment : snap.segments) {
        reserved += segment.mapped_bytes;
        if (segment.expandable) {
            address_space += segment.size;
            expandable = true;
        }
        for (const AllocatorSnapshot::Block& block : segment.blocks) {
            if (block.state == State::allocated) {
                allocated += block.size;
                ++live;
            } else if (block.state != State::free && block.state != State::unmapped) {
                held += block.size;
            }
        }
    }
    if (address_space != stats.address_space_bytes) return "address space disagrees with the segments";
    if (reserved != stats.reserved_bytes) return "reserved bytes disagree with the segments";
    if (snap.segments.size() != stats.segments) return "segment count disagrees";
    if (allocated != stats.allocated_bytes) return "allocated bytes disagree with the blocks";
    if (live != stats.live_allocations) return "live allocation count disagrees";
    if (allocated + held != stats.active_bytes) return "active bytes disagree with the blocks";
    if (!expandable && stats.driver_allocations - stats.driver_frees != stats.segments)
        return "driver counts disagree";
    if (stats.peak_allocated_bytes < stats.allocated_bytes) return "peak below current allocation";
    if (stats.peak_reserved_bytes < stats.reserved_bytes) return "peak reserved below current reserve";
    return {};
}

inline std::string snapshot_problem(const alloc::CachingAllocator& allocator) {
    // Note: the two reads are consistent only while no other thread uses the allocator.
    return snapshot_problem(allocator.snapshot(), allocator.stats());
}

// The snapshot block that starts at `address`, or nullptr.
inline const AllocatorSnapshot::Block* find_block(const AllocatorSnapshot& snap, DevicePtr address) {
    for (const auto& segment : snap.segments) {
        for (const auto& block : segment.blocks) {
            if (block.address == address) return &block;
        }
    }
    return nullptr;
}

}  // namespace cudarc::test

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
    explicit AllocatorOnFakeDevice(std::size_t capacity = 1024 * kMiB, const AllocatorConfig& config = {})
        : device(std::make_shared<FakeDevice>(capacity)), backend(device), allocator(backend, config) {}

    std::shared_ptr<FakeDevice> device;
    FakeBackend backend;
    alloc::CachingAllocator allocator;
};

// A fresh seed per run, to be shown with the test's failure (CAPTURE / INFO).
inline std::uint64_t fresh_seed() {
    return (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}

// Returns the first broken invariant of a snapshot's structure, or "" if none: segments in order and
// apart, blocks that tile their segment, free neighbours merged. Holds even while other threads run.
inline std::string snapshot_structure_problem(const AllocatorSnapshot& snap) {
    DevicePtr previous_end = 0;
    for (const AllocatorSnapshot::Segment& segment : snap.segments) {
        if (segment.address < previous_end) return "segments overlap or are out of order";
        previous_end = segment.address + segment.size;
        if (segment.small_pool && segment.size != 2 * kMiB) return "a small-pool segment that is not 2 MiB";
        if (segment.blocks.empty()) return "a segment without blocks";
        DevicePtr expected = segment.address;
        bool previous_free = false;
        for (const AllocatorSnapshot::Block& block : segment.blocks) {
            if (block.address != expected) return "blocks of a segment are not contiguous";
            if (block.size == 0 || block.size % 512 != 0)
                return "a block size that is not a positive multiple of 512";
            if (block.stream != segment.stream) return "a block on another stream than its segment";
            const bool is_free = block.state == AllocatorSnapshot::BlockState::free;
            if (is_free && previous_free) return "two adjacent free blocks were not merged";
            previous_free = is_free;
            expected += block.size;
        }
        if (expected != segment.address + segment.size) return "blocks do not cover their segment";
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
    for (const AllocatorSnapshot::Segment& segment : snap.segments) {
        reserved += segment.size;
        for (const AllocatorSnapshot::Block& block : segment.blocks) {
            if (block.state == State::allocated) {
                allocated += block.size;
                ++live;
            } else if (block.state != State::free) {
                held += block.size;
            }
        }
    }
    if (reserved != stats.reserved_bytes) return "reserved bytes disagree with the segments";
    if (snap.segments.size() != stats.segments) return "segment count disagrees";
    if (allocated != stats.allocated_bytes) return "allocated bytes disagree with the blocks";
    if (live != stats.live_allocations) return "live allocation count disagrees";
    if (allocated + held != stats.active_bytes) return "active bytes disagree with the blocks";
    if (stats.driver_allocations - stats.driver_frees != stats.segments) return "driver counts disagree";
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

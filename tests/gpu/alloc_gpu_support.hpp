// Shared by the alloc_* GPU tests: opening device 0 with a given memory source, reading the caching
// allocator's snapshot, and the invariants every snapshot must satisfy whatever the test did before.
#pragma once

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstddef>
#include <optional>
#include <string>

#include "cudarc/cudarc.hpp"
#include "gpu_test.hpp"

namespace cudarc::test {

// Device 0 with `source` (and `config`), or nullopt after the case marked itself skipped: when the device
// was opened earlier in this process with another source (options apply at the first open; ctest runs each
// case in a process of its own), or when the device cannot give that source (no virtual memory management
// for MemorySource::expandable).
inline std::optional<Device> open_device_with(MemorySource source, const AllocatorConfig& config = {}) {
    DeviceOptions options;
    options.memory_source = source;
    options.allocator = config;
    try {
        Device device = Device::open(0, options);
        if (device.memory_source() != source) {
            skip_test(
                fmt::format("device 0 was opened earlier in this process with the {} source, not {}: run "
                            "this case on its own (ctest does)",
                            to_string(device.memory_source()), to_string(source)));
            return std::nullopt;
        }
        return device;
    } catch (const Error& e) {
        const std::string what = e.what();
        if (source != MemorySource::expandable || what.find("virtual memory management") == std::string::npos)
            throw;
        skip_test(what);
        return std::nullopt;
    }
}

// The block whose range contains `address`, if a segment holds it.
inline std::optional<AllocatorSnapshot::Block> block_at(const AllocatorSnapshot& snapshot,
                                                        DevicePtr address) {
    for (const auto& segment : snapshot.segments) {
        if (address < segment.address || address >= segment.address + segment.size) continue;
        for (const auto& block : segment.blocks) {
            if (address >= block.address && address < block.address + block.size) return block;
        }
    }
    return std::nullopt;
}

// True when [a, a + a_bytes) and [b, b + b_bytes) share a byte.
inline bool ranges_overlap(DevicePtr a, std::size_t a_bytes, DevicePtr b, std::size_t b_bytes) {
    return a < b + b_bytes && b < a + a_bytes;
}

// Checks a snapshot against the stats taken right after it (single-threaded use): blocks tile their
// segments in address order, every block belongs to its segment's stream, no two adjacent blocks are both
// free (they would have been merged), and the sums agree with the stats. Returns the number of problems.
inline int check_snapshot_agrees(const AllocatorSnapshot& snapshot, const AllocatorStats& stats) {
    using State = AllocatorSnapshot::BlockState;
    int problems = 0;
    auto problem = [&](const std::string& what) {
        if (problems < 5) MESSAGE("allocator snapshot: " << what);
        ++problems;
    };
    std::size_t reserved = 0;
    std::size_t allocated = 0;
    std::size_t held = 0;
    std::size_t live = 0;
    std::size_t address_space = 0;
    for (const auto& segment : snapshot.segments) {
        reserved += segment.mapped_bytes;
        if (segment.expandable) address_space += segment.size;
        DevicePtr next = segment.address;
        State previous = State::allocated;
        std::size_t mapped = 0;
        for (const auto& block : segment.blocks) {
            if (block.address != next) problem("a gap or an overlap inside a segment");
            if (block.size == 0 || block.size % 512 != 0)
                problem("a block size that is not a multiple of 512");
            if (block.stream != segment.stream) problem("a block of another stream than its segment");
            if (block.state == previous && (block.state == State::free || block.state == State::unmapped))
                problem("two adjacent free (or unmapped) blocks (not merged)");
            if (block.state == State::unmapped && !segment.expandable)
                problem("an unmapped block in a fixed segment");
            previous = block.state;
            if (block.state != State::unmapped) mapped += block.size;
            if (block.state == State::allocated) {
                allocated += block.size;
                ++live;
            } else if (block.state != State::free && block.state != State::unmapped) {
                held += block.size;
            }
            next = block.address + block.size;
        }
        if (next != segment.address + segment.size) problem("blocks do not cover their segment");
        if (mapped != segment.mapped_bytes) problem("a segment's mapped_bytes differ from its mapped blocks");
    }
    if (reserved != stats.reserved_bytes) problem("segments' mapped bytes do not add up to reserved_bytes");
    if (address_space != stats.address_space_bytes)
        problem("expandable segments do not add up to address_space_bytes");
    if (snapshot.segments.size() != stats.segments) problem("segment count differs from stats.segments");
    if (allocated != stats.allocated_bytes) problem("allocated blocks do not add up to allocated_bytes");
    if (live != stats.live_allocations) problem("allocated block count differs from live_allocations");
    if (allocated + held != stats.active_bytes) problem("allocated + held blocks differ from active_bytes");
    return problems;
}

inline int check_snapshot_agrees(const Device& device) {
    const AllocatorSnapshot snapshot = device.allocator_snapshot();
    return check_snapshot_agrees(snapshot, device.allocator_stats());
}

}  // namespace cudarc::test

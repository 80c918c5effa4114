// Pools, rounding, segment sizes, split and merge, best fit, oversize blocks, per-stream pools.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "host/alloc_test_support.hpp"

namespace {

using cudarc::AllocatorConfig;
using cudarc::AllocatorSnapshot;
using cudarc::DevicePtr;
using cudarc::alloc::Allocation;
using cudarc::test::AllocatorOnFakeDevice;
using cudarc::test::FakeCall;
using cudarc::test::kKiB;
using cudarc::test::kMiB;
using cudarc::test::snapshot_problem;

std::size_t reference_round(std::size_t bytes) {
    return bytes % 512 == 0 ? bytes : (bytes / 512 + 1) * 512;
}

// The segment the rules give for a rounded request.
std::size_t reference_segment(std::size_t rounded) {
    if (rounded <= kMiB) return 2 * kMiB;
    if (rounded < 10 * kMiB) return 20 * kMiB;
    return (rounded + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
}

}  // namespace

TEST_CASE("alloc.rounding") {
    const std::uint64_t seed = cudarc::test::fresh_seed();
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::size_t> small_bytes(1, kMiB);
    std::uniform_int_distribution<std::size_t> large_bytes(kMiB + 1, 9 * kMiB);

    AllocatorOnFakeDevice f;
    std::vector<Allocation> live;
    for (int i = 0; i < 200; ++i) {
        const std::size_t bytes = (i % 2 == 0) ? small_bytes(rng) : large_bytes(rng);
        CAPTURE(bytes);
        const Allocation a = f.allocator.allocate(bytes, 1);
        // Small requests always split exactly (segments are multiples of 512); large ones below
        // 10 MiB come from 20 MiB segments whose remainder is split off when above 1 MiB.
        CHECK(a.size >= reference_round(bytes));
        CHECK(a.size % 512 == 0);
        CHECK(a.ptr % 512 == 0);
        if (bytes <= kMiB) CHECK(a.size == reference_round(bytes));
        live.push_back(a);
    }
    CHECK(snapshot_problem(f.allocator) == "");
    for (const Allocation& a : live) f.allocator.free(a);

    // Exact boundaries.
    for (std::size_t bytes :
         {std::size_t{1}, std::size_t{511}, std::size_t{512}, std::size_t{513}, 64 * kKiB + 1}) {
        const Allocation a = f.allocator.allocate(bytes, 2);
        CHECK(a.size == reference_round(bytes));
        f.allocator.free(a);
    }

    // A zero-byte request takes no memory, and its free is a no-op.
    const auto before = f.allocator.stats();
    const Allocation empty = f.allocator.allocate(0, 1);
    CHECK(empty.ptr == 0);
    CHECK(empty.size == 0);
    CHECK(empty.block == nullptr);
    f.allocator.free(empty);
    CHECK(f.allocator.stats().allocated_bytes == before.allocated_bytes);
    CHECK(f.allocator.stats().cache_hits == before.cache_hits);
}

TEST_CASE("alloc.segment_sizes_and_pools") {
    struct Case {
        std::size_t bytes;
        std::size_t segment;
        bool small;
    };
    const std::vector<Case> cases = {
        {1, 2 * kMiB, true},           {kMiB, 2 * kMiB, true},
        {kMiB + 1, 20 * kMiB, false},  {10 * kMiB - 512, 20 * kMiB, false},
        {10 * kMiB, 10 * kMiB, false}, {10 * kMiB + 1, 12 * kMiB, false},
        {64 * kMiB, 64 * kMiB, false}, {100 * kMiB + 3, 102 * kMiB, false},
    };
    for (const Case& c : cases) {
        CAPTURE(c.bytes);
        REQUIRE(reference_segment(reference_round(c.bytes)) == c.segment);  // the table agrees with the rule
        AllocatorOnFakeDevice f;
        const Allocation a = f.allocator.allocate(c.bytes, 1);
        const auto log = f.device->log();
        REQUIRE(log.size() == 1);
        CHECK(log[0].kind == FakeCall::Kind::allocate);
        CHECK(log[0].value == c.segment);
        const AllocatorSnapshot snap = f.allocator.snapshot();
        REQUIRE(snap.segments.size() == 1);
        CHECK(snap.segments[0].size == c.segment);
        CHECK(snap.segments[0].small_pool == c.small);
        CHECK(snap.segments[0].stream == 1);
        f.allocator.free(a);
    }

    SUBCASE("small requests share a 2 MiB segment until it is full") {
        AllocatorOnFakeDevice f;
        std::vector<Allocation> quarter;
        for (int i = 0; i < 4; ++i) quarter.push_back(f.allocator.allocate(512 * kKiB, 1));
        CHECK(f.allocator.stats().segments == 1);
        for (int i = 1; i < 4; ++i) CHECK(quarter[i].ptr == quarter[i - 1].ptr + 512 * kKiB);
        const Allocation fifth = f.allocator.allocate(512 * kKiB, 1);
        CHECK(f.allocator.stats().segments == 2);
        CHECK(snapshot_problem(f.allocator) == "");
        f.allocator.free(fifth);
        for (const auto& a : quarter) f.allocator.free(a);
    }

    SUBCASE("the pools do not lend to each other") {
        AllocatorOnFakeDevice f;
        const Allocation large = f.allocator.allocate(4 * kMiB, 1);
        f.allocator.free(large);  // a wholly free 20 MiB large-pool segment
        const Allocation small = f.allocator.allocate(4 * kKiB, 1);
        CHECK(f.allocator.stats().segments == 2);  // not carved from the large segment
        const Allocation small2 = f.allocator.allocate(600 * kKiB, 1);
        f.allocator.free(small);
        f.allocator.free(small2);  // the small segment is wholly free again: 2 MiB of free space
        const Allocation large2 = f.allocator.allocate(kMiB + 512, 1);
        CHECK(f.allocator.stats().segments == 2);
        CHECK(large2.ptr == large.ptr);  // from the large pool, not the free 2 MiB small segment
        f.allocator.free(large2);
    }
}

TEST_CASE("alloc.split_and_merge") {
    SUBCASE("small pool: neighbours merge back into one block") {
        AllocatorOnFakeDevice f;
        const Allocation a = f.allocator.allocate(256 * kKiB, 1);
        const Allocation b = f.allocator.allocate(256 * kKiB, 1);
        const Allocation c = f.allocator.allocate(256 * kKiB, 1);
        REQUIRE(f.allocator.stats().segments == 1);
        CHECK(b.ptr == a.ptr + 256 * kKiB);
        CHECK(c.ptr == b.ptr + 256 * kKiB);

        f.allocator.free(b);  // a hole between two live blocks
        auto snap = f.allocator.snapshot();
        REQUIRE(snap.segments[0].blocks.size() == 4);
        CHECK(snap.segments[0].blocks[1].state == AllocatorSnapshot::BlockState::free);
        CHECK(snap.segments[0].blocks[1].size == 256 * kKiB);
        CHECK(snapshot_problem(f.allocator) == "");

        f.allocator.free(a);  // merges with the hole after it
        snap = f.allocator.snapshot();
        REQUIRE(snap.segments[0].blocks.size() == 3);
        CHECK(snap.segments[0].blocks[0].address == a.ptr);
        CHECK(snap.segments[0].blocks[0].size == 512 * kKiB);

        f.allocator.free(c);  // merges with both sides: the whole segment again
        snap = f.allocator.snapshot();
        REQUIRE(snap.segments[0].blocks.size() == 1);
        CHECK(snap.segments[0].blocks[0].size == 2 * kMiB);
        CHECK(snapshot_problem(f.allocator) == "");

        // The merged block is reused: no new segment.
        const Allocation whole = f.allocator.allocate(kMiB, 1);
        CHECK(whole.ptr == a.ptr);
        CHECK(f.allocator.stats().driver_allocations == 1);
        f.allocator.free(whole);
    }

    SUBCASE("small pool splits off a remainder of exactly 512 bytes") {
        AllocatorOnFakeDevice f;
        const Allocation a = f.allocator.allocate(kMiB, 1);
        const Allocation b = f.allocator.allocate(kMiB - 512, 1);
        CHECK(b.size == kMiB - 512);
        const Allocation c = f.allocator.allocate(1, 1);  // fits the 512-byte remainder
        CHECK(c.ptr == b.ptr + b.size);
        CHECK(f.allocator.stats().segments == 1);
        for (const auto& x : {a, b, c}) f.allocator.free(x);
    }

    SUBCASE("large pool splits only when more than 1 MiB remains") {
        AllocatorOnFakeDevice f;
        const Allocation a = f.allocator.allocate(5 * kMiB, 1);                // 20 MiB segment: 5 + 15 free
        const Allocation b = f.allocator.allocate(14 * kMiB + 512 * kKiB, 1);  // leaves 512 KiB: no split
        CHECK(b.ptr == a.ptr + 5 * kMiB);
        CHECK(b.size == 15 * kMiB);
        f.allocator.free(b);
        const Allocation b2 = f.allocator.allocate(14 * kMiB, 1);  // leaves exactly 1 MiB: no split
        CHECK(b2.ptr == b.ptr);
        CHECK(b2.size == 15 * kMiB);
        f.allocator.free(b2);
        const Allocation c = f.allocator.allocate(13 * kMiB + 512 * kKiB, 1);  // leaves 1.5 MiB: split
        CHECK(c.ptr == a.ptr + 5 * kMiB);
        CHECK(c.size == 13 * kMiB + 512 * kKiB);
        const Allocation d = f.allocator.allocate(kMiB + 512 * kKiB, 1);  // takes exactly the remainder
        CHECK(d.ptr == c.ptr + c.size);
        CHECK(d.size == kMiB + 512 * kKiB);
        CHECK(f.allocator.stats().segments == 1);
        CHECK(snapshot_problem(f.allocator) == "");
        for (const auto& x : {a, c, d}) f.allocator.free(x);
        CHECK(snapshot_problem(f.allocator) == "");
    }
}

TEST_CASE("alloc.best_fit") {
    const std::uint64_t seed = cudarc::test::fresh_seed();
    CAPTURE(seed);
    std::mt19937_64 rng(seed);

    for (int round = 0; round < 20; ++round) {
        AllocatorOnFakeDevice f;
        // Fill one small segment with blocks of random sizes; free every other one so that no two
        // holes touch. The holes are the reference model of the free list.
        std::vector<Allocation> blocks;
        std::size_t used = 0;
        std::uniform_int_distribution<std::size_t> pieces(1, 96);  // in units of 512 bytes
        while (used < 2 * kMiB) {
            std::size_t bytes = pieces(rng) * 512;
            if (2 * kMiB - used < bytes + 512) bytes = 2 * kMiB - used;  // the last one takes the rest
            blocks.push_back(f.allocator.allocate(bytes, 7));
            used += blocks.back().size;
        }
        REQUIRE(f.allocator.stats().segments == 1);
        std::map<DevicePtr, std::size_t> holes;  // address -> size
        for (std::size_t i = 0; i < blocks.size(); i += 2) {
            f.allocator.free(blocks[i]);
            holes[blocks[i].ptr] = blocks[i].size;
        }
        REQUIRE(snapshot_problem(f.allocator) == "");

        // Requests no larger than the largest hole: each must land in the smallest hole that fits
        // (lowest address among equals), splitting it when 512 bytes or more remain.
        for (int request = 0; request < 10 && !holes.empty(); ++request) {
            std::size_t largest = 0;
            for (const auto& [addr, size] : holes) largest = std::max(largest, size);
            const std::size_t bytes = std::uniform_int_distribution<std::size_t>(1, largest)(rng);
            const std::size_t rounded = reference_round(bytes);
            auto best = holes.end();
            for (auto it = holes.begin(); it != holes.end(); ++it) {
                if (it->second >= rounded && (best == holes.end() || it->second < best->second)) best = it;
            }
            REQUIRE(best != holes.end());
            CAPTURE(bytes);
            const Allocation a = f.allocator.allocate(bytes, 7);
            CHECK(a.ptr == best->first);
            CHECK(a.size == rounded);
            CHECK(f.allocator.stats().segments == 1);
            const DevicePtr addr = best->first;
            const std::size_t size = best->second;
            holes.erase(best);
            if (size > rounded) holes[addr + rounded] = size - rounded;
        }
        CHECK(snapshot_problem(f.allocator) == "");
    }
}

TEST_CASE("alloc.oversize_blocks") {
    AllocatorConfig config;
    config.max_split_size = 40 * kMiB;
    AllocatorOnFakeDevice f(1024 * kMiB, config);

    const Allocation big = f.allocator.allocate(64 * kMiB, 1);
    f.allocator.free(big);

    // Not oversize: must not take the oversize block.
    const Allocation normal = f.allocator.allocate(30 * kMiB, 1);
    CHECK(normal.ptr != big.ptr);
    CHECK(f.allocator.stats().driver_allocations == 2);

    // Oversize but wasting the whole margin (20 MiB) or more: not reused.
    const Allocation wasteful = f.allocator.allocate(44 * kMiB, 1);
    CHECK(wasteful.ptr != big.ptr);
    CHECK(f.allocator.stats().driver_allocations == 3);

    // Oversize and close in size: reused whole, never split.
    const Allocation close = f.allocator.allocate(44 * kMiB + 512, 1);
    CHECK(close.ptr == big.ptr);
    CHECK(close.size == 64 * kMiB);
    CHECK(f.allocator.stats().driver_allocations == 3);
    CHECK(snapshot_problem(f.allocator) == "");

    // A new oversize segment is not split either.
    const Allocation fresh = f.allocator.allocate(48 * kMiB + 512 * kKiB, 1);  // 50 MiB segment
    CHECK(fresh.size == 50 * kMiB);
    for (const auto& a : {normal, wasteful, close, fresh}) f.allocator.free(a);
    CHECK(snapshot_problem(f.allocator) == "");

    SUBCASE("without a limit, the same large block is split") {
        AllocatorOnFakeDevice g;
        const Allocation b = g.allocator.allocate(64 * kMiB, 1);
        g.allocator.free(b);
        const Allocation part = g.allocator.allocate(30 * kMiB, 1);
        CHECK(part.ptr == b.ptr);
        CHECK(part.size == 30 * kMiB);
        g.allocator.free(part);
    }
}

TEST_CASE("alloc.invalid_config") {
    auto make = [](const AllocatorConfig& config) {
        auto device = std::make_shared<cudarc::test::FakeDevice>();
        cudarc::test::FakeBackend backend(device);
        cudarc::alloc::CachingAllocator a(backend, config);
    };
    AllocatorConfig config;
    config.max_split_size = 20 * kMiB - 1;
    CHECK_THROWS_AS(make(config), cudarc::Error);
    for (double fraction : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
        AllocatorConfig c;
        c.memory_fraction = fraction;
        CAPTURE(fraction);
        CHECK_THROWS_WITH_AS(make(c), doctest::Contains("memory_fraction"), cudarc::Error);
    }
    AllocatorConfig ok;
    ok.max_split_size = 20 * kMiB;
    ok.memory_fraction = 1.0;
    CHECK_NOTHROW(make(ok));
}

TEST_CASE("alloc.per_stream_pools") {
    AllocatorOnFakeDevice f;
    const Allocation on1 = f.allocator.allocate(64 * kKiB, 1);
    f.allocator.free(on1);

    // Another stream never gets stream 1's cached block.
    const Allocation on2 = f.allocator.allocate(64 * kKiB, 2);
    CHECK(on2.ptr != on1.ptr);
    CHECK(f.allocator.stats().segments == 2);
    auto snap = f.allocator.snapshot();
    REQUIRE(snap.segments.size() == 2);
    CHECK(snap.segments[0].stream != snap.segments[1].stream);

    // The same stream gets it back at once (freed with no other uses).
    const auto hits = f.allocator.stats().cache_hits;
    const Allocation again = f.allocator.allocate(64 * kKiB, 1);
    CHECK(again.ptr == on1.ptr);
    CHECK(f.allocator.stats().cache_hits == hits + 1);
    f.allocator.free(again);
    f.allocator.free(on2);
    CHECK(snapshot_problem(f.allocator) == "");
}

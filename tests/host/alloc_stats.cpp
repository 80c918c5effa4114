// Stats, snapshot, reset_peak, empty_cache, bad input and tear-down.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "host/alloc_test_support.hpp"

namespace {

using cudarc::AllocatorSnapshot;
using cudarc::alloc::Allocation;
using cudarc::alloc::CachingAllocator;
using cudarc::alloc::PendingUse;
using cudarc::test::AllocatorOnFakeDevice;
using cudarc::test::FakeBackend;
using cudarc::test::FakeCall;
using cudarc::test::FakeDevice;
using cudarc::test::kKiB;
using cudarc::test::kMiB;
using cudarc::test::snapshot_problem;

struct Live {
    Allocation allocation;
    cudarc::alloc::StreamKey stream;
};

}  // namespace

TEST_CASE("alloc.stats_and_snapshot") {
    const std::uint64_t seed = cudarc::test::fresh_seed();
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    AllocatorOnFakeDevice f(4096 * kMiB);

    std::vector<Live> live;
    std::size_t allocated = 0;
    std::size_t peak = 0;
    std::size_t requests = 0;
    std::uniform_int_distribution<int> coin(0, 99);
    std::uniform_int_distribution<cudarc::alloc::StreamKey> stream_of(1, 3);
    for (int step = 0; step < 2000; ++step) {
        if (live.empty() || coin(rng) < 55) {
            // Mostly small, some large, a few beyond 10 MiB.
            const int kind = coin(rng);
            std::size_t bytes = 0;
            if (kind < 70) {
                bytes = std::uniform_int_distribution<std::size_t>(1, kMiB)(rng);
            } else if (kind < 95) {
                bytes = std::uniform_int_distribution<std::size_t>(kMiB + 1, 10 * kMiB)(rng);
            } else {
                bytes = std::uniform_int_distribution<std::size_t>(10 * kMiB, 40 * kMiB)(rng);
            }
            const auto stream = stream_of(rng);
            const Allocation a = f.allocator.allocate(bytes, stream);
            ++requests;
            REQUIRE(a.size >= bytes);
            live.push_back({a, stream});
            allocated += a.size;
            peak = std::max(peak, allocated);
        } else {
            const std::size_t i = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
            f.allocator.free(live[i].allocation);
            allocated -= live[i].allocation.size;
            live[i] = live.back();
            live.pop_back();
        }
        if (step % 100 == 0 || step == 1999) {
            const auto stats = f.allocator.stats();
            const AllocatorSnapshot snap = f.allocator.snapshot();
            REQUIRE(snapshot_problem(snap, stats) == "");
            CHECK(stats.allocated_bytes == allocated);
            CHECK(stats.active_bytes == allocated);  // nothing waits for events here
            CHECK(stats.peak_allocated_bytes == peak);
            CHECK(stats.live_allocations == live.size());
            CHECK(stats.cache_hits + stats.driver_allocations == requests);
            CHECK(stats.reserved_bytes == f.device->used());
            CHECK(stats.segments == f.device->live_segments());
            // Every live allocation shows up as an allocated block with its size and stream.
            for (const Live& l : live) {
                const auto* block = cudarc::test::find_block(snap, l.allocation.ptr);
                REQUIRE(block != nullptr);
                CHECK(block->state == AllocatorSnapshot::BlockState::allocated);
                CHECK(block->size == l.allocation.size);
                CHECK(block->stream == l.stream);
            }
        }
    }

    f.allocator.reset_peak();
    CHECK(f.allocator.stats().peak_allocated_bytes == allocated);
    CHECK(f.allocator.stats().peak_reserved_bytes == f.allocator.stats().reserved_bytes);
    for (const Live& l : live) f.allocator.free(l.allocation);
    const auto stats = f.allocator.stats();
    CHECK(stats.allocated_bytes == 0);
    CHECK(stats.live_allocations == 0);
    CHECK(stats.peak_allocated_bytes == allocated);  // the peak survives the frees
    CHECK(snapshot_problem(f.allocator) == "");
}

TEST_CASE("alloc.empty_cache") {
    AllocatorOnFakeDevice f;
    const Allocation keep = f.allocator.allocate(64 * kKiB, 1);       // small segment stays
    const Allocation gone = f.allocator.allocate(3 * kMiB, 1);        // 20 MiB segment, freed
    const Allocation waiting = f.allocator.allocate(12 * kMiB, 2);    // 12 MiB segment, pending
    const Allocation completed = f.allocator.allocate(30 * kMiB, 2);  // 30 MiB segment, event done
    const auto e_waiting = f.device->make_event(3);
    const auto e_completed = f.device->make_event(4);
    const PendingUse u_waiting{3, e_waiting};
    const PendingUse u_completed{4, e_completed};
    f.allocator.free(gone);
    f.allocator.free(waiting, {&u_waiting, 1});
    f.allocator.free(completed, {&u_completed, 1});
    f.device->complete(e_completed);
    CHECK(f.allocator.stats().segments == 4);

    // Frees the wholly free segments (including one whose event has completed), keeps the others.
    CHECK(f.allocator.empty_cache() == 50 * kMiB);
    const auto stats = f.allocator.stats();
    CHECK(stats.segments == 2);
    CHECK(stats.reserved_bytes == 14 * kMiB);
    CHECK(stats.driver_frees == 2);
    CHECK(f.device->used() == 14 * kMiB);
    CHECK(f.device->count(FakeCall::Kind::synchronize_event) == 0);  // never blocks
    CHECK(snapshot_problem(f.allocator) == "");

    f.device->complete(e_waiting);
    f.allocator.free(keep);
    CHECK(f.allocator.empty_cache() == 14 * kMiB);
    CHECK(f.device->live_segments() == 0);
    CHECK(f.allocator.stats().reserved_bytes == 0);
    CHECK(f.allocator.empty_cache() == 0);
    CHECK(f.device->unreleased_events() == 0);

    // Usable afterwards.
    const Allocation again = f.allocator.allocate(64 * kKiB, 1);
    CHECK(f.allocator.stats().segments == 1);
    f.allocator.free(again);
}

TEST_CASE("alloc.bad_free_changes_nothing") {
    AllocatorOnFakeDevice f;
    const Allocation a = f.allocator.allocate(kKiB, 1);
    const Allocation b = f.allocator.allocate(kKiB, 1);
    f.allocator.free(a);
    const auto before = f.allocator.stats();
    const auto snap_before = f.allocator.snapshot();
    CHECK_THROWS_WITH_AS(f.allocator.free(a), doctest::Contains("not a live allocation"), cudarc::Error);
    Allocation forged = b;
    forged.ptr += 512;  // a pointer inside b, not b itself
    CHECK_THROWS_AS(f.allocator.free(forged), cudarc::Error);
    CHECK_THROWS_AS(f.allocator.free(Allocation{0x1234, 512, nullptr}), cudarc::Error);
    const auto after = f.allocator.stats();
    CHECK(after.allocated_bytes == before.allocated_bytes);
    CHECK(after.live_allocations == before.live_allocations);
    const auto snap_after = f.allocator.snapshot();
    REQUIRE(snap_after.segments.size() == snap_before.segments.size());
    CHECK(snap_after.segments[0].blocks.size() == snap_before.segments[0].blocks.size());

    // The events of a rejected free stay the caller's.
    const auto event = f.device->make_event(2);
    const PendingUse use{2, event};
    CHECK_THROWS_AS(f.allocator.free(a, {&use, 1}), cudarc::Error);
    CHECK_FALSE(f.device->released(event));
    f.device->release(event);

    f.allocator.free(b);
    CHECK(snapshot_problem(f.allocator) == "");
}

TEST_CASE("alloc.destructor_returns_everything") {
    auto device = std::make_shared<FakeDevice>();
    {
        FakeBackend backend(device);
        CachingAllocator allocator(backend);
        const Allocation live = allocator.allocate(5 * kMiB, 1);
        const Allocation pending = allocator.allocate(kKiB, 2);
        const Allocation cached = allocator.allocate(40 * kMiB, 3);
        const auto event = device->make_event(4);
        const PendingUse use{4, event};
        allocator.free(pending, {&use, 1});
        allocator.free(cached);
        allocator.record_stream(live, 6);
        (void)live;
        CHECK(device->live_segments() == 3);
    }
    CHECK(device->live_segments() == 0);
    CHECK(device->used() == 0);
    CHECK(device->unreleased_events() == 0);
    CHECK(device->violations().empty());
}

// Expandable segments (Note [Expandable segments]) on the fake backend: growing in place, giving free chunks
// back after a synchronize, out of memory, captures, streams, failures half way, and the benchmark's replays
// (peak reserved over peak allocated, against fixed segments on the same trace).
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cudarc_testing/alloc/replays.hpp"
#include "host/alloc_test_support.hpp"

namespace {

using cudarc::AllocatorConfig;
using cudarc::AllocatorSnapshot;
using cudarc::AllocatorStats;
using cudarc::DevicePtr;
using cudarc::Error;
using cudarc::OutOfMemory;
using cudarc::alloc::Allocation;
using cudarc::alloc::CachingAllocator;
using cudarc::alloc::ExpandableLayout;
using cudarc::alloc::NewSegments;
using cudarc::alloc::PendingUse;
using cudarc::alloc::Segments;
using cudarc::test::AllocatorOnFakeDevice;
using cudarc::test::FakeBackend;
using cudarc::test::FakeCall;
using cudarc::test::FakeDevice;
using cudarc::test::kKiB;
using cudarc::test::kMiB;
using cudarc::test::snapshot_problem;
using State = AllocatorSnapshot::BlockState;
using Kind = FakeCall::Kind;

constexpr std::size_t kGiB = 1024 * kMiB;

struct Expandable : AllocatorOnFakeDevice {
    explicit Expandable(std::size_t capacity = 1024 * kMiB, const AllocatorConfig& config = {})
        : AllocatorOnFakeDevice(capacity, config, Segments::expandable) {}

    Allocation allocate(std::size_t bytes, cudarc::alloc::StreamKey stream = 1) {
        const Allocation a = allocator.allocate(bytes, stream);
        device->handed_out();
        return a;
    }
    // Every invariant that must hold between two calls.
    [[nodiscard]] std::string problem() {
        if (std::string p = snapshot_problem(allocator); !p.empty()) return p;
        if (device->mapped_bytes() != allocator.stats().reserved_bytes)
            return "mapped bytes differ from reserved";
        if (!device->violations().empty()) return device->violations().front();
        return {};
    }
};

std::vector<Kind> kinds(const std::vector<FakeCall>& log) {
    std::vector<Kind> out;
    for (const FakeCall& call : log) out.push_back(call.kind);
    return out;
}

std::size_t count(const std::vector<FakeCall>& log, Kind kind) {
    return static_cast<std::size_t>(
        std::count_if(log.begin(), log.end(), [kind](const FakeCall& c) { return c.kind == kind; }));
}

// The state of each block of the only segment, with its size in MiB.
std::vector<std::pair<State, std::size_t>> layout_of(const CachingAllocator& allocator) {
    const AllocatorSnapshot snap = allocator.snapshot();
    REQUIRE(snap.segments.size() == 1);
    std::vector<std::pair<State, std::size_t>> out;
    for (const auto& block : snap.segments[0].blocks) out.emplace_back(block.state, block.size / kMiB);
    return out;
}

// Replays a trace on one stream of `allocator`; returns the stats at the end (peaks included).
AllocatorStats replay(CachingAllocator& allocator, const cudarc::testing::AllocationTrace& trace) {
    std::vector<Allocation> slots(trace.slots);
    for (const auto& op : trace.ops) {
        if (op.kind == cudarc::testing::TraceOp::Kind::allocate) {
            slots[op.id] = allocator.allocate(op.bytes, 1);
        } else if (op.kind == cudarc::testing::TraceOp::Kind::free) {
            allocator.free(slots[op.id]);
            slots[op.id] = {};
        }
    }
    const AllocatorStats stats = allocator.stats();
    for (const Allocation& a : slots) allocator.free(a);
    return stats;
}

}  // namespace

TEST_CASE("alloc.expandable_layout") {
    const ExpandableLayout h200 = ExpandableLayout::for_device(2 * kMiB, 141 * kGiB);
    CHECK(h200.small_chunk == 2 * kMiB);
    CHECK(h200.large_chunk == 16 * kMiB);
    CHECK(h200.large_range >= 141 * kGiB + 141 * kGiB / 8);
    CHECK(h200.large_range % h200.large_chunk == 0);
    CHECK(h200.small_range >= 141 * kGiB / 8);
    CHECK(h200.small_range % h200.small_chunk == 0);
    // A coarser driver: chunks are its granularity.
    const ExpandableLayout coarse = ExpandableLayout::for_device(32 * kMiB, 8 * kGiB);
    CHECK(coarse.small_chunk == 32 * kMiB);
    CHECK(coarse.large_chunk == 32 * kMiB);
    // A tiny device still gets a chunk's worth of range.
    CHECK(ExpandableLayout::for_device(2 * kMiB, kMiB).small_range == 2 * kMiB);
    // Not a power of two: no layout, and the allocator says why.
    CHECK(ExpandableLayout::for_device(3 * kMiB, 8 * kGiB).large_range == 0);
    auto device = std::make_shared<FakeDevice>();
    device->set_granularity(3 * kMiB);
    FakeBackend backend(device);
    try {
        CachingAllocator allocator(backend, {}, Segments::expandable);
        FAIL("an allocator over a granularity of 3 MiB was made");
    } catch (const Error& e) {
        CHECK(std::string(e.what()).find("not a power of two") != std::string::npos);
    }
}

TEST_CASE("alloc.expandable_segment_grows_in_place") {
    Expandable f;
    const Allocation a = f.allocate(10 * kMiB);
    const AllocatorStats s1 = f.allocator.stats();
    CHECK(s1.segments == 1);
    CHECK(s1.reserved_bytes == 16 * kMiB);  // one large chunk
    CHECK(s1.address_space_bytes == f.allocator.layout().large_range);
    CHECK(s1.driver_allocations == 1);
    CHECK(a.ptr % (16 * kMiB) == 0);

    // The 6 MiB left at the end are free but too small: the segment grows behind them, and the request
    // takes them and part of the new chunk.
    const Allocation b = f.allocate(10 * kMiB);
    CHECK(b.ptr == a.ptr + 10 * kMiB);
    const AllocatorStats s2 = f.allocator.stats();
    CHECK(s2.reserved_bytes == 32 * kMiB);
    CHECK(s2.segments == 1);
    CHECK(s2.driver_allocations == 2);
    CHECK(s2.cache_misses == 2);
    // The rest is one free block: a request of its size fits without the driver.
    const Allocation c = f.allocate(12 * kMiB);
    CHECK(c.ptr == b.ptr + 10 * kMiB);
    CHECK(f.allocator.stats().cache_hits == 1);
    CHECK(f.allocator.stats().reserved_bytes == f.allocator.stats().allocated_bytes);
    CHECK(f.problem() == "");

    for (const Allocation& x : {a, b, c}) f.allocator.free(x);
    CHECK(layout_of(f.allocator) ==
          std::vector<std::pair<State, std::size_t>>{
              {State::free, 32}, {State::unmapped, f.allocator.layout().large_range / kMiB - 32}});
    // Freed memory stays mapped and serves any size that fits.
    const Allocation d = f.allocate(30 * kMiB);
    CHECK(d.ptr == a.ptr);
    CHECK(f.allocator.stats().driver_allocations == 2);
    f.allocator.free(d);
    CHECK(f.problem() == "");
}

TEST_CASE("alloc.expandable_pools_and_streams_have_their_own_segments") {
    Expandable f;
    const Allocation small = f.allocate(1000, 1);
    const Allocation large = f.allocate(3 * kMiB, 1);
    const Allocation other = f.allocate(3 * kMiB, 2);
    const AllocatorSnapshot snap = f.allocator.snapshot();
    REQUIRE(snap.segments.size() == 3);
    CHECK(snap.source == "expandable");
    int small_segments = 0;
    for (const auto& segment : snap.segments) {
        CHECK(segment.expandable);
        small_segments += segment.small_pool ? 1 : 0;
        CHECK(segment.size == f.allocator.layout().range(segment.small_pool));
        CHECK(segment.mapped_bytes == f.allocator.layout().chunk(segment.small_pool));
    }
    CHECK(small_segments == 1);
    CHECK(f.allocator.stats().reserved_bytes == 2 * kMiB + 2 * 16 * kMiB);
    CHECK(other.ptr != large.ptr);
    CHECK(f.problem() == "");
    for (const Allocation& x : {small, large, other}) f.allocator.free(x);
    // Stream 2's cached memory does not serve stream 1: its segment grows instead.
    const Allocation more = f.allocate(20 * kMiB, 1);
    CHECK(f.allocator.stats().reserved_bytes == 2 * kMiB + 3 * 16 * kMiB);
    f.allocator.free(more);
    CHECK(f.problem() == "");
}

TEST_CASE("alloc.expandable_empty_cache_unmaps_free_chunks_after_a_synchronize") {
    Expandable f;
    const Allocation a = f.allocate(10 * kMiB);
    const Allocation b = f.allocate(10 * kMiB);
    const Allocation c = f.allocate(12 * kMiB);
    f.allocator.free(b);
    f.allocator.free(c);
    f.device->clear_log();
    // [0, 10) is allocated; [10, 32) is free: only the chunk [16, 32) lies wholly inside it.
    CHECK(f.allocator.empty_cache() == 16 * kMiB);
    CHECK(kinds(f.device->log()) == std::vector<Kind>{Kind::synchronize_device, Kind::unmap});
    CHECK(f.device->log()[1].value == a.ptr + 16 * kMiB);
    CHECK(layout_of(f.allocator) == std::vector<std::pair<State, std::size_t>>{
                                        {State::allocated, 10},
                                        {State::free, 6},
                                        {State::unmapped, f.allocator.layout().large_range / kMiB - 16}});
    AllocatorStats s = f.allocator.stats();
    CHECK(s.reserved_bytes == 16 * kMiB);
    CHECK(s.driver_frees == 1);
    CHECK(f.problem() == "");

    // Nothing to give back: no synchronize either.
    f.device->clear_log();
    CHECK(f.allocator.empty_cache() == 0);
    CHECK(count(f.device->log(), Kind::synchronize_device) == 0);

    // All free: every chunk goes, then the range itself.
    f.allocator.free(a);
    f.device->clear_log();
    CHECK(f.allocator.empty_cache() == 16 * kMiB);
    CHECK(kinds(f.device->log()) ==
          std::vector<Kind>{Kind::synchronize_device, Kind::unmap, Kind::free_range});
    s = f.allocator.stats();
    CHECK(s.reserved_bytes == 0);
    CHECK(s.segments == 0);
    CHECK(s.address_space_bytes == 0);
    CHECK(f.device->mapped_bytes() == 0);
    CHECK(f.device->live_ranges() == 0);
    CHECK(f.problem() == "");

    // And the allocator grows a new segment afterwards.
    const Allocation d = f.allocate(40 * kMiB);
    CHECK(f.allocator.stats().reserved_bytes == 48 * kMiB);
    f.allocator.free(d);
    CHECK(f.problem() == "");
}

TEST_CASE("alloc.expandable_blocks_held_for_other_streams_stay_mapped") {
    Expandable f;
    const Allocation a = f.allocate(20 * kMiB, 1);
    const auto event = f.device->make_event(2);
    const PendingUse use{2, event};
    f.allocator.free(a, std::span(&use, 1));
    CHECK(f.allocator.empty_cache() == 0);  // [0, 20) is held for stream 2: no chunk of it is unmapped
    CHECK(f.allocator.stats().reserved_bytes == 32 * kMiB);
    CHECK(f.problem() == "");
    f.device->complete(event);
    CHECK(f.allocator.empty_cache() == 32 * kMiB);
    CHECK(f.allocator.stats().reserved_bytes == 0);
    CHECK(f.problem() == "");
}

TEST_CASE("alloc.expandable_out_of_memory_unmaps_cached_chunks_then_retries") {
    Expandable f(64 * kMiB);
    const Allocation a = f.allocate(40 * kMiB, 1);  // 48 MiB mapped for stream 1
    f.allocator.free(a);
    f.device->clear_log();
    // Stream 2 needs 32 MiB mapped; only 16 MiB are left until stream 1's cached chunks go.
    const Allocation b = f.allocate(30 * kMiB, 2);
    CHECK(kinds(f.device->log()) == std::vector<Kind>{Kind::reserve_range, Kind::map_failed,
                                                      Kind::capture_status, Kind::synchronize_device,
                                                      Kind::unmap, Kind::unmap, Kind::unmap, Kind::map});
    const AllocatorStats s = f.allocator.stats();
    CHECK(s.oom_retries == 1);
    CHECK(s.out_of_memory_errors == 0);
    CHECK(s.reserved_bytes == 32 * kMiB);
    CHECK(s.segments == 2);  // stream 1's range stays (empty_cache frees it); only its memory went
    f.allocator.free(b);
    CHECK(f.problem() == "");
}

TEST_CASE("alloc.expandable_out_of_memory_names_mapped_reserved_and_largest_free") {
    Expandable f(64 * kMiB);
    const Allocation a = f.allocate(40 * kMiB);  // 48 MiB mapped, 8 MiB of it free at the end
    std::optional<OutOfMemory> error;
    try {
        (void)f.allocate(30 * kMiB);
    } catch (const OutOfMemory& e) {
        error = e;
    }
    REQUIRE(error.has_value());
    const OutOfMemory::Figures& figures = error->figures();
    CHECK(figures.requested == 30 * kMiB);
    CHECK(figures.allocated == 40 * kMiB);
    CHECK(figures.reserved == 48 * kMiB);
    CHECK(figures.mapped == 48 * kMiB);
    CHECK(figures.address_space == f.allocator.layout().large_range);
    REQUIRE(figures.largest_free.has_value());
    CHECK(*figures.largest_free == 8 * kMiB);
    const std::string message = error->what();
    INFO(message);
    CHECK(message.find(
              fmt::format("{} bytes reserved ({} bytes mapped into expandable segments of {} bytes of "
                          "reserved address space)",
                          48 * kMiB, 48 * kMiB, f.allocator.layout().large_range)) != std::string::npos);
    CHECK(message.find(fmt::format("its largest free block {} bytes", 8 * kMiB)) != std::string::npos);
    CHECK(message.find("fragmented") == std::string::npos);  // that hint is for fixed segments
    // Nothing changed: the allocation is intact and the allocator usable.
    CHECK(f.allocator.stats().live_allocations == 1);
    CHECK(f.problem() == "");
    f.allocator.free(a);
    const Allocation b = f.allocate(60 * kMiB);
    f.allocator.free(b);
    CHECK(f.problem() == "");
}

TEST_CASE("alloc.expandable_failed_mapping_half_way_changes_nothing") {
    Expandable f;
    const Allocation a = f.allocate(32 * kMiB);
    const Allocation b = f.allocate(32 * kMiB);
    const Allocation c = f.allocate(32 * kMiB);
    REQUIRE(b.ptr == a.ptr + 32 * kMiB);
    REQUIRE(c.ptr == b.ptr + 32 * kMiB);
    f.allocator.free(b);
    REQUIRE(f.allocator.empty_cache() == 32 * kMiB);  // b's chunks: an unmapped hole before c
    f.allocator.free(c);                              // free, between the hole and the unmapped end
    // 80 MiB from the hole on: its 32 MiB, c's 32 and 16 of the end: two pieces to map. The second fails.
    f.device->clear_log();
    f.device->fail_a_map_after(1);
    const Allocation d = f.allocate(80 * kMiB);
    CHECK(kinds(f.device->log()) ==
          std::vector<Kind>{Kind::map, Kind::map_failed, Kind::unmap, Kind::unmap,  // the first piece undone
                            Kind::capture_status, Kind::synchronize_device, Kind::unmap,
                            Kind::unmap,  // c's chunks
                            Kind::map});  // one piece now: all unmapped from the hole on
    CHECK(d.ptr == b.ptr);
    CHECK(f.allocator.stats().reserved_bytes == 112 * kMiB);
    CHECK(f.problem() == "");
    f.allocator.free(a);
    f.allocator.free(d);
    CHECK(f.problem() == "");
}

TEST_CASE("alloc.expandable_capture_maps_nothing") {
    Expandable f;
    const Allocation warm = f.allocate(4 * kMiB, 1);
    f.allocator.free(warm);  // 16 MiB mapped and free
    const auto capture = f.allocator.notify_capture_begin(1);
    f.device->set_capturing(1, true);
    f.device->clear_log();
    // What is mapped serves the capture.
    const Allocation inside = f.allocator.allocate(8 * kMiB, 1, NewSegments::refused);
    CHECK(inside.ptr == warm.ptr);
    // What is not throws before any driver call, and changes nothing.
    const AllocatorStats before = f.allocator.stats();
    try {
        (void)f.allocator.allocate(20 * kMiB, 1, NewSegments::refused);
        FAIL("a capture mapped memory");
    } catch (const Error& e) {
        const std::string what = e.what();
        CHECK(what.find("expandable") != std::string::npos);
        CHECK(what.find("cuMemCreate") != std::string::npos);
    }
    CHECK(f.allocator.stats().allocated_bytes == before.allocated_bytes);
    CHECK(f.allocator.empty_cache() == 0);  // nothing unmapped, no synchronize during a capture
    CHECK(f.device->log().empty());
    f.allocator.free(inside);
    f.device->set_capturing(1, false);
    f.allocator.notify_capture_end(1);
    f.allocator.release_capture(capture);
    CHECK(f.allocator.empty_cache() == 16 * kMiB);
    CHECK(f.problem() == "");
}

TEST_CASE("alloc.expandable_retired_stream_hands_its_segments_over") {
    Expandable f;
    const Allocation a = f.allocate(4 * kMiB, 5);
    const Allocation kept = f.allocate(1000, 5);
    f.allocator.free(a);
    f.allocator.retire_stream(5, 1);
    const AllocatorSnapshot snap = f.allocator.snapshot();
    for (const auto& segment : snap.segments) CHECK(segment.stream == 1);
    // The heir reuses the cached block, and grows the segment it inherited.
    const Allocation b = f.allocate(4 * kMiB, 1);
    CHECK(b.ptr == a.ptr);
    const Allocation c = f.allocate(30 * kMiB, 1);
    CHECK(f.allocator.snapshot().segments.size() == 2);  // the same two: small and large
    for (const Allocation& x : {kept, b, c}) f.allocator.free(x);
    CHECK(f.problem() == "");
}

TEST_CASE("alloc.expandable_destruction_unmaps_everything_after_a_synchronize") {
    auto device = std::make_shared<FakeDevice>();
    {
        FakeBackend backend(device);
        CachingAllocator allocator(backend, {}, Segments::expandable);
        (void)allocator.allocate(100 * kMiB, 1);  // still live: the device is going away
        const Allocation b = allocator.allocate(1000, 2);
        allocator.free(b);
        device->handed_out();
        device->clear_log();
    }
    const auto log = device->log();
    REQUIRE_FALSE(log.empty());
    CHECK(log.front().kind == Kind::synchronize_device);
    CHECK(count(log, Kind::unmap) == 7 + 1);  // 112 MiB in 16 MiB chunks, one 2 MiB chunk
    CHECK(count(log, Kind::free_range) == 2);
    CHECK(device->mapped_bytes() == 0);
    CHECK(device->live_ranges() == 0);
    CHECK(device->violations().empty());
}

TEST_CASE("alloc.expandable_random_operations_keep_every_invariant") {
    const std::uint64_t seed = cudarc::test::fresh_seed();
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    Expandable f(256 * kMiB);
    struct Live {
        Allocation allocation;
        cudarc::alloc::StreamKey stream;
    };
    std::vector<Live> live;
    std::vector<cudarc::alloc::EventHandle> events;
    int out_of_memory = 0;
    for (int step = 0; step < 3000; ++step) {
        const auto choice = rng() % 100;
        if (choice < 50 || live.empty()) {
            const cudarc::alloc::StreamKey stream = 1 + rng() % 3;
            const std::size_t bytes = rng() % 4 == 0 ? 1 + rng() % (40 * kMiB) : 1 + rng() % kMiB;
            try {
                live.push_back({f.allocate(bytes, stream), stream});
            } catch (const OutOfMemory&) {
                ++out_of_memory;
            }
        } else if (choice < 90) {
            const std::size_t i = rng() % live.size();
            if (rng() % 3 == 0) {
                const cudarc::alloc::StreamKey other = live[i].stream % 3 + 1;
                const PendingUse use{other, f.device->make_event(other)};
                events.push_back(use.event);
                f.allocator.free(live[i].allocation, std::span(&use, 1));
            } else {
                f.allocator.free(live[i].allocation);
            }
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        } else if (choice < 97) {
            if (!events.empty()) f.device->complete(events[rng() % events.size()]);
        } else {
            (void)f.allocator.empty_cache();
        }
        INFO("step " << step);
        REQUIRE(f.problem() == "");
        for (const Live& l : live) REQUIRE(f.device->mapped(l.allocation.ptr, l.allocation.size));
    }
    std::vector<std::pair<DevicePtr, std::size_t>> ranges;
    for (const Live& l : live) ranges.emplace_back(l.allocation.ptr, l.allocation.size);
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t i = 1; i < ranges.size(); ++i)
        CHECK(ranges[i - 1].first + ranges[i - 1].second <= ranges[i].first);
    MESSAGE(out_of_memory << " requests ran out of memory, " << f.allocator.stats().oom_retries
                          << " retries");
    for (const Live& l : live) f.allocator.free(l.allocation);
    f.device->complete_all();
    (void)f.allocator.empty_cache();
    const AllocatorStats s = f.allocator.stats();
    CHECK(s.reserved_bytes == 0);
    CHECK(s.segments == 0);
    CHECK(f.problem() == "");
}

TEST_CASE("alloc.expandable_replays_stay_within_their_targets") {
    // The traces of cudarc-bench alloc, on an H200-sized fake device with the H200's granularity; the peaks
    // are bookkeeping (no timing), the same wherever they are computed.
    const cudarc::testing::ModelShape shape;
    struct Case {
        std::string name;
        cudarc::testing::AllocationTrace trace;
        double target;
    };
    std::vector<Case> cases;
    cases.push_back({"training", cudarc::testing::training_trace(shape, 20, 1), 1.05});
    for (const std::uint64_t seed : {1, 2, 3, 4, 5}) {
        cases.push_back(
            {fmt::format("variable, seed {}", seed), cudarc::testing::decode_trace(shape, 400, seed), 1.10});
    }
    for (const Case& c : cases) {
        CAPTURE(c.name);
        AllocatorOnFakeDevice fixed(141 * kGiB);
        Expandable expandable(141 * kGiB);
        const AllocatorStats f = replay(fixed.allocator, c.trace);
        const AllocatorStats e = replay(expandable.allocator, c.trace);
        const auto ratio = [](const AllocatorStats& s) {
            return static_cast<double>(s.peak_reserved_bytes) / static_cast<double>(s.peak_allocated_bytes);
        };
        MESSAGE(c.name << ": peak requested " << c.trace.peak_requested / kMiB << " MiB; caching allocator "
                       << ratio(f) << " (" << f.peak_reserved_bytes / kMiB << " / "
                       << f.peak_allocated_bytes / kMiB << " MiB, " << f.driver_allocations
                       << " segments); expandable " << ratio(e) << " (" << e.peak_reserved_bytes / kMiB
                       << " / " << e.peak_allocated_bytes / kMiB << " MiB, " << e.driver_allocations
                       << " chunks)");
        CHECK(ratio(e) <= c.target);
        CHECK(ratio(e) <= ratio(f));
        CHECK(expandable.problem() == "");
    }
}

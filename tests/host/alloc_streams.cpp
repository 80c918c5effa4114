// Blocks used on other streams: event-gated reuse, per-stream FIFO polling, record_stream.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "host/alloc_test_support.hpp"

namespace {

using cudarc::AllocatorSnapshot;
using cudarc::alloc::Allocation;
using cudarc::alloc::PendingUse;
using cudarc::test::AllocatorOnFakeDevice;
using cudarc::test::FakeCall;
using cudarc::test::FakeDevice;
using cudarc::test::find_block;
using cudarc::test::kKiB;
using cudarc::test::kMiB;
using cudarc::test::snapshot_problem;

AllocatorSnapshot::BlockState state_of(const cudarc::alloc::CachingAllocator& allocator,
                                       cudarc::DevicePtr ptr) {
    const AllocatorSnapshot snap = allocator.snapshot();
    const AllocatorSnapshot::Block* block = find_block(snap, ptr);
    REQUIRE(block != nullptr);
    return block->state;
}

}  // namespace

TEST_CASE("alloc.event_gated_reuse") {
    AllocatorOnFakeDevice f;
    const Allocation a = f.allocator.allocate(256 * kKiB, 1);
    const auto event = f.device->make_event(2);  // stream 2 read the block
    const PendingUse use{2, event};
    f.allocator.free(a, {&use, 1});
    CHECK(state_of(f.allocator, a.ptr) == AllocatorSnapshot::BlockState::awaiting_events);
    CHECK(f.allocator.stats().allocated_bytes == 0);
    CHECK(f.allocator.stats().active_bytes == 256 * kKiB);

    // While stream 2's use may be running, the block is not handed out again, not even on its own stream.
    for (int i = 0; i < 3; ++i) {
        const Allocation b = f.allocator.allocate(256 * kKiB, 1);
        CHECK(b.ptr != a.ptr);
        f.allocator.free(b);
    }
    CHECK_FALSE(f.device->released(event));
    CHECK(f.device->count(FakeCall::Kind::query_event) >= 3);        // polled at each allocation...
    CHECK(f.device->count(FakeCall::Kind::synchronize_event) == 0);  // ...and never waited for

    f.device->complete(event);
    const Allocation c = f.allocator.allocate(256 * kKiB, 1);
    CHECK(c.ptr == a.ptr);
    CHECK(f.device->released(event));
    CHECK(f.allocator.stats().active_bytes == 256 * kKiB);  // c itself
    f.allocator.free(c);
    CHECK(snapshot_problem(f.allocator) == "");
    CHECK(f.device->violations().empty());
}

TEST_CASE("alloc.same_stream_reuse") {
    AllocatorOnFakeDevice f;
    const Allocation a = f.allocator.allocate(4 * kMiB, 3);
    f.allocator.free(a);
    const Allocation b = f.allocator.allocate(4 * kMiB, 3);
    CHECK(b.ptr == a.ptr);

    // An explicit event on the block's own stream gates it like any other (a foreign stream's handle
    // may be reused by another stream, so the caller gates by event rather than by identity).
    const auto own = f.device->make_event(3);
    const PendingUse use{3, own};
    f.allocator.free(b, {&use, 1});
    CHECK_FALSE(f.device->released(own));
    const Allocation c = f.allocator.allocate(4 * kMiB, 3);
    CHECK(c.ptr != a.ptr);
    f.device->complete(own);
    const Allocation d = f.allocator.allocate(4 * kMiB, 3);
    CHECK(d.ptr == a.ptr);
    CHECK(f.device->released(own));
    f.allocator.free(c);
    f.allocator.free(d);
    CHECK(snapshot_problem(f.allocator) == "");
}

TEST_CASE("alloc.waits_for_every_using_stream") {
    AllocatorOnFakeDevice f;
    const Allocation a = f.allocator.allocate(2 * kMiB, 1);
    const auto e2 = f.device->make_event(2);
    const auto e3 = f.device->make_event(3);
    const PendingUse uses[] = {{2, e2}, {3, e3}};
    f.allocator.free(a, uses);

    f.device->complete(e3);
    const Allocation b = f.allocator.allocate(2 * kMiB, 1);
    CHECK(b.ptr != a.ptr);  // stream 2 may still use it
    CHECK(f.device->released(e3));
    CHECK_FALSE(f.device->released(e2));
    f.allocator.free(b);

    f.device->complete(e2);
    const Allocation c = f.allocator.allocate(2 * kMiB, 1);
    CHECK(c.ptr == a.ptr);
    CHECK(f.device->unreleased_events() == 0);
    f.allocator.free(c);
    CHECK(snapshot_problem(f.allocator) == "");
}

TEST_CASE("alloc.pending_frees_are_fifo_per_stream") {
    AllocatorOnFakeDevice f;
    const Allocation a = f.allocator.allocate(64 * kKiB, 1);
    const Allocation b = f.allocator.allocate(64 * kKiB, 1);
    const Allocation c = f.allocator.allocate(64 * kKiB, 1);
    const Allocation guard = f.allocator.allocate(64 * kKiB, 1);  // keeps the freed blocks from merging
    const auto ea = f.device->make_event(2);
    const auto eb = f.device->make_event(2);
    const auto ec = f.device->make_event(3);
    const PendingUse ua{2, ea};
    const PendingUse ub{2, eb};
    const PendingUse uc{3, ec};
    f.allocator.free(a, {&ua, 1});
    f.allocator.free(b, {&ub, 1});
    f.allocator.free(c, {&uc, 1});

    // Complete the later event on stream 2 and stream 3's event. On a real stream the earlier event
    // completes first; the allocator relies on that and stops at the first incomplete one.
    f.device->complete(eb);
    f.device->complete(ec);
    f.device->clear_log();
    const Allocation x = f.allocator.allocate(kMiB, 9);  // any allocation polls
    std::vector<std::uint64_t> queried;
    for (const FakeCall& call : f.device->log()) {
        if (call.kind == FakeCall::Kind::query_event) queried.push_back(call.value);
    }
    CHECK(std::count(queried.begin(), queried.end(), FakeDevice::id_of(ea)) == 1);
    CHECK(std::count(queried.begin(), queried.end(), FakeDevice::id_of(eb)) == 0);  // behind ea
    CHECK(std::count(queried.begin(), queried.end(), FakeDevice::id_of(ec)) == 1);  // its own queue
    CHECK(state_of(f.allocator, a.ptr) == AllocatorSnapshot::BlockState::awaiting_events);
    CHECK(state_of(f.allocator, b.ptr) == AllocatorSnapshot::BlockState::awaiting_events);
    CHECK(state_of(f.allocator, c.ptr) == AllocatorSnapshot::BlockState::free);

    f.device->complete(ea);
    const Allocation y = f.allocator.allocate(kMiB, 9);
    CHECK(state_of(f.allocator, a.ptr) == AllocatorSnapshot::BlockState::free);
    // a, b and c merged into one free block starting at a.
    const AllocatorSnapshot snap = f.allocator.snapshot();
    const auto* merged = find_block(snap, a.ptr);
    REQUIRE(merged != nullptr);
    CHECK(merged->size == 3 * 64 * kKiB);
    CHECK(f.device->unreleased_events() == 0);
    for (const auto& z : {x, y, guard}) f.allocator.free(z);
    CHECK(snapshot_problem(f.allocator) == "");
}

TEST_CASE("alloc.record_stream") {
    AllocatorOnFakeDevice f;
    const Allocation a = f.allocator.allocate(8 * kMiB, 1);
    f.allocator.record_stream(a, 4);
    f.allocator.record_stream(a, 4);  // once is enough
    f.allocator.record_stream(a, 1);  // its own stream: nothing to record
    f.allocator.free(a);

    // The allocator recorded one event, on stream 4, at free time.
    const auto recorded = f.device->events_recorded_by_allocator();
    REQUIRE(recorded.size() == 1);
    std::vector<std::uint64_t> streams;
    for (const FakeCall& call : f.device->log()) {
        if (call.kind == FakeCall::Kind::record_event) streams.push_back(call.value);
    }
    CHECK(streams == std::vector<std::uint64_t>{4});
    CHECK(state_of(f.allocator, a.ptr) == AllocatorSnapshot::BlockState::awaiting_events);

    const Allocation b = f.allocator.allocate(8 * kMiB, 1);
    CHECK(b.ptr != a.ptr);
    f.device->complete(recorded[0]);
    const Allocation c = f.allocator.allocate(8 * kMiB, 1);
    CHECK(c.ptr == a.ptr);
    CHECK(f.device->released(recorded[0]));

    // By raw pointer: any address inside a live allocation names it.
    f.allocator.record_stream(c.ptr + 12345, 5);
    f.allocator.free(c);
    CHECK(f.device->events_recorded_by_allocator().size() == 2);
    CHECK(state_of(f.allocator, c.ptr) == AllocatorSnapshot::BlockState::awaiting_events);

    // A pointer outside every live allocation is bad input and changes nothing.
    const auto before = f.allocator.stats();
    CHECK_THROWS_AS(f.allocator.record_stream(c.ptr + 10, 5), cudarc::Error);  // freed
    CHECK_THROWS_AS(f.allocator.record_stream(cudarc::DevicePtr{42}, 5), cudarc::Error);
    CHECK_THROWS_AS(f.allocator.record_stream(c, 5), cudarc::Error);
    CHECK(f.allocator.stats().allocated_bytes == before.allocated_bytes);

    f.device->complete_all();
    f.allocator.free(b);
    CHECK(f.allocator.empty_cache() > 0);
    CHECK(f.device->unreleased_events() == 0);
    CHECK(snapshot_problem(f.allocator) == "");
}

TEST_CASE("alloc.use_without_event_is_recorded_at_free") {
    AllocatorOnFakeDevice f;
    const Allocation a = f.allocator.allocate(3 * kMiB, 1);
    const PendingUse uses[] = {{2, nullptr}, {2, nullptr}, {1, nullptr}};  // stream 2 twice, own stream
    f.allocator.free(a, uses);
    const auto recorded = f.device->events_recorded_by_allocator();
    REQUIRE(recorded.size() == 1);  // one event for stream 2, none for the block's own stream
    CHECK(state_of(f.allocator, a.ptr) == AllocatorSnapshot::BlockState::awaiting_events);
    const Allocation b = f.allocator.allocate(3 * kMiB, 1);
    CHECK(b.ptr != a.ptr);
    f.device->complete(recorded[0]);
    const Allocation c = f.allocator.allocate(3 * kMiB, 1);
    CHECK(c.ptr == a.ptr);
    CHECK(f.device->unreleased_events() == 0);
    f.allocator.free(b);
    f.allocator.free(c);
    CHECK(snapshot_problem(f.allocator) == "");
}

TEST_CASE("alloc.many_pending_frees_complete_in_order") {
    AllocatorOnFakeDevice f;
    constexpr int kBlocks = 300;
    std::vector<Allocation> blocks;
    std::vector<cudarc::alloc::EventHandle> events;
    for (int i = 0; i < kBlocks; ++i) blocks.push_back(f.allocator.allocate(64 * kKiB, 1));
    for (int i = 0; i < kBlocks; ++i) {
        events.push_back(f.device->make_event(2));
        const PendingUse use{2, events.back()};
        f.allocator.free(blocks[i], {&use, 1});
    }
    auto awaiting = [&] {
        std::size_t n = 0;
        for (const auto& segment : f.allocator.snapshot().segments) {
            for (const auto& block : segment.blocks) {
                n += block.state == AllocatorSnapshot::BlockState::awaiting_events ? 1 : 0;
            }
        }
        return n;
    };
    CHECK(awaiting() == kBlocks);
    // The stream finishes its work in order, a chunk at a time; each allocation polls.
    int completed = 0;
    while (completed < kBlocks) {
        const int chunk = std::min(37, kBlocks - completed);
        for (int i = 0; i < chunk; ++i) f.device->complete(events[completed + i]);
        completed += chunk;
        const Allocation probe = f.allocator.allocate(kKiB, 3);  // another stream: takes no freed block
        CHECK(awaiting() == static_cast<std::size_t>(kBlocks - completed));
        CHECK(f.allocator.stats().active_bytes == (kBlocks - completed) * 64 * kKiB + probe.size);
        f.allocator.free(probe);
        CHECK(snapshot_problem(f.allocator) == "");
    }
    CHECK(f.device->unreleased_events() == 0);
    CHECK(f.allocator.stats().active_bytes == 0);
}

TEST_CASE("alloc.retire_stream_moves_its_blocks_to_the_heir") {
    // Note [Stream identity]: a foreign stream's key goes away with its wrapper; its segments (free, held
    // and allocated blocks) and record_stream entries move to the heir (the default stream).
    AllocatorOnFakeDevice f;
    constexpr cudarc::alloc::StreamKey kForeign = 7;
    constexpr cudarc::alloc::StreamKey kHeir = 2;
    const Allocation cached = f.allocator.allocate(256 * kKiB, kForeign);
    const Allocation live = f.allocator.allocate(256 * kKiB, kForeign);
    const Allocation other = f.allocator.allocate(64 * kKiB, 3);
    f.allocator.record_stream(other, kForeign);  // stream 3's block, also used on the foreign stream
    f.allocator.free(cached);
    const auto event = f.device->make_event(kForeign);
    const PendingUse use{kForeign, event};
    const Allocation held = f.allocator.allocate(64 * kKiB, 3);
    f.allocator.free(held, {&use, 1});  // gated by an event on the foreign stream

    f.allocator.retire_stream(kForeign, kHeir);
    for (const auto& segment : f.allocator.snapshot().segments) CHECK(segment.stream != kForeign);
    // The cached block is the heir's now: reused there, never on the old key.
    const Allocation again = f.allocator.allocate(256 * kKiB, kHeir);
    CHECK(again.ptr == cached.ptr);
    const Allocation fresh = f.allocator.allocate(256 * kKiB, kForeign);
    CHECK(fresh.ptr != cached.ptr);
    // The live block goes back to the heir's pool when freed.
    f.allocator.free(live);
    const Allocation reuse = f.allocator.allocate(256 * kKiB, kHeir);
    CHECK(reuse.ptr == live.ptr);
    // The record_stream entry now names the heir: freeing records on it, never on the retired key.
    const auto before = f.device->count(FakeCall::Kind::record_event);
    f.allocator.free(other);
    CHECK(f.device->count(FakeCall::Kind::record_event) == before + 1);
    const auto log = f.device->log();
    const auto last_record = std::find_if(log.rbegin(), log.rend(), [](const FakeCall& call) {
        return call.kind == FakeCall::Kind::record_event;
    });
    REQUIRE(last_record != log.rend());
    CHECK(last_record->value == kHeir);
    // The event already queued on the retired stream still gates its block.
    f.device->complete(event);
    for (const auto& a : {again, fresh, reuse}) f.allocator.free(a);
    f.device->complete_all();
    f.allocator.empty_cache();
    CHECK(snapshot_problem(f.allocator) == "");
    CHECK(f.device->violations().empty());
}

TEST_CASE("alloc.abandon_stream_keeps_its_blocks_out_of_reach") {
    // Note [Free after a failed record]: a retiring stream whose work nothing could be ordered after, nor
    // waited for: none of its blocks may be handed out again, under any key.
    AllocatorOnFakeDevice f;
    constexpr cudarc::alloc::StreamKey kForeign = 7;
    constexpr cudarc::alloc::StreamKey kHeir = 2;
    const Allocation cached = f.allocator.allocate(256 * kKiB, kForeign);
    const Allocation live = f.allocator.allocate(256 * kKiB, kForeign);
    const Allocation other = f.allocator.allocate(64 * kKiB, 3);
    f.allocator.record_stream(other, kForeign);  // stream 3's block, also used on the foreign stream
    f.allocator.free(cached);
    const auto records = f.device->count(FakeCall::Kind::record_event);

    f.allocator.abandon_stream(kForeign);
    const std::size_t reserved = f.allocator.stats().reserved_bytes;
    std::vector<Allocation> taken;
    for (const cudarc::alloc::StreamKey key : {kForeign, kHeir, cudarc::alloc::StreamKey{3}}) {
        taken.push_back(f.allocator.allocate(256 * kKiB, key));
        CHECK(taken.back().ptr != cached.ptr);
    }
    // Freed later, the live block and the block the stream used stay out of reach too; nothing is recorded
    // on the abandoned key.
    f.allocator.free(live);
    f.allocator.free(other);
    CHECK(f.device->count(FakeCall::Kind::record_event) == records);
    for (const cudarc::alloc::StreamKey key : {kForeign, kHeir, cudarc::alloc::StreamKey{3}}) {
        const Allocation a = f.allocator.allocate(256 * kKiB, key);
        const Allocation b = f.allocator.allocate(64 * kKiB, key);
        CHECK(a.ptr != live.ptr);
        CHECK(b.ptr != other.ptr);
        taken.push_back(a);
        taken.push_back(b);
    }
    for (const Allocation& a : taken) f.allocator.free(a);
    // empty_cache keeps the abandoned segments (they are not free); the allocator returns them at its end.
    f.allocator.empty_cache();
    CHECK(f.allocator.stats().reserved_bytes >= reserved);
    CHECK(f.allocator.stats().allocated_bytes == 0);
    CHECK(snapshot_problem(f.allocator) == "");
    CHECK(f.device->violations().empty());
}

// Graph capture: no event query, no wait and no driver free while a capture is under way; blocks a
// graph may touch are kept until the graph is released.
#include <doctest/doctest.h>

#include <vector>

#include "host/alloc_test_support.hpp"

namespace {

using cudarc::AllocatorSnapshot;
using cudarc::alloc::Allocation;
using cudarc::alloc::CachingAllocator;
using cudarc::alloc::CaptureId;
using cudarc::alloc::PendingUse;
using cudarc::alloc::StreamKey;
using cudarc::test::AllocatorOnFakeDevice;
using cudarc::test::FakeCall;
using cudarc::test::find_block;
using cudarc::test::kKiB;
using cudarc::test::kMiB;
using cudarc::test::snapshot_problem;

using State = AllocatorSnapshot::BlockState;

State state_of(const CachingAllocator& allocator, cudarc::DevicePtr ptr) {
    const AllocatorSnapshot snap = allocator.snapshot();
    const auto* block = find_block(snap, ptr);
    REQUIRE(block != nullptr);
    return block->state;
}

// What the device does around a capture: the fake refuses queries, waits and frees while capturing.
CaptureId begin(AllocatorOnFakeDevice& f, StreamKey stream) {
    const CaptureId id = f.allocator.notify_capture_begin(stream);
    f.device->set_capturing(stream, true);
    return id;
}
CaptureId end(AllocatorOnFakeDevice& f, StreamKey stream) {
    f.device->set_capturing(stream, false);
    return f.allocator.notify_capture_end(stream);
}

}  // namespace

TEST_CASE("alloc.capture_keeps_blocks_until_graph_release") {
    AllocatorOnFakeDevice f;
    const Allocation before = f.allocator.allocate(256 * kKiB, 1);  // allocated before the capture
    const Allocation elsewhere = f.allocator.allocate(256 * kKiB, 2);
    const auto e_other = f.device->make_event(3);
    const PendingUse other_use{3, e_other};

    const CaptureId id = begin(f, 1);
    // Allocated during the capture, freed during it: the graph replays work on it later.
    const Allocation inside = f.allocator.allocate(256 * kKiB, 1);
    f.allocator.free(inside);
    CHECK(state_of(f.allocator, inside.ptr) == State::held_for_graph);
    // Allocated before, freed during the capture on the capturing stream: the graph may use it.
    f.allocator.free(before);
    CHECK(state_of(f.allocator, before.ptr) == State::held_for_graph);
    // A block of another stream freed with an event: queued, but not queried during the capture.
    f.allocator.free(elsewhere, {&other_use, 1});
    f.device->complete(e_other);

    // Neither is handed out again during the capture.
    const Allocation next = f.allocator.allocate(256 * kKiB, 1);
    CHECK(next.ptr != inside.ptr);
    CHECK(next.ptr != before.ptr);
    CHECK(f.device->count(FakeCall::Kind::query_event) == 0);
    CHECK(f.allocator.empty_cache() == 0);
    CHECK(f.device->count(FakeCall::Kind::free) == 0);

    // Allocated during the capture, freed after it ended but before the graph is released.
    const Allocation late = f.allocator.allocate(256 * kKiB, 1);
    CHECK(end(f, 1) == id);
    f.allocator.free(late);
    CHECK(state_of(f.allocator, late.ptr) == State::held_for_graph);
    f.allocator.free(next);
    CHECK(state_of(f.allocator, next.ptr) == State::held_for_graph);  // also allocated during the capture
    CHECK(state_of(f.allocator, inside.ptr) == State::held_for_graph);
    // Four blocks held for the graph, and `elsewhere`, not yet polled (no polling during a capture).
    CHECK(f.allocator.stats().active_bytes == 5 * 256 * kKiB);
    CHECK(snapshot_problem(f.allocator) == "");

    // With the capture over, polling resumes for other streams.
    const Allocation poll = f.allocator.allocate(kKiB, 2);
    CHECK(state_of(f.allocator, elsewhere.ptr) != State::awaiting_events);
    f.allocator.free(poll);
    CHECK(f.allocator.stats().active_bytes == 4 * 256 * kKiB);

    f.allocator.release_capture(id);
    // All four went back and merged with the rest of their segment.
    const AllocatorSnapshot snap = f.allocator.snapshot();
    const auto* merged = find_block(snap, before.ptr);
    REQUIRE(merged != nullptr);
    CHECK(merged->state == State::free);
    CHECK(merged->size == 2 * kMiB);
    const Allocation reused = f.allocator.allocate(256 * kKiB, 1);
    CHECK(reused.ptr == before.ptr);  // the lowest of the freed blocks, merged back
    f.allocator.free(reused);
    CHECK(f.allocator.stats().active_bytes == 0);
    CHECK(snapshot_problem(f.allocator) == "");
    CHECK(f.device->violations().empty());
    CHECK(f.device->unreleased_events() == 0);

    // After release, a block allocated during that capture is an ordinary block again.
    CHECK_THROWS_AS(f.allocator.release_capture(id), cudarc::Error);
}

TEST_CASE("alloc.capture_release_waits_for_events") {
    AllocatorOnFakeDevice f;
    const CaptureId id = begin(f, 1);
    const Allocation inside = f.allocator.allocate(kMiB, 1);
    f.allocator.free(inside);
    end(f, 1);

    // The graph was launched on stream 5; its last launch is gated by this event.
    const auto launched = f.device->make_event(5);
    const PendingUse after{5, launched};
    f.allocator.release_capture(id, {&after, 1});
    CHECK(state_of(f.allocator, inside.ptr) == State::held_for_graph);
    const Allocation other = f.allocator.allocate(kMiB, 1);
    CHECK(other.ptr != inside.ptr);
    f.device->complete(launched);
    const Allocation reused = f.allocator.allocate(kMiB, 1);
    CHECK(reused.ptr == inside.ptr);
    CHECK(f.device->released(launched));
    f.allocator.free(other);
    f.allocator.free(reused);
    CHECK(snapshot_problem(f.allocator) == "");
    CHECK(f.device->violations().empty());
}

TEST_CASE("alloc.capture_on_a_using_stream") {
    AllocatorOnFakeDevice f;
    const Allocation a = f.allocator.allocate(64 * kKiB, 1);
    f.allocator.record_stream(a, 2);
    const CaptureId id = begin(f, 2);
    // Stream 2 is being captured: no event can be recorded there that could be queried, so the
    // capture holds the block instead.
    f.allocator.free(a);
    CHECK(f.device->count(FakeCall::Kind::record_event) == 0);
    CHECK(state_of(f.allocator, a.ptr) == State::held_for_graph);

    // A using-stream event recorded inside the capture is given back at once, never queried.
    const Allocation b = f.allocator.allocate(64 * kKiB, 1);
    const auto captured_event = f.device->make_event(2);
    const PendingUse use{2, captured_event};
    f.allocator.free(b, {&use, 1});
    CHECK(f.device->released(captured_event));
    CHECK(state_of(f.allocator, b.ptr) == State::held_for_graph);

    end(f, 2);
    f.allocator.release_capture(id);
    CHECK(state_of(f.allocator, a.ptr) == State::free);
    CHECK(f.device->count(FakeCall::Kind::query_event) == 0);
    CHECK(f.device->violations().empty());
    CHECK(snapshot_problem(f.allocator) == "");
}

TEST_CASE("alloc.capture_out_of_memory") {
    AllocatorOnFakeDevice f(22 * kMiB);
    const Allocation cached = f.allocator.allocate(4 * kMiB, 1);
    f.allocator.free(cached);  // a wholly free 20 MiB segment the capture must not give back
    const Allocation pending = f.allocator.allocate(kKiB, 2);
    const auto event = f.device->make_event(3);
    const PendingUse use{3, event};
    f.allocator.free(pending, {&use, 1});

    const CaptureId id = begin(f, 4);
    f.device->clear_log();
    CHECK_THROWS_AS((void)f.allocator.allocate(4 * kMiB, 4), cudarc::OutOfMemory);
    CHECK(f.device->count(FakeCall::Kind::free) == 0);
    CHECK(f.device->count(FakeCall::Kind::synchronize_event) == 0);
    CHECK(f.device->count(FakeCall::Kind::query_event) == 0);
    CHECK(f.device->violations().empty());
    end(f, 4);
    f.allocator.release_capture(id);

    // After the capture, the usual escalation applies again.
    const Allocation after = f.allocator.allocate(4 * kMiB, 4);
    CHECK(f.allocator.stats().driver_frees >= 1);
    f.allocator.free(after);
    CHECK(snapshot_problem(f.allocator) == "");
}

TEST_CASE("alloc.capture_misuse") {
    AllocatorOnFakeDevice f;
    const CaptureId id = f.allocator.notify_capture_begin(1);
    CHECK_THROWS_AS(f.allocator.notify_capture_begin(1), cudarc::Error);
    CHECK_THROWS_AS(f.allocator.notify_capture_end(2), cudarc::Error);
    CHECK_THROWS_WITH_AS(f.allocator.release_capture(id), doctest::Contains("under way"), cudarc::Error);
    CHECK_THROWS_AS(f.allocator.release_capture(id + 100), cudarc::Error);
    const CaptureId other = f.allocator.notify_capture_begin(2);  // two captures at once
    CHECK(other != id);
    CHECK(f.allocator.notify_capture_end(1) == id);
    CHECK(f.allocator.notify_capture_end(2) == other);
    f.allocator.release_capture(other);
    f.allocator.release_capture(id);
    // A new capture on the same stream gets a new identity.
    const CaptureId again = f.allocator.notify_capture_begin(1);
    CHECK(again != id);
    f.allocator.notify_capture_end(1);
    f.allocator.release_capture(again);
}

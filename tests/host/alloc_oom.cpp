// Out of memory: escalation order (cache free, then event wait, then throw), figures, recovery, cap.
#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <vector>

#include "host/alloc_test_support.hpp"

namespace {

using cudarc::AllocatorConfig;
using cudarc::OutOfMemory;
using cudarc::alloc::Allocation;
using cudarc::alloc::CachingAllocator;
using cudarc::alloc::PendingUse;
using cudarc::test::FakeBackend;
using cudarc::test::FakeCall;
using cudarc::test::FakeDevice;
using cudarc::test::kKiB;
using cudarc::test::kMiB;
using cudarc::test::snapshot_problem;

using Kind = FakeCall::Kind;

std::vector<Kind> kinds(const std::vector<FakeCall>& log) {
    std::vector<Kind> out;
    for (const FakeCall& call : log) out.push_back(call.kind);
    return out;
}

// Runs `fn`, which must throw OutOfMemory, and returns the exception.
template <typename Fn>
OutOfMemory expect_out_of_memory(Fn&& fn) {
    try {
        fn();
    } catch (const OutOfMemory& e) {
        return e;
    }
    FAIL("expected cudarc::OutOfMemory");
    return OutOfMemory(0, {});
}

}  // namespace

TEST_CASE("alloc.oom_escalation_order") {
    auto device = std::make_shared<FakeDevice>(44 * kMiB);
    {
        FakeBackend backend(device);
        CachingAllocator allocator(backend);

        // Stage 1: a wholly free cached segment is given back, then the request retried.
        const Allocation a = allocator.allocate(4 * kMiB, 1);  // 20 MiB segment
        allocator.free(a);
        const Allocation b = allocator.allocate(4 * kMiB, 2);  // stream 2 cannot use stream 1's block
        device->clear_log();
        const Allocation c = allocator.allocate(4 * kMiB, 3);
        CHECK(kinds(device->log()) ==
              std::vector<Kind>{Kind::allocate_failed, Kind::capture_status, Kind::free, Kind::allocate});
        CHECK(device->log()[2].value == a.ptr);
        CHECK(allocator.stats().oom_retries == 1);
        CHECK(allocator.stats().event_synchronizations == 0);
        CHECK(allocator.stats().driver_frees == 1);

        // Stage 2: nothing cached is wholly free, so the pending free's event is waited for, its
        // segment given back, and the request retried.
        const auto event = device->make_event(4);
        const PendingUse use{4, event};
        allocator.free(b, {&use, 1});
        device->clear_log();
        const Allocation d = allocator.allocate(4 * kMiB, 5);
        CHECK(kinds(device->log()) == std::vector<Kind>{Kind::query_event, Kind::allocate_failed,
                                                        Kind::capture_status, Kind::synchronize_event,
                                                        Kind::release_event, Kind::free, Kind::allocate});
        CHECK(device->log()[5].value == b.ptr);
        CHECK(allocator.stats().oom_retries == 2);
        CHECK(allocator.stats().event_synchronizations == 1);
        CHECK(device->released(event));

        // Stage 3: nothing left to free or wait for: OutOfMemory with the allocator's figures.
        device->clear_log();
        const auto error = expect_out_of_memory([&] { (void)allocator.allocate(30 * kMiB, 1); });
        CHECK(kinds(device->log()) ==
              std::vector<Kind>{Kind::allocate_failed, Kind::capture_status, Kind::memory_info});
        CHECK(error.figures().requested == 30 * kMiB);
        CHECK(error.figures().allocated == c.size + d.size);
        CHECK(error.figures().reserved == 40 * kMiB);
        CHECK(error.figures().device_free == 4 * kMiB);
        CHECK(error.figures().device_total == 44 * kMiB);
        const std::string message = error.what();
        CHECK(message.find("out of memory") != std::string::npos);
        CHECK(message.find("Hint") != std::string::npos);
        CHECK(allocator.stats().out_of_memory_errors == 1);
        CHECK(snapshot_problem(allocator) == "");  // nothing half-done

        // Recovery: once memory is freed, the same request succeeds (cached segments go back first).
        allocator.free(c);
        allocator.free(d);
        const Allocation big = allocator.allocate(30 * kMiB, 1);
        CHECK(big.size == 30 * kMiB);
        CHECK(allocator.stats().reserved_bytes == 30 * kMiB);
        CHECK(snapshot_problem(allocator) == "");
        allocator.free(big);
    }
    // Nothing leaked: every segment back to the device, every event back to the pool.
    CHECK(device->live_segments() == 0);
    CHECK(device->unreleased_events() == 0);
    CHECK(device->violations().empty());
}

TEST_CASE("alloc.oom_wait_frees_a_block_for_its_own_stream") {
    auto device = std::make_shared<FakeDevice>(20 * kMiB);
    FakeBackend backend(device);
    CachingAllocator allocator(backend);
    const Allocation a = allocator.allocate(19 * kMiB, 1);  // the whole 20 MiB
    REQUIRE(a.size == 20 * kMiB);
    const auto event = device->make_event(2);
    const PendingUse use{2, event};
    allocator.free(a, {&use, 1});

    const auto hits = allocator.stats().cache_hits;
    const Allocation b = allocator.allocate(19 * kMiB, 1);
    CHECK(b.ptr == a.ptr);  // reused after the wait, without going back to the driver
    CHECK(allocator.stats().cache_hits == hits + 1);
    CHECK(device->count(Kind::synchronize_event) == 1);
    CHECK(device->count(Kind::free) == 0);
    CHECK(allocator.stats().driver_allocations == 1);
    allocator.free(b);
}

TEST_CASE("alloc.oom_impossible_request") {
    auto device = std::make_shared<FakeDevice>(64 * kMiB);
    FakeBackend backend(device);
    CachingAllocator allocator(backend);
    const Allocation keep = allocator.allocate(kKiB, 1);
    for (std::size_t bytes :
         {std::numeric_limits<std::size_t>::max(), std::numeric_limits<std::size_t>::max() / 2, 65 * kMiB}) {
        CAPTURE(bytes);
        const auto error = expect_out_of_memory([&] { (void)allocator.allocate(bytes, 1); });
        CHECK(error.figures().requested >= bytes);
        CHECK(error.figures().allocated == keep.size);
    }
    CHECK(device->count(Kind::allocate) == 1);
    CHECK(snapshot_problem(allocator) == "");
    const Allocation more = allocator.allocate(kKiB, 1);  // still usable
    CHECK(more.ptr == keep.ptr + kKiB);
    allocator.free(more);
    allocator.free(keep);
}

TEST_CASE("alloc.memory_fraction_cap") {
    auto device = std::make_shared<FakeDevice>(100 * kMiB);
    AllocatorConfig config;
    config.memory_fraction = 0.5;  // 50 MiB of the device's 100
    FakeBackend backend(device);
    CachingAllocator allocator(backend, config);

    const Allocation a = allocator.allocate(4 * kMiB, 1);
    const Allocation b = allocator.allocate(4 * kMiB, 2);
    CHECK(allocator.stats().reserved_bytes == 40 * kMiB);

    // A third 20 MiB segment would pass the cap although the device has room: out of memory, and the
    // driver is not even asked.
    const auto attempts = device->count(Kind::allocate) + device->count(Kind::allocate_failed);
    const auto error = expect_out_of_memory([&] { (void)allocator.allocate(4 * kMiB, 3); });
    CHECK(device->count(Kind::allocate) + device->count(Kind::allocate_failed) == attempts);
    CHECK(error.figures().reserved == 40 * kMiB);
    CHECK(error.figures().device_free == 60 * kMiB);

    // Below the cap, allocation goes on: a 2 MiB small segment fits (42 <= 50).
    const Allocation small = allocator.allocate(kKiB, 4);
    CHECK(allocator.stats().reserved_bytes == 42 * kMiB);

    // Freeing a cached segment makes room under the cap.
    allocator.free(a);
    const Allocation c = allocator.allocate(4 * kMiB, 3);
    CHECK(allocator.stats().reserved_bytes == 42 * kMiB);
    CHECK(allocator.stats().peak_reserved_bytes <= 50 * kMiB);
    for (const auto& x : {b, c, small}) allocator.free(x);
    CHECK(snapshot_problem(allocator) == "");
}

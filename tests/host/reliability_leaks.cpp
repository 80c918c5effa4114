// Issue 14, item 4 on the fake driver: an event record that fails while freeing memory or after an
// asynchronous copy must leak nothing and leave no transfer untracked.
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::error_from;
using cudarc::test::FakeGpu;

TEST_CASE("reliability.free_whose_event_record_fails_neither_leaks_nor_reuses_early") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        auto other = device.create_stream();
        const AllocatorStats before = device.allocator_stats();
        std::vector<int> values(4096);
        std::iota(values.begin(), values.end(), 1);
        PinnedBuffer<int> seen(device, values.size());
        {
            auto slice = DeviceSlice<int>::from_host(stream, values);
            gpu.driver.hold(other.native());  // `other` is busy: its read stays queued
            // A read on another stream than the home one. Note [Eager events]: its event is recorded right
            // after the read (the 2nd record: the 1st orders the read after the home stream's write); that
            // record fails, so freeing must record one itself ...
            gpu.faults.fail_nth(fake::Entry::event_record, 2, sys::kErrorInvalidValue);
            seen.copy_from_device_async(other, slice.view());
            // ... and that record fails too.
            gpu.faults.fail_nth(fake::Entry::event_record, 1, sys::kErrorInvalidValue);
        }
        const std::string deferred = error_from([&] { device.rethrow_deferred_error(); });
        CHECK(contains(deferred, "cuEventRecord"));
        // Not leaked: the block went back to the allocator ...
        const AllocatorStats after = device.allocator_stats();
        CHECK(after.live_allocations == before.live_allocations);
        CHECK(after.active_bytes == before.active_bytes);
        // ... and not reused before `other` read it: a new slice of the same size, written at once, must not
        // change what the queued copy sees.
        auto reuse = DeviceSlice<int>::zeros(stream, values.size());
        gpu.driver.release(other.native());
        seen.synchronize();
        CHECK(std::vector<int>(seen.span().begin(), seen.span().end()) == values);
        CHECK(gpu.driver.violations().empty());
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.pinned_copy_whose_event_record_fails_is_still_waited_for") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        auto slice = DeviceSlice<int>::zeros(stream, 4096);
        {
            PinnedBuffer<int> pinned(device, 4096);
            gpu.driver.hold(stream.native());  // the copies stay queued (a busy stream)
            pinned.copy_from_device_async(stream, slice.view());
            // Note [Pinned memory]: each copy records an event after itself; the second copy's record fails
            // (the error is deferred), so the destructor records the event it waits for itself.
            gpu.faults.fail_nth(fake::Entry::event_record, 1, sys::kErrorInvalidValue);
            pinned.copy_from_device_async(stream, slice.view());
        }  // the destructor must not free page-locked memory under the queued copy
        CHECK(gpu.driver.violations().empty());
        CHECK(contains(error_from([&] { device.rethrow_deferred_error(); }), "cuEventRecord"));
        gpu.driver.finish_all();
        CHECK(gpu.driver.violations().empty());  // nor did the copy run on freed memory
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

// The device's caching source (src/alloc/caching_source.hpp), the allocator's real backend, on the fake
// driver: segments and host waits are counted on the device, driver failures become errors that name the
// call, an out-of-memory answer makes the allocator escalate, and the device's context is made current
// around its driver calls and the caller's put back (Note [Context scope]).
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::FakeGpu;

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;
}  // namespace

TEST_CASE("alloc.caching_source_counts_segments_on_the_device") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        REQUIRE(device.memory_source() == MemorySource::caching_allocator);
        auto& stream = device.default_stream();
        const Counters before = device.counters();
        {
            auto a = DeviceSlice<float>::zeros(stream, 1000);  // a new 2 MiB segment
            CHECK((device.counters() - before).driver_allocations == 1);
        }
        { auto b = DeviceSlice<float>::zeros(stream, 1000); }  // the cached block, no driver call
        Counters since = device.counters() - before;
        CHECK(since.driver_allocations == 1);
        CHECK(since.driver_frees == 0);
        CHECK(gpu.faults.calls(fake::Entry::mem_alloc) == 1);

        device.empty_cache();
        since = device.counters() - before;
        CHECK(since.driver_frees == 1);
        CHECK(gpu.faults.calls(fake::Entry::mem_free) == 1);
        CHECK(since.host_synchronizations() == 0);
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("alloc.caching_source_counts_the_host_wait_of_its_out_of_memory_path") {
    fake::Options options;
    options.devices[0].memory_bytes = 24 * kMiB;  // one 20 MiB segment fits, a second does not
    FakeGpu gpu(options);
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        auto other = device.create_stream();
        const Counters before = device.counters();
        {
            auto a = DeviceSlice<std::byte>::zeros(stream, 19 * kMiB);  // the whole 20 MiB segment
            gpu.driver.hold(other.native());                            // `other` still runs its work
            a.record_stream(other);  // the free records an event on `other`, which stays pending
        }
        CHECK((device.counters() - before).event_synchronizes == 0);
        // No new segment fits, and the cached one waits for `other`: the allocator waits for its event on
        // the host (counted) and reuses the block.
        auto b = DeviceSlice<std::byte>::zeros(stream, 19 * kMiB);
        const Counters since = device.counters() - before;
        CHECK(since.event_synchronizes == 1);
        CHECK(since.driver_allocations == 1);
        CHECK(gpu.faults.calls(fake::Entry::mem_alloc) == 2);  // the second answered out of memory
        gpu.driver.release(other.native());
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("alloc.caching_source_driver_failures_name_the_call") {
    FakeGpu gpu;
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    const Counters before = device.counters();

    gpu.faults.fail_nth(fake::Entry::mem_alloc, 1, sys::kErrorInvalidValue);
    try {
        (void)DeviceSlice<float>::zeros(stream, 1000);
        FAIL("expected cudarc::Error");
    } catch (const OutOfMemory&) {
        FAIL("a failure other than out of memory is not out of memory");
    } catch (const Error& error) {
        CHECK(error.api() == "cuMemAlloc");
        CHECK(error.result() == sys::kErrorInvalidValue);
        CHECK(error.device() == 0);
    }
    CHECK((device.counters() - before).driver_allocations == 0);

    // Out of memory is an answer, not an error: the allocator escalates, then throws OutOfMemory.
    gpu.faults.fail_nth(fake::Entry::mem_alloc, 1, sys::kErrorOutOfMemory, fake::FaultInjector::kForever);
    CHECK_THROWS_AS((void)DeviceSlice<float>::zeros(stream, 1000), OutOfMemory);
    CHECK((device.counters() - before).driver_allocations == 0);

    gpu.faults.clear();
    auto a = DeviceSlice<float>::zeros(stream, 1000);
    CHECK((device.counters() - before).driver_allocations == 1);
    CHECK(a.to_vector(stream) == std::vector<float>(1000, 0.0f));
}

TEST_CASE("alloc.caching_source_puts_the_callers_context_back") {
    FakeGpu gpu;
    const sys::Context foreign = gpu.driver.create_context(0);
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        REQUIRE(gpu.faults.api().ctx_set_current(foreign) == sys::kSuccess);  // as a framework would
        const Counters before = device.counters();
        {
            const std::vector<int> host{1, 2, 3, 4};
            auto a = DeviceSlice<int>::from_host(stream, host);  // a new segment, in the device's context
            CHECK(gpu.driver.current_context() == foreign);
            CHECK(a.to_vector(stream) == host);
        }
        device.empty_cache();  // the segment goes back to the driver
        CHECK((device.counters() - before).driver_allocations == 1);
        CHECK((device.counters() - before).driver_frees == 1);
        CHECK(gpu.driver.current_context() == foreign);
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
}

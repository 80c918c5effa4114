// Issue 14, item 3 on the fake driver: MemorySource::stream_ordered gives memory back and reports the
// pool's real figures.
#include <doctest/doctest.h>

#include <cstddef>

#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::FakeGpu;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

Device open_stream_ordered() {
    DeviceOptions options;
    options.memory_source = MemorySource::stream_ordered;
    return Device::open(0, options);
}

fake::Options with_memory(std::size_t bytes) {
    fake::Options options;
    options.devices[0].memory_bytes = bytes;
    return options;
}

}  // namespace

TEST_CASE("reliability.stream_ordered_empty_cache_trims_the_pool") {
    FakeGpu gpu;
    {
        auto device = open_stream_ordered();
        auto& stream = device.default_stream();
        {
            auto big = DeviceSlice<std::byte>::uninitialized(stream, 64 * kMiB);
            const AllocatorStats held = device.allocator_stats();
            CHECK(held.allocated_bytes == 64 * kMiB);
            CHECK(held.reserved_bytes == 64 * kMiB);
            CHECK(held.live_allocations == 1);
        }
        stream.synchronize();
        // The raised release threshold keeps freed memory in the pool for reuse ...
        CHECK(gpu.driver.pool_reserved_bytes(0) == 64 * kMiB);
        AllocatorStats cached = device.allocator_stats();
        CHECK(cached.allocated_bytes == 0);
        CHECK(cached.reserved_bytes == 64 * kMiB);
        CHECK(cached.peak_allocated_bytes == 64 * kMiB);
        CHECK(cached.live_allocations == 0);
        // ... until empty_cache() gives it back.
        device.empty_cache();
        CHECK(gpu.driver.pool_reserved_bytes(0) == 0);
        CHECK(device.allocator_stats().reserved_bytes == 0);
        device.reset_peak_memory();
        CHECK(device.allocator_stats().peak_allocated_bytes == 0);
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.stream_ordered_out_of_memory_reports_the_pool") {
    FakeGpu gpu(with_memory(256 * kMiB));
    {
        auto device = open_stream_ordered();
        auto& stream = device.default_stream();
        auto held = DeviceSlice<std::byte>::uninitialized(stream, 160 * kMiB);
        try {
            (void)DeviceSlice<std::byte>::uninitialized(stream, 160 * kMiB);
            FAIL("the second 160 MiB fit in 256 MiB");
        } catch (const OutOfMemory& oom) {
            CHECK(oom.figures().requested == 160 * kMiB);
            CHECK(oom.figures().reserved == 160 * kMiB);
            CHECK(oom.figures().allocated == 160 * kMiB);
            CHECK(oom.figures().device_total == 256 * kMiB);
            const std::string what = oom.what();
            INFO(what);
            CHECK(contains(what, "167772160 bytes reserved, 167772160 allocated"));
        }
        CHECK(device.allocator_stats().out_of_memory_errors == 1);
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.stream_ordered_out_of_memory_trims_the_pool_and_retries") {
    // Memory freed into the pool stays reserved; a request that needs it back must not fail.
    FakeGpu gpu(with_memory(256 * kMiB));
    {
        auto device = open_stream_ordered();
        auto& stream = device.default_stream();
        { auto first = DeviceSlice<std::byte>::uninitialized(stream, 160 * kMiB); }
        stream.synchronize();
        REQUIRE(gpu.driver.pool_reserved_bytes(0) == 160 * kMiB);
        auto second = DeviceSlice<std::byte>::uninitialized(stream, 200 * kMiB);
        CHECK(gpu.driver.pool_reserved_bytes(0) == 200 * kMiB);
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

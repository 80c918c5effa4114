// The caching allocator's figures on a real GPU (issue 4, item 4): allocated, reserved, active and peak
// bytes move as the allocations say; reuse is a cache hit; a warm loop asks the driver for nothing.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <vector>

#include "alloc_gpu_support.hpp"
#include "launch_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * 1024;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("alloc.stats_follow_allocations_frees_and_reuse") {
    auto opened = open_device_with(MemorySource::caching_allocator);
    if (!opened) return;
    Device& device = *opened;
    auto stream = device.create_stream();
    // Start from an empty cache (earlier tests leave cached segments) and a peak equal to the current use.
    device.synchronize();
    device.empty_cache();
    device.reset_peak_memory();
    const AllocatorStats s0 = device.allocator_stats();
    const Counters c0 = device.counters();
    CHECK(s0.peak_allocated_bytes == s0.allocated_bytes);
    CHECK(s0.peak_reserved_bytes == s0.reserved_bytes);

    // 4000 bytes: rounded to 4096, from a new 2 MiB small-pool segment.
    auto a = DeviceSlice<float>::from_host(stream, random_floats(1000));
    const AllocatorStats s1 = device.allocator_stats();
    CHECK(s1.allocated_bytes == s0.allocated_bytes + 4096);
    CHECK(s1.active_bytes == s0.active_bytes + 4096);
    CHECK(s1.reserved_bytes == s0.reserved_bytes + 2 * kMiB);
    CHECK(s1.segments == s0.segments + 1);
    CHECK(s1.live_allocations == s0.live_allocations + 1);
    CHECK(s1.driver_allocations == s0.driver_allocations + 1);

    // 3 MiB: a 20 MiB large-pool segment. 64 MiB + 1 byte: rounded to 64 MiB + 512, its own 66 MiB segment.
    auto b = DeviceSlice<std::uint8_t>::uninitialized(stream, 3 * kMiB);
    auto c = DeviceSlice<std::uint8_t>::uninitialized(stream, 64 * kMiB + 1);
    const AllocatorStats s2 = device.allocator_stats();
    CHECK(s2.allocated_bytes == s1.allocated_bytes + 3 * kMiB + 64 * kMiB + 512);
    CHECK(s2.reserved_bytes == s1.reserved_bytes + 20 * kMiB + 66 * kMiB);
    CHECK(s2.segments == s1.segments + 2);
    CHECK(s2.driver_allocations == s1.driver_allocations + 2);
    CHECK(s2.peak_allocated_bytes == s2.allocated_bytes);
    CHECK(s2.peak_reserved_bytes == s2.reserved_bytes);
    CHECK(check_snapshot_agrees(device) == 0);

    // Freed on its own stream: no longer allocated nor active, still reserved; the peak stays.
    const DevicePtr c_ptr = c.device_ptr();
    c = DeviceSlice<std::uint8_t>{};
    const AllocatorStats s3 = device.allocator_stats();
    CHECK(s3.allocated_bytes == s1.allocated_bytes + 3 * kMiB);
    CHECK(s3.active_bytes == s3.allocated_bytes + (s0.active_bytes - s0.allocated_bytes));
    CHECK(s3.reserved_bytes == s2.reserved_bytes);
    CHECK(s3.peak_allocated_bytes == s2.peak_allocated_bytes);
    CHECK(s3.live_allocations == s2.live_allocations - 1);
    const auto freed_block = block_at(device.allocator_snapshot(), c_ptr);
    REQUIRE(freed_block.has_value());
    CHECK(freed_block->state == AllocatorSnapshot::BlockState::free);
    CHECK(freed_block->size == 66 * kMiB);  // merged with the rest of its segment

    // The same request again: a cache hit at the same address (best fit on this stream), no driver call,
    // and memory that holds what is written to it.
    std::vector<std::uint8_t> c_host(64 * kMiB + 1);
    const auto words = random_words(c_host.size() / 4 + 1);
    std::memcpy(c_host.data(), words.data(), c_host.size());
    auto again = DeviceSlice<std::uint8_t>::from_host(stream, c_host);
    const AllocatorStats s4 = device.allocator_stats();
    CHECK(again.device_ptr() == c_ptr);
    CHECK(s4.cache_hits == s3.cache_hits + 1);
    CHECK(s4.driver_allocations == s3.driver_allocations);
    CHECK(s4.reserved_bytes == s3.reserved_bytes);
    CHECK(again.to_vector(stream) == c_host);
    again = DeviceSlice<std::uint8_t>{};

    // reset_peak brings the peaks down to the current figures.
    device.reset_peak_memory();
    const AllocatorStats s5 = device.allocator_stats();
    CHECK(s5.peak_allocated_bytes == s5.allocated_bytes);
    CHECK(s5.peak_reserved_bytes == s5.reserved_bytes);
    CHECK(s5.peak_allocated_bytes < s4.peak_allocated_bytes);

    // Freed while another stream's read is queued behind a spin: active but not allocated until then.
    {
        const auto spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
        auto other = device.create_stream();
        const auto a_host = a.to_vector(stream);
        auto a_copy = DeviceSlice<float>::from_host(other, poisoned(a.size()));
        launch(other, LaunchConfig{1, 1}, spin, spin_cycles(device, 100.0), nullptr);
        copy(other, a_copy.view(), a.view());
        const AllocatorStats before_free = device.allocator_stats();
        a = DeviceSlice<float>{};
        const AllocatorStats held = device.allocator_stats();
        const bool still_pending = !other.query();
        CHECK(held.allocated_bytes == before_free.allocated_bytes - 4096);
        if (still_pending) CHECK(held.active_bytes == before_free.active_bytes);
        CHECK(check_snapshot_agrees(device) == 0);
        CHECK(bitwise_equal(a_copy.to_vector(other), a_host));
        // The read is done: the next allocation polls the event and the block is no longer active.
        const auto probe = DeviceSlice<std::uint8_t>::uninitialized(stream, 512);
        const AllocatorStats released = device.allocator_stats();
        CHECK(released.active_bytes - released.allocated_bytes == s0.active_bytes - s0.allocated_bytes);
    }

    // A warm loop: after the first round every request is a cache hit and nothing reaches the driver.
    const std::size_t sizes[] = {512, 64 * kKiB, 1 * kMiB, 64 * kMiB};
    constexpr int kRounds = 200;
    std::uint64_t hits_after_first = 0;
    std::uint64_t driver_after_first = 0;
    Counters counters_after_first;
    for (int round = 0; round < kRounds; ++round) {
        std::vector<DeviceSlice<std::uint8_t>> live;
        for (std::size_t size : sizes) {
            live.push_back(DeviceSlice<std::uint8_t>::uninitialized(stream, size));
            memset(stream, live.back().view(), static_cast<unsigned char>(round));
        }
        while (!live.empty()) live.pop_back();  // freed in reverse order
        if (round == 0) {
            const AllocatorStats warm = device.allocator_stats();
            hits_after_first = warm.cache_hits;
            driver_after_first = warm.driver_allocations;
            counters_after_first = device.counters();
        }
    }
    const AllocatorStats s6 = device.allocator_stats();
    const Counters loop = device.counters() - counters_after_first;
    CHECK(s6.cache_hits - hits_after_first == std::uint64_t{kRounds - 1} * std::size(sizes));
    CHECK(s6.driver_allocations == driver_after_first);
    CHECK(loop.driver_allocations == 0);
    CHECK(loop.host_synchronizations() == 0);
    CHECK(loop.events_recorded == 0);
    CHECK(s6.allocated_bytes == s0.allocated_bytes + 3 * kMiB);  // only `b` is still live
    CHECK(check_snapshot_agrees(device) == 0);

    // With everything freed, empty_cache gives back every segment this test made.
    b = DeviceSlice<std::uint8_t>{};
    const AllocatorStats before_empty = device.allocator_stats();
    CHECK(before_empty.allocated_bytes == s0.allocated_bytes);
    CHECK(before_empty.reserved_bytes > s0.reserved_bytes);
    device.empty_cache();
    const AllocatorStats s7 = device.allocator_stats();
    CHECK(s7.reserved_bytes == s0.reserved_bytes);
    CHECK(s7.segments == s0.segments);
    CHECK(s7.driver_frees - before_empty.driver_frees == before_empty.segments - s0.segments);
    // The device's counters saw every segment the allocator took and gave back.
    const Counters total = device.counters() - c0;
    CHECK(total.driver_allocations == s7.driver_allocations - s0.driver_allocations);
    CHECK(total.driver_frees == s7.driver_frees - s0.driver_frees);
    CHECK(check_snapshot_agrees(device) == 0);
}

// Issue 29: pitched device memory and 2D copies (Note [2D copies] in src/core/copy_2d.cpp) on the fake
// driver: rows land at their pitch, and hazard tracking orders the rows' byte spans.
#include <doctest/doctest.h>

#include <numeric>
#include <utility>
#include <vector>

#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::error_from;
using cudarc::test::FakeGpu;

TEST_CASE("pinned.copy_2d_moves_rows_between_host_pinned_and_pitched_memory") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto a = device.create_stream();
        auto b = device.create_stream();
        constexpr std::size_t w = 100;
        constexpr std::size_t h = 7;
        auto pitched = PitchedSlice<float>::uninitialized(a, w, h);
        CHECK(pitched.pitch() == 512);  // 400 bytes a row, rounded up
        std::vector<float> host(w * h);
        std::iota(host.begin(), host.end(), 1.0f);
        copy_2d(a, pitched.view(), std::span<const float>(host));
        std::vector<float> back(w * h, 0.0f);
        copy_2d(a, std::span<float>(back), std::as_const(pitched).view());
        CHECK(back == host);

        // Into pinned memory on another stream: ordered after a's write of those rows.
        PinnedBuffer<float> pinned(device, w * h);
        std::copy(host.begin(), host.end(), pinned.data());
        gpu.driver.hold(a.native());  // a's rewrite of rows 1 and 2 stays queued
        copy_2d(a, pitched.view().rows(1, 2), std::as_const(pinned).view(w, 2 * w));
        const Counters before = device.counters();
        copy_2d(b, pinned.view(), std::as_const(pitched).view());
        CHECK((device.counters() - before).cross_stream_waits == 1);
        pinned.synchronize();

        // Rows 3..5 to a second pitched slice, then compared through the host.
        auto rows = PitchedSlice<float>::uninitialized(b, w, 3);
        copy_2d(b, rows.view(), PitchedView<const float>(pitched.view().rows(3, 3)));
        std::vector<float> three(3 * w);
        copy_2d(b, std::span<float>(three), std::as_const(rows).view());
        CHECK(std::equal(three.begin(), three.end(), host.begin() + 3 * w));
        CHECK(std::equal(pinned.data(), pinned.data() + h * w, host.begin()));

        CHECK(contains(error_from([&] { (void)pitched.view().rows(5, 3); }), "out of range"));
        CHECK(
            contains(error_from([&] { copy_2d(a, pitched.view(), std::span<const float>(host).first(10)); }),
                     "size mismatch"));
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("pinned.copy_2d_of_disjoint_rows_on_two_streams_needs_no_wait") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto a = device.create_stream();
        auto b = device.create_stream();
        constexpr std::size_t w = 64;
        auto pitched = PitchedSlice<int>::uninitialized(a, w, 8);
        b.join(a);  // b has seen the allocation
        PinnedBuffer<int> pinned(device, 8 * w);
        std::iota(pinned.data(), pinned.data() + 8 * w, 0);
        const Counters before = device.counters();
        // b first: a's own later write of the other rows then finds them b-free (Note [Single-stream fast
        // path]: while a alone owns the buffer, its uses are its work so far, wherever they are).
        copy_2d(b, pitched.view().rows(4, 4), std::as_const(pinned).view(4 * w, 4 * w));
        copy_2d(a, pitched.view().rows(0, 4), std::as_const(pinned).view(0, 4 * w));
        CHECK((device.counters() - before).cross_stream_waits == 0);
        // A read of all rows on a waits for b's rows only.
        std::vector<int> back(8 * w);
        const Counters read = device.counters();
        copy_2d(a, std::span<int>(back), std::as_const(pitched).view());
        CHECK((device.counters() - read).cross_stream_waits == 1);
        CHECK(std::equal(back.begin(), back.end(), pinned.data()));
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

// Managed memory (DeviceSlice::managed, cudarc::prefetch) and Stream::is_capturing on a real GPU.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/buffer.hpp"
#include "gpu_test.hpp"

using namespace cudarc;
using cudarc::test::SpinKernel;

namespace {

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("core.managed_slice_round_trips_and_counts_its_driver_calls") {
    auto device = Device::open(0);
    auto stream = device.create_stream();
    constexpr std::size_t n = (1 << 20) + 3;
    const auto host = test::random_floats(n);
    const Counters before = device.counters();
    {
        auto slice = DeviceSlice<float>::managed(stream, n);
        CHECK(slice.size() == n);
        CHECK(cudarc::detail::Internals::buffer(slice)->managed());
        slice.copy_from_host(stream, host);
        prefetch(stream, slice.view());
        std::vector<float> back(n, test::poison_float());
        slice.copy_to_host(stream, back);
        CHECK(bitwise_equal(back, host));
        // Zeros through the ordinary memset, read back through a sub-view.
        memset(stream, slice.view(5, 100), 0);
        std::vector<float> part(102, test::poison_float());
        copy(stream, std::span<float>(part), slice.view(4, 102));
        CHECK(part.front() == host[4]);
        CHECK(part.back() == host[105]);
        for (std::size_t i = 1; i <= 100; ++i) CHECK(part[i] == 0.0f);
    }
    const Counters delta = device.counters() - before;
    CHECK(delta.driver_allocations == 1);
    CHECK(delta.driver_frees == 1);
    // A copy out of managed memory synchronizes its stream (counted), where one into pageable memory
    // from device memory would not; freeing waits on the host for the last use (one event).
    CHECK(delta.stream_synchronizes == 2);
    CHECK(delta.blocking_copies == 0);
    CHECK(delta.event_synchronizes == 1);
    CHECK(delta.context_synchronizes == 0);
}

TEST_CASE("core.managed_slice_keeps_ordinary_hazard_state_across_streams") {
    auto device = Device::open(0);
    SpinKernel spin(device);
    auto writer = device.create_stream();
    auto reader = device.create_stream();
    constexpr std::size_t n = 1 << 20;
    auto slice = DeviceSlice<float>::managed(writer, n);
    slice.fill_zero(writer);
    writer.synchronize();
    const auto fresh = test::random_floats(n);

    // The write is held back on its stream; the read on another stream must still see it.
    spin.launch(writer, spin.cycles_for_ms(100));
    slice.copy_from_host(writer, fresh);
    const Counters before = device.counters();
    prefetch(reader, slice.view());  // ordered like a read: waits for the held-back write
    const auto seen = slice.to_vector(reader);
    const Counters delta = device.counters() - before;
    CHECK(bitwise_equal(seen, fresh));
    CHECK(delta.cross_stream_waits == 1);
}

TEST_CASE("core.managed_slice_freed_while_in_use_waits_for_its_last_use") {
    auto device = Device::open(0);
    SpinKernel spin(device);
    auto stream = device.create_stream();
    auto other = device.create_stream();
    constexpr std::size_t n = 1 << 20;
    const auto host = test::random_floats(n);
    std::vector<float> back(n, test::poison_float());
    {
        auto slice = DeviceSlice<float>::managed(stream, n);
        slice.copy_from_host(stream, host);
        // A use on another stream, behind a spin: the free must wait for it (memcheck would report a
        // copy out of freed memory otherwise).
        spin.launch(other, spin.cycles_for_ms(50));
        PinnedBuffer<float> pinned(device, n);
        pinned.copy_from_device_async(other, slice.view());
        const Counters before = device.counters();
        slice = DeviceSlice<float>{};
        const Counters delta = device.counters() - before;
        CHECK(delta.event_synchronizes == 2);  // the copy on `other` and the write on `stream`
        CHECK(other.query());                  // the host waited for the copy on `other`
        pinned.synchronize();
        std::memcpy(back.data(), pinned.data(), n * sizeof(float));
    }
    CHECK(bitwise_equal(back, host));
}

TEST_CASE("core.stream_is_capturing_and_prefetch_inside_a_capture") {
    auto device = Device::open(0);
    auto stream = device.create_stream();
    constexpr std::size_t n = 4096;
    auto managed = DeviceSlice<float>::managed(stream, n);
    managed.fill_zero(stream);
    auto plain = DeviceSlice<float>::zeros(stream, n);
    stream.synchronize();
    CHECK_FALSE(stream.is_capturing());
    bool captured = false;
    Graph graph = capture(stream, [&](Stream& s) {
        captured = s.is_capturing();
        prefetch(s, managed.view());  // skipped: a prefetch is not a graph node
        memset(s, plain.view(), 0x3f);
    });
    CHECK(captured);
    CHECK_FALSE(stream.is_capturing());
    graph.launch(stream);
    const auto values = plain.to_vector(stream);
    std::uint32_t word = 0;
    std::memcpy(&word, &values[n - 1], sizeof(word));
    CHECK(word == 0x3f3f3f3fu);
    prefetch(stream, managed.view());  // outside the capture: enqueued
    CHECK(managed.to_vector(stream) == std::vector<float>(n, 0.0f));
}

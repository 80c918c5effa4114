// Core runtime on a real GPU: copies, fork/join ordering, hazards across streams, counters.
#include <doctest/doctest.h>

#include <cstring>
#include <regex>

#include "core/device_state.hpp"
#include "gpu_test.hpp"

using namespace cudarc;
using cudarc::test::SpinKernel;

namespace {

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Raw, untracked driver copies: used to test the ordering that fork/join alone must provide.
void raw_htod(Stream& stream, DevicePtr dst, const void* src, std::size_t bytes) {
    auto& state = *cudarc::detail::Internals::device_state(stream.device());
    const auto scope = state.bind();
    state.check(state.api().memcpy_htod_async(dst, src, bytes, stream.native()),
                sys::Entry::memcpy_htod_async);
}
void raw_dtoh(Stream& stream, void* dst, DevicePtr src, std::size_t bytes) {
    auto& state = *cudarc::detail::Internals::device_state(stream.device());
    const auto scope = state.bind();
    state.check(state.api().memcpy_dtoh_async(dst, src, bytes, stream.native()),
                sys::Entry::memcpy_dtoh_async);
}

}  // namespace

TEST_CASE("core.device_properties") {
    auto device = Device::open(0);
    CHECK(Device::count() >= 1);
    CHECK_FALSE(device.name().empty());
    CHECK(device.compute_capability().major >= 3);
    CHECK(device.multiprocessor_count() > 0);
    CHECK(device.total_memory() > (std::size_t{1} << 30));
    const auto info = device.memory_info();
    CHECK(info.free <= info.total);
    CHECK(info.total == device.total_memory());
    CHECK(std::regex_match(device.uuid_string(),
                           std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")));
    CHECK(Device::driver_version() >= 11000);
    CHECK(device.backend() == Backend::cuda);
    // Two handles to one ordinal share one state (one set of counters).
    auto again = Device::open(0);
    CHECK(cudarc::detail::Internals::device_state(again).get() ==
          cudarc::detail::Internals::device_state(device).get());
    CHECK_THROWS_WITH_AS((void)Device::open(Device::count()), doctest::Contains("out of range"), Error);
    CHECK_THROWS_AS((void)Device::open(-1), Error);
}

TEST_CASE("core.copies_round_trip_random_data") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{(1 << 20) + 3}}) {
        const auto host = test::random_floats(n);
        auto a = DeviceSlice<float>::from_host(stream, host);
        CHECK(a.size() == n);
        CHECK(a.bytes() == n * sizeof(float));
        CHECK(bitwise_equal(a.to_vector(stream), host));

        // Device to device into a poisoned destination.
        auto b = DeviceSlice<float>::from_host(stream, std::vector<float>(n, test::poison_float()));
        copy(stream, b.view(), a.view());
        CHECK(bitwise_equal(b.to_vector(stream), host));

        // Sub-views: copy the second half of a over the first half of b.
        if (n >= 2) {
            const std::size_t half = n / 2;
            copy(stream, b.view(0, half), a.view(n - half, half));
            auto expected = host;
            std::copy(host.end() - static_cast<std::ptrdiff_t>(half), host.end(), expected.begin());
            CHECK(bitwise_equal(b.to_vector(stream), expected));
        }
    }
    // zeros() and memset really write.
    auto z = DeviceSlice<float>::from_host(stream, test::random_floats(4097));
    z.fill_zero(stream);
    for (float x : z.to_vector(stream)) REQUIRE(x == 0.0f);
    auto w = DeviceSlice<std::uint8_t>::zeros(stream, 13);
    memset(stream, w.view().subview(3, 7), 0xab);
    const auto bytes = w.to_vector(stream);
    for (std::size_t i = 0; i < bytes.size(); ++i) CHECK(bytes[i] == ((i >= 3 && i < 10) ? 0xab : 0));
    // Empty slices are fine.
    auto empty = DeviceSlice<float>::zeros(stream, 0);
    CHECK(empty.to_vector(stream).empty());
}

TEST_CASE("core.bad_input_is_rejected_and_changes_nothing") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    const auto host = test::random_floats(100);
    auto a = DeviceSlice<float>::from_host(stream, host);
    std::vector<float> wrong_size(99, 1.0f);
    CHECK_THROWS_WITH_AS(a.copy_from_host(stream, wrong_size), doctest::Contains("size mismatch"), Error);
    CHECK_THROWS_WITH_AS(copy(stream, a.view(), std::span<const float>(wrong_size)),
                         doctest::Contains("size mismatch"), Error);
    auto small = DeviceSlice<float>::zeros(stream, 10);
    CHECK_THROWS_AS(copy(stream, small.view(), a.view()), Error);
    CHECK_THROWS_AS((void)a.view(90, 11), Error);
    CHECK(bitwise_equal(a.to_vector(stream), host));  // nothing was written
}

TEST_CASE("core.pageable_copy_adds_no_synchronize") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    const auto host = test::random_floats(1 << 16);
    auto a = DeviceSlice<float>::from_host(stream, host);

    auto before = device.counters();
    const auto back = a.to_vector(stream);  // pageable destination: the copy itself blocks
    auto delta = device.counters() - before;
    CHECK(bitwise_equal(back, host));
    CHECK(delta.blocking_copies == 1);
    CHECK(delta.host_synchronizations() == 0);

    // Page-locked destination through the blocking API: the copy does not block, so one synchronize.
    PinnedBuffer<float> pinned(device, host.size());
    before = device.counters();
    copy(stream, pinned.span(), a.view());
    delta = device.counters() - before;
    CHECK(delta.stream_synchronizes == 1);
    CHECK(delta.blocking_copies == 0);
    CHECK(std::memcmp(pinned.data(), host.data(), host.size() * sizeof(float)) == 0);

    // Asynchronous copy into pinned memory: nothing blocks until synchronize().
    std::fill(pinned.span().begin(), pinned.span().end(), test::poison_float());
    before = device.counters();
    pinned.copy_from_device_async(stream, a.view());
    CHECK((device.counters() - before).host_blocking_calls() == 0);
    pinned.synchronize();
    CHECK((device.counters() - before).event_synchronizes == 1);
    CHECK(std::memcmp(pinned.data(), host.data(), host.size() * sizeof(float)) == 0);
}

TEST_CASE("core.fork_waits_for_parent_and_join_orders_parent_after_child") {
    auto device = Device::open(0);
    SpinKernel spin(device);
    auto parent = device.create_stream();
    constexpr std::size_t n = 1 << 18;
    const auto first = test::random_floats(n);
    const auto second = test::random_floats(n);
    auto buffer = DeviceSlice<float>::zeros(parent, n);
    parent.synchronize();

    // Fork: the parent's pending write (behind a spin) must be visible to the child's raw read.
    spin.launch(parent, spin.cycles_for_ms(100));
    raw_htod(parent, buffer.device_ptr(), first.data(), n * sizeof(float));
    std::vector<float> seen_by_child(n, test::poison_float());
    {
        auto child = parent.fork();
        raw_dtoh(child, seen_by_child.data(), buffer.device_ptr(), n * sizeof(float));  // blocks until done
        CHECK(bitwise_equal(seen_by_child, first));

        // Join: the child's write (behind a spin) must be ordered before the parent's later read.
        spin.launch(child, spin.cycles_for_ms(200));
        raw_htod(child, buffer.device_ptr(), second.data(), n * sizeof(float));
        const auto before = device.counters();
        {
            Stream moved = std::move(child);  // moving keeps one join, on the final owner's destruction
        }
        const auto delta = device.counters() - before;
        CHECK(delta.host_blocking_calls() == 0);  // the join never blocks the host
        CHECK(delta.cross_stream_waits == 1);
        CHECK(delta.events_recorded == 1);
        CHECK_FALSE(parent.query());  // the parent now waits for the child's spin
    }
    std::vector<float> seen_by_parent(n, test::poison_float());
    raw_dtoh(parent, seen_by_parent.data(), buffer.device_ptr(), n * sizeof(float));
    CHECK(bitwise_equal(seen_by_parent, second));
}

TEST_CASE("core.explicit_join_and_event_wait") {
    auto device = Device::open(0);
    SpinKernel spin(device);
    auto a = device.create_stream();
    auto b = device.create_stream();
    spin.launch(a, spin.cycles_for_ms(100));
    b.join(a);
    CHECK_FALSE(b.query());
    Event done(device);
    spin.launch(b, spin.cycles_for_ms(50));
    done.record(b);
    a.wait(done);
    a.synchronize();
    CHECK(done.query());
    CHECK(b.query());
}

TEST_CASE("core.read_after_write_across_streams_waits_once") {
    auto device = Device::open(0);
    SpinKernel spin(device);
    auto writer = device.create_stream();
    auto reader = device.create_stream();
    constexpr std::size_t n = 1 << 20;
    auto slice = DeviceSlice<float>::zeros(writer, n);
    const auto fresh = test::random_floats(n);

    spin.launch(writer, spin.cycles_for_ms(100));
    slice.copy_from_host(writer, fresh);  // pending behind the spin
    const auto before = device.counters();
    const auto seen = slice.to_vector(reader);  // must wait for the write, not read zeros
    const auto delta = device.counters() - before;
    CHECK(bitwise_equal(seen, fresh));
    CHECK(delta.cross_stream_waits == 1);
    CHECK(delta.events_recorded == 2);  // on the writer for the wait; on the reader after it (eager events)
    // A second read on the same stream needs no new wait.
    const auto before2 = device.counters();
    (void)slice.to_vector(reader);
    CHECK((device.counters() - before2).cross_stream_waits == 0);
}

TEST_CASE("core.write_after_read_across_streams_waits_for_the_reader") {
    auto device = Device::open(0);
    SpinKernel spin(device);
    auto reader = device.create_stream();
    auto writer = device.create_stream();
    constexpr std::size_t n = 1 << 20;
    const auto original = test::random_floats(n);
    auto source = DeviceSlice<float>::from_host(reader, original);
    auto snapshot = DeviceSlice<float>::zeros(reader, n);

    spin.launch(reader, spin.cycles_for_ms(100));
    copy(reader, snapshot.view(), source.view());  // reads `source` behind the spin
    const auto overwrite = test::random_floats(n);
    source.copy_from_host(writer, overwrite);  // must wait for the pending read
    CHECK(bitwise_equal(snapshot.to_vector(reader), original));
    CHECK(bitwise_equal(source.to_vector(writer), overwrite));
}

TEST_CASE("core.single_stream_records_nothing_and_waits_for_nothing") {
    auto device = Device::open(0);
    auto stream = device.create_stream();
    const auto host = test::random_floats(4096);
    const auto before = device.counters();
    auto a = DeviceSlice<float>::from_host(stream, host);
    auto b = DeviceSlice<float>::zeros(stream, host.size());
    for (int i = 0; i < 10; ++i) {
        copy(stream, b.view(), a.view());
        copy(stream, a.view(), b.view());
    }
    const auto back = b.to_vector(stream);
    const auto delta = device.counters() - before;
    CHECK(bitwise_equal(back, host));
    CHECK(delta.events_recorded == 0);
    CHECK(delta.cross_stream_waits == 0);
    CHECK(delta.host_synchronizations() == 0);
}

TEST_CASE("core.free_is_ordered_after_a_use_on_another_stream") {
    auto device = Device::open(0);
    SpinKernel spin(device);
    auto home = device.create_stream();
    auto other = device.create_stream();
    constexpr std::size_t n = 1 << 20;
    const auto old_values = test::random_floats(n);
    auto snapshot = DeviceSlice<float>::zeros(other, n);
    {
        auto doomed = DeviceSlice<float>::from_host(home, old_values);
        spin.launch(other, spin.cycles_for_ms(150));
        copy(other, snapshot.view(), doomed.view());  // reads behind the spin
    }                                                 // freed while the read is pending
    // New memory of the same size on the home stream, written at once: must not clobber the pending read.
    auto reuse = DeviceSlice<float>::from_host(home, std::vector<float>(n, -7.0f));
    CHECK(bitwise_equal(snapshot.to_vector(other), old_values));
    CHECK(reuse.to_vector(home)[0] == -7.0f);
}

TEST_CASE("core.wrapped_foreign_stream") {
    auto device = Device::open(0);
    auto& state = *cudarc::detail::Internals::device_state(device);
    const auto scope = state.bind();
    sys::Stream raw = nullptr;
    state.check(state.api().stream_create_with_priority(&raw, sys::kStreamNonBlocking, 0),
                sys::Entry::stream_create_with_priority);
    {
        auto wrapped = Stream::wrap(device, raw);
        CHECK_FALSE(wrapped.owned());
        CHECK(wrapped.native() == raw);
        const auto host = test::random_floats(1000);
        auto a = DeviceSlice<float>::from_host(wrapped, host);
        CHECK(bitwise_equal(a.to_vector(wrapped), host));
        auto child = wrapped.fork();
        CHECK(child.owned());
    }
    // Still usable: cudarc did not destroy it.
    CHECK(state.api().stream_query(raw) == sys::kSuccess);
    CHECK(state.api().stream_destroy(raw) == sys::kSuccess);
}

TEST_CASE("core.synchronizations_are_counted") {
    auto device = Device::open(0);
    auto stream = device.create_stream();
    auto before = device.counters();
    stream.synchronize();
    device.synchronize();
    Event event(device);
    event.record(stream);
    event.synchronize();
    const auto delta = device.counters() - before;
    CHECK(delta.stream_synchronizes == 1);
    CHECK(delta.context_synchronizes == 1);
    CHECK(delta.event_synchronizes == 1);
    CHECK(delta.events_recorded == 1);
    CHECK(delta.host_synchronizations() == 3);
}

TEST_CASE("core.event_timing_only_when_asked") {
    auto device = Device::open(0);
    SpinKernel spin(device);
    auto stream = device.create_stream();
    Event start(device, EventTiming::enabled);
    Event stop(device, EventTiming::enabled);
    start.record(stream);
    spin.launch(stream, spin.cycles_for_ms(20));
    stop.record(stream);
    stop.synchronize();
    CHECK(Event::elapsed_ms(start, stop) > 1.0f);
    Event untimed(device);
    untimed.record(stream);
    CHECK_THROWS_WITH_AS((void)Event::elapsed_ms(start, untimed), doctest::Contains("EventTiming::enabled"),
                         Error);
}

TEST_CASE("core.priorities_are_clamped") {
    auto device = Device::open(0);
    auto high = device.create_stream(StreamOptions{.priority = -1000});
    auto low = device.create_stream(StreamOptions{.priority = 1000});
    CHECK(high.priority() <= low.priority());
}

TEST_CASE("core.read_on_the_writing_stream_after_another_read_orders_a_later_write") {
    // The writer's event recorded for B's read does not cover A's later read: a write on C must still wait
    // for that read.
    auto device = Device::open(0);
    SpinKernel spin(device);
    auto a = device.create_stream();
    auto b = device.create_stream();
    auto c = device.create_stream();
    constexpr std::size_t n = 1 << 20;
    const auto original = test::random_floats(n);
    auto slice = DeviceSlice<float>::from_host(a, original);
    auto snapshot = DeviceSlice<float>::zeros(a, n);
    CHECK(bitwise_equal(slice.to_vector(b), original));  // B reads: an event is recorded on A for it
    spin.launch(a, spin.cycles_for_ms(150));
    copy(a, snapshot.view(), slice.view());           // A reads again, behind the spin
    slice.copy_from_host(c, test::random_floats(n));  // C writes: must wait for A's second read
    CHECK(bitwise_equal(snapshot.to_vector(a), original));
}

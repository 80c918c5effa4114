// Issue 29: pinned views tracked per byte range (Note [Pinned memory]), host functions in stream order and
// a pipeline of batches on several streams through one pinned staging buffer, on the fake driver.
#include <doctest/doctest.h>

#include <atomic>
#include <cstddef>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "cudarc/completion_queue.hpp"
#include "cudarc/config.hpp"
#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::error_from;
using cudarc::test::FakeGpu;

namespace {

constexpr const char* kScalePtx = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry scale(.param .u64 y, .param .u64 x, .param .f32 a, .param .u64 n) { ret; }
)";

void define_scale(FakeGpu& gpu) {
    gpu.driver.define_kernel("scale", {8, 8, 4, 8}, [](const fake::KernelCall& call) {
        const auto n = call.argument<unsigned long long>(3);
        auto y_bytes = call.memory(call.argument<DevicePtr>(0), n * sizeof(float));
        auto x_bytes = call.memory(call.argument<DevicePtr>(1), n * sizeof(float));
        if (y_bytes.empty() || x_bytes.empty()) return fake::kErrorIllegalAddress;
        auto* out = reinterpret_cast<float*>(y_bytes.data());
        const auto* in = reinterpret_cast<const float*>(x_bytes.data());
        for (unsigned long long i = 0; i < n; ++i) out[i] = call.argument<float>(2) * in[i];
        return sys::kSuccess;
    });
}

}  // namespace

TEST_CASE("pipeline.batches_on_several_streams_from_one_pinned_buffer_never_wait_on_each_other") {
    FakeGpu gpu;
    define_scale(gpu);
    {
        auto device = Device::open(0);
        constexpr std::size_t kBatches = 8;
        constexpr std::size_t kStreams = 4;
        constexpr std::size_t n = 256;
        std::vector<Stream> streams;
        for (std::size_t k = 0; k < kStreams; ++k) streams.push_back(device.create_stream());
        auto module = Module::from_ptx(device, kScalePtx);
        auto kernel = module.kernel<void(float*, const float*, float, unsigned long long)>("scale");

        PinnedBuffer<float> in(device, kBatches * n);
        PinnedBuffer<float> out(device, kBatches * n);
        std::iota(in.data(), in.data() + in.size(), 1.0f);
        std::vector<DeviceSlice<float>> x;
        std::vector<DeviceSlice<float>> y;
        for (std::size_t k = 0; k < kStreams; ++k) {
            x.push_back(DeviceSlice<float>::uninitialized(streams[k], n));
            y.push_back(DeviceSlice<float>::uninitialized(streams[k], n));
        }
        const Counters before = device.counters();
        for (std::size_t b = 0; b < kBatches; ++b) {
            Stream& s = streams[b % kStreams];
            copy(s, x[b % kStreams].view(), in.view(b * n, n));
            launch(s, LaunchConfig::for_elements(n, device), kernel, y[b % kStreams], x[b % kStreams], 3.0f,
                   static_cast<unsigned long long>(n));
            copy(s, out.view(b * n, n), y[b % kStreams].view());
        }
        const Counters during = device.counters() - before;
        CHECK(during.cross_stream_waits == 0);  // disjoint chunks: nothing to order across streams
        CHECK(during.host_synchronizations() == 0);
        CHECK(during.blocking_copies == 0);
        for (std::size_t b = 0; b < kBatches; ++b) {
            const std::span<const float> batch = out.wait(std::as_const(out).view(b * n, n));
            for (std::size_t i = 0; i < n; ++i) REQUIRE(batch[i] == 3.0f * in[b * n + i]);
        }
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("pinned.wait_and_ready_follow_exactly_the_copies_of_their_range") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto a = device.create_stream();
        auto b = device.create_stream();
        constexpr std::size_t n = 64;
        std::vector<int> values(2 * n);
        std::iota(values.begin(), values.end(), 5);
        auto first = DeviceSlice<int>::from_host(a, std::span<const int>(values).first(n));
        auto last = DeviceSlice<int>::from_host(b, std::span<const int>(values).last(n));
        PinnedBuffer<int> pinned(device, 2 * n);
        gpu.driver.hold(a.native());  // a's copy stays queued
        copy(a, pinned.view(0, n), first.view());
        copy(b, pinned.view(n, n), last.view());
        CHECK_FALSE(pinned.ready(pinned.view(0, n)));
        CHECK(pinned.ready(pinned.view(n, n)));
        CHECK_FALSE(pinned.ready());
        const Counters before = device.counters();
        const std::span<int> second = pinned.wait(pinned.view(n, n));
        CHECK((device.counters() - before).event_synchronizes == 1);  // b only
        CHECK(std::vector<int>(second.begin(), second.end()) ==
              std::vector<int>(values.begin() + n, values.end()));
        pinned.synchronize();
        CHECK(std::vector<int>(pinned.data(), pinned.data() + 2 * n) == values);
        CHECK(pinned.ready());
        // An empty view, and a view with nothing pending, wait for nothing.
        const Counters idle = device.counters();
        static_cast<void>(pinned.wait(pinned.view(0, 0)));
        CHECK((device.counters() - idle).host_synchronizations() == 0);
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("pinned.a_copy_of_a_chunk_another_stream_wrote_waits_for_it_on_the_device") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto a = device.create_stream();
        auto b = device.create_stream();
        constexpr std::size_t n = 128;
        std::vector<float> values(n);
        std::iota(values.begin(), values.end(), 0.5f);
        auto first = DeviceSlice<float>::from_host(a, values);
        auto second = DeviceSlice<float>::zeros(b, n);
        PinnedBuffer<float> staging(device, 2 * n);
        gpu.driver.hold(a.native());
        copy(a, staging.view(0, n), first.view());  // device to host on a, held
        const Counters before = device.counters();
        copy(b, second.view(), std::as_const(staging).view(0, n));  // host to device on b: after a's copy
        CHECK((device.counters() - before).cross_stream_waits == 1);
        CHECK((device.counters() - before).host_synchronizations() == 0);
        // A write of the other chunk on b needs no wait.
        const Counters other = device.counters();
        copy(b, staging.view(n, n), second.view());
        CHECK((device.counters() - other).cross_stream_waits == 0);
        CHECK(second.to_vector(b) == values);
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("pinned.destroying_a_buffer_waits_only_for_pending_copies") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto a = device.create_stream();
        auto b = device.create_stream();
        auto slice = DeviceSlice<int>::zeros(a, 32);
        b.join(a);
        const Counters before = device.counters();
        {
            PinnedBuffer<int> pinned(device, 64);
            gpu.driver.hold(a.native());
            copy(a, pinned.view(0, 32), slice.view());
            copy(b, pinned.view(32, 32), slice.view());
        }  // the fake reports memory freed under a queued copy
        CHECK((device.counters() - before).event_synchronizes == 2);  // one per stream that used it
        {
            PinnedBuffer<int> pinned(device, 64);
            const Counters quiet = device.counters();
            {
                PinnedBuffer<int> moved = std::move(pinned);
                CHECK(moved.size() == 64);
            }
            CHECK((device.counters() - quiet).host_synchronizations() == 0);  // nothing was pending
        }
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("pinned.views_survive_a_move_and_check_their_bounds") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& s = device.default_stream();
        PinnedBuffer<int> pinned(device, 16);
        auto view = pinned.view(4, 8);
        PinnedBuffer<int> moved = std::move(pinned);
        auto slice = DeviceSlice<int>::zeros(s, 8);
        std::fill(moved.data(), moved.data() + 16, 9);
        copy(s, slice.view(), PinnedView<const int>(view));
        CHECK(slice.to_vector(s) == std::vector<int>(8, 9));
        CHECK(contains(error_from([&] { (void)moved.view(10, 8); }), "out of range"));
        CHECK(contains(error_from([&] { (void)view.subview(2, 7); }), "out of range"));
        CHECK(contains(error_from([&] { copy(s, slice.view(), std::as_const(moved).view(0, 7)); }),
                       "size mismatch"));
        PinnedBuffer<int> empty;
        CHECK(contains(error_from([&] {
                           copy(s, empty.view(), slice.view(0, 0));
                           copy(s, slice.view(), PinnedView<const int>(empty.view()));
                       }),
                       "size mismatch"));
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("pinned.registered_host_memory_is_tracked_and_unregistered_after_its_copies") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto a = device.create_stream();
        std::vector<float> host(512);
        std::iota(host.begin(), host.end(), 2.0f);
        auto slice = DeviceSlice<float>::zeros(a, host.size());
        {
            auto registered = PinnedBuffer<float>::register_memory(device, std::span<float>(host));
            CHECK(registered.data() == host.data());
            copy(a, slice.view(), std::as_const(registered).view());
            CHECK(slice.to_vector(a) == host);
            std::fill(host.begin(), host.end(), 0.0f);
            gpu.driver.hold(a.native());
            copy(a, registered.view(), std::as_const(slice).view());  // queued: not blocking
            CHECK_FALSE(registered.ready());
        }  // unregistered after the queued copy
        CHECK(host[7] == 9.0f);
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("host_function.runs_in_stream_order_and_keeps_its_exceptions") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto s = device.create_stream();
        std::atomic<int> ran{0};
        gpu.driver.hold(s.native());
        s.host_function([&ran] { ran.fetch_add(1); });
        CHECK(ran.load() == 0);  // the stream's work before it has not run
        s.synchronize();
        CHECK(ran.load() == 1);

        s.host_function([] { throw std::runtime_error("batch 7 failed"); });
        s.synchronize();
        CHECK(contains(error_from([&] { device.rethrow_deferred_error(); }), "batch 7 failed"));

        // A move-only function is fine.
        auto owned = std::make_unique<int>(41);
        s.host_function([owned = std::move(owned), &ran] { ran.fetch_add(*owned); });
        s.synchronize();
        CHECK(ran.load() == 42);
#if !defined(NDEBUG) || CUDARC_DEBUG_VIEWS
        // Note [No CUDA in host functions]: the library refuses its own calls there.
        s.host_function([&device] { (void)device.default_stream().query(); });
        s.synchronize();
        CHECK(contains(error_from([&] { device.rethrow_deferred_error(); }), "inside a host function"));
#endif
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("host_function.is_refused_inside_a_capture") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto s = device.create_stream();
        auto slice = DeviceSlice<int>::zeros(s, 16);
        CHECK(contains(error_from([&] {
                           (void)capture(s, [&](Stream& st) {
                               memset(st, slice.view(), 1);
                               st.host_function([] {});
                           });
                       }),
                       "Stream::host_function inside a graph capture"));
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("pipeline.a_completion_queue_hands_finished_batches_to_the_host") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        std::vector<Stream> streams;
        for (int k = 0; k < 2; ++k) streams.push_back(device.create_stream());
        constexpr std::size_t n = 32;
        constexpr std::size_t kBatches = 6;
        PinnedBuffer<int> out(device, kBatches * n);
        std::vector<DeviceSlice<int>> slices;
        for (std::size_t b = 0; b < kBatches; ++b) {
            slices.push_back(DeviceSlice<int>::zeros(streams[b % 2], n));
            memset(streams[b % 2], slices.back().view(), static_cast<unsigned char>(b + 1));
        }
        CompletionQueue done;
        gpu.driver.hold(streams[1].native());
        for (std::size_t b = 0; b < kBatches; ++b) {
            copy(streams[b % 2], out.view(b * n, n), std::as_const(slices[b]).view());
            done.notify(streams[b % 2], b);
        }
        // Stream 0's batches are done; stream 1's are held.
        std::vector<std::uint64_t> seen;
        while (auto token = done.try_pop()) seen.push_back(*token);
        CHECK(seen == std::vector<std::uint64_t>{0, 2, 4});
        for (std::uint64_t b : seen) CHECK(out[b * n] == static_cast<int>(0x01010101 * (b + 1)));
        gpu.driver.release(streams[1].native());
        for (int i = 0; i < 3; ++i) seen.push_back(done.wait());
        CHECK(seen == std::vector<std::uint64_t>{0, 2, 4, 1, 3, 5});
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

// Issue 14, items 5, 7 and 8 on the fake driver: another context made current behind cudarc's back,
// destructors whose driver calls fail, and sticky errors that lose the device.
#include <doctest/doctest.h>

#include <numeric>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::error_from;
using cudarc::test::FakeGpu;

namespace {

constexpr const char* kPtx =
    ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry touch(.param .u64 p) { ret; }\n";

// Makes `context` current on this thread behind cudarc's back, as a framework does with cuCtxPushCurrent.
void switch_context(FakeGpu& gpu, sys::Context context) {
    REQUIRE(gpu.faults.api().ctx_set_current(context) == sys::kSuccess);
}

}  // namespace

TEST_CASE("reliability.foreign_context_made_current_behind_cudarcs_back") {
    FakeGpu gpu;
    const sys::Context foreign = gpu.driver.create_context(0);
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        std::vector<int> host(256);
        std::iota(host.begin(), host.end(), 0);
        auto a = DeviceSlice<int>::from_host(stream, host);
        Event event(device);
        auto module = Module::from_ptx(device, kPtx);
        PinnedBuffer<int> pinned(device, host.size());

        switch_context(gpu, foreign);  // cudarc's thread-local cache still says "bound"
        event.record(stream);
        CHECK(event.query());
        auto kernel = module.kernel<void(int*)>("touch");
        launch(stream, LaunchConfig{1, 1}, kernel, a);
        pinned.copy_from_device_async(stream, a.view());
        pinned.synchronize();
        CHECK(std::vector<int>(pinned.span().begin(), pinned.span().end()) == host);
        auto b = DeviceSlice<int>::zeros(stream, host.size());
        {
            auto child = stream.fork();
            copy(child, b.view(), a.view());
        }
        CHECK(b.to_vector(stream) == host);
        // ... and the framework's context is still current afterwards: cudarc scoped its calls.
        CHECK(gpu.driver.current_context() == foreign);
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.pool_objects_are_never_created_in_a_foreign_context") {
    FakeGpu gpu;
    const sys::Context foreign = gpu.driver.create_context(0);
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        auto data = DeviceSlice<float>::zeros(stream, 64);
        switch_context(gpu, foreign);
        {
            // The event pool and the stream pool are empty: fork and join create what they need now.
            auto child = stream.fork();
            auto other = device.create_stream();
            memset(child, data.view(), 1);
        }
        switch_context(gpu, gpu.driver.primary_context(0));  // the framework pops its context
        // The pooled events and streams must work in cudarc's own context.
        for (int i = 0; i < 3; ++i) {
            auto child = stream.fork();
            memset(child, data.view(), 2);
        }
        CHECK(data.to_vector(stream) == std::vector<float>(64, std::bit_cast<float>(0x02020202u)));
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.destructors_never_throw_when_binding_fails") {
    // ~DeviceState, ~Stream, ~Event, ~Module, ~DeviceSlice and ~PinnedBuffer must each survive a failing
    // cuCtxSetCurrent: the error is deferred, never thrown (which would terminate the process). They run on
    // a fresh thread, where nothing is bound yet, so each of them has to bind.
    FakeGpu gpu;
    std::optional<Device> device = Device::open(0);
    auto& stream = device->default_stream();
    struct Objects {
        DeviceSlice<int> slice;
        Stream child;
        Event timed;
        Module module;
        PinnedBuffer<int> pinned;
    };
    auto slice = DeviceSlice<int>::zeros(stream, 1024);
    auto child = stream.fork();
    memset(child, slice.view(), 3);  // used on two streams: freeing it records an event
    std::optional<Objects> objects(
        Objects{std::move(slice), std::move(child), Event(*device, EventTiming::enabled),
                Module::from_ptx(*device, kPtx), PinnedBuffer<int>(*device, 1024)});
    gpu.driver.hold(stream.native());
    objects->pinned.copy_from_device_async(stream, objects->slice.view());

    gpu.faults.fail_nth(fake::Entry::ctx_set_current, 1, sys::kErrorInvalidValue,
                        fake::FaultInjector::kForever);
    std::thread([&] { objects.reset(); }).join();  // every destructor but the device's
    gpu.faults.clear();
    CHECK_THROWS_AS(device->rethrow_deferred_error(), Error);

    gpu.faults.fail_nth(fake::Entry::ctx_set_current, 1, sys::kErrorInvalidValue,
                        fake::FaultInjector::kForever);
    std::thread([&] { device.reset(); }).join();  // the last handle: ~DeviceState
    gpu.faults.clear();
    CHECK(gpu.driver.live().retained_primary_contexts == 0);
}

TEST_CASE("reliability.sticky_error_loses_the_device_with_one_clear_error") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        {
            auto cached = DeviceSlice<float>::zeros(stream, 1 << 18);  // 1 MiB, cached after this scope
        }
        auto data = DeviceSlice<float>::zeros(stream, 256);
        CHECK_FALSE(device.lost());
        const AllocatorStats before = device.allocator_stats();

        gpu.faults.fail_sticky(fake::Entry::stream_synchronize, 1, fake::kErrorIllegalAddress);
        std::string first;
        try {
            stream.synchronize();
            FAIL("synchronize did not throw");
        } catch (const DeviceLost& lost) {
            first = lost.what();
            CHECK(lost.result() == fake::kErrorIllegalAddress);
            CHECK(lost.device() == 0);
        }
        CHECK(contains(first, "cuStreamSynchronize"));
        CHECK(contains(first, "CUDA_ERROR_ILLEGAL_ADDRESS"));
        CHECK(contains(first, "restart"));
        CHECK(device.lost());

        // Every later call throws the same clear error, whichever driver call it would have made first;
        // the caching allocator hands out nothing, not even the 1 MiB block it has cached.
        const auto expect_lost = [&](auto&& body) {
            const std::string what = error_from(body);
            CHECK(contains(what, "device 0 is lost"));
            CHECK(contains(what, "cuStreamSynchronize"));
            CHECK(contains(what, "restart"));
        };
        expect_lost([&] { (void)DeviceSlice<float>::uninitialized(stream, 1 << 18); });
        expect_lost([&] { (void)DeviceSlice<float>::uninitialized(stream, 64); });
        expect_lost([&] { (void)data.to_vector(stream); });
        expect_lost([&] { data.fill_zero(stream); });
        expect_lost([&] { (void)stream.fork(); });
        expect_lost([&] { device.synchronize(); });
        expect_lost([&] { (void)Module::from_ptx(device, kPtx); });
        expect_lost([&] { PinnedBuffer<float> pinned(device, 16); });
        CHECK_THROWS_AS((void)DeviceSlice<float>::uninitialized(stream, 64), DeviceLost);
        const AllocatorStats after = device.allocator_stats();
        CHECK(after.live_allocations == before.live_allocations);
        CHECK(after.cache_hits == before.cache_hits);
    }  // destructors on a lost device: no throw, no crash
    gpu.faults.clear();
    CHECK(gpu.driver.live().retained_primary_contexts == 0);
}

TEST_CASE("reliability.kernel_fault_surfaces_as_a_lost_device") {
    // The realistic order: the launch succeeds, the fault shows at the next call that waits or queries.
    FakeGpu gpu;
    gpu.driver.define_kernel("touch", {8},
                             [](const fake::KernelCall&) { return fake::kErrorIllegalAddress; });
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        auto data = DeviceSlice<int>::zeros(stream, 16);
        auto module = Module::from_ptx(device, kPtx);
        launch(stream, LaunchConfig{1, 1}, module.kernel<void(int*)>("touch"), data);
        CHECK_THROWS_AS(stream.synchronize(), DeviceLost);
        CHECK(device.lost());
        CHECK_THROWS_AS((void)data.to_vector(stream), DeviceLost);
    }
    CHECK(gpu.driver.live().retained_primary_contexts == 0);
}

TEST_CASE("core.device_copies_share_one_state_and_a_null_stream_is_not_wrapped") {
    // Device is a shared handle (issue 15): a copy sees the same counters and allocator. Stream::wrap
    // refuses a null stream (the legacy stream) with an error that says what to do, before any driver call.
    static_assert(std::is_copy_constructible_v<Device> && std::is_copy_assignable_v<Device>);
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        Device copy_of = device;
        CHECK(cudarc::detail::Internals::device_state(copy_of) ==
              cudarc::detail::Internals::device_state(device));
        auto slice = DeviceSlice<int>::zeros(copy_of.default_stream(), 64);
        CHECK(device.allocator_stats().allocated_bytes == copy_of.allocator_stats().allocated_bytes);
        CHECK(device.allocator_stats().allocated_bytes >= 64 * sizeof(int));
        const NativeStream null_stream = nullptr;
        const std::string message = error_from([&] { (void)Stream::wrap(device, null_stream); });
        CHECK(contains(message, "null"));
        CHECK(contains(message, "legacy stream"));
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

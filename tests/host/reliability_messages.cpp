// Issue 14, item 9: messages a user can act on.
#include <doctest/doctest.h>

#include <string>

#include "alloc_test_support.hpp"
#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::error_from;
using cudarc::test::FakeGpu;

namespace {
constexpr const char* kPtx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n";
}  // namespace

TEST_CASE("reliability.message_unknown_memory_source_shows_the_value") {
    FakeGpu gpu;
    DeviceOptions options;
    options.memory_source = static_cast<MemorySource>(7);
    const std::string what = error_from([&] { (void)Device::open(0, options); });
    INFO(what);
    CHECK(contains(what, "MemorySource"));
    CHECK(contains(what, "7"));
    CHECK(contains(what, "caching_allocator"));
    CHECK(contains(what, "stream_ordered"));
    // Nothing stays behind: the context is released, and a good option opens the device.
    CHECK(gpu.driver.live().retained_primary_contexts == 0);
    { auto device = Device::open(0); }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.message_stream_already_captured_says_what_to_do") {
    cudarc::test::AllocatorOnFakeDevice f;
    static_cast<void>(f.allocator.notify_capture_begin(0x5a));
    const std::string what = error_from([&] { static_cast<void>(f.allocator.notify_capture_begin(0x5a)); });
    INFO(what);
    CHECK(contains(what, "0x5a is already being captured"));
    CHECK(contains(what, "end"));
    CHECK(contains(what, "capture"));
    CHECK(contains(what, "another stream"));
}

TEST_CASE("reliability.message_page_lock_failure_is_out_of_memory_with_a_hint") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        gpu.faults.fail_nth(fake::Entry::mem_host_alloc, 1, sys::kErrorOutOfMemory);
        try {
            PinnedBuffer<float> pinned(device, 1 << 20);
            FAIL("did not throw");
        } catch (const OutOfMemory& oom) {
            const std::string what = oom.what();
            INFO(what);
            CHECK(oom.api() == "cuMemHostAlloc");
            CHECK(oom.result() == sys::kErrorOutOfMemory);
            CHECK(oom.device() == 0);
            CHECK(contains(what, "4194304 bytes"));
            CHECK(contains(what, "CUDA_ERROR_OUT_OF_MEMORY (2)"));
            CHECK(contains(what, "ulimit -l"));
            CHECK(contains(what, "memlock"));
        }
        // Another failure keeps its own code and is a plain error naming the call.
        gpu.faults.fail_nth(fake::Entry::mem_host_alloc, 1, sys::kErrorInvalidValue);
        const std::string what = error_from([&] { PinnedBuffer<float> pinned(device, 16); });
        CHECK(contains(what, "cuMemHostAlloc"));
        CHECK(contains(what, "CUDA_ERROR_INVALID_VALUE"));
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.message_launch_with_too_much_shared_memory_states_the_maximum") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        auto module = Module::from_ptx(device, kPtx);
        auto kernel = module.kernel<void()>("k");
        // 1 GiB: no call can allow that; the message states the device's maximum instead of suggesting one.
        std::string what = error_from([&] {
            launch(stream, LaunchConfig{1, 32}.with_shared_memory(1u << 30), kernel);
        });
        INFO(what);
        CHECK(contains(what, "1073741824"));
        CHECK(contains(what, "232448"));
        CHECK_FALSE(contains(what, "set_max_dynamic_shared_memory(1073741824)"));
        // 100 KB fits the device once allowed: the hint to allow it stays.
        what = error_from([&] {
            launch(stream, LaunchConfig{1, 32}.with_shared_memory(100 * 1024), kernel);
        });
        CHECK(contains(what, "set_max_dynamic_shared_memory(102400)"));
        kernel.function().set_max_dynamic_shared_memory(100 * 1024);
        launch(stream, LaunchConfig{1, 32}.with_shared_memory(100 * 1024), kernel);
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

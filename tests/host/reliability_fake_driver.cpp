// The fake driver and the fault injector themselves (testing/fake_driver): the library runs on them.
#include <doctest/doctest.h>

#include <cstddef>
#include <numeric>
#include <vector>

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

}  // namespace

TEST_CASE("reliability.fake_driver_covers_the_whole_table") {
    // Every slot of sys::DriverApi is a function pointer after `backend`; the fake and the injector must
    // know each one (a new entry added to the table without them fails here).
    constexpr std::size_t slots = (sizeof(sys::DriverApi) - offsetof(sys::DriverApi, init)) / sizeof(void*);
    CHECK_MESSAGE(slots == fake::kEntryCount,
                  "sys::DriverApi has " << slots << " entries, testing/fake_driver/driver_entries.hpp lists "
                                        << fake::kEntryCount
                                        << ": add the new ones to the list and the fake");
    fake::FakeDriver gpu;
    fake::FaultInjector faults(gpu.api());
    const auto* fake_slots = reinterpret_cast<void* const*>(&gpu.api().init);
    const auto* wrapped_slots = reinterpret_cast<void* const*>(&faults.api().init);
    for (std::size_t i = 0; i < slots; ++i) {
        INFO("slot " << i);
        CHECK(fake_slots[i] != nullptr);
        CHECK(wrapped_slots[i] != nullptr);
        CHECK(wrapped_slots[i] != fake_slots[i]);
    }
}

TEST_CASE("reliability.fake_driver_runs_copies_forks_and_launches") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        CHECK(device.name() == "cudarc fake GPU");
        CHECK(device.arch() == "sm_90");
        auto& stream = device.default_stream();

        std::vector<float> host(1000);
        std::iota(host.begin(), host.end(), 1.0f);
        auto x = DeviceSlice<float>::from_host(stream, host);
        auto y = DeviceSlice<float>::zeros(stream, host.size());
        CHECK(y.to_vector(stream) == std::vector<float>(host.size(), 0.0f));
        {
            auto child = stream.fork();
            copy(child, y.view(), x.view());
        }
        CHECK(y.to_vector(stream) == host);

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
        auto module = Module::from_ptx(device, kScalePtx);
        auto kernel = module.kernel<void(float*, const float*, float, unsigned long long)>("scale");
        launch(stream, LaunchConfig::for_elements(host.size(), device), kernel, y, x, 2.0f,
               static_cast<unsigned long long>(host.size()));
        const std::vector<float> scaled = y.to_vector(stream);
        for (std::size_t i = 0; i < host.size(); ++i) CHECK(scaled[i] == 2.0f * host[i]);
        REQUIRE(gpu.driver.launches().size() == 1);
        CHECK(gpu.driver.launches()[0].kernel == "scale");
        CHECK(contains(error_from([&] { (void)module.function("missing"); }), "no kernel named 'missing'"));
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.fault_injector_fails_the_nth_call_of_an_entry") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        const std::uint64_t before = gpu.faults.calls(fake::Entry::memcpy_htod_async);
        gpu.faults.fail_nth(fake::Entry::memcpy_htod_async, 2, sys::kErrorInvalidValue);
        std::vector<int> host(16, 7);
        auto a = DeviceSlice<int>::from_host(stream, host);  // the 1st call: fine
        const std::string what = error_from([&] { (void)DeviceSlice<int>::from_host(stream, host); });
        CHECK(contains(what, "cuMemcpyHtoDAsync"));
        CHECK(contains(what, "CUDA_ERROR_INVALID_VALUE"));
        auto c = DeviceSlice<int>::from_host(stream, host);  // the 3rd: fine again
        CHECK(c.to_vector(stream) == host);
        CHECK(gpu.faults.calls(fake::Entry::memcpy_htod_async) == before + 3);
        const auto fired = gpu.faults.fired();
        REQUIRE(fired.size() == 1);
        CHECK(fired[0].entry == fake::Entry::memcpy_htod_async);
        CHECK(fired[0].call == before + 2);
        CHECK(std::string(fake::cuda_name(fired[0].entry)) == "cuMemcpyHtoDAsync");
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.fake_driver_holds_streams_and_reports_freed_memory_under_a_copy") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        auto slice = DeviceSlice<int>::zeros(stream, 64);
        gpu.driver.hold(stream.native());
        {
            PinnedBuffer<int> pinned(device, 64);
            pinned.copy_from_device_async(stream, slice.view());
            CHECK_FALSE(pinned.ready());
            CHECK(gpu.driver.queued_operations() > 0);
        }  // waits for the copy first
        CHECK(gpu.driver.violations().empty());

        // The fake notices page-locked memory freed under a queued copy (raw calls, past the library).
        const sys::DriverApi& api = gpu.faults.api();
        void* raw = nullptr;
        REQUIRE(api.mem_host_alloc(&raw, 256, 0) == sys::kSuccess);
        gpu.driver.hold(stream.native());
        REQUIRE(api.memcpy_dtoh_async(raw, slice.device_ptr(), 256, stream.native()) == sys::kSuccess);
        CHECK(api.mem_free_host(raw) == sys::kSuccess);
        REQUIRE(gpu.driver.violations().size() == 1);
        CHECK(contains(gpu.driver.violations()[0], "cuMemFreeHost"));
        gpu.driver.finish_all();
        CHECK(gpu.driver.violations().size() == 2);  // ... and the copy running on freed memory
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

// The fake driver's entries for peer access, peer copies and borrowed memory (issues 12 and 18 code under
// issue 14's fake driver and fault injector): the real code paths on two fake devices, and each new entry
// failing on purpose.
#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "core/device_state.hpp"
#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::error_from;
using cudarc::test::FakeGpu;

namespace {

fake::Options two_devices(bool peer_access = true) {
    fake::Options options;
    options.devices = {fake::DeviceSpec{}, fake::DeviceSpec{}};
    options.peer_access = peer_access;
    return options;
}

std::vector<int> iota_ints(std::size_t n, int first) {
    std::vector<int> values(n);
    std::iota(values.begin(), values.end(), first);
    return values;
}

// Raw device memory of `device` made through the fake itself (not the injector): what another library
// would own.
DevicePtr raw_alloc(FakeGpu& gpu, const Device& device, std::size_t bytes) {
    const auto scope = cudarc::detail::Internals::device_state(device)->bind();
    DevicePtr ptr = 0;
    REQUIRE(gpu.driver.api().mem_alloc(&ptr, bytes) == sys::kSuccess);
    return ptr;
}

void raw_free(FakeGpu& gpu, const Device& device, DevicePtr ptr) {
    const auto scope = cudarc::detail::Internals::device_state(device)->bind();
    CHECK(gpu.driver.api().mem_free(ptr) == sys::kSuccess);
}

}  // namespace

TEST_CASE("reliability.peer_copy_on_two_fake_devices_waits_for_the_source_write") {
    FakeGpu gpu(two_devices());
    {
        auto d0 = Device::open(0);
        auto d1 = Device::open(1);
        CHECK(d0.can_access_peer(d1));
        CHECK_FALSE(d1.peer_access_enabled(d0));
        d1.enable_peer_access(d0);
        CHECK(d1.peer_access_enabled(d0));
        d1.enable_peer_access(d0);  // idempotent

        auto s0 = d0.create_stream();
        auto s1 = d1.create_stream();
        const auto values = iota_ints(4096, 7);
        auto src = DeviceSlice<int>::zeros(s0, values.size());
        auto dst = DeviceSlice<int>::zeros(s1, values.size());
        s1.synchronize();
        gpu.driver.hold(s0.native());  // the write below stays queued on device 0
        copy(s0, src.view(), std::span<const int>(values));
        copy(s1, dst.view(), src.view());  // on device 1's stream: must wait for device 0's write
        CHECK(gpu.driver.queued_operations() > 0);
        gpu.driver.release(s0.native());
        CHECK(dst.to_vector(s1) == values);
        CHECK(gpu.driver.violations().empty());
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.peer_access_refused_without_a_path_but_copies_still_work") {
    FakeGpu gpu(two_devices(false));
    {
        auto d0 = Device::open(0);
        auto d1 = Device::open(1);
        CHECK_FALSE(d0.can_access_peer(d1));
        CHECK(contains(error_from([&] { d0.enable_peer_access(d1); }), "cannot access"));
        CHECK_FALSE(d0.peer_access_enabled(d1));
        auto s1 = d1.create_stream();
        const auto values = iota_ints(100, -3);
        const auto src = DeviceSlice<int>::from_host(d0.default_stream(), values);
        auto dst = DeviceSlice<int>::zeros(s1, values.size());
        copy(s1, dst.view(), src.view());
        CHECK(dst.to_vector(s1) == values);
        // A launch-style use of another device's memory without peer access is refused.
        CHECK(contains(
            error_from([&] { memset(s1, DeviceSlice<int>::zeros(d0.default_stream(), 4).view(), 0); }),
            "enable peer access first"));
        CHECK(gpu.driver.violations().empty());
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.peer_entry_points_that_fail_name_themselves_and_change_nothing") {
    FakeGpu gpu(two_devices());
    {
        auto d0 = Device::open(0);
        auto d1 = Device::open(1);
        gpu.faults.fail_nth(fake::Entry::device_can_access_peer, 1, sys::kErrorInvalidValue);
        CHECK(contains(error_from([&] { (void)d0.can_access_peer(d1); }), "cuDeviceCanAccessPeer"));

        gpu.faults.fail_nth(fake::Entry::ctx_enable_peer_access, 1, sys::kErrorInvalidValue);
        CHECK(contains(error_from([&] { d0.enable_peer_access(d1); }), "cuCtxEnablePeerAccess"));
        CHECK_FALSE(d0.peer_access_enabled(d1));
        d0.enable_peer_access(d1);  // works once the driver does
        CHECK(d0.peer_access_enabled(d1));

        auto s1 = d1.create_stream();
        const auto values = iota_ints(256, 1);
        const auto src = DeviceSlice<int>::from_host(d0.default_stream(), values);
        auto dst = DeviceSlice<int>::from_host(s1, std::vector<int>(values.size(), -1));
        gpu.faults.fail_nth(fake::Entry::memcpy_peer_async, 1, sys::kErrorInvalidValue);
        CHECK(contains(error_from([&] { copy(s1, dst.view(), src.view()); }), "cuMemcpyPeerAsync"));
        CHECK(dst.to_vector(s1) == std::vector<int>(values.size(), -1));  // nothing was copied
        copy(s1, dst.view(), src.view());
        CHECK(dst.to_vector(s1) == values);
        CHECK(gpu.driver.violations().empty());
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.borrowed_memory_checks_on_the_fake_driver") {
    FakeGpu gpu(two_devices());
    {
        auto d0 = Device::open(0);
        auto d1 = Device::open(1);
        auto& stream = d0.default_stream();
        constexpr std::size_t n = 1000;
        const DevicePtr mine = raw_alloc(gpu, d0, n * sizeof(int));
        const DevicePtr theirs = raw_alloc(gpu, d1, n * sizeof(int));
        {
            BorrowedSlice<int> borrowed(d0, mine, n);
            const auto values = iota_ints(n, 3);
            copy(stream, borrowed.view(), std::span<const int>(values));
            std::vector<int> back(n);
            copy(stream, std::span<int>(back), borrowed.view());
            CHECK(back == values);
        }
        CHECK(contains(error_from([&] { BorrowedSlice<int>(d0, mine, n + 1); }), "run past the end"));
        CHECK(contains(error_from([&] { BorrowedSlice<int>(d0, theirs, n); }), "memory of device 1"));
        PinnedBuffer<int> pinned(d0, n);
        const auto host_address = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(pinned.data()));
        CHECK(contains(error_from([&] { BorrowedSlice<int>(d0, host_address, n); }), "page-locked"));
        CHECK(contains(error_from([&] { BorrowedSlice<int>(d0, mine, SIZE_MAX / 2); }), "overflow"));

        // A borrow's check is one driver call: the pointer's attributes give its allocation's bounds.
        const std::uint64_t attributes_before = gpu.faults.calls(fake::Entry::pointer_get_attributes);
        const std::uint64_t ranges_before = gpu.faults.calls(fake::Entry::mem_get_address_range);
        CHECK_NOTHROW(BorrowedSlice<int>(d0, mine + 4, n - 1));
        CHECK(contains(error_from([&] { BorrowedSlice<int>(d0, mine + 4, n); }), "run past the end"));
        CHECK(gpu.faults.calls(fake::Entry::pointer_get_attributes) == attributes_before + 2);
        CHECK(gpu.faults.calls(fake::Entry::mem_get_address_range) == ranges_before);
        gpu.faults.fail_nth(fake::Entry::pointer_get_attributes, 1, sys::kErrorInvalidValue);
        CHECK(contains(error_from([&] { BorrowedSlice<int>(d0, mine, n); }), "cuPointerGetAttributes"));

        // A sticky error met while checking borrowed memory loses the device like any other call.
        gpu.faults.fail_sticky(fake::Entry::pointer_get_attributes, 1, fake::kErrorIllegalAddress);
        try {
            BorrowedSlice<int>(d0, mine, n);
            FAIL("did not throw");
        } catch (const DeviceLost& lost) {
            CHECK(contains(lost.what(), "cuPointerGetAttributes"));
        }
        CHECK(d0.lost());
        CHECK_THROWS_AS(BorrowedSlice<int>(d0, mine, n), DeviceLost);
        gpu.faults.clear();
        raw_free(gpu, d1, theirs);
        {
            // Device 0's context is lost: free its raw memory through the fake without a scope.
            static_cast<void>(gpu.driver.api().ctx_set_current(gpu.driver.primary_context(0)));
            static_cast<void>(gpu.driver.api().mem_free(mine));
        }
    }
}

TEST_CASE("reliability.borrowed_memory_bounds_without_cuPointerGetAttributes") {
    // A driver without cuPointerGetAttributes (as on HIP): the bounds come from cuMemGetAddressRange.
    fake::FakeDriver driver;
    fake::FaultInjector faults(driver.api());
    sys::DriverApi table = faults.api();
    table.pointer_get_attributes = nullptr;
    fake::DriverOverride installed(table);
    {
        auto device = Device::open(0);
        constexpr std::size_t n = 1000;
        DevicePtr mine = 0;
        {
            const auto scope = cudarc::detail::Internals::device_state(device)->bind();
            REQUIRE(driver.api().mem_alloc(&mine, n * sizeof(int)) == sys::kSuccess);
        }
        CHECK_NOTHROW(BorrowedSlice<int>(device, mine, n));
        CHECK_NOTHROW(BorrowedSlice<int>(device, mine + 4, n - 1));
        CHECK(contains(error_from([&] { BorrowedSlice<int>(device, mine, n + 1); }), "run past the end"));
        CHECK(contains(error_from([&] { BorrowedSlice<int>(device, mine + 4 * n, 1); }),
                       "inside no allocation"));
        CHECK(faults.calls(fake::Entry::mem_get_address_range) == 4);
        faults.fail_nth(fake::Entry::mem_get_address_range, 1, sys::kErrorInvalidValue);
        CHECK(contains(error_from([&] { BorrowedSlice<int>(device, mine, n); }), "cuMemGetAddressRange"));
        faults.clear();
        const auto scope = cudarc::detail::Internals::device_state(device)->bind();
        CHECK(driver.api().mem_free(mine) == sys::kSuccess);
    }
    CHECK(driver.live() == fake::LiveCounts{});
}

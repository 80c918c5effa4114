// Issue 28: page-locked memory is portable (cuMemHostAlloc with CU_MEMHOSTALLOC_PORTABLE), so a
// PinnedBuffer made on one device may copy to and from another device's memory on that device's stream. The
// copy and its event belong to the stream's device: its context current, its event pool.
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::FakeGpu;

namespace {

fake::Options two_devices() {
    fake::Options options;
    options.devices = {fake::DeviceSpec{}, fake::DeviceSpec{}};
    return options;  // strict contexts: a call on another context's stream fails as on a real driver
}

}  // namespace

TEST_CASE("pinned.async_copies_run_in_the_streams_device") {
    FakeGpu gpu(two_devices());
    {
        auto d0 = Device::open(0);
        auto d1 = Device::open(1);
        Stream& s1 = d1.default_stream();
        std::vector<int> expected(256);
        std::iota(expected.begin(), expected.end(), 7);
        auto slice = DeviceSlice<int>::zeros(s1, expected.size());
        {
            PinnedBuffer<int> pinned(d0, expected.size());  // page-locked through device 0's context
            std::copy(expected.begin(), expected.end(), pinned.data());
            pinned.copy_to_device_async(s1, slice.view());
            pinned.synchronize();
            CHECK(slice.to_vector(s1) == expected);

            std::fill(pinned.data(), pinned.data() + pinned.size(), 0);
            gpu.driver.hold(s1.native());  // the copy stays queued
            pinned.copy_from_device_async(s1, slice.view());
            CHECK_FALSE(pinned.ready());
            pinned.synchronize();  // waits for device 1's event
            CHECK(std::vector<int>(pinned.data(), pinned.data() + pinned.size()) == expected);

            gpu.driver.hold(s1.native());
            pinned.copy_from_device_async(s1, slice.view());
        }  // freed after the queued copy (the fake reports memory freed under a copy)
        d0.rethrow_deferred_error();
        d1.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});  // the events went back to device 1's pool
}

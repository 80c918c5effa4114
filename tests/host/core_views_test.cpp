// Issue 28's two memory-safety defects, on the fake driver: views stay valid when their owner moves (Note
// [Stable buffers]), a view that outlives its owner is caught by CUDARC_DEBUG_VIEWS, and Stream::wrap
// refuses the handles that name no single stream.
#include <doctest/doctest.h>

#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "cudarc/optim/param_tensor.hpp"
#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::error_from;
using cudarc::test::FakeGpu;

TEST_CASE("core.views_survive_a_move_of_their_owner") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        std::vector<float> host(1024);
        std::iota(host.begin(), host.end(), 1.0f);
        std::vector<DeviceSlice<float>> slices;
        slices.push_back(DeviceSlice<float>::from_host(stream, host));
        const DeviceView<float> view = slices.front().view(8, 16);
        const optim::ParamTensor tensor(slices.front().view(), slices.front().view());
        // The vector grows: its slices move, their buffers stay where they were.
        for (int i = 0; i < 64; ++i) slices.push_back(DeviceSlice<float>::zeros(stream, 4));
        std::vector<float> back(16);
        copy(stream, std::span<float>(back), DeviceView<const float>(view));
        CHECK(back == std::vector<float>(host.begin() + 8, host.begin() + 24));
        CHECK(view.device_ordinal() == 0);
        CHECK(tensor.param_ptr() == slices.front().device_ptr());
        // Writes through the old view land in the moved slice's memory.
        memset(stream, view.subview(0, 1), 0);
        CHECK(slices.front().to_vector(stream)[8] == 0.0f);
        // A moved-from slice is empty, with the errors of one.
        DeviceSlice<float> moved = std::move(slices.front());
        CHECK(slices.front().empty());
        CHECK(slices.front().device_ptr() == 0);
        CHECK(slices.front().device_ordinal() == -1);
        CHECK(moved.size() == host.size());
        copy(stream, std::span<float>(back), DeviceView<const float>(view));
        CHECK(back[1] == host[9]);
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("core.borrowed_views_survive_a_move_of_their_owner") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        auto memory = DeviceSlice<int>::zeros(stream, 256);
        std::vector<BorrowedSlice<int>> borrowed;
        borrowed.emplace_back(device, memory.device_ptr(), 256, stream);
        const DeviceView<int> view = borrowed.front().view();
        for (int i = 0; i < 32; ++i) borrowed.emplace_back(device, memory.device_ptr(), 1);
        memset(stream, view, 0x01);
        CHECK(memory.to_vector(stream)[255] == 0x01010101);
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("core.a_view_that_outlives_its_owner_is_caught_by_debug_views" *
          doctest::skip(CUDARC_DEBUG_VIEWS == 0)) {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        std::optional<DeviceSlice<float>> slice = DeviceSlice<float>::zeros(stream, 64);
        const DeviceView<float> view = slice->view();
        slice.reset();
        const std::string message = error_from([&] { memset(stream, view, 0); });
        CHECK(contains(message, "after the slice it views was destroyed"));
        CHECK(contains(message, "CUDARC_DEBUG_VIEWS"));
        // A new slice in the same slot does not revive the old view.
        auto other = DeviceSlice<float>::zeros(stream, 64);
        CHECK(contains(error_from([&] { memset(stream, view, 0); }), "destroyed"));
        CHECK_NOTHROW(memset(stream, other.view(), 0));
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("core.wrap_refuses_the_legacy_and_per_thread_handles") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        const auto legacy = reinterpret_cast<NativeStream>(std::uintptr_t{1});
        const auto per_thread = reinterpret_cast<NativeStream>(std::uintptr_t{2});
        const std::string legacy_message = error_from([&] { auto s = Stream::wrap(device, legacy); });
        CHECK(contains(legacy_message, "CU_STREAM_LEGACY"));
        CHECK(contains(legacy_message, "legacy stream"));
        const std::string per_thread_message = error_from([&] { auto s = Stream::wrap(device, per_thread); });
        CHECK(contains(per_thread_message, "CU_STREAM_PER_THREAD"));
        CHECK(contains(per_thread_message, "different stream on each thread"));
        // Two threads wrapping one created stream share one queue: still accepted.
        auto created = device.create_stream();
        std::thread other([&] { auto s = Stream::wrap(device, created.native()); });
        other.join();
        CHECK_NOTHROW(static_cast<void>(Stream::wrap(device, created.native())));
    }
    CHECK(gpu.driver.violations().empty());
}

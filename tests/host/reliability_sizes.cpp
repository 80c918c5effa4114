// Issue 14, item 1: every size a public entry point computes is checked for overflow, with an error that
// names the request, and nothing is allocated or enqueued.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "reliability_support.hpp"
// Note: after the public headers (param_tensor.hpp names cudarc::detail as `detail` inside cudarc::optim).
#include "optim/group_layout.hpp"
#include "optim/kernel_abi.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::error_from;
using cudarc::test::FakeGpu;

namespace {

constexpr std::size_t kHuge = (std::size_t{1} << 62) + 2;  // 2^62 + 2 floats: 2^64 + 8 bytes, 8 once wrapped

void check_names(const std::string& what, const char* request, const char* count) {
    INFO(what);
    CHECK(contains(what, request));
    CHECK(contains(what, count));
    CHECK(contains(what, "overflow"));
}

}  // namespace

TEST_CASE("reliability.slice_sizes_that_overflow_are_rejected") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        const fake::LiveCounts before = gpu.driver.live();
        check_names(error_from([&] { (void)DeviceSlice<float>::uninitialized(stream, kHuge); }),
                    "DeviceSlice::uninitialized", "4611686018427387906");
        check_names(
            error_from([&] { (void)DeviceSlice<double>::uninitialized(stream, std::size_t{1} << 61); }),
            "DeviceSlice::uninitialized", "2305843009213693952");
        check_names(error_from([&] { (void)DeviceSlice<float>::zeros(stream, kHuge); }),
                    "DeviceSlice::uninitialized", "4611686018427387906");
        std::vector<float> host(4);
        check_names(error_from([&] {
                        (void)DeviceSlice<float>::from_host(stream,
                                                            std::span<const float>(host.data(), kHuge));
                    }),
                    "DeviceSlice::uninitialized", "4611686018427387906");
        check_names(error_from([&] { (void)DeviceSlice<float>::managed(stream, kHuge); }),
                    "DeviceSlice::managed", "4611686018427387906");
        CHECK(device.allocator_stats().live_allocations == 0);
        CHECK(gpu.driver.live() == before);
        CHECK(gpu.driver.queued_operations() == 0);
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.pinned_sizes_that_overflow_are_rejected") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        check_names(error_from([&] { PinnedBuffer<float> pinned(device, kHuge); }), "PinnedBuffer",
                    "4611686018427387906");
        check_names(error_from([&] { PinnedBuffer<double> pinned(device, std::size_t{1} << 61); }),
                    "PinnedBuffer", "2305843009213693952");
        CHECK(gpu.driver.live().host_allocations == 0);
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.copy_and_memset_sizes_that_overflow_are_rejected") {
    // A view's size comes from its slice, but DeviceView's constructor is public: a view forged with a size
    // whose bytes overflow must not turn into a short copy.
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        auto slice = DeviceSlice<float>::zeros(stream, 16);
        const DeviceView<float> forged = cudarc::detail::Internals::retype<float>(slice.view(), kHuge);
        std::vector<float> host(16, 1.0f);
        const std::uint64_t copies = gpu.faults.calls(fake::Entry::memcpy_htod_async) +
                                     gpu.faults.calls(fake::Entry::memcpy_dtoh_async) +
                                     gpu.faults.calls(fake::Entry::memcpy_dtod_async) +
                                     gpu.faults.calls(fake::Entry::memset_d8_async) +
                                     gpu.faults.calls(fake::Entry::memset_d32_async);
        check_names(error_from([&] { copy(stream, forged, std::span<const float>(host.data(), kHuge)); }),
                    "cudarc::copy (host to device)", "4611686018427387906");
        check_names(error_from([&] {
                        copy(stream, std::span<float>(host.data(), kHuge), DeviceView<const float>(forged));
                    }),
                    "cudarc::copy (device to host)", "4611686018427387906");
        check_names(error_from([&] { copy(stream, forged, DeviceView<const float>(forged)); }),
                    "cudarc::copy (device to device)", "4611686018427387906");
        check_names(error_from([&] { memset(stream, forged, 0); }), "cudarc::memset", "4611686018427387906");
        check_names(error_from([&] { prefetch(stream, forged); }), "cudarc::prefetch", "4611686018427387906");
        check_names(error_from([&] { (void)as_bytes(forged); }), "cudarc::as_bytes", "4611686018427387906");
        check_names(error_from([&] { (void)as_writable_bytes(forged); }), "cudarc::as_writable_bytes",
                    "4611686018427387906");
        PinnedBuffer<float> pinned(device, 16);
        const DeviceView<float> forged_small = cudarc::detail::Internals::retype<float>(slice.view(), 16);
        CHECK_NOTHROW(pinned.copy_from_device_async(stream, forged_small));
        CHECK(gpu.faults.calls(fake::Entry::memcpy_htod_async) +
                  gpu.faults.calls(fake::Entry::memcpy_dtoh_async) +
                  gpu.faults.calls(fake::Entry::memcpy_dtod_async) +
                  gpu.faults.calls(fake::Entry::memset_d8_async) +
                  gpu.faults.calls(fake::Entry::memset_d32_async) ==
              copies + 1);  // only the pinned copy reached the driver
        CHECK(slice.to_vector(stream) == std::vector<float>(16, 0.0f));
        CHECK(gpu.driver.violations().empty());
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("reliability.for_elements_near_size_max") {
    // A grid-stride launch over any n is valid: n near SIZE_MAX gets the resident grid, not one block.
    const DeviceShape shape{132, 2048};
    constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
    CHECK(LaunchConfig::for_elements(max, shape, 256).grid.x == 132 * 8);
    CHECK(LaunchConfig::for_elements(max - 100, shape, 1024).grid.x == 132 * 2);
    CHECK(LaunchConfig::for_elements(max, shape, 256, 3).grid.x == 132 * 3);
    CHECK(LaunchConfig::for_elements(1000, shape, 256).grid.x == 4);
    CHECK(LaunchConfig::for_elements(0, shape, 256).grid.x == 1);
}

TEST_CASE("reliability.optimizer_tables_that_overflow_are_rejected") {
    namespace optim = cudarc::optim;
    const std::vector<optim::ElementType> one_type{optim::ElementType::fp32};
    // 2^62 fp32 state elements: 2^64 bytes per state array.
    const std::vector<std::int64_t> huge{std::int64_t{1} << 62};
    std::string what = error_from(
        [&] { (void)optim::detail::plan_group(optim::StatePrecision::fp32, 2, one_type, huge, 16384); });
    INFO(what);
    CHECK(contains(what, "tensor 0"));
    CHECK(contains(what, "4611686018427387904"));
    CHECK(contains(what, "overflow"));
    // More chunks than a launch can index (the kernels take an int count), found before any is made.
    const std::vector<std::int64_t> many{std::numeric_limits<std::int64_t>::max()};
    what = error_from([&] { (void)optim::abi::make_chunks(many, optim::StatePrecision::fp32, 16384); });
    CHECK(contains(what, "chunks"));
    CHECK(contains(what, "9223372036854775807"));
    const std::vector<std::int64_t> tensors(3, std::int64_t{1} << 44);  // 2^30 chunks of 16K each, x 3
    what = error_from([&] { (void)optim::abi::make_chunks(tensors, optim::StatePrecision::fp32, 16384); });
    CHECK(contains(what, "chunks"));
}

TEST_CASE("reliability.optimizer_groups_that_overflow_are_rejected_before_allocating") {
    // The same checks through Optimizer::add_group, which sizes a group's state and chunk tables with
    // plan_group before it compiles or allocates anything. The tensors are forged views of 16 floats.
    namespace optim = cudarc::optim;
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        auto param = DeviceSlice<float>::zeros(stream, 16);
        auto grad = DeviceSlice<float>::zeros(stream, 16);
        const auto tensor = [&](std::size_t numel) {
            return optim::ParamTensor(cudarc::detail::Internals::retype<float>(param.view(), numel),
                                      cudarc::detail::Internals::retype<const float>(grad.view(), numel));
        };
        optim::Optimizer optimizer(stream, optim::OptimizerOptions{});  // AdamW: two fp32 state arrays
        const optim::GroupOptions options = optim::default_options(optim::UpdateRule::adamw);
        const fake::LiveCounts before = gpu.driver.live();
        const std::size_t queued = gpu.driver.queued_operations();
        // 2^61 floats fit in a view (2^63 bytes), but two state arrays of 2^63 bytes do not fit in one arena.
        const std::vector<optim::ParamTensor> huge{tensor(std::size_t{1} << 61)};
        std::string what = error_from([&] { (void)optimizer.add_group(stream, options, huge); });
        INFO(what);
        CHECK(contains(what, "tensor 0"));
        CHECK(contains(what, "2305843009213693952"));
        CHECK(contains(what, "overflow"));
        // Three tensors of 2^44 elements: 3 * 2^30 chunks of 16K, more than a launch can index.
        const std::vector<optim::ParamTensor> many(3, tensor(std::size_t{1} << 44));
        what = error_from([&] { (void)optimizer.add_group(stream, options, many); });
        CHECK(contains(what, "chunks"));
        CHECK(contains(what, "17592186044416"));
        CHECK(gpu.driver.live() == before);
        CHECK(gpu.driver.queued_operations() == queued);
        CHECK(device.allocator_stats().live_allocations == 2);
    }
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

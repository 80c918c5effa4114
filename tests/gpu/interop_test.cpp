// Borrowed memory, foreign streams that die, and DLPack on a real GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "core/device_state.hpp"
#include "launch_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

DevicePtr raw_alloc(const Device& device, std::size_t bytes) {
    auto& state = *cudarc::detail::Internals::device_state(device);
    const auto scope = state.bind();
    DevicePtr ptr = 0;
    state.check(state.api().mem_alloc(&ptr, bytes), sys::Entry::mem_alloc);
    return ptr;
}

// Counts the calls of a DLPack deleter it wraps (the original still runs).
template <typename Managed>
struct DeleterSpy {
    static inline int calls = 0;
    static inline void (*original)(Managed*) = nullptr;
    static void install(Managed* tensor) {
        calls = 0;
        original = tensor->deleter;
        tensor->deleter = [](Managed* self) {
            ++calls;
            original(self);
        };
    }
};

}  // namespace

TEST_CASE("interop.borrowed_slice_over_raw_cuMemAlloc") {
    auto device = Device::open(0);
    auto& state = *cudarc::detail::Internals::device_state(device);
    const BenchSpin spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    const BenchSaxpy saxpy = bench_module(device).kernel<BenchSaxpy::signature>("bench_saxpy");
    constexpr std::size_t n = (std::size_t{1} << 20) + 5;
    const DevicePtr raw = raw_alloc(device, n * sizeof(float));
    auto owner = device.create_stream();  // stands for the owning library's stream
    auto worker = device.create_stream();
    const auto x_host = random_floats(n);
    const auto y_host = random_floats(n);
    const float a = random_floats(1, -2.0f, 2.0f)[0];

    // The owner writes the memory behind a spin, with a raw copy cudarc does not see.
    launch(owner, LaunchConfig{1, 1}, spin, spin_cycles(device, 100.0), nullptr);
    {
        const auto scope = state.bind();
        state.check(state.api().memcpy_htod_async(raw, x_host.data(), n * sizeof(float), owner.native()),
                    sys::Entry::memcpy_htod_async);
    }
    const auto allocator_before = device.allocator_stats();
    const auto before = device.counters();
    {
        BorrowedSlice<const float> x(device, raw, n, owner);
        CHECK(x.size() == n);
        CHECK(x.device_ptr() == raw);
        auto y = DeviceSlice<float>::from_host(worker, y_host);
        // cudarc's first use on another stream waits for the owner's work so far.
        launch(worker, LaunchConfig::for_elements(n, device), saxpy, y, x, a,
               static_cast<unsigned long long>(n));
        auto x_copy = DeviceSlice<float>::zeros(worker, n);
        copy(worker, x_copy.view(), x.view());
        CHECK(bitwise_equal(x_copy.to_vector(worker), x_host));
        std::vector<double> want(n);
        for (std::size_t i = 0; i < n; ++i) want[i] = double{a} * double{x_host[i]} + double{y_host[i]};
        auto tolerance = [&](std::size_t i) {
            return fp32_tolerance(std::abs(double{a} * double{x_host[i]}) + std::abs(double{y_host[i]}));
        };
        CHECK(count_mismatches(y.to_vector(worker), want, tolerance, "saxpy on borrowed memory") == 0);
        // A sub-view launch as well: the borrowed slice works like any other.
        launch(worker, LaunchConfig::for_elements(16, device), saxpy, y.view(0, 16), x.view(16, 16), 0.0f,
               16ull);
    }  // destroyed: frees nothing; the owner's stream waits for the worker's last use
    const auto delta = device.counters() - before;
    CHECK(delta.host_synchronizations() == 0);
    CHECK(device.allocator_stats().allocated_bytes == allocator_before.allocated_bytes);
    std::vector<float> back(n, poison_float());
    {
        const auto scope = state.bind();
        state.check(state.api().memcpy_dtoh_async(back.data(), raw, n * sizeof(float), owner.native()),
                    sys::Entry::memcpy_dtoh_async);
    }
    owner.synchronize();
    CHECK(bitwise_equal(back, x_host));  // still there: nothing was freed
    CHECK(state.api().mem_free(raw) == sys::kSuccess);

    // Rejected: host memory, a range past the allocation, a null pointer, a stream of another device.
    std::vector<float> host(16);
    CHECK_THROWS_WITH_AS(BorrowedSlice<float>(device, host.data(), host.size()),
                         doctest::Contains("is not device memory"), Error);
    const DevicePtr small = raw_alloc(device, 1024);
    CHECK_THROWS_WITH_AS(BorrowedSlice<float>(device, small, 257), doctest::Contains("run past the end"),
                         Error);
    CHECK_NOTHROW(BorrowedSlice<float>(device, small, 256));
    CHECK_THROWS_WITH_AS(BorrowedSlice<float>(device, DevicePtr{0}, 4),
                         doctest::Contains("null device pointer"), Error);
    CHECK(state.api().mem_free(small) == sys::kSuccess);
}

// A borrow's one driver call (src/core/borrowed.cpp) takes its bounds from cuPointerGetAttributes' range
// attributes instead of cuMemGetAddressRange: on this driver the two must agree for every kind of memory
// a framework hands over, at the start of an allocation and inside it.
TEST_CASE("interop.borrow_bounds_from_pointer_attributes_match_the_address_range") {
    auto device = Device::open(0);
    auto& state = *cudarc::detail::Internals::device_state(device);
    const sys::DriverApi& api = state.api();
    if (api.pointer_get_attributes == nullptr || api.mem_get_address_range == nullptr) {
        MESSAGE("this driver lacks cuPointerGetAttributes or cuMemGetAddressRange: nothing to compare");
        return;
    }
    const auto scope = state.bind();
    constexpr std::size_t kBytes = (std::size_t{1} << 20) + 20;
    std::vector<std::pair<const char*, DevicePtr>> allocations;
    allocations.emplace_back("cuMemAlloc", raw_alloc(device, kBytes));
    if (api.mem_alloc_managed != nullptr) {
        DevicePtr managed = 0;
        state.check(api.mem_alloc_managed(&managed, kBytes, sys::kMemAttachGlobal),
                    sys::Entry::mem_alloc_managed);
        allocations.emplace_back("cuMemAllocManaged", managed);
    }
    auto stream = device.create_stream();
    auto pooled = DeviceSlice<std::uint8_t>::zeros(stream, kBytes);  // a block of cudarc's own allocator
    allocations.emplace_back("a DeviceSlice", pooled.view().device_ptr());
    for (const auto& allocation : allocations) {
        // Note: named copies, not a structured binding, which doctest's CAPTURE cannot capture in clang.
        const char* const what = allocation.first;
        const DevicePtr start = allocation.second;
        for (const std::size_t offset : {std::size_t{0}, std::size_t{4096} + 4, kBytes - 4}) {
            CAPTURE(what);
            CAPTURE(offset);
            const DevicePtr ptr = start + offset;
            DevicePtr base = 0;
            std::size_t size = 0;
            int attributes[] = {sys::kPointerAttributeRangeStart, sys::kPointerAttributeRangeSize};
            void* data[] = {&base, &size};
            REQUIRE(api.pointer_get_attributes(2, attributes, data, ptr) == sys::kSuccess);
            DevicePtr want_base = 0;
            std::size_t want_size = 0;
            REQUIRE(api.mem_get_address_range(&want_base, &want_size, ptr) == sys::kSuccess);
            CHECK(base == want_base);
            CHECK(size == want_size);
            CHECK(size != 0);
        }
    }
    // And a borrow's bounds check sees the same allocation: the last 4 bytes fit, 8 do not.
    const DevicePtr raw = allocations.front().second;
    CHECK_NOTHROW(BorrowedSlice<float>(device, raw + kBytes - 4, 1));
    CHECK_THROWS_WITH_AS(BorrowedSlice<float>(device, raw + kBytes - 4, 2),
                         doctest::Contains("run past the end"), Error);
    stream.synchronize();
    for (const auto& allocation : allocations) {
        if (allocation.second != pooled.view().device_ptr())
            CHECK(api.mem_free(allocation.second) == sys::kSuccess);
    }
}

TEST_CASE("interop.foreign_stream_destroyed_after_its_wrapper") {
    // A slice is allocated and written on a wrapped stream, the wrapper is dropped, and then the owner
    // destroys its stream. Reading and freeing the slice afterwards must neither crash nor misorder.
    auto device = Device::open(0);
    auto& state = *cudarc::detail::Internals::device_state(device);
    const BenchSpin spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    const BenchFill fill = bench_module(device).kernel<BenchFill::signature>("bench_fill");
    constexpr std::size_t n = (std::size_t{1} << 20) + 1;
    const float value = random_floats(1, 1.0f, 2.0f)[0];
    const auto scope = state.bind();  // the raw calls below run in the device's context
    sys::Stream raw = nullptr;
    state.check(state.api().stream_create_with_priority(&raw, sys::kStreamNonBlocking, 0),
                sys::Entry::stream_create_with_priority);
    std::optional<DeviceSlice<float>> slice;
    std::optional<DeviceSlice<float>> second;
    {
        auto wrapped = Stream::wrap(device, raw);
        slice = DeviceSlice<float>::from_host(wrapped, poisoned(n));
        second = DeviceSlice<float>::zeros(wrapped, 64);
        launch(wrapped, LaunchConfig{1, 1}, spin, spin_cycles(device, 100.0), nullptr);
        launch(wrapped, LaunchConfig::for_elements(n, device), fill, *slice, value,
               static_cast<unsigned long long>(n));
    }                                                         // the wrapper records its final event here
    CHECK(state.api().stream_destroy(raw) == sys::kSuccess);  // the owner destroys its stream
    auto reader = device.create_stream();
    const auto got = slice->to_vector(reader);  // orders after the final event, through the default stream
    CHECK(std::all_of(got.begin(), got.end(), [&](float x) { return x == value; }));
    slice.reset();   // freed: its uses on the retired stream are covered by the final event
    second.reset();  // never used elsewhere: its block now belongs to the default stream
    // The memory is reused safely, and nothing names the destroyed handle.
    auto again = DeviceSlice<float>::from_host(reader, random_floats(n));
    CHECK(again.size() == n);
    device.synchronize();
    CHECK_NOTHROW(device.rethrow_deferred_error());
}

TEST_CASE("interop.dlpack_round_trip_across_two_streams") {
    auto device = Device::open(0);
    const BenchSpin spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    const BenchCopy copy_kernel = bench_module(device).kernel<BenchCopy::signature>("bench_copy");
    constexpr std::size_t n = (std::size_t{1} << 18) + 7;
    const auto data = random_floats(n);
    auto producer = device.create_stream();
    auto consumer = device.create_stream();
    auto user = device.create_stream();

    // Versioned: the producer fills a slice behind a spin and hands it to a consumer on another stream.
    auto slice = DeviceSlice<float>::from_host(producer, poisoned(n));
    launch(producer, LaunchConfig{1, 1}, spin, spin_cycles(device, 100.0), nullptr);
    slice.copy_from_host(producer, data);
    const auto allocated = device.allocator_stats().allocated_bytes;
    auto* managed = to_dlpack(std::move(slice), consumer);  // the consumer waits for the producer's work
    CHECK(slice.empty());
    REQUIRE(managed != nullptr);
    CHECK(managed->version.major == 1);
    CHECK(managed->dl_tensor.device.device_type == dlpack::kDLCUDA);
    CHECK(managed->dl_tensor.ndim == 1);
    CHECK(managed->dl_tensor.shape[0] == static_cast<std::int64_t>(n));
    DeleterSpy<dlpack::DLManagedTensorVersioned>::install(managed);
    {
        // The consumer imports it back, names its stream; a third stream reads it, held back.
        BorrowedSlice<float> borrowed = from_dlpack<float>(device, managed, consumer);
        CHECK(borrowed.size() == n);
        auto out = DeviceSlice<float>::from_host(user, poisoned(n));
        const auto allocated_with_out = device.allocator_stats().allocated_bytes;
        CHECK(allocated_with_out > allocated);
        launch(user, LaunchConfig{1, 1}, spin, spin_cycles(device, 100.0), nullptr);
        launch(user, LaunchConfig::for_elements(n, device), copy_kernel, out, borrowed,
               static_cast<unsigned long long>(n));
        CHECK(bitwise_equal(out.to_vector(user), data));
        launch(user, LaunchConfig{1, 1}, spin, spin_cycles(device, 100.0), nullptr);
        launch(user, LaunchConfig::for_elements(n, device), copy_kernel, out, borrowed,
               static_cast<unsigned long long>(n));
        const auto before = device.counters();
        // Destroyed while the second read is pending: the deleter must wait for it, without a host block.
        borrowed = BorrowedSlice<float>();
        CHECK((device.counters() - before).host_synchronizations() == 0);
        CHECK(DeleterSpy<dlpack::DLManagedTensorVersioned>::calls == 0);
        CHECK(device.allocator_stats().allocated_bytes == allocated_with_out);  // the import: not freed yet
    }
    user.synchronize();
    consumer.synchronize();  // both uses have completed; synchronize polls the release queue
    CHECK(DeleterSpy<dlpack::DLManagedTensorVersioned>::calls == 1);
    device.synchronize();
    CHECK(DeleterSpy<dlpack::DLManagedTensorVersioned>::calls == 1);  // exactly once
    CHECK(device.allocator_stats().allocated_bytes < allocated);      // the deleter freed the memory

    // Legacy struct, imported as const; a rejected import runs the deleter once and frees the memory.
    auto second = DeviceSlice<float>::from_host(producer, data);
    auto* legacy = to_dlpack_legacy(std::move(second), consumer);
    DeleterSpy<dlpack::DLManagedTensor>::install(legacy);
    {
        auto view = from_dlpack<const float>(device, legacy, consumer);
        CHECK(bitwise_equal(
            [&] {
                auto out = DeviceSlice<float>::zeros(user, n);
                copy(user, out.view(), view.view());
                return out.to_vector(user);
            }(),
            data));
    }
    device.synchronize();
    CHECK(DeleterSpy<dlpack::DLManagedTensor>::calls == 1);
    auto third = DeviceSlice<float>::from_host(producer, data);
    auto* rejected = to_dlpack_legacy(std::move(third), consumer);
    DeleterSpy<dlpack::DLManagedTensor>::install(rejected);
    CHECK_THROWS_WITH_AS((void)from_dlpack<double>(device, rejected, consumer),
                         doctest::Contains("dtype is float32, the element type is float64"), Error);
    CHECK(DeleterSpy<dlpack::DLManagedTensor>::calls == 1);
    device.synchronize();
    CHECK(device.allocator_stats().allocated_bytes < allocated);
}

TEST_CASE("interop.optimizer_steps_borrowed_memory_like_its_own") {
    // AdamW on parameters in raw cuMemAlloc memory (borrowed, owner stream given) and on the same values in
    // DeviceSlices: bitwise equal results, no host synchronization, and the borrowed memory is not freed.
    auto device = Device::open(0);
    auto& state = *cudarc::detail::Internals::device_state(device);
    auto owner = device.create_stream();
    auto stream = device.create_stream();
    constexpr std::size_t n = 100003;
    const auto p_host = random_floats(n);
    const auto g_host = random_floats(n);
    const DevicePtr raw_p = raw_alloc(device, n * sizeof(float));
    const DevicePtr raw_g = raw_alloc(device, n * sizeof(float));
    const auto scope = state.bind();  // the raw calls below run in the device's context
    state.check(state.api().memcpy_htod_async(raw_p, p_host.data(), n * sizeof(float), owner.native()),
                sys::Entry::memcpy_htod_async);
    state.check(state.api().memcpy_htod_async(raw_g, g_host.data(), n * sizeof(float), owner.native()),
                sys::Entry::memcpy_htod_async);
    auto own_p = DeviceSlice<float>::from_host(stream, p_host);
    const auto own_g = DeviceSlice<float>::from_host(stream, g_host);

    optim::GroupOptions options = optim::default_options(optim::UpdateRule::adamw);
    options.lr = 1e-2;
    optim::Optimizer borrowed_opt(stream, {.rule = optim::UpdateRule::adamw});
    optim::Optimizer own_opt(stream, {.rule = optim::UpdateRule::adamw});
    std::vector<float> borrowed_result;
    {
        BorrowedSlice<float> p(device, raw_p, n, owner);
        BorrowedSlice<const float> g(device, raw_g, n, owner);
        const std::vector<optim::ParamTensor> borrowed_tensors = {{p.view(), g.view()}};
        const std::vector<optim::ParamTensor> own_tensors = {{own_p, own_g}};
        const auto bg = borrowed_opt.add_group(stream, options, borrowed_tensors);
        const auto og = own_opt.add_group(stream, options, own_tensors);
        const auto before = device.counters();
        for (int step = 0; step < 3; ++step) {
            borrowed_opt.step(stream, bg, borrowed_tensors);  // the first waits for the owner's uploads
            own_opt.step(stream, og, own_tensors);
        }
        CHECK((device.counters() - before).host_synchronizations() == 0);
        auto out = DeviceSlice<float>::zeros(stream, n);
        copy(stream, out.view(), std::as_const(p).view());
        borrowed_result = out.to_vector(stream);
    }
    const auto own_result = own_p.to_vector(stream);
    CHECK(bitwise_equal(borrowed_result, own_result));
    CHECK_FALSE(bitwise_equal(own_result, p_host));  // the steps changed something
    owner.synchronize();
    CHECK(state.api().mem_free(raw_p) == sys::kSuccess);  // still allocated: the slice freed nothing
    CHECK(state.api().mem_free(raw_g) == sys::kSuccess);
}

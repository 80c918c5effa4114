// Fuzz target: from_dlpack (Note [Fuzzing] in docs/reliability.md). Random DLManagedTensorVersioned or legacy
// DLManagedTensor fields over memory of "another library" on the fake driver: the data pointer inside that
// memory, null or anywhere; any version, flags, device, dtype, shape, strides and byte offset. As
// documented, the deleter runs exactly once: before the throw when the tensor is rejected; otherwise not
// while the slice lives, and once its uses have completed after it is gone. An accepted tensor's elements
// lie inside the memory, and reading them reads exactly those bytes.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/device_state.hpp"
#include "cudarc/cudarc.hpp"
#include "cudarc/dlpack.hpp"
#include "fake_device.hpp"

namespace {

using namespace cudarc;

constexpr std::size_t kMemoryBytes = 4096;

// Device memory cudarc did not allocate, as a framework's would be.
DevicePtr foreign_memory() {
    static const DevicePtr memory = [] {
        auto& gpu = fuzz::fake_device();
        const auto scope = detail::Internals::device_state(gpu.device)->bind();
        DevicePtr ptr = 0;
        if (gpu.driver.api().mem_alloc(&ptr, kMemoryBytes) != sys::kSuccess) std::abort();
        auto bytes = gpu.driver.bytes(ptr, kMemoryBytes);
        for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7 + 1);
        return ptr;
    }();
    return memory;
}

struct Deleter {
    int calls = 0;
};

template <typename Managed>
void count_deleter_call(Managed* self) {
    ++static_cast<Deleter*>(self->manager_ctx)->calls;
}

// Imports `tensor` as T and checks what the documentation promises.
template <typename T, typename Managed>
void import(Managed* tensor, Deleter& deleter, bool has_deleter) {
    auto& gpu = fuzz::fake_device();
    Stream& stream = gpu.device.default_stream();
    const dlpack::DLTensor t = tensor->dl_tensor;
    const DevicePtr base = foreign_memory();
    try {
        BorrowedSlice<T> slice = from_dlpack<T>(gpu.device, tensor, stream);
        if (deleter.calls != 0) std::abort();  // the slice owns the tensor
        std::size_t count = 1;
        for (std::int32_t i = 0; i < t.ndim; ++i) count *= static_cast<std::size_t>(t.shape[i]);
        if (slice.size() != count) std::abort();
        if (count > 0) {
            const DevicePtr first = reinterpret_cast<std::uintptr_t>(t.data) + t.byte_offset;
            if (slice.view().device_ptr() != first) std::abort();
            // Checked with the driver: the elements lie inside the memory.
            if (first < base || first - base > kMemoryBytes ||
                count * sizeof(T) > kMemoryBytes - (first - base))
                std::abort();
            std::vector<std::remove_const_t<T>> host(count);
            copy(stream, std::span(host), slice.view());
            if (std::memcmp(host.data(), gpu.driver.bytes(first, count * sizeof(T)).data(),
                            count * sizeof(T)) != 0)
                std::abort();
        }
    } catch (const DeviceLost&) {
        std::abort();
    } catch (const Error&) {
        // Rejected: the deleter ran before the throw.
        if (deleter.calls != (has_deleter ? 1 : 0)) std::abort();
        return;
    }
    if (deleter.calls > 1) std::abort();
    gpu.device.synchronize();
    static_cast<void>(DeviceSlice<float>::uninitialized(stream, 1));  // gives deferred releases their turn
    if (deleter.calls != (has_deleter ? 1 : 0)) std::abort();
}

template <typename T, typename Managed>
void import_as(int element, Managed* tensor, Deleter& deleter, bool has_deleter) {
    switch (element) {
        case 0:
            return import <float>(tensor, deleter, has_deleter);
        case 1:
            return import <const float>(tensor, deleter, has_deleter);
        case 2:
            return import <std::int8_t>(tensor, deleter, has_deleter);
        case 3:
            return import <double>(tensor, deleter, has_deleter);
        default:
            return import <std::uint16_t>(tensor, deleter, has_deleter);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    const bool versioned = in.ConsumeBool();
    const bool has_deleter = in.ConsumeIntegralInRange(0, 7) != 0;
    const int element = in.ConsumeIntegralInRange(0, 4);

    dlpack::DLTensor t{};
    switch (in.ConsumeIntegralInRange(0, 3)) {
        case 0:
        case 1:
            t.data = reinterpret_cast<void*>(foreign_memory() +
                                             in.ConsumeIntegralInRange<std::size_t>(0, kMemoryBytes + 64));
            break;
        case 2:
            t.data = nullptr;
            break;
        default:
            t.data = reinterpret_cast<void*>(in.ConsumeIntegral<std::uintptr_t>());
            break;
    }
    t.device.device_type = in.ConsumeBool()
                               ? dlpack::kDLCUDA
                               : static_cast<dlpack::DLDeviceType>(in.ConsumeIntegralInRange(0, 16));
    t.device.device_id = in.ConsumeIntegralInRange(-1, 1);
    const std::uint8_t codes[] = {dlpack::kDLFloat, dlpack::kDLInt, dlpack::kDLUInt, dlpack::kDLBfloat};
    t.dtype.code =
        in.ConsumeBool() ? codes[in.ConsumeIntegralInRange(0, 3)] : in.ConsumeIntegral<std::uint8_t>();
    const std::uint8_t bits[] = {8, 16, 32, 64};
    t.dtype.bits =
        in.ConsumeBool() ? bits[in.ConsumeIntegralInRange(0, 3)] : in.ConsumeIntegral<std::uint8_t>();
    t.dtype.lanes = in.ConsumeIntegralInRange<std::uint16_t>(0, 2);
    t.ndim = in.ConsumeIntegralInRange(-1, 6);
    const std::size_t dims = t.ndim > 0 ? static_cast<std::size_t>(t.ndim) : 0;
    std::vector<std::int64_t> shape(dims);
    std::vector<std::int64_t> strides(dims);
    for (auto& extent : shape) {
        extent = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::int64_t>(0, 8)
                                  : in.ConsumeIntegral<std::int64_t>();
    }
    for (auto& stride : strides) {
        stride = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::int64_t>(-1, 64)
                                  : in.ConsumeIntegral<std::int64_t>();
    }
    t.shape = in.ConsumeIntegralInRange(0, 7) != 0 ? shape.data() : nullptr;
    t.strides = in.ConsumeBool() ? strides.data() : nullptr;
    t.byte_offset = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::uint64_t>(0, 128)
                                     : in.ConsumeIntegral<std::uint64_t>();

    Deleter deleter;
    if (versioned) {
        dlpack::DLManagedTensorVersioned tensor{};
        tensor.version.major = in.ConsumeBool() ? dlpack::kMajorVersion : in.ConsumeIntegral<std::uint32_t>();
        tensor.version.minor = in.ConsumeIntegral<std::uint32_t>();
        tensor.flags = in.ConsumeIntegralInRange<std::uint64_t>(0, 7);
        tensor.manager_ctx = &deleter;
        tensor.deleter = has_deleter ? &count_deleter_call<dlpack::DLManagedTensorVersioned> : nullptr;
        tensor.dl_tensor = t;
        import_as<void>(element, &tensor, deleter, has_deleter);
    } else {
        dlpack::DLManagedTensor tensor{};
        tensor.manager_ctx = &deleter;
        tensor.deleter = has_deleter ? &count_deleter_call<dlpack::DLManagedTensor> : nullptr;
        tensor.dl_tensor = t;
        import_as<void>(element, &tensor, deleter, has_deleter);
    }
    return 0;
}

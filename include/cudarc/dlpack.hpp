/// @file
/// DLPack interop: cudarc::from_dlpack borrows another framework's device array; cudarc::to_dlpack hands a
/// DeviceSlice to one. The ABI structs are in cudarc/detail/dlpack_abi.hpp (namespace cudarc::dlpack).
///
/// Streams follow DLPack's exchange convention: the consumer names its stream, and the producer makes
/// that stream wait for its pending work (an event, never a host block).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "cudarc/borrowed.hpp"
#include "cudarc/detail/dlpack_abi.hpp"
#include "cudarc/export.hpp"
#include "cudarc/slice.hpp"

namespace cudarc {

namespace optim {
struct half_bits;
struct bf16_bits;
}  // namespace optim

/// Whether `T` has a DLPack data type (dlpack_dtype): true for float, double, optim::half_bits,
/// optim::bf16_bits, the 8, 16, 32 and 64-bit integers and bool. Specialize it, with dlpack_dtype, for your
/// own element types.
template <typename T>
inline constexpr bool has_dlpack_dtype = false;
/// The DLPack data type of an element type (one lane), where has_dlpack_dtype<T> is true.
template <typename T>
inline constexpr dlpack::DLDataType dlpack_dtype{};

/// @cond INTERNAL
#define CUDARC_DLPACK_DTYPE(type, code, bits)                \
    template <>                                              \
    inline constexpr bool has_dlpack_dtype<type> = true;     \
    template <>                                              \
    inline constexpr dlpack::DLDataType dlpack_dtype<type> { \
        code, bits, 1                                        \
    }
CUDARC_DLPACK_DTYPE(float, dlpack::kDLFloat, 32);
CUDARC_DLPACK_DTYPE(double, dlpack::kDLFloat, 64);
CUDARC_DLPACK_DTYPE(optim::half_bits, dlpack::kDLFloat, 16);
CUDARC_DLPACK_DTYPE(optim::bf16_bits, dlpack::kDLBfloat, 16);
CUDARC_DLPACK_DTYPE(std::int8_t, dlpack::kDLInt, 8);
CUDARC_DLPACK_DTYPE(std::int16_t, dlpack::kDLInt, 16);
CUDARC_DLPACK_DTYPE(std::int32_t, dlpack::kDLInt, 32);
CUDARC_DLPACK_DTYPE(std::int64_t, dlpack::kDLInt, 64);
CUDARC_DLPACK_DTYPE(std::uint8_t, dlpack::kDLUInt, 8);
CUDARC_DLPACK_DTYPE(std::uint16_t, dlpack::kDLUInt, 16);
CUDARC_DLPACK_DTYPE(std::uint32_t, dlpack::kDLUInt, 32);
CUDARC_DLPACK_DTYPE(std::uint64_t, dlpack::kDLUInt, 64);
CUDARC_DLPACK_DTYPE(bool, dlpack::kDLBool, 8);
#undef CUDARC_DLPACK_DTYPE
/// @endcond

namespace detail {

/// What an import checks a tensor's elements against.
struct DlpackElement {
    dlpack::DLDataType dtype{};
    std::size_t size = 0;
    std::size_t alignment = 1;
    bool read_only = false;  ///< imported as const T: a read-only tensor is fine
};

/// Either kind of managed tensor, seen through cudarc's declarations.
struct DlpackSource {
    dlpack::DLManagedTensorVersioned* versioned = nullptr;
    dlpack::DLManagedTensor* legacy = nullptr;
    // Runs the tensor's deleter through the declaration the caller used (as_source); null: cudarc's own.
    void (*run_deleter)(void* tensor) noexcept = nullptr;
};

/// A checked tensor: its first element's address and its element count.
struct DlpackPlan {
    DevicePtr ptr = 0;
    std::size_t count = 0;
};

/// Checks `source` for elements `element` on device `ordinal` without touching a driver (host tests call it
/// directly). On a problem it runs the tensor's deleter (the import took ownership) and throws
/// cudarc::Error naming the problem.
[[nodiscard]] CUDARC_API DlpackPlan check_dlpack(DlpackSource source, int ordinal,
                                                 const DlpackElement& element);
/// check_dlpack, then borrow_memory; the deleter runs exactly once: on rejection before the throw, else once
/// cudarc's uses of the memory have completed (Note [Deferred release]).
[[nodiscard]] CUDARC_API std::pair<BufferHandle, std::size_t> import_dlpack(const Device& device,
                                                                            DlpackSource source,
                                                                            const DlpackElement& element,
                                                                            const Stream* stream);
/// Moves `buffer` (owned, of `count` elements of `dtype`) into a managed tensor whose deleter frees it, after
/// making `stream` wait for cudarc's pending work on it. On a throw `buffer` is as it was.
[[nodiscard]] CUDARC_API void* export_dlpack(BufferHandle& buffer, std::size_t count,
                                             dlpack::DLDataType dtype, Stream& stream, bool versioned);

/// A managed tensor type laid out as DLManagedTensorVersioned / DLManagedTensor (cudarc's, or a
/// framework's own declaration of the same ABI).
template <typename M>
concept dlpack_versioned = requires(M m) {
    m.version.major;
    m.flags;
    m.dl_tensor.data;
    m.manager_ctx;
    m.deleter;
};
template <typename M>
concept dlpack_legacy = !dlpack_versioned<M> && requires(M m) {
    m.dl_tensor.data;
    m.manager_ctx;
    m.deleter;
};

// Calls M's deleter as M declares it: a framework's deleter called through cudarc's function pointer type
// (another type, however alike) would be undefined behaviour, which UBSan's -fsanitize=function reports.
template <typename M>
void run_deleter_of(void* tensor) noexcept {
    auto* managed = static_cast<M*>(tensor);
    if (managed->deleter != nullptr) managed->deleter(managed);
}

template <typename M>
DlpackSource as_source(M* tensor) noexcept {
    if constexpr (dlpack_versioned<M>) {
        static_assert(std::is_standard_layout_v<M> && sizeof(M) == sizeof(dlpack::DLManagedTensorVersioned),
                      "cudarc::from_dlpack: this DLManagedTensorVersioned does not have DLPack 1.x's layout");
        return DlpackSource{reinterpret_cast<dlpack::DLManagedTensorVersioned*>(tensor), nullptr,
                            &run_deleter_of<M>};
    } else {
        static_assert(std::is_standard_layout_v<M> && sizeof(M) == sizeof(dlpack::DLManagedTensor),
                      "cudarc::from_dlpack: this DLManagedTensor does not have DLPack's layout");
        return DlpackSource{nullptr, reinterpret_cast<dlpack::DLManagedTensor*>(tensor), &run_deleter_of<M>};
    }
}

template <typename T>
constexpr DlpackElement dlpack_element() noexcept {
    using V = std::remove_const_t<T>;
    static_assert(has_dlpack_dtype<V>,
                  "cudarc DLPack: no DLPack data type is known for this element type; specialize "
                  "cudarc::has_dlpack_dtype and cudarc::dlpack_dtype for it");
    return DlpackElement{dlpack_dtype<V>, sizeof(V), alignof(V), std::is_const_v<T>};
}

}  // namespace detail

/// Borrows the device array of a DLPack managed tensor (DLManagedTensorVersioned* of DLPack 1.x, or the
/// legacy DLManagedTensor*, for example from at::toDLPack). The result owns the tensor: its deleter runs
/// exactly once, after cudarc's uses of the memory have completed on the device, without blocking the host
/// (also when the tensor is rejected: then before the throw).
///
/// Accepted: device type kDLCUDA or kDLCUDAManaged of `device`, T's data type with one lane, compact
/// row-major strides (or none), any byte_offset. A read-only tensor (DLPack 1.x flag) must be imported as
/// const T. Every other input throws cudarc::Error naming the problem.
///
/// `stream` is the stream the producer made ready for the data (DLPack's convention: the consumer names
/// its stream, the producer makes it wait for its work). cudarc's first use on another stream waits for
/// it, and releasing the slice makes it wait for cudarc's last uses. The stream must outlive the slice.
template <typename T, typename Managed>
requires(detail::dlpack_versioned<Managed> || detail::dlpack_legacy<Managed>)
    [[nodiscard]] BorrowedSlice<T> from_dlpack(const Device& device, Managed* tensor, const Stream& stream) {
    auto [buffer, count] =
        detail::import_dlpack(device, detail::as_source(tensor), detail::dlpack_element<T>(), &stream);
    return detail::Internals::make_borrowed<T>(std::move(buffer), count);
}
/// The same without a stream: the data must be ready for any stream (the producer synchronized).
template <typename T, typename Managed>
requires(detail::dlpack_versioned<Managed> || detail::dlpack_legacy<Managed>)
    [[nodiscard]] BorrowedSlice<T> from_dlpack(const Device& device, Managed* tensor) {
    auto [buffer, count] =
        detail::import_dlpack(device, detail::as_source(tensor), detail::dlpack_element<T>(), nullptr);
    return detail::Internals::make_borrowed<T>(std::move(buffer), count);
}

/// Hands `slice` to a DLPack consumer as a one-dimensional DLPack 1.x tensor (device type kDLCUDA). The
/// consumer's `stream` first waits for cudarc's pending work on the slice. The tensor's deleter frees the
/// memory ordered after every use cudarc knows of, the consumer's on `stream` included: keep `stream` (a
/// Stream::wrap of the consumer's stream, typically) alive until the consumer calls the deleter, which may
/// happen on any thread.
template <typename T>
[[nodiscard]] dlpack::DLManagedTensorVersioned* to_dlpack(DeviceSlice<T>&& slice, Stream& stream) {
    const std::size_t count = slice.size();
    void* tensor =
        detail::export_dlpack(detail::Internals::handle(slice), count, dlpack_dtype<T>, stream, true);
    slice = DeviceSlice<T>();
    return static_cast<dlpack::DLManagedTensorVersioned*>(tensor);
}
/// The same as a legacy DLManagedTensor (for consumers of DLPack 0.x, for example at::fromDLPack).
template <typename T>
[[nodiscard]] dlpack::DLManagedTensor* to_dlpack_legacy(DeviceSlice<T>&& slice, Stream& stream) {
    const std::size_t count = slice.size();
    void* tensor =
        detail::export_dlpack(detail::Internals::handle(slice), count, dlpack_dtype<T>, stream, false);
    slice = DeviceSlice<T>();
    return static_cast<dlpack::DLManagedTensor*>(tensor);
}

}  // namespace cudarc

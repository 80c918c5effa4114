/// @file
/// cudarc::copy — typed, size-checked copies between host memory and device views.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

#include "cudarc/detail/checked_size.hpp"

#include "cudarc/slice.hpp"

namespace cudarc {

/// Device to device, asynchronous on `stream`. Sizes must match (throws cudarc::Error otherwise). Like a
/// launch, it first waits for conflicting earlier work on other streams (hazard tracking). `dst` and `src`
/// may be on different devices (cuMemcpyPeerAsync, no peer access needed), with a stream of either one.
template <typename T>
void copy(Stream& stream, DeviceView<T> dst, DeviceView<const std::remove_const_t<T>> src) {
    static_assert(!std::is_const_v<T>,
                  "the destination of a copy must be writable (DeviceView<const T> given)");
    if (dst.size() != src.size())
        detail::throw_size_mismatch("cudarc::copy (device to device)", dst.size(), src.size());
    const std::size_t bytes = detail::checked_bytes("cudarc::copy (device to device)", dst.size(), sizeof(T));
    detail::copy_device_to_device(stream, detail::Internals::buffer(dst), dst.device_ptr(),
                                  detail::Internals::buffer(src), src.device_ptr(), bytes);
}

/// Host to device, asynchronous on `stream`; `src` may be reused as soon as this returns. Inside a graph
/// capture, a copy from pageable memory throws (the graph would read `src` at every replay).
template <typename T>
void copy(Stream& stream, DeviceView<T> dst, std::span<const std::type_identity_t<T>> src) {
    static_assert(!std::is_const_v<T>,
                  "the destination of a copy must be writable (DeviceView<const T> given)");
    if (dst.size() != src.size())
        detail::throw_size_mismatch("cudarc::copy (host to device)", dst.size(), src.size());
    const std::size_t bytes = detail::checked_bytes("cudarc::copy (host to device)", dst.size(), sizeof(T));
    detail::copy_host_to_device(stream, detail::Internals::buffer(dst), dst.device_ptr(), src.data(), bytes);
}

/// Device to host. Returns once the data is in `dst` (Note [Pageable copies already block],
/// src/core/host_copy.hpp): into pageable memory the copy itself blocks, so no synchronize is added; into
/// page-locked memory the stream is synchronized (counted). Throws inside a graph capture (use
/// PinnedBuffer::copy_from_device_async there).
template <typename T>
void copy(Stream& stream, std::span<std::remove_const_t<T>> dst, DeviceView<T> src) {
    if (dst.size() != src.size())
        detail::throw_size_mismatch("cudarc::copy (device to host)", dst.size(), src.size());
    const std::size_t bytes = detail::checked_bytes("cudarc::copy (device to host)", src.size(), sizeof(T));
    detail::copy_device_to_host(stream, dst.data(), detail::Internals::buffer(src), src.device_ptr(), bytes);
}

/// Sets every byte of `dst` to `value`, asynchronously on `stream` (a write, ordered like a launch's).
template <typename T>
void memset(Stream& stream, DeviceView<T> dst, unsigned char value) {
    static_assert(!std::is_const_v<T>, "memset needs a writable view");
    detail::memset_bytes(stream, detail::Internals::buffer(dst), dst.device_ptr(), value,
                         detail::checked_bytes("cudarc::memset", dst.size(), sizeof(T)));
}

/// Managed memory (DeviceSlice::managed): enqueues on `stream` the migration of `view`'s pages to the
/// stream's device, so that later work there finds them resident. A hint: a no-op for device memory, where
/// the device lacks concurrent managed access (Device::supports_managed_memory), and while `stream` is being
/// captured (a prefetch is not a graph node). Freeing the memory waits for it. Throws cudarc::Error for
/// managed memory of another device than the stream's.
template <typename T>
void prefetch(Stream& stream, DeviceView<T> view) {
    detail::prefetch_to_device(stream, detail::Internals::buffer(view), view.device_ptr(),
                               detail::checked_bytes("cudarc::prefetch", view.size(), sizeof(T)));
}

}  // namespace cudarc

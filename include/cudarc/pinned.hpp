/// @file
/// cudarc::PinnedBuffer<T> — page-locked host memory for truly asynchronous copies.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "cudarc/detail/native_handles.hpp"
#include "cudarc/export.hpp"
#include "cudarc/slice.hpp"

namespace cudarc {

class Device;

namespace detail {
class DeviceState;

// Untyped page-locked host allocation; remembers the event of its last asynchronous copy.
class CUDARC_API PinnedAllocation {
  public:
    PinnedAllocation() = default;
    PinnedAllocation(const Device& device, std::size_t bytes);
    PinnedAllocation(const PinnedAllocation&) = delete;
    PinnedAllocation& operator=(const PinnedAllocation&) = delete;
    PinnedAllocation(PinnedAllocation&& other) noexcept;
    PinnedAllocation& operator=(PinnedAllocation&& other) noexcept;
    ~PinnedAllocation();  // waits for a pending copy first: the memory must not vanish under the DMA engine

    [[nodiscard]] void* data() const noexcept { return data_; }
    // Device to this memory, asynchronous; returns at once.
    void copy_from_device_async(Stream& stream, void* dst, Buffer* src, DevicePtr src_ptr, std::size_t bytes);
    // This memory to the device, asynchronous; the memory must not change until the copy completes.
    void copy_to_device_async(Stream& stream, Buffer* dst, DevicePtr dst_ptr, const void* src,
                              std::size_t bytes);
    // Blocks until the last asynchronous copy completes (counted; nothing to do if none is pending).
    void synchronize();
    [[nodiscard]] bool ready() const;

  private:
    void note_copy(Stream& stream);
    void release() noexcept;

    std::shared_ptr<DeviceState> device_;  // the device whose context allocated the memory
    void* data_ = nullptr;
    // The device of the last async copy's stream (any device may copy: the memory is portable), whose pool
    // last_copy_ comes from.
    std::shared_ptr<DeviceState> copy_device_;
    NativeEvent last_copy_ = nullptr;  // pooled; recorded after each async copy
    bool untracked_copy_ = false;  // a copy neither an event nor a host wait covers: never free the memory
};
}  // namespace detail

/// `count` elements of page-locked host memory. Copies into it from the device return at once; call
/// synchronize() (or synchronize the stream) before reading the data. Destroying it waits on the host for
/// a pending copy (counted) before the memory is freed; on a capturing thread the free is deferred instead.
template <typename T>
class PinnedBuffer {
    static_assert(DeviceCopyable<T>, "PinnedBuffer<T> needs a trivially copyable T");

  public:
    /// An empty buffer: no memory, size 0.
    PinnedBuffer() = default;
    /// `count` elements of page-locked memory (cuMemHostAlloc, portable: any device's streams may copy with
    /// it). Costs a driver allocation, which is slow: reuse buffers. Throws cudarc::OutOfMemory when the host
    /// cannot page-lock that much.
    PinnedBuffer(const Device& device, std::size_t count)
        : allocation_(device, detail::checked_bytes("PinnedBuffer", count, sizeof(T))), size_(count) {}

    /// Number of elements.
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    /// The host address of the first element (null when empty).
    [[nodiscard]] T* data() noexcept { return static_cast<T*>(allocation_.data()); }
    /// The host address of the first element (null when empty).
    [[nodiscard]] const T* data() const noexcept { return static_cast<const T*>(allocation_.data()); }
    /// The elements as a span.
    [[nodiscard]] std::span<T> span() noexcept { return {data(), size_}; }
    /// The elements as a read-only span.
    [[nodiscard]] std::span<const T> span() const noexcept { return {data(), size_}; }
    /// Element `i`, unchecked. Wait for a pending copy (synchronize()) before reading.
    [[nodiscard]] T& operator[](std::size_t i) noexcept { return data()[i]; }
    /// Element `i`, unchecked.
    [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return data()[i]; }

    /// Device to this buffer, asynchronous. Sizes must match.
    void copy_from_device_async(Stream& stream, DeviceView<const T> src) {
        if (src.size() != size_)
            detail::throw_size_mismatch("PinnedBuffer::copy_from_device_async", size_, src.size());
        allocation_.copy_from_device_async(
            stream, data(), detail::Internals::buffer(src), src.device_ptr(),
            detail::checked_bytes("PinnedBuffer::copy_from_device_async", src.size(), sizeof(T)));
    }
    /// This buffer to the device, asynchronous. Do not modify the buffer until synchronize() returns.
    void copy_to_device_async(Stream& stream, DeviceView<T> dst) {
        if (dst.size() != size_)
            detail::throw_size_mismatch("PinnedBuffer::copy_to_device_async", dst.size(), size_);
        allocation_.copy_to_device_async(
            stream, detail::Internals::buffer(dst), dst.device_ptr(), data(),
            detail::checked_bytes("PinnedBuffer::copy_to_device_async", dst.size(), sizeof(T)));
    }
    /// Blocks the host until the last asynchronous copy completes (one cuEventSynchronize, counted; nothing
    /// when none is pending). Throws during a graph capture on this thread.
    void synchronize() { allocation_.synchronize(); }
    /// True when no asynchronous copy is pending (one cuEventQuery; never blocks). Throws during a graph
    /// capture on this thread.
    [[nodiscard]] bool ready() const { return allocation_.ready(); }

  private:
    detail::PinnedAllocation allocation_;
    std::size_t size_ = 0;
};

}  // namespace cudarc

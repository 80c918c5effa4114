// cudarc::PinnedBuffer<T> — page-locked host memory for truly asynchronous copies, and PinnedView<T>, a
// window into it whose copies are tracked per byte range like a device view's.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>

#include "cudarc/detail/checked_size.hpp"
#include "cudarc/detail/native_handles.hpp"
#include "cudarc/export.hpp"
#include "cudarc/slice.hpp"

namespace cudarc {

class Device;

namespace detail {
// Defined in src/core/pinned_state.hpp: the memory, its device and its hazard state, at a stable address.
class PinnedState;

// Untyped page-locked host memory (allocated, or registered host memory) and the state that tracks its
// copies (Note [Pinned memory] in src/core/pinned_state.hpp). Move-only; moving keeps views valid.
class CUDARC_API PinnedAllocation {
  public:
    PinnedAllocation() = default;
    PinnedAllocation(const Device& device, std::size_t bytes);
    // Page-locks `bytes` of existing host memory at `ptr` (cuMemHostRegister); unregistered on destruction,
    // after the copies that use it.
    [[nodiscard]] static PinnedAllocation register_memory(const Device& device, void* ptr, std::size_t bytes);
    PinnedAllocation(const PinnedAllocation&) = delete;
    PinnedAllocation& operator=(const PinnedAllocation&) = delete;
    PinnedAllocation(PinnedAllocation&& other) noexcept
        : state_(std::exchange(other.state_, nullptr)), data_(std::exchange(other.data_, nullptr)) {}
    PinnedAllocation& operator=(PinnedAllocation&& other) noexcept {
        if (this != &other) {
            release();
            state_ = std::exchange(other.state_, nullptr);
            data_ = std::exchange(other.data_, nullptr);
        }
        return *this;
    }
    ~PinnedAllocation() { release(); }  // waits only for the copies still pending

    [[nodiscard]] void* data() const noexcept { return data_; }
    [[nodiscard]] PinnedState* state() const noexcept { return state_; }

  private:
    void release() noexcept;

    PinnedState* state_ = nullptr;
    void* data_ = nullptr;
};

// What a host access waits for: a read waits for the copies writing the range, a write for every copy
// touching it (later copies read what the host writes).
enum class HostAccess { read, write };

// Non-template operations behind PinnedView. Offsets and sizes in bytes, checked by the callers.
CUDARC_API void copy_pinned_to_device(Stream& stream, Buffer* dst, DevicePtr dst_ptr, PinnedState* src,
                                      std::size_t src_offset, std::size_t bytes);
CUDARC_API void copy_device_to_pinned(Stream& stream, PinnedState* dst, std::size_t dst_offset, Buffer* src,
                                      DevicePtr src_ptr, std::size_t bytes);
// Blocks until the copies a host access of [offset, offset + bytes) must follow have completed (counted as
// event synchronizes, one per stream waited for).
CUDARC_API void pinned_wait(PinnedState* state, std::size_t offset, std::size_t bytes, HostAccess access);
// Whether pinned_wait would return at once. Never blocks.
[[nodiscard]] CUDARC_API bool pinned_ready(PinnedState* state, std::size_t offset, std::size_t bytes,
                                           HostAccess access);
}  // namespace detail

template <typename T>
class PinnedBuffer;
template <typename T>
class PinnedView;
namespace detail {
struct PinnedAccess;
}

/// A window into a PinnedBuffer: `size()` elements of page-locked host memory. Copies between it and device
/// views (cudarc::copy) run on any stream and are tracked per byte range, through the same hazard tracking as
/// device views: a copy into one chunk never waits for copies of another. The host reads or writes the
/// memory only after PinnedBuffer::wait(view) (or when ready(view) is true). PinnedView<const T> can only
/// be copied from. Like a DeviceView, it must not outlive its buffer.
template <typename T>
class PinnedView {
    static_assert(DeviceCopyable<std::remove_const_t<T>>, "PinnedView<T> needs a trivially copyable T");

  public:
    using element_type = T;                    ///< The viewed type (const for a read-only view).
    using value_type = std::remove_const_t<T>;  ///< The element type without const.

    /// A view of T converts to a view of const T.
    template <typename U>
    requires(std::is_const_v<T>&& std::is_same_v<const U, T>) PinnedView(const PinnedView<U>& other)
    noexcept  // NOLINT(google-explicit-constructor)
        : state_(other.state_), data_(other.data_), offset_(other.offset_), size_(other.size_) {}

    /// Number of elements.
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    /// Size in bytes.
    [[nodiscard]] std::size_t bytes() const noexcept { return size_ * sizeof(T); }
    /// Whether the view has no elements.
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    /// The host address. Reading or writing through it without PinnedBuffer::wait races with pending copies.
    [[nodiscard]] T* data() const noexcept { return data_; }
    /// Byte offset of the view in its buffer.
    [[nodiscard]] std::size_t offset_bytes() const noexcept { return offset_; }

    /// Elements [offset, offset + count). Throws cudarc::Error when out of range.
    [[nodiscard]] PinnedView subview(std::size_t offset, std::size_t count) const {
        if (offset > size_ || count > size_ - offset)
            detail::throw_out_of_range("PinnedView", offset, count, size_);
        return PinnedView(state_, data_ + offset, offset_ + offset * sizeof(T), count);
    }

  private:
    template <typename U>
    friend class PinnedView;
    template <typename U>
    friend class PinnedBuffer;
    friend struct detail::PinnedAccess;
    PinnedView(detail::PinnedState* state, T* data, std::size_t offset, std::size_t size) noexcept
        : state_(state), data_(data), offset_(offset), size_(size) {}

    detail::PinnedState* state_;
    T* data_;
    std::size_t offset_;  // bytes from the buffer's start
    std::size_t size_;
};

namespace detail {
// The library's access to a PinnedView's state (for the copy templates).
struct PinnedAccess {
    template <typename T>
    [[nodiscard]] static PinnedState* state(const PinnedView<T>& view) noexcept {
        return view.state_;
    }
};
}  // namespace detail

/// `count` elements of page-locked host memory. Copies into it from the device return at once. Each copy
/// is tracked per byte range (Note [Pinned memory]), so one buffer can stage many batches on many streams:
/// copy chunk i on stream i, then wait(view) for exactly the copies that touch that chunk. synchronize()
/// waits for everything pending; destroying the buffer waits only for the copies still pending.
template <typename T>
class PinnedBuffer {
    static_assert(DeviceCopyable<T>, "PinnedBuffer<T> needs a trivially copyable T");

  public:
    /// An empty buffer: no memory, size 0.
    PinnedBuffer() = default;
    /// `count` elements of fresh page-locked memory (cuMemHostAlloc, portable: any device may copy with it).
    PinnedBuffer(const Device& device, std::size_t count)
        : allocation_(device, detail::checked_bytes("PinnedBuffer", count, sizeof(T))), size_(count) {}
    /// Page-locks existing host memory (cuMemHostRegister, portable) and tracks it like an allocated
    /// buffer. `memory` must outlive the returned buffer, whose destruction unregisters it after the copies
    /// that use it. Throws cudarc::Error where the driver cannot register memory.
    [[nodiscard]] static PinnedBuffer register_memory(const Device& device, std::span<T> memory) {
        return PinnedBuffer(
            detail::PinnedAllocation::register_memory(
                device, memory.data(),
                detail::checked_bytes("PinnedBuffer::register_memory", memory.size(), sizeof(T))),
            memory.size());
    }

    /// Number of elements.
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    /// The host address of the first element (null when empty).
    [[nodiscard]] T* data() noexcept { return static_cast<T*>(allocation_.data()); }
    /// The host address of the first element (null when empty).
    [[nodiscard]] const T* data() const noexcept { return static_cast<const T*>(allocation_.data()); }
    /// The elements as a span, untracked: wait(view()) (or synchronize()) first when copies may be pending.
    [[nodiscard]] std::span<T> span() noexcept { return {data(), size_}; }
    /// The elements as a read-only span.
    [[nodiscard]] std::span<const T> span() const noexcept { return {data(), size_}; }
    /// Element `i`, unchecked. Wait for a pending copy (synchronize()) before reading.
    [[nodiscard]] T& operator[](std::size_t i) noexcept { return data()[i]; }
    /// Element `i`, unchecked.
    [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return data()[i]; }

    /// The whole buffer as a view.
    [[nodiscard]] PinnedView<T> view() noexcept {
        return PinnedView<T>(allocation_.state(), data(), 0, size_);
    }
    /// The whole buffer as a read-only view.
    [[nodiscard]] PinnedView<const T> view() const noexcept {
        return PinnedView<const T>(allocation_.state(), data(), 0, size_);
    }
    /// Elements [offset, offset + count). Throws cudarc::Error when out of range.
    [[nodiscard]] PinnedView<T> view(std::size_t offset, std::size_t count) {
        return view().subview(offset, count);
    }
    /// Elements [offset, offset + count), read-only. Throws cudarc::Error when out of range.
    [[nodiscard]] PinnedView<const T> view(std::size_t offset, std::size_t count) const {
        return view().subview(offset, count);
    }

    /// Blocks until the host may write `v` (every copy touching it has completed) and returns its span.
    /// Counted as host synchronizations (one event synchronize per stream waited for; none when nothing is
    /// pending). Throws inside a graph capture when something is pending.
    std::span<T> wait(PinnedView<T> v) {
        detail::pinned_wait(v.state_, v.offset_, v.bytes(), detail::HostAccess::write);
        return {v.data(), v.size()};
    }
    /// Blocks until the host may read `v` (the copies writing into it have completed) and returns its span.
    std::span<const T> wait(PinnedView<const T> v) const {
        detail::pinned_wait(v.state_, v.offset_, v.bytes(), detail::HostAccess::read);
        return {v.data(), v.size()};
    }
    /// Whether wait(v) would return at once (the host may write `v`). Never blocks.
    [[nodiscard]] bool ready(PinnedView<T> v) {
        return detail::pinned_ready(v.state_, v.offset_, v.bytes(), detail::HostAccess::write);
    }
    /// Whether the host may read `v`. Never blocks.
    [[nodiscard]] bool ready(PinnedView<const T> v) const {
        return detail::pinned_ready(v.state_, v.offset_, v.bytes(), detail::HostAccess::read);
    }

    /// Device to this buffer, asynchronous. Sizes must match (see cudarc::copy for chunks).
    void copy_from_device_async(Stream& stream, DeviceView<const T> src) {
        if (src.size() != size_)
            detail::throw_size_mismatch("PinnedBuffer::copy_from_device_async", size_, src.size());
        detail::copy_device_to_pinned(
            stream, allocation_.state(), 0, detail::Internals::buffer(src), src.device_ptr(),
            detail::checked_bytes("PinnedBuffer::copy_from_device_async", src.size(), sizeof(T)));
    }
    /// This buffer to the device, asynchronous. Do not modify the buffer until synchronize() returns.
    void copy_to_device_async(Stream& stream, DeviceView<T> dst) {
        if (dst.size() != size_)
            detail::throw_size_mismatch("PinnedBuffer::copy_to_device_async", dst.size(), size_);
        detail::copy_pinned_to_device(
            stream, detail::Internals::buffer(dst), dst.device_ptr(), allocation_.state(), 0,
            detail::checked_bytes("PinnedBuffer::copy_to_device_async", dst.size(), sizeof(T)));
    }
    /// Blocks until every pending copy of the buffer completes (counted; nothing to do if none is pending).
    void synchronize() { static_cast<void>(wait(view())); }
    /// Whether no copy of the buffer is pending. Never blocks.
    [[nodiscard]] bool ready() { return ready(view()); }

  private:
    PinnedBuffer(detail::PinnedAllocation allocation, std::size_t count) noexcept
        : allocation_(std::move(allocation)), size_(count) {}

    detail::PinnedAllocation allocation_;
    std::size_t size_ = 0;
};

/// Page-locked host memory to the device, asynchronous on `stream`: ordered after earlier copies into the
/// same bytes of `src` (on any stream), and the host must not write `src` until PinnedBuffer::wait says so.
/// Sizes must match.
template <typename T>
void copy(Stream& stream, DeviceView<T> dst, PinnedView<const std::remove_const_t<T>> src) {
    static_assert(!std::is_const_v<T>,
                  "the destination of a copy must be writable (DeviceView<const T> given)");
    if (dst.size() != src.size())
        detail::throw_size_mismatch("cudarc::copy (pinned to device)", dst.size(), src.size());
    detail::copy_pinned_to_device(
        stream, detail::Internals::buffer(dst), dst.device_ptr(), detail::PinnedAccess::state(src),
        src.offset_bytes(), detail::checked_bytes("cudarc::copy (pinned to device)", dst.size(), sizeof(T)));
}

/// The device to page-locked host memory, asynchronous on `stream`: returns at once; the data is there once
/// PinnedBuffer::wait(view) returns. Sizes must match.
template <typename T>
void copy(Stream& stream, PinnedView<T> dst, DeviceView<const std::remove_const_t<T>> src) {
    static_assert(!std::is_const_v<T>,
                  "the destination of a copy must be writable (PinnedView<const T> given)");
    if (dst.size() != src.size())
        detail::throw_size_mismatch("cudarc::copy (device to pinned)", dst.size(), src.size());
    detail::copy_device_to_pinned(
        stream, detail::PinnedAccess::state(dst), dst.offset_bytes(), detail::Internals::buffer(src),
        src.device_ptr(), detail::checked_bytes("cudarc::copy (device to pinned)", src.size(), sizeof(T)));
}

}  // namespace cudarc

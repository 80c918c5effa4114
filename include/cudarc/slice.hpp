/// @file
/// cudarc::DeviceSlice<T> (owning) and cudarc::DeviceView<T> (non-owning, bounds-checked window).
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "cudarc/detail/buffer.hpp"
#include "cudarc/detail/checked_size.hpp"
#include "cudarc/stream.hpp"

namespace cudarc {

/// Element types that may live in device memory: copied bytewise, no constructors run on the device.
template <typename T>
concept DeviceCopyable = std::is_trivially_copyable_v<T> && !std::is_pointer_v<T> && !std::is_reference_v<T>;

/// A window into a DeviceSlice (or BorrowedSlice): pointer, length and the owner's buffer.
/// `DeviceView<const T>` can only be read by launches and copies. A view stays valid when its owner moves
/// (Note [Stable buffers] in cudarc/detail/buffer.hpp), but must not outlive it (like std::span); a library
/// built with CUDARC_DEBUG_VIEWS throws when a view is used after its owner is gone.
template <typename T>
class DeviceView {
    static_assert(DeviceCopyable<std::remove_const_t<T>>, "DeviceView<T> needs a trivially copyable T");

  public:
    /// The element type as viewed (const for a read-only view).
    using element_type = T;
    /// The element type without const.
    using value_type = std::remove_const_t<T>;

    /// A view of T converts to a view of const T.
    template <typename U>
    requires(std::is_const_v<T>&& std::is_same_v<const U, T>) DeviceView(const DeviceView<U>& other)
    noexcept  // NOLINT(google-explicit-constructor)
        : buffer_(other.buffer_), ptr_(other.ptr_), size_(other.size_), generation_(other.generation_) {}

    /// Number of elements.
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    /// Size in bytes.
    [[nodiscard]] std::size_t bytes() const noexcept { return size_ * sizeof(T); }
    /// True when the view has no elements.
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    /// The raw address. Using it outside cudarc bypasses hazard tracking: see DeviceSlice::record_stream.
    [[nodiscard]] DevicePtr device_ptr() const noexcept { return ptr_; }
    /// The ordinal of the device whose memory this is (-1 for a view of an empty slice).
    [[nodiscard]] int device_ordinal() const noexcept { return detail::buffer_device_ordinal(buffer_); }

    /// Elements [offset, offset + count). Throws cudarc::Error when out of range.
    [[nodiscard]] DeviceView subview(std::size_t offset, std::size_t count) const {
        if (offset > size_ || count > size_ - offset)
            detail::throw_out_of_range("DeviceView", offset, count, size_);
        return DeviceView(buffer_, ptr_ + offset * sizeof(T), count, generation_);
    }
    /// Elements [offset, size()). Throws cudarc::Error when `offset` is past the end.
    [[nodiscard]] DeviceView subview(std::size_t offset) const {
        if (offset > size_) detail::throw_out_of_range("DeviceView", offset, 0, size_);
        return subview(offset, size_ - offset);
    }

  private:
    friend struct detail::Internals;  // Note [Internal access]
    template <typename U>
    friend class DeviceView;
    DeviceView(detail::Buffer* buffer, DevicePtr ptr, std::size_t size, std::uint64_t generation) noexcept
        : buffer_(buffer), ptr_(ptr), size_(size), generation_(generation) {}

    detail::Buffer* buffer_;
    DevicePtr ptr_;
    std::size_t size_;
    std::uint64_t generation_;  // Note [Stable buffers]
};

/// @cond INTERNAL
template <typename T>
detail::Buffer* detail::Internals::buffer(const DeviceView<T>& view) {
#if CUDARC_DEBUG_VIEWS
    detail::check_view(view.buffer_, view.generation_);
#endif
    return view.buffer_;
}
template <typename T>
DeviceView<T> detail::Internals::make_view(Buffer* buffer, DevicePtr ptr, std::size_t size,
                                           std::uint64_t generation) noexcept {
    return DeviceView<T>(buffer, ptr, size, generation);
}
template <typename U, typename T>
DeviceView<U> detail::Internals::retype(const DeviceView<T>& view, std::size_t count) {
    return DeviceView<U>(buffer(view), view.ptr_, count, view.generation_);
}
/// @endcond

/// An owning, typed device allocation on one device. Move-only; moving it keeps its views valid (Note
/// [Stable buffers]). Its memory is returned to the allocator on destruction, ordered after every recorded
/// use on every stream (see DESIGN: hazard tracking).
template <typename T>
class DeviceSlice {
    static_assert(DeviceCopyable<T>, "DeviceSlice<T> needs a trivially copyable, non-pointer T");
    static_assert(!std::is_const_v<T>,
                  "use a const DeviceSlice<T> or DeviceView<const T> for read-only data");

  public:
    /// The element type.
    using value_type = T;

    /// An empty slice that holds no memory (device_ordinal() is -1).
    DeviceSlice() = default;
    /// Takes over `other`'s memory; `other` is left empty. Views of the memory stay valid.
    DeviceSlice(DeviceSlice&& other) noexcept
        : buffer_(std::move(other.buffer_)),
          ptr_(std::exchange(other.ptr_, 0)),
          size_(std::exchange(other.size_, 0)) {}
    /// Frees this slice's memory (ordered after its recorded uses, as on destruction) and takes over
    /// `other`'s.
    DeviceSlice& operator=(DeviceSlice&& other) noexcept {
        if (this != &other) {
            buffer_ = std::move(other.buffer_);
            ptr_ = std::exchange(other.ptr_, 0);
            size_ = std::exchange(other.size_, 0);
        }
        return *this;
    }

    /// `count` elements with unspecified contents, allocated on `stream` from the device's memory source.
    /// With the caching allocator a cached block costs no driver call and no synchronization; otherwise
    /// memory is taken from the driver (counted). Throws cudarc::OutOfMemory when the source cannot satisfy
    /// it even after freeing its cache (docs/allocator.md).
    [[nodiscard]] static DeviceSlice uninitialized(Stream& stream, std::size_t count) {
        return DeviceSlice(detail::allocate_buffer(
                               stream, detail::checked_bytes("DeviceSlice::uninitialized", count, sizeof(T))),
                           count);
    }
    /// `count` zero-filled elements: uninitialized, then an asynchronous memset on `stream`.
    [[nodiscard]] static DeviceSlice zeros(Stream& stream, std::size_t count) {
        DeviceSlice slice = uninitialized(stream, count);
        slice.fill_zero(stream);
        return slice;
    }
    /// `count` elements of managed (unified) memory with unspecified contents: one address that the host and
    /// the device share, whose pages the driver migrates on demand and may evict under memory pressure.
    /// Otherwise an ordinary slice (hazard tracking, launches, copies); cudarc::prefetch moves its pages to
    /// the device ahead of use. Freeing it waits on the host for its last uses, since managed memory has no
    /// stream-ordered free. Throws cudarc::Error when the driver has no managed memory.
    [[nodiscard]] static DeviceSlice managed(Stream& stream, std::size_t count) {
        return DeviceSlice(detail::allocate_managed_buffer(
                               stream, detail::checked_bytes("DeviceSlice::managed", count, sizeof(T))),
                           count);
    }
    /// A copy of `host` (the host memory may be reused as soon as this returns).
    [[nodiscard]] static DeviceSlice from_host(Stream& stream, std::span<const T> host) {
        DeviceSlice slice = uninitialized(stream, host.size());
        slice.copy_from_host(stream, host);
        return slice;
    }
    /// A copy of `host`, like the span overload.
    [[nodiscard]] static DeviceSlice from_host(Stream& stream, const std::vector<T>& host) {
        return from_host(stream, std::span<const T>(host));
    }

    /// Number of elements.
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    /// Size in bytes.
    [[nodiscard]] std::size_t bytes() const noexcept { return size_ * sizeof(T); }
    /// True when the slice has no elements.
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    /// The raw address (0 when empty). Using it outside cudarc bypasses hazard tracking: see record_stream.
    [[nodiscard]] DevicePtr device_ptr() const noexcept { return ptr_; }
    /// The ordinal of the device whose memory this is (-1 for a default-constructed or moved-from slice).
    [[nodiscard]] int device_ordinal() const noexcept { return detail::buffer_device_ordinal(buffer_.get()); }

    /// A view of the whole slice. Costs nothing: no driver call, no synchronization.
    [[nodiscard]] DeviceView<T> view() noexcept {
        return detail::Internals::make_view<T>(buffer_.get(), ptr_, size_,
                                               detail::view_generation(buffer_.get()));
    }
    /// A read-only view of the whole slice.
    [[nodiscard]] DeviceView<const T> view() const noexcept {
        return detail::Internals::make_view<const T>(buffer_.get(), ptr_, size_,
                                                     detail::view_generation(buffer_.get()));
    }
    /// Elements [offset, offset + count). Throws cudarc::Error when out of range.
    [[nodiscard]] DeviceView<T> view(std::size_t offset, std::size_t count) {
        return view().subview(offset, count);
    }
    /// Read-only elements [offset, offset + count). Throws cudarc::Error when out of range.
    [[nodiscard]] DeviceView<const T> view(std::size_t offset, std::size_t count) const {
        return view().subview(offset, count);
    }

    /// Host to device, asynchronous on `stream`; `host` may be reused as soon as this returns.
    void copy_from_host(Stream& stream, std::span<const T> host) {
        if (host.size() != size_)
            detail::throw_size_mismatch("DeviceSlice::copy_from_host", size_, host.size());
        detail::copy_host_to_device(stream, buffer_.get(), ptr_, host.data(), bytes());
    }
    /// Device to host. Returns once the data is in `host` (no extra synchronize when `host` is pageable).
    void copy_to_host(Stream& stream, std::span<T> host) const {
        if (host.size() != size_)
            detail::throw_size_mismatch("DeviceSlice::copy_to_host", host.size(), size_);
        detail::copy_device_to_host(stream, host.data(), buffer_.get(), ptr_, bytes());
    }
    /// The contents as a new vector: copy_to_host into pageable memory, so the host waits for the copy.
    [[nodiscard]] std::vector<T> to_vector(Stream& stream) const {
        std::vector<T> host(size_);
        copy_to_host(stream, host);
        return host;
    }
    /// Sets every byte to zero, asynchronously on `stream` (a memset, ordered after other streams'
    /// conflicting uses like any write).
    void fill_zero(Stream& stream) { detail::memset_bytes(stream, buffer_.get(), ptr_, 0, bytes()); }

    /// Declares that `stream` uses this memory through its raw pointer: later writers on other streams, and
    /// freeing it, wait for everything submitted to `stream` (until cudarc next sees the memory written).
    /// Cudarc's own launches and copies record their uses automatically.
    void record_stream(Stream& stream) { detail::record_stream(stream, buffer_.get()); }

  private:
    friend struct detail::Internals;  // Note [Internal access]

    DeviceSlice(detail::BufferHandle buffer, std::size_t count) noexcept
        : buffer_(std::move(buffer)), ptr_(detail::buffer_address(buffer_.get())), size_(count) {}

    detail::BufferHandle buffer_;
    DevicePtr ptr_ = 0;  // the buffer's address, kept here for the inline accessors
    std::size_t size_ = 0;
};

/// @cond INTERNAL
template <typename T>
detail::Buffer* detail::Internals::buffer(DeviceSlice<T>& slice) noexcept {
    return slice.buffer_.get();
}
template <typename T>
detail::BufferHandle& detail::Internals::handle(DeviceSlice<T>& slice) noexcept {
    return slice.buffer_;
}
/// @endcond

/// The bytes of a view, like std::as_bytes / std::as_writable_bytes: the same memory and hazard state.
/// Throws cudarc::Error for a (forged) view whose size in bytes overflows.
template <typename T>
[[nodiscard]] DeviceView<const std::byte> as_bytes(DeviceView<T> view) {
    return detail::Internals::retype<const std::byte>(
        view, detail::checked_bytes("cudarc::as_bytes", view.size(), sizeof(T)));
}
/// The writable bytes of a view of non-const T (see as_bytes).
template <typename T>
requires(!std::is_const_v<T>) [[nodiscard]] DeviceView<std::byte> as_writable_bytes(DeviceView<T> view) {
    return detail::Internals::retype<std::byte>(
        view, detail::checked_bytes("cudarc::as_writable_bytes", view.size(), sizeof(T)));
}

}  // namespace cudarc

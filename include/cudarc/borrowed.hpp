/// @file
/// cudarc::BorrowedSlice<T> — device memory another library owns (a PyTorch tensor, a CuPy array, a buffer
/// from a C API), tracked by cudarc while it uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "cudarc/detail/buffer.hpp"
#include "cudarc/device.hpp"
#include "cudarc/export.hpp"
#include "cudarc/slice.hpp"
#include "cudarc/stream.hpp"

namespace cudarc {

namespace detail {
/// Checks that [ptr, ptr + bytes) is device (or managed) memory of `device`'s context inside one allocation
/// (cuPointerGetAttributes, cuMemGetAddressRange), and that `owner` is a stream of `device`; throws a clear
/// error naming the failed check, else returns a borrowed Buffer. `hook` (may be empty) runs once cudarc's
/// uses have completed; on a throw it has not run and is the caller's to run.
[[nodiscard]] CUDARC_API BufferHandle borrow_memory(const Device& device, DevicePtr ptr, std::size_t count,
                                                    std::size_t element_size, const Stream* owner,
                                                    ReleaseHook hook);
/// BorrowedSlice::owner_wrote and sync_owner.
CUDARC_API void owner_wrote(Buffer* buffer);
CUDARC_API void sync_owner(Buffer* buffer);
}  // namespace detail

/// A typed, non-owning slice over device memory that another library owns. `T` may be const: then it can
/// only be read (by launches, copies, optimizer gradients).
///
/// - Made from a device address, an element count, the Device and optionally the owner's stream (a
///   cudarc Stream, typically Stream::wrap of the framework's current stream). The memory is checked: it
///   must be device or managed memory of the device's context, and count * sizeof(T) bytes must lie
///   inside one allocation. (A driver table without cuPointerGetAttributes or cuMemGetAddressRange, such
///   as HIP's today, skips the check it cannot make.)
/// - view() / view(offset, count) give DeviceViews that work with launch, copy, memset and
///   optim::ParamTensor; cudarc tracks its own uses per byte range while the slice lives.
/// - With an owner stream, cudarc's first use on another stream waits for the owner's work submitted so
///   far, and destroying the slice makes the owner's stream wait for cudarc's last uses (events, never a
///   host block). The owner's Stream must outlive the slice (if it is gone first, the destructor waits on
///   the host instead, counted).
/// - A borrow may last across steps (a framework's parameters and gradients): call sync_owner() before the
///   owner uses the memory again, and owner_wrote() once it has, instead of borrowing anew each step.
/// - Destroying it frees nothing.
///
/// Move-only, like DeviceSlice; moving it keeps its views valid, but views must not outlive it.
template <typename T>
class BorrowedSlice {
    static_assert(DeviceCopyable<std::remove_const_t<T>>, "BorrowedSlice<T> needs a trivially copyable T");

  public:
    /// The element type as borrowed (const for read-only memory).
    using element_type = T;
    /// The element type without const.
    using value_type = std::remove_const_t<T>;

    /// An empty slice that borrows nothing (device_ordinal() is -1).
    BorrowedSlice() = default;
    /// Borrows `count` elements at `ptr` on `device`, without an owner stream. Checks the memory with
    /// cuPointerGetAttributes and cuMemGetAddressRange (no synchronization, no device allocation) and throws
    /// cudarc::Error naming the check that failed.
    BorrowedSlice(const Device& device, DevicePtr ptr, std::size_t count)
        : BorrowedSlice(detail::borrow_memory(device, ptr, count, sizeof(T), nullptr, {}), count) {}
    /// The same with the owner's stream: cudarc's first use on another stream waits for the owner's work so
    /// far, and destruction makes `owner` wait for cudarc's last uses (events, never a host block). Also
    /// throws when `owner` is not a stream of `device`.
    BorrowedSlice(const Device& device, DevicePtr ptr, std::size_t count, const Stream& owner)
        : BorrowedSlice(detail::borrow_memory(device, ptr, count, sizeof(T), &owner, {}), count) {}
    /// The same from a typed device pointer (for example a framework's data pointer).
    BorrowedSlice(const Device& device, T* ptr, std::size_t count)
        : BorrowedSlice(device, address_of(ptr), count) {}
    /// The same from a typed device pointer, with the owner's stream.
    BorrowedSlice(const Device& device, T* ptr, std::size_t count, const Stream& owner)
        : BorrowedSlice(device, address_of(ptr), count, owner) {}
    /// Takes over `other`'s borrow; `other` is left empty. Views stay valid.
    BorrowedSlice(BorrowedSlice&& other) noexcept
        : buffer_(std::move(other.buffer_)),
          ptr_(std::exchange(other.ptr_, 0)),
          size_(std::exchange(other.size_, 0)) {}
    /// Ends this slice's borrow (as on destruction) and takes over `other`'s.
    BorrowedSlice& operator=(BorrowedSlice&& other) noexcept {
        if (this != &other) {
            buffer_ = std::move(other.buffer_);
            ptr_ = std::exchange(other.ptr_, 0);
            size_ = std::exchange(other.size_, 0);
        }
        return *this;
    }

    /// Number of elements.
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    /// Size in bytes.
    [[nodiscard]] std::size_t bytes() const noexcept { return size_ * sizeof(T); }
    /// True when the slice has no elements.
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    /// The borrowed address (0 when empty).
    [[nodiscard]] DevicePtr device_ptr() const noexcept { return ptr_; }
    /// The ordinal of the device whose memory this is (-1 for a default-constructed or moved-from slice).
    [[nodiscard]] int device_ordinal() const noexcept { return detail::buffer_device_ordinal(buffer_.get()); }

    /// A view of the whole slice; costs nothing.
    [[nodiscard]] DeviceView<T> view() noexcept {
        return detail::Internals::make_view<T>(buffer_.get(), ptr_, size_,
                                               detail::view_generation(buffer_.get()));
    }
    /// A read-only view of the whole slice.
    [[nodiscard]] DeviceView<const value_type> view() const noexcept {
        return detail::Internals::make_view<const value_type>(buffer_.get(), ptr_, size_,
                                                              detail::view_generation(buffer_.get()));
    }
    /// Elements [offset, offset + count). Throws cudarc::Error when out of range.
    [[nodiscard]] DeviceView<T> view(std::size_t offset, std::size_t count) {
        return view().subview(offset, count);
    }
    /// Read-only elements [offset, offset + count). Throws cudarc::Error when out of range.
    [[nodiscard]] DeviceView<const value_type> view(std::size_t offset, std::size_t count) const {
        return view().subview(offset, count);
    }

    /// Declares that `stream` uses this memory through its raw pointer (see DeviceSlice::record_stream).
    void record_stream(Stream& stream) { detail::record_stream(stream, buffer_.get()); }

    /// A borrow that lasts: the owner's stream used the memory again (wrote or read it) outside cudarc, so
    /// cudarc's next use on another stream waits for the owner's work so far, as after the borrow began.
    /// Bookkeeping only: no driver call, no allocation. cudarc's earlier uses are forgotten: call
    /// sync_owner() before the owner touches the memory. Throws for a slice without an owner stream.
    void owner_wrote() { detail::owner_wrote(buffer_.get()); }
    /// A borrow that lasts: makes the owner's stream wait for cudarc's uses so far, as destroying the slice
    /// does, without ending the borrow (events, never a host block; the owner's stream waits at most once
    /// per stream that used the memory, however many slices it syncs). Throws for a slice without an owner
    /// stream.
    void sync_owner() { detail::sync_owner(buffer_.get()); }

  private:
    friend struct detail::Internals;  // Note [Internal access]
    BorrowedSlice(detail::BufferHandle buffer, std::size_t count) noexcept
        : buffer_(std::move(buffer)), ptr_(detail::buffer_address(buffer_.get())), size_(count) {}

    static DevicePtr address_of(T* ptr) noexcept {
        return static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(ptr));
    }

    detail::BufferHandle buffer_;
    DevicePtr ptr_ = 0;
    std::size_t size_ = 0;
};

/// @cond INTERNAL
template <typename T>
detail::Buffer* detail::Internals::buffer(BorrowedSlice<T>& slice) noexcept {
    return slice.buffer_.get();
}
template <typename T>
BorrowedSlice<T> detail::Internals::make_borrowed(BufferHandle buffer, std::size_t count) noexcept {
    return BorrowedSlice<T>(std::move(buffer), count);
}
/// @endcond

}  // namespace cudarc

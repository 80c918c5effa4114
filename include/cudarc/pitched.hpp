// cudarc::PitchedSlice<T> — a 2D device allocation whose rows start `pitch` bytes apart, PitchedView<T>, and
// cudarc::copy_2d between it and host, pinned or other pitched memory (cuMemcpy2DAsync).
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include "cudarc/detail/buffer.hpp"
#include "cudarc/detail/checked_size.hpp"
#include "cudarc/pinned.hpp"
#include "cudarc/slice.hpp"

namespace cudarc {

namespace detail {
// One side of a 2D copy (Note [2D copies] in src/core/copy_2d.cpp).
struct Side2D {
    enum class Kind { device, pinned, host };
    Kind kind = Kind::host;
    Buffer* buffer = nullptr;       // device
    PinnedState* pinned = nullptr;  // pinned
    DevicePtr device_ptr = 0;       // device: the first row
    void* host = nullptr;           // pinned and host: the first row
    std::size_t offset = 0;         // pinned: bytes from the buffer's start
    std::size_t pitch = 0;          // bytes from one row to the next
};
// `height` rows of `width_bytes` from `src` to `dst` on `stream`. Into pageable host memory it returns once
// the data is there; otherwise asynchronous.
CUDARC_API void copy_2d(Stream& stream, const Side2D& dst, const Side2D& src, std::size_t width_bytes,
                        std::size_t height);
// The row pitch PitchedSlice uses for rows of `width_bytes`.
[[nodiscard]] constexpr std::size_t pitch_for(std::size_t width_bytes) noexcept {
    constexpr std::size_t kAlignment = 512;  // what cuMemAllocPitch gives on current GPUs
    return (width_bytes + kAlignment - 1) / kAlignment * kAlignment;
}
struct PitchedAccess;
}  // namespace detail

/// A window of rows into a PitchedSlice: `height()` rows of `width()` elements, `pitch()` bytes apart.
/// Copies through it are tracked as the byte span from its first row's start to its last row's end
/// (Note [2D copies]: the padding between rows counts as touched, which can only add waits).
template <typename T>
class PitchedView {
    static_assert(DeviceCopyable<std::remove_const_t<T>>, "PitchedView<T> needs a trivially copyable T");

  public:
    using element_type = T;  ///< The viewed type (const for a read-only view).

    /// A view of T converts to a view of const T.
    template <typename U>
    requires(std::is_const_v<T>&& std::is_same_v<const U, T>) PitchedView(const PitchedView<U>& other)
    noexcept  // NOLINT(google-explicit-constructor)
        : buffer_(other.buffer_),
          ptr_(other.ptr_),
          width_(other.width_),
          height_(other.height_),
          pitch_(other.pitch_) {}

    /// Elements per row.
    [[nodiscard]] std::size_t width() const noexcept { return width_; }
    /// Rows.
    [[nodiscard]] std::size_t height() const noexcept { return height_; }
    /// Bytes from one row's start to the next.
    [[nodiscard]] std::size_t pitch() const noexcept { return pitch_; }
    /// The first row's address (raw use bypasses hazard tracking).
    [[nodiscard]] DevicePtr device_ptr() const noexcept { return ptr_; }

    /// Rows [first, first + count). Throws cudarc::Error when out of range.
    [[nodiscard]] PitchedView rows(std::size_t first, std::size_t count) const {
        if (first > height_ || count > height_ - first)
            detail::throw_out_of_range("PitchedView rows", first, count, height_);
        return PitchedView(buffer_, ptr_ + first * pitch_, width_, count, pitch_);
    }

  private:
    template <typename U>
    friend class PitchedView;
    template <typename U>
    friend class PitchedSlice;
    friend struct detail::PitchedAccess;
    PitchedView(detail::Buffer* buffer, DevicePtr ptr, std::size_t width, std::size_t height,
                std::size_t pitch) noexcept
        : buffer_(buffer), ptr_(ptr), width_(width), height_(height), pitch_(pitch) {}

    detail::Buffer* buffer_;
    DevicePtr ptr_;
    std::size_t width_;
    std::size_t height_;
    std::size_t pitch_;
};

/// An owning 2D device allocation: `height` rows of `width` elements, each row starting at a multiple of
/// 512 bytes (the pitch cuMemAllocPitch chooses), allocated from the device's memory source like any slice
/// and tracked the same way. Move-only; moving keeps its views valid.
template <typename T>
class PitchedSlice {
    static_assert(DeviceCopyable<T> && !std::is_const_v<T>, "PitchedSlice<T> needs a trivially copyable T");

  public:
    PitchedSlice() = default;
    /// `height` rows of `width` elements, uninitialized, allocated on `stream`.
    [[nodiscard]] static PitchedSlice uninitialized(Stream& stream, std::size_t width, std::size_t height) {
        const std::size_t pitch = detail::pitch_for(detail::checked_bytes("PitchedSlice", width, sizeof(T)));
        return PitchedSlice(
            detail::allocate_buffer(stream, detail::checked_bytes("PitchedSlice", height, pitch)), width,
            height, pitch);
    }

    /// Elements per row.
    [[nodiscard]] std::size_t width() const noexcept { return width_; }
    /// Number of rows.
    [[nodiscard]] std::size_t height() const noexcept { return height_; }
    /// Bytes from the start of one row to the next (at least width() * sizeof(T)).
    [[nodiscard]] std::size_t pitch() const noexcept { return pitch_; }
    /// The whole allocation as a pitched view.
    [[nodiscard]] PitchedView<T> view() noexcept {
        return PitchedView<T>(buffer_.get(), detail::buffer_address(buffer_.get()), width_, height_, pitch_);
    }
    /// The whole allocation as a read-only pitched view.
    [[nodiscard]] PitchedView<const T> view() const noexcept {
        return PitchedView<const T>(buffer_.get(), detail::buffer_address(buffer_.get()), width_, height_,
                                    pitch_);
    }
    /// Every byte, padding included, as a flat view (a memset, a launch that knows the pitch).
    [[nodiscard]] DeviceView<std::byte> bytes() noexcept {
        return detail::Internals::make_view<std::byte>(buffer_.get(), detail::buffer_address(buffer_.get()),
                                                       height_ * pitch_,
                                                       detail::view_generation(buffer_.get()));
    }

  private:
    PitchedSlice(detail::BufferHandle buffer, std::size_t width, std::size_t height,
                 std::size_t pitch) noexcept
        : buffer_(std::move(buffer)), width_(width), height_(height), pitch_(pitch) {}

    detail::BufferHandle buffer_;
    std::size_t width_ = 0;
    std::size_t height_ = 0;
    std::size_t pitch_ = 0;
};

namespace detail {
struct PitchedAccess {
    template <typename T>
    [[nodiscard]] static Side2D side(const PitchedView<T>& v) noexcept {
        Side2D s;
        s.kind = Side2D::Kind::device;
        s.buffer = v.buffer_;
        s.device_ptr = v.ptr_;
        s.pitch = v.pitch_;
        return s;
    }
};
template <typename T>
[[nodiscard]] Side2D pinned_side(const PinnedView<T>& v, std::size_t pitch) noexcept {
    Side2D s;
    s.kind = Side2D::Kind::pinned;
    s.pinned = PinnedAccess::state(v);
    s.host = const_cast<std::remove_const_t<T>*>(v.data());
    s.offset = v.offset_bytes();
    s.pitch = pitch;
    return s;
}
template <typename T>
[[nodiscard]] Side2D host_side(std::span<T> v, std::size_t pitch) noexcept {
    Side2D s;
    s.kind = Side2D::Kind::host;
    s.host = const_cast<std::remove_const_t<T>*>(v.data());
    s.pitch = pitch;
    return s;
}
inline void check_2d(const char* what, std::size_t dst_width, std::size_t dst_height, std::size_t src_width,
                     std::size_t src_height) {
    if (dst_width != src_width) throw_size_mismatch(what, dst_width, src_width);
    if (dst_height != src_height) throw_size_mismatch(what, dst_height, src_height);
}
}  // namespace detail

/// Rows of contiguous page-locked memory (width() elements each, no padding) to a pitched view,
/// asynchronous on `stream`. `src.size()` must be width * height.
template <typename T>
void copy_2d(Stream& stream, PitchedView<T> dst, PinnedView<const std::remove_const_t<T>> src) {
    static_assert(!std::is_const_v<T>, "the destination of a copy must be writable");
    if (src.size() != dst.width() * dst.height())
        detail::throw_size_mismatch("cudarc::copy_2d (pinned to pitched)", dst.width() * dst.height(),
                                    src.size());
    detail::copy_2d(stream, detail::PitchedAccess::side(dst),
                    detail::pinned_side(src, dst.width() * sizeof(T)), dst.width() * sizeof(T), dst.height());
}
/// A pitched view to contiguous page-locked rows, asynchronous (PinnedBuffer::wait before reading).
template <typename T>
void copy_2d(Stream& stream, PinnedView<T> dst, PitchedView<const std::remove_const_t<T>> src) {
    static_assert(!std::is_const_v<T>, "the destination of a copy must be writable");
    if (dst.size() != src.width() * src.height())
        detail::throw_size_mismatch("cudarc::copy_2d (pitched to pinned)", dst.size(),
                                    src.width() * src.height());
    detail::copy_2d(stream, detail::pinned_side(dst, src.width() * sizeof(T)),
                    detail::PitchedAccess::side(src), src.width() * sizeof(T), src.height());
}
/// Contiguous host rows (any host memory; may be reused once this returns) to a pitched view.
template <typename T>
void copy_2d(Stream& stream, PitchedView<T> dst, std::span<const std::type_identity_t<T>> src) {
    static_assert(!std::is_const_v<T>, "the destination of a copy must be writable");
    if (src.size() != dst.width() * dst.height())
        detail::throw_size_mismatch("cudarc::copy_2d (host to pitched)", dst.width() * dst.height(),
                                    src.size());
    detail::copy_2d(stream, detail::PitchedAccess::side(dst), detail::host_side(src, dst.width() * sizeof(T)),
                    dst.width() * sizeof(T), dst.height());
}
/// A pitched view to contiguous host rows; returns once the data is there (as cudarc::copy to host).
template <typename T>
void copy_2d(Stream& stream, std::span<std::remove_const_t<T>> dst, PitchedView<T> src) {
    if (dst.size() != src.width() * src.height())
        detail::throw_size_mismatch("cudarc::copy_2d (pitched to host)", dst.size(),
                                    src.width() * src.height());
    detail::copy_2d(stream, detail::host_side(dst, src.width() * sizeof(std::remove_const_t<T>)),
                    detail::PitchedAccess::side(src), src.width() * sizeof(std::remove_const_t<T>),
                    src.height());
}
/// Pitched to pitched (any pitches), asynchronous. Widths and heights must match.
template <typename T>
void copy_2d(Stream& stream, PitchedView<T> dst, PitchedView<const std::remove_const_t<T>> src) {
    static_assert(!std::is_const_v<T>, "the destination of a copy must be writable");
    detail::check_2d("cudarc::copy_2d (pitched to pitched)", dst.width(), dst.height(), src.width(),
                     src.height());
    detail::copy_2d(stream, detail::PitchedAccess::side(dst), detail::PitchedAccess::side(src),
                    dst.width() * sizeof(T), dst.height());
}

}  // namespace cudarc

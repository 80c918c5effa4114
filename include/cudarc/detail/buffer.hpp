// detail::Buffer — an untyped device allocation (or borrowed memory) that knows which streams used which
// of its bytes. DeviceSlice<T> and BorrowedSlice<T> own one through a BufferHandle; views point at it.
// Library templates reach the non-template code through here. Not an API to program against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "cudarc/config.hpp"
#include "cudarc/detail/native_handles.hpp"
#include "cudarc/export.hpp"

namespace cudarc {
class Stream;
}

namespace cudarc::detail {

enum class Access { read, write };

// Defined in src/core/buffer.hpp: its layout is the library's own.
class Buffer;

// What to call once borrowed memory is no longer used by cudarc (a DLPack deleter, for instance).
struct ReleaseHook {
    void (*call)(void* context) noexcept = nullptr;
    void* context = nullptr;
    [[nodiscard]] explicit operator bool() const noexcept { return call != nullptr; }
};

// Note [Stable buffers]
// ~~~~~~~~~~~~~~~~~~~~~
// A buffer's state (its memory, its hazard state) lives on the heap, owned by one BufferHandle. Moving a
// DeviceSlice, BorrowedSlice or PinnedBuffer moves the handle, never the state, so views and ParamTensors
// taken before the move stay valid: a std::vector<DeviceSlice<float>> may grow. A view must still not
// outlive its owner, like std::span. A library built with CUDARC_DEBUG_VIEWS (cudarc/config.hpp) catches
// one that does: buffers then live in slots that are never freed, each slot counts its buffers (its
// generation), every view carries the generation of its buffer, and a use of a view whose buffer is gone
// throws an error that says so, instead of reading freed memory. Release builds carry the field and skip
// the check.

// Frees the buffer's memory, ordered after every recorded use (or releases borrowed memory). Never throws.
CUDARC_API void destroy_buffer(Buffer* buffer) noexcept;

// The one owner of a Buffer (null: an empty slice). Move-only.
class BufferHandle {
  public:
    BufferHandle() noexcept = default;
    explicit BufferHandle(Buffer* buffer) noexcept : buffer_(buffer) {}
    BufferHandle(const BufferHandle&) = delete;
    BufferHandle& operator=(const BufferHandle&) = delete;
    BufferHandle(BufferHandle&& other) noexcept : buffer_(std::exchange(other.buffer_, nullptr)) {}
    BufferHandle& operator=(BufferHandle&& other) noexcept {
        if (this != &other) {
            reset();
            buffer_ = std::exchange(other.buffer_, nullptr);
        }
        return *this;
    }
    ~BufferHandle() { reset(); }

    void reset() noexcept {
        if (buffer_ != nullptr) destroy_buffer(std::exchange(buffer_, nullptr));
    }
    [[nodiscard]] Buffer* get() const noexcept { return buffer_; }
    [[nodiscard]] Buffer* release() noexcept { return std::exchange(buffer_, nullptr); }

  private:
    Buffer* buffer_ = nullptr;
};

// Allocates `bytes` on `stream` (uninitialized) from the device's memory source, or from its managed
// memory (DeviceSlice::managed). The allocation counts as a write by `stream`.
[[nodiscard]] CUDARC_API BufferHandle allocate_buffer(Stream& stream, std::size_t bytes);
[[nodiscard]] CUDARC_API BufferHandle allocate_managed_buffer(Stream& stream, std::size_t bytes);

// Facts of a buffer; null stands for an empty (default-constructed or moved-from) slice.
[[nodiscard]] CUDARC_API DevicePtr buffer_address(const Buffer* buffer) noexcept;
[[nodiscard]] CUDARC_API int buffer_device_ordinal(const Buffer* buffer) noexcept;
// Note [Stable buffers]: the buffer's generation (0 unless the library checks views).
[[nodiscard]] CUDARC_API std::uint64_t buffer_generation(const Buffer* buffer) noexcept;
// Note [Stable buffers]: throws when a view's buffer is gone (a library that checks views), else nothing.
CUDARC_API void check_view(const Buffer* buffer, std::uint64_t generation);

// The generation a new view of `buffer` carries.
[[nodiscard]] inline std::uint64_t view_generation(const Buffer* buffer) noexcept {
#if CUDARC_DEBUG_VIEWS
    return buffer_generation(buffer);
#else
    static_cast<void>(buffer);
    return 0;
#endif
}

// Declares that `stream` uses the whole buffer through raw pointers (DeviceSlice::record_stream).
CUDARC_API void record_stream(Stream& stream, Buffer* buffer);
// cudarc::prepare_indirect_access: work enqueued later, untracked, reads or writes [ptr, ptr + bytes).
CUDARC_API void prepare_indirect_access(Stream& stream, Buffer* buffer, DevicePtr ptr, std::size_t bytes,
                                        Access access);

// Non-template memory operations behind DeviceSlice<T> and cudarc::copy. Offsets and sizes in bytes;
// callers have already checked bounds and sizes. A null buffer throws "use of an empty slice".
CUDARC_API void copy_host_to_device(Stream& stream, Buffer* dst, DevicePtr dst_ptr, const void* src,
                                    std::size_t bytes);
CUDARC_API void copy_device_to_host(Stream& stream, void* dst, Buffer* src, DevicePtr src_ptr,
                                    std::size_t bytes);
CUDARC_API void copy_device_to_device(Stream& stream, Buffer* dst, DevicePtr dst_ptr, Buffer* src,
                                      DevicePtr src_ptr, std::size_t bytes);
CUDARC_API void memset_bytes(Stream& stream, Buffer* dst, DevicePtr dst_ptr, unsigned char value,
                             std::size_t bytes);
// cudarc::prefetch: managed memory to the stream's device (a no-op for other memory and while capturing).
CUDARC_API void prefetch_to_device(Stream& stream, Buffer* buffer, DevicePtr ptr, std::size_t bytes);

[[noreturn]] CUDARC_API void throw_out_of_range(const char* what, std::size_t offset, std::size_t count,
                                                std::size_t size);
[[noreturn]] CUDARC_API void throw_size_mismatch(const char* what, std::size_t dst_size,
                                                 std::size_t src_size);

}  // namespace cudarc::detail

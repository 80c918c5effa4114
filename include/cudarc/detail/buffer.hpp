// detail::Buffer — an untyped device allocation that knows which streams used it.
// The typed DeviceSlice<T> wraps one; library templates reach the non-template code through here.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "cudarc/detail/native_handles.hpp"

namespace cudarc {
class Stream;
}

namespace cudarc::detail {

class DeviceState;
class StreamState;
class MemoryResource;

enum class Access { read, write };

// One stream's use of a buffer. The event is recorded lazily: only when another stream must wait for
// this use (or the buffer is freed while the use may be in flight).
struct StreamUse {
    std::shared_ptr<StreamState> stream;
    NativeEvent event = nullptr;  // pooled; null until needed
};

// Hazard state of one buffer: the last writer and the readers since that write.
//
// Note: on a single stream nothing is recorded and nothing waited for — the check below is two
// comparisons. Only when a second stream touches the buffer are events recorded (on the earlier
// streams, capturing their work so far) and waits inserted.
class HazardState {
  public:
    HazardState() = default;
    explicit HazardState(std::shared_ptr<StreamState> first_writer) noexcept
        : writer_{std::move(first_writer)} {}
    HazardState(const HazardState&) = delete;
    HazardState& operator=(const HazardState&) = delete;
    HazardState(HazardState&&) noexcept = default;
    HazardState& operator=(HazardState&&) noexcept = default;
    ~HazardState() = default;  // events are released by Buffer, which knows the device

    // Orders an access on `stream` after every conflicting earlier access on other streams.
    void before_access(StreamState& stream, Access access) {
        if (writer_.stream.get() == &stream && readers_.empty()) return;  // single-stream fast path
        before_access_slow(stream, access);
    }
    // Notes that `stream` uses the buffer outside the library's knowledge (raw pointers): no waits are
    // inserted, but freeing the buffer will wait for that stream's work.
    void record_use(StreamState& stream);

    // Every recorded use (the writer and the readers), leaving this state empty. Events may be null.
    [[nodiscard]] std::vector<StreamUse> take_uses();
    // Drops the (home stream's) writer entry when used_only_on() holds, returning its event to the pool.
    void forget_home_use() noexcept;
    // True when no stream but `stream` used the buffer since it was created or last written.
    [[nodiscard]] bool used_only_on(const StreamState& stream) const noexcept {
        return readers_.empty() && (!writer_.stream || writer_.stream.get() == &stream);
    }

    [[nodiscard]] const StreamUse& writer() const noexcept { return writer_; }
    [[nodiscard]] const std::vector<StreamUse>& readers() const noexcept { return readers_; }

  private:
    void before_access_slow(StreamState& stream, Access access);

    StreamUse writer_;
    std::vector<StreamUse> readers_;  // at most one entry per stream, never the writer's stream
};

// An untyped allocation owned by a DeviceSlice. The memory is released, ordered after every recorded use,
// when the Buffer is destroyed.
class Buffer {
  public:
    Buffer() = default;
    // Allocates `bytes` on `stream` (uninitialized) from the device's memory source. The allocation counts
    // as a write by `stream`.
    Buffer(Stream& stream, std::size_t bytes);
    // The same in managed memory (DeviceSlice::managed).
    [[nodiscard]] static Buffer managed(Stream& stream, std::size_t bytes);
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    Buffer(Buffer&& other) noexcept;
    Buffer& operator=(Buffer&& other) noexcept;
    ~Buffer();

    [[nodiscard]] DevicePtr ptr() const noexcept { return ptr_; }
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
    [[nodiscard]] int device_ordinal() const noexcept;
    [[nodiscard]] const std::shared_ptr<DeviceState>& device() const noexcept { return device_; }
    // Whether the memory is managed (DeviceSlice::managed).
    [[nodiscard]] bool managed() const noexcept;
    [[nodiscard]] HazardState& hazards() noexcept { return hazards_; }
    [[nodiscard]] const HazardState& hazards() const noexcept { return hazards_; }

    // Checks that `stream` belongs to this buffer's device; throws a clear error otherwise.
    void check_same_device(const Stream& stream) const;

  private:
    friend void prefetch_to_device(Stream& stream, Buffer& buffer, DevicePtr ptr, std::size_t bytes);
    Buffer(Stream& stream, std::size_t bytes, MemoryResource& source);
    void release() noexcept;

    std::shared_ptr<DeviceState> device_;  // keeps the device (and its allocator) alive
    MemoryResource* source_ = nullptr;     // where the memory came from (owned by the device state)
    DevicePtr ptr_ = 0;
    std::size_t bytes_ = 0;
    void* allocation_ = nullptr;         // the memory source's bookkeeping for this allocation
    std::shared_ptr<StreamState> home_;  // the stream the memory was allocated on
    HazardState hazards_;
};

// Orders an access to `buffer` on `stream` (hazard tracking), checking the device first.
void prepare_access(const Stream& stream, Buffer& buffer, Access access);

// Non-template memory operations behind DeviceSlice<T> and cudarc::copy. Offsets and sizes in bytes;
// callers have already checked bounds and sizes.
void copy_host_to_device(Stream& stream, Buffer& dst, DevicePtr dst_ptr, const void* src, std::size_t bytes);
void copy_device_to_host(Stream& stream, void* dst, Buffer& src, DevicePtr src_ptr, std::size_t bytes);
void copy_device_to_device(Stream& stream, Buffer& dst, DevicePtr dst_ptr, Buffer& src, DevicePtr src_ptr,
                           std::size_t bytes);
void memset_bytes(Stream& stream, Buffer& dst, DevicePtr dst_ptr, unsigned char value, std::size_t bytes);
// cudarc::prefetch: managed memory to the stream's device (a no-op for other memory and while capturing).
void prefetch_to_device(Stream& stream, Buffer& buffer, DevicePtr ptr, std::size_t bytes);

[[noreturn]] void throw_out_of_range(const char* what, std::size_t offset, std::size_t count,
                                     std::size_t size);
[[noreturn]] void throw_size_mismatch(const char* what, std::size_t dst_size, std::size_t src_size);

}  // namespace cudarc::detail

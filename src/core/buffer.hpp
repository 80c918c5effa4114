// detail::Buffer — device memory that cudarc tracks, at a stable address (Note [Stable buffers] in
// cudarc/detail/buffer.hpp): either owned (allocated from the device's memory source or its managed memory,
// freed on destruction ordered after every recorded use) or borrowed (another library owns it; on
// destruction the owner's stream waits for cudarc's uses and an optional release hook runs once they
// complete).
#pragma once

#include <cstddef>
#include <memory>

#include "core/hazard_state.hpp"
#include "cudarc/detail/buffer.hpp"

namespace cudarc::detail {

class DeviceState;
class MemorySource;
class StreamState;

class Buffer {
  public:
    // Owned: `bytes` allocated on `stream` from `source` (the device's memory source, or its managed one).
    static BufferHandle allocate(StreamState& stream, std::size_t bytes, MemorySource& source);
    // Borrowed: `bytes` at `ptr` on `device` (checked by the caller). With an `owner` stream the memory
    // counts as written by it, and destruction makes it wait for cudarc's last uses. `hook` (optional)
    // runs once cudarc's uses have completed, without blocking the host.
    static BufferHandle borrow(const std::shared_ptr<DeviceState>& device, DevicePtr ptr, std::size_t bytes,
                               StreamState* owner, ReleaseHook hook);

    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    [[nodiscard]] DevicePtr ptr() const noexcept { return ptr_; }
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
    [[nodiscard]] bool borrowed() const noexcept { return borrowed_; }
    [[nodiscard]] int device_ordinal() const noexcept;
    [[nodiscard]] DeviceState& device() const noexcept { return *device_; }
    [[nodiscard]] const std::shared_ptr<DeviceState>& shared_device() const noexcept { return device_; }
    // Whether the memory is managed (DeviceSlice::managed).
    [[nodiscard]] bool managed() const noexcept;
    [[nodiscard]] MemorySource* source() const noexcept { return source_; }
    // Borrowed: the owner's stream, or null.
    [[nodiscard]] StreamState* owner() const noexcept { return borrowed_ ? home_ : nullptr; }
    [[nodiscard]] HazardState& hazards() noexcept { return hazards_; }
    [[nodiscard]] const HazardState& hazards() const noexcept { return hazards_; }
    // Note [Stable buffers].
    [[nodiscard]] std::uint64_t generation() const noexcept;

    // Checks that `stream` may use this buffer (its device, or one with peer access); throws a clear error.
    void check_stream(const StreamState& stream) const;

    // destroy_buffer: releases the memory and frees the object.
    static void destroy(Buffer* buffer) noexcept;

  private:
    Buffer(std::shared_ptr<DeviceState> device, MemorySource* source, std::size_t bytes, StreamState* home,
           bool borrowed, ReleaseHook hook) noexcept;
    ~Buffer();
    static void* storage();  // Note [Stable buffers]: a slot in debug-views builds
    static void free_storage(void* p) noexcept;
    void release() noexcept;
    void release_borrowed() noexcept;

    std::shared_ptr<DeviceState> device_;  // keeps the device (and its allocator) alive
    MemorySource* source_ = nullptr;       // owned: where the memory came from (the device state owns it)
    DevicePtr ptr_ = 0;
    std::size_t bytes_ = 0;
    void* allocation_ = nullptr;  // the memory source's bookkeeping for this allocation
    // Owned: the stream the memory was allocated on. Borrowed: the owner's stream, or null.
    // Note: a pooled or default stream's state lives as long as its device, which device_ keeps alive;
    // only a foreign stream's state needs the reference in home_keep_.
    StreamState* home_ = nullptr;
    std::shared_ptr<StreamState> home_keep_;
    HazardState hazards_;
    ReleaseHook on_release_;
    bool borrowed_ = false;
};

// The buffer behind a view or slice: checked not to be empty, else throws naming `what`.
[[nodiscard]] Buffer& non_empty(Buffer* buffer, const char* what);

}  // namespace cudarc::detail

// detail::Buffer — an untyped device allocation (or borrowed memory) that knows which streams used which
// of its bytes. The typed DeviceSlice<T> and BorrowedSlice<T> wrap one; library templates reach the
// non-template code through here.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "cudarc/detail/native_handles.hpp"
#include "cudarc/export.hpp"

namespace cudarc {
class Stream;
}

namespace cudarc::detail {

class DeviceState;
class StreamState;
class HazardTracker;
class MemorySource;
class HazardState;

enum class Access { read, write };

// One stream's use of a buffer, as a memory source or a release queue receives it. The event, when not
// null, was recorded on `stream` after the use; otherwise the receiver records one when it needs it.
struct StreamUse {
    std::shared_ptr<StreamState> stream;
    NativeEvent event = nullptr;  // pooled
};

// What to call once borrowed memory is no longer used by cudarc (a DLPack deleter, for instance).
struct ReleaseHook {
    void (*call)(void* context) noexcept = nullptr;
    void* context = nullptr;
    [[nodiscard]] explicit operator bool() const noexcept { return call != nullptr; }
};

// How many graph captures are under way in the process (Note [Capture overlay] in src/core/capture.hpp).
// While any is, the single-stream fast path below is off, so that captured accesses are seen.
extern CUDARC_API std::atomic<unsigned> captures_underway;

// What a graph keeps of a buffer its captured work used: the buffer's hazard state while it lives (null
// once it is released), and its address and size to name it in errors. Created at the buffer's first
// captured access; moves with the buffer.
struct BufferLink {
    HazardState* state = nullptr;
    DevicePtr address = 0;
    std::size_t bytes = 0;
};

// Hazard state of one buffer: which streams wrote and read which bytes (Note [Range hazards] in
// src/core/range_table.hpp).
//
// Note [Single-stream fast path]
// While one stream alone has written the whole buffer and nothing else happened since, `exclusive_` names
// it, and any access on that stream needs no wait and changes nothing: one pointer comparison (and one
// relaxed load: no capture under way). Only when a second stream touches the buffer is the range table
// built (and events recorded, lazily, on the earlier streams). A write of the whole buffer by one stream
// returns to the fast path.
class CUDARC_API HazardState {
  public:
    HazardState() noexcept;
    // A buffer of `bytes` last written as a whole by `first_writer` (may be null: untouched). The caller
    // keeps `first_writer` alive for as long as this state may name it.
    HazardState(std::size_t bytes, StreamState* first_writer) noexcept;
    HazardState(const HazardState&) = delete;
    HazardState& operator=(const HazardState&) = delete;
    HazardState(HazardState&& other) noexcept;
    HazardState& operator=(HazardState&& other) noexcept;
    ~HazardState();  // returns recorded events to their pools

    // Orders an access on `stream` to bytes [offset, offset + bytes) after every conflicting earlier
    // access on other streams. Throws (changing nothing) when a wait cannot be enqueued. During a capture
    // on this thread, an access by a captured stream goes to the capture instead (Note [Capture overlay]).
    void before_access(StreamState& stream, std::size_t offset, std::size_t bytes, Access access) {
        if (exclusive_ == &stream && captures_underway.load(std::memory_order_relaxed) == 0) return;
        before_access_slow(stream, offset, bytes, access);
    }
    // Called once the access's work is enqueued on `stream`: in the slow path, records an event right after
    // it, so that a later waiter on another stream orders after exactly this stream's uses of the buffer,
    // not after whatever the stream runs next (Note [Eager events]). Never throws; nothing on the fast path.
    // Note: the caller still holds the context scope that the work was enqueued under (Note [Context
    // scope]), so the record binds nothing.
    void after_access(StreamState& stream) noexcept {
        if ((exclusive_ == &stream || !tracker_) && captures_underway.load(std::memory_order_relaxed) == 0)
            return;
        after_access_slow(stream);
    }
    // Notes that `stream` uses the whole buffer outside the library's knowledge (raw pointers): no waits
    // are inserted, but later writers on other streams and the free wait for that stream's work.
    void record_use(StreamState& stream);

    // The same three, never diverted into a capture: the bookkeeping itself, which a capture's overlay
    // also uses (Note [Capture overlay]).
    void order_access(StreamState& stream, std::size_t offset, std::size_t bytes, Access access);
    void order_after_access(StreamState& stream) noexcept;
    void order_use(StreamState& stream);
    // Whether an access by a stream that never used the buffer would have to wait for anything.
    [[nodiscard]] bool would_wait(std::size_t offset, std::size_t bytes, Access access) const noexcept;

    // Every stream that used the buffer (one entry each, events possibly null), leaving this state
    // untouched and empty.
    [[nodiscard]] std::vector<StreamUse> take_uses();
    // Forgets everything (events back to their pools).
    void clear() noexcept;
    // Records the events it holds again on `stream` (a capture's overlay, once the capture has ended: Note
    // [Capture overlay]).
    void rerecord_events(NativeStream stream) noexcept;

    // The buffer's address, for the link (set by Buffer once its memory is known).
    void set_address(DevicePtr address) noexcept { address_ = address; }
    // The link graphs keep to this buffer, made on first use (Note [Capture overlay]).
    [[nodiscard]] const std::shared_ptr<BufferLink>& link();
    [[nodiscard]] BufferLink* link_if_any() const noexcept { return link_.get(); }
    // The buffer is going away: links now say so.
    void detach_link() noexcept;

    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
    // The stream that alone owns the whole buffer (Note [Single-stream fast path]), or null.
    [[nodiscard]] StreamState* exclusive() const noexcept { return exclusive_; }
    // For tests and diagnostics: the range table behind the slow path (null until a second stream came).
    [[nodiscard]] const HazardTracker* tracker() const noexcept { return tracker_.get(); }

  private:
    void before_access_slow(StreamState& stream, std::size_t offset, std::size_t bytes, Access access);
    void after_access_slow(StreamState& stream) noexcept;
    HazardTracker& ensure_tracker();

    StreamState* exclusive_ = nullptr;
    std::size_t bytes_ = 0;
    std::unique_ptr<HazardTracker> tracker_;
    DevicePtr address_ = 0;
    std::shared_ptr<BufferLink> link_;
};

// Device memory that cudarc tracks: either owned (allocated from the device's memory source or its managed
// memory source, freed on destruction ordered after every recorded use) or borrowed (another library owns it;
// on destruction the owner's stream is made to wait for cudarc's uses and an optional release hook runs once
// they complete).
class CUDARC_API Buffer {
  public:
    Buffer() = default;
    // Allocates `bytes` on `stream` (uninitialized) from the device's memory source. The allocation counts
    // as a write by `stream`.
    Buffer(Stream& stream, std::size_t bytes);
    // The same in managed memory (DeviceSlice::managed).
    [[nodiscard]] static Buffer managed(Stream& stream, std::size_t bytes);
    // Borrows `bytes` at `ptr` on `device`. With an `owner` stream, the memory counts as written by it
    // (cudarc's first use on another stream waits for it), and destruction makes it wait for cudarc's last
    // uses. `hook` (optional) runs once cudarc's uses have completed, without blocking the host.
    Buffer(const std::shared_ptr<DeviceState>& device, DevicePtr ptr, std::size_t bytes, const Stream* owner,
           ReleaseHook hook);
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    Buffer(Buffer&& other) noexcept;
    Buffer& operator=(Buffer&& other) noexcept;
    ~Buffer();

    [[nodiscard]] DevicePtr ptr() const noexcept { return ptr_; }
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
    [[nodiscard]] bool borrowed() const noexcept { return borrowed_; }
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
    Buffer(Stream& stream, std::size_t bytes, MemorySource& source);
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

// Orders an access to bytes [ptr, ptr + bytes) of `buffer` on `stream` (hazard tracking), checking the
// device first. `ptr` lies in the buffer (callers checked bounds).
CUDARC_API void prepare_access(const Stream& stream, Buffer& buffer, DevicePtr ptr, std::size_t bytes,
                               Access access);
// The same for the whole buffer.
CUDARC_API void prepare_access(const Stream& stream, Buffer& buffer, Access access);
// After the work of a prepared access is enqueued (HazardState::after_access).
CUDARC_API void finish_access(const Stream& stream, Buffer& buffer) noexcept;

// Non-template memory operations behind DeviceSlice<T> and cudarc::copy. Offsets and sizes in bytes;
// callers have already checked bounds and sizes.
CUDARC_API void copy_host_to_device(Stream& stream, Buffer& dst, DevicePtr dst_ptr, const void* src,
                                    std::size_t bytes);
CUDARC_API void copy_device_to_host(Stream& stream, void* dst, Buffer& src, DevicePtr src_ptr,
                                    std::size_t bytes);
CUDARC_API void copy_device_to_device(Stream& stream, Buffer& dst, DevicePtr dst_ptr, Buffer& src,
                                      DevicePtr src_ptr, std::size_t bytes);
CUDARC_API void memset_bytes(Stream& stream, Buffer& dst, DevicePtr dst_ptr, unsigned char value,
                             std::size_t bytes);
// cudarc::prefetch: managed memory to the stream's device (a no-op for other memory and while capturing).
CUDARC_API void prefetch_to_device(Stream& stream, Buffer& buffer, DevicePtr ptr, std::size_t bytes);

[[noreturn]] CUDARC_API void throw_out_of_range(const char* what, std::size_t offset, std::size_t count,
                                                std::size_t size);
[[noreturn]] CUDARC_API void throw_size_mismatch(const char* what, std::size_t dst_size,
                                                 std::size_t src_size);

}  // namespace cudarc::detail

// The shared state behind every handle to one device.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/atomic_counters.hpp"
#include "core/event_pool.hpp"
#include "core/memory_source.hpp"
#include "cudarc/device.hpp"
#include "cudarc/stream.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::detail {

class StreamState;

// Who destroys a stream handle.
enum class StreamOwnership {
    owned,    // created for one Stream object, destroyed with it
    pooled,   // taken from the device's pool by fork(), returned to it on join
    foreign,  // wrapped; never destroyed by cudarc
};

// Streams handed to forked children. Note: creating and destroying a stream costs microseconds; reusing
// one keeps fork + join at the cost of two event records and two waits. A returned stream may still have
// queued work: a new child waits for its own parent first, and the old work only adds ordering, never
// removes it.
class StreamPool {
  public:
    explicit StreamPool(DeviceState& device) noexcept : device_(device) {}
    StreamPool(const StreamPool&) = delete;
    StreamPool& operator=(const StreamPool&) = delete;
    ~StreamPool();
    [[nodiscard]] sys::Stream acquire(int priority);
    void release(sys::Stream stream, int priority) noexcept;
    void clear() noexcept;

  private:
    DeviceState& device_;
    std::mutex mutex_;
    std::vector<std::pair<int, sys::Stream>> free_;  // (priority, stream)
};

class DeviceState : public std::enable_shared_from_this<DeviceState> {
  public:
    DeviceState(const sys::DriverApi& api, int ordinal, const DeviceOptions& options);
    DeviceState(const DeviceState&) = delete;
    DeviceState& operator=(const DeviceState&) = delete;
    ~DeviceState();

    // Makes this device's context current on the calling thread.
    // Note: a thread-local cache makes this free when it is already current (no driver call). Code outside
    // cudarc that switches contexts on the same thread behind our back must switch back (the CUDA runtime
    // and PyTorch use the same primary context, so a single-device program is unaffected).
    void bind() const {
        if (current_.context != context_ || current_.generation != generation_) bind_slow();
    }
    // Throws the named error for a failing call on this device.
    void check(sys::Result result, const char* call) const {
        if (result != sys::kSuccess) throw sys::make_error(api_, call, result, ordinal_);
    }
    // For destructors: records the first failure so the next Device call can rethrow it.
    void defer(sys::Result result, const char* call) noexcept;
    void defer(const Error& error) noexcept;
    void rethrow_deferred_error();

    [[nodiscard]] const sys::DriverApi& api() const noexcept { return api_; }
    [[nodiscard]] int ordinal() const noexcept { return ordinal_; }
    [[nodiscard]] sys::Device device() const noexcept { return device_; }
    [[nodiscard]] sys::Context context() const noexcept { return context_; }
    [[nodiscard]] AtomicCounters& counters() noexcept { return counters_; }
    [[nodiscard]] EventPool& events() noexcept { return events_; }
    [[nodiscard]] StreamPool& streams() noexcept { return streams_; }
    // `priority` clamped to the device's range (read once at open).
    [[nodiscard]] int clamp_priority(int priority) const noexcept;
    [[nodiscard]] MemoryResource& memory() noexcept { return *memory_; }
    [[nodiscard]] MemorySource memory_source() const noexcept { return memory_source_; }
    [[nodiscard]] Stream& default_stream() noexcept { return *default_stream_; }
    [[nodiscard]] const std::shared_ptr<StreamState>& default_stream_state() const noexcept;

    // An event recorded on `stream` now (pooled; counted).
    [[nodiscard]] sys::Event record_event(sys::Stream stream);
    // `waiter` waits for `event` (counted as a cross-stream wait).
    void wait_event(sys::Stream waiter, sys::Event event);

    // The shared state of device `ordinal`, opened on first use.
    [[nodiscard]] static std::shared_ptr<DeviceState> open(int ordinal, const DeviceOptions& options);

    // Peer access (core/peer_access.cpp). True when this device's streams may use `owner`'s memory: it is
    // this device, or enable_peer_access(owner) succeeded for the context `owner` holds now.
    [[nodiscard]] bool can_use_memory_of(const DeviceState& owner) const noexcept {
        return &owner == this ||
               (owner.ordinal_ >= 0 && owner.ordinal_ < kMaxPeerOrdinals &&
                peers_[owner.ordinal_].load(std::memory_order_acquire) == owner.generation_);
    }
    void enable_peer_access(const DeviceState& peer);
    // Forgets which context the calling thread has current. For code that calls a library which switches
    // devices behind cudarc's back (NCCL does, through the CUDA runtime): the next bind() sets it again.
    static void forget_thread_binding() noexcept { current_ = {}; }

  private:
    void bind_slow() const;

    struct ThreadBinding {
        sys::Context context = nullptr;
        std::uint64_t generation = 0;
    };
    // Note: the generation changes whenever a device state is created, so a context handle value reused
    // after a release can never match a stale cache entry.
    static thread_local ThreadBinding current_;

    const sys::DriverApi& api_;
    int ordinal_;
    std::uint64_t generation_;
    sys::Device device_ = 0;
    sys::Context context_ = nullptr;
    AtomicCounters counters_;
    EventPool events_{*this};
    StreamPool streams_{*this};
    int priority_low_ = 0;   // numerically largest: least urgent
    int priority_high_ = 0;  // numerically smallest: most urgent
    MemorySource memory_source_;
    std::unique_ptr<MemoryResource> memory_;
    std::unique_ptr<Stream> default_stream_;
    std::mutex deferred_mutex_;
    std::optional<Error> deferred_;
    // Per peer ordinal: the generation of the peer's state whose context this one has peer access to (0:
    // none). Note: a generation, not a flag: when a peer's state is released and opened again its primary
    // context may be new, and access to the old one says nothing about it.
    static constexpr int kMaxPeerOrdinals = 64;
    std::array<std::atomic<std::uint64_t>, kMaxPeerOrdinals> peers_{};
};

// A stream's state, shared by its Stream object and every buffer that used it.
class StreamState : public std::enable_shared_from_this<StreamState> {
  public:
    StreamState(DeviceState& device, sys::Stream handle, StreamOwnership ownership, int priority) noexcept
        : device_(device), handle_(handle), ownership_(ownership), priority_(priority) {}
    StreamState(const StreamState&) = delete;
    StreamState& operator=(const StreamState&) = delete;
    ~StreamState();

    [[nodiscard]] DeviceState& device() const noexcept { return device_; }
    [[nodiscard]] sys::Stream handle() const noexcept { return handle_; }
    [[nodiscard]] StreamOwnership ownership() const noexcept { return ownership_; }
    [[nodiscard]] int priority() const noexcept { return priority_; }

    // A pooled event that completes when everything submitted to this stream so far has completed. After
    // the stream is gone, one that completes after its final work.
    [[nodiscard]] sys::Event mark();
    // Makes `waiter` wait for everything submitted to this stream so far (or, once it is gone, its final
    // work). Counted; a no-op when `waiter` is this stream.
    void order_before(sys::Stream waiter);
    // Called once by the owning Stream before the handle is destroyed: `final_event` (owned from now on)
    // completes after the stream's last work.
    void retire(sys::Event final_event) noexcept;
    [[nodiscard]] bool alive() const;

  private:
    DeviceState& device_;
    sys::Stream handle_;
    StreamOwnership ownership_;
    int priority_;
    mutable std::mutex mutex_;  // guards retirement against a concurrent mark() from another thread
    bool retired_ = false;
    sys::Event final_event_ = nullptr;
};

}  // namespace cudarc::detail

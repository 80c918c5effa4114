// The shared state behind every handle to one device.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
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
class DeviceState;

// Note [Context scope]
// Every driver call cudarc makes for a device runs while the device's context is current on the calling
// thread. Frameworks switch contexts behind cudarc's back (cuCtxPushCurrent / cuCtxSetCurrent), so a
// cached "already bound" flag cannot be trusted: each scope asks the driver (cuCtxGetCurrent, one cheap
// call, the only cost on the launch path) and, when another context is current, makes the device's current
// for the scope's duration and puts the other one back at its end, so the framework finds its context as
// it left it. When no context was current the device's stays current (nobody's work can be disturbed and
// the next call saves two driver calls), as the CUDA runtime does. Objects that belong to a context
// (pooled events and streams, modules, page-locked memory) are therefore always created in the device's
// own context.
class ContextScope {
  public:
    explicit ContextScope(const DeviceState& device);
    // Never throws: a failure to bind is deferred on the device.
    ContextScope(const DeviceState& device, std::nothrow_t) noexcept;
    ContextScope(const ContextScope&) = delete;
    ContextScope& operator=(const ContextScope&) = delete;
    ~ContextScope();

  private:
    void enter(sys::Result query, sys::Context current);
    void leave() noexcept;

    const DeviceState* device_;
    sys::Context previous_ = nullptr;
    bool restore_ = false;
};

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

    // Makes this device's context current on the calling thread until the returned scope ends: see
    // Note [Context scope]. Throws DeviceLost once the device is lost.
    [[nodiscard]] ContextScope bind() const { return ContextScope(*this); }
    // The same for destructors and other no-throw paths: a failure is deferred (rethrow_deferred_error),
    // and the calls that follow run in whatever context is current (they fail and are deferred too).
    [[nodiscard]] ContextScope bind_or_defer() const noexcept { return ContextScope(*this, std::nothrow); }
    // Throws the named error for a failing call on this device (DeviceLost for a sticky error, and for any
    // failure once the device is lost).
    void check(sys::Result result, const char* call) const {
        if (result != sys::kSuccess) [[unlikely]]
            throw_error(result, call);
    }
    [[noreturn]] void throw_error(sys::Result result, const char* call) const;
    // Throws `error`, a driver error of a call on this device, or DeviceLost in its place when the error is
    // sticky or the device is already lost (see Note [Lost devices]).
    [[noreturn]] void throw_error(const Error& error) const;
    // Rethrows the exception being handled as it is, unless it is a cudarc::Error that loses the device
    // (then DeviceLost). Call it from a catch block.
    [[noreturn]] void rethrow_current() const;

    // True once a sticky error (an illegal address, a kernel fault) made the context unusable.
    [[nodiscard]] bool lost() const noexcept { return lost_.load(std::memory_order_relaxed); }
    [[noreturn]] void throw_lost() const;
    // For destructors: records the first failure so the next Device call can rethrow it (a sticky one also
    // loses the device).
    void defer(sys::Result result, const char* call) const noexcept;
    void defer(const Error& error) const noexcept;
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
    // The source of DeviceSlice::managed memory, made on first use.
    [[nodiscard]] MemoryResource& managed_memory();
    [[nodiscard]] MemorySource memory_source() const noexcept { return memory_source_; }
    [[nodiscard]] Stream& default_stream() noexcept { return *default_stream_; }
    [[nodiscard]] const std::shared_ptr<StreamState>& default_stream_state() const noexcept;

    // An event recorded on `stream` now (pooled; counted). Note: the caller holds a context scope, as for
    // wait_event (one scope covers a record and its wait; see Note [Context scope]).
    [[nodiscard]] sys::Event record_event(sys::Stream stream);
    // `waiter` waits for `event` (counted as a cross-stream wait).
    void wait_event(sys::Stream waiter, sys::Event event);

    // The shared state of device `ordinal`, opened on first use.
    [[nodiscard]] static std::shared_ptr<DeviceState> open(int ordinal, const DeviceOptions& options);

  private:
    friend class ContextScope;
    // Marks the device lost with `cause` (the first sticky error) unless it is already; noexcept so that
    // destructors can call it.
    void mark_lost(const Error& cause) const noexcept;

    const sys::DriverApi& api_;
    int ordinal_;
    sys::Device device_ = 0;
    sys::Context context_ = nullptr;
    AtomicCounters counters_;
    EventPool events_{*this};
    StreamPool streams_{*this};
    int priority_low_ = 0;   // numerically largest: least urgent
    int priority_high_ = 0;  // numerically smallest: most urgent
    MemorySource memory_source_;
    std::unique_ptr<MemoryResource> memory_;
    std::once_flag managed_once_;
    std::unique_ptr<MemoryResource> managed_memory_;
    std::unique_ptr<Stream> default_stream_;
    mutable std::mutex deferred_mutex_;
    mutable std::optional<Error> deferred_;
    mutable std::atomic<bool> lost_{false};
    mutable std::mutex lost_mutex_;
    mutable std::optional<Error> lost_cause_;  // the first sticky error
};

inline ContextScope::ContextScope(const DeviceState& device) : device_(&device) {
    if (device.lost()) [[unlikely]]
        device.throw_lost();
    sys::Context current = nullptr;
    const sys::Result result = device.api_.ctx_get_current(&current);
    if (result != sys::kSuccess || current != device.context_) [[unlikely]]
        enter(result, current);
}

inline ContextScope::~ContextScope() {
    if (restore_) [[unlikely]]
        leave();
}

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

// The shared state behind every handle to one device.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/atomic_counters.hpp"
#include "core/event_pool.hpp"
#include "core/memory_source.hpp"
#include "core/timeline.hpp"
#include "cudarc/config.hpp"
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

class CaptureSession;

// Whether a graph capture is under way on the calling thread (Note [Capture overlay]). One relaxed load
// when no capture is under way anywhere.
[[nodiscard]] bool capture_on_this_thread() noexcept;

// Who destroys a stream handle.
enum class StreamOwnership {
    owned,    // created for one Stream object, destroyed with it
    pooled,   // taken from the device's pool by fork(), returned to it on join
    foreign,  // wrapped; never destroyed by cudarc
};

// Streams handed to forked children and to Device::create_stream, with their states. Note: creating and
// destroying a stream costs microseconds; reusing one keeps fork + join at the cost of two event records
// and two waits. A returned stream may still have queued work: a new child waits for its own parent first,
// and the old work only adds ordering, never removes it. The state goes back to the pool with its handle
// (Note [Stream identity]): buffers that name it keep meaning that same queue of work.
class StreamPool {
  public:
    explicit StreamPool(DeviceState& device) noexcept : device_(device) {}
    StreamPool(const StreamPool&) = delete;
    StreamPool& operator=(const StreamPool&) = delete;
    ~StreamPool();
    [[nodiscard]] std::shared_ptr<StreamState> acquire(int priority);
    void release(std::shared_ptr<StreamState> state) noexcept;
    // Destroys every pooled stream (the device is going away).
    void clear() noexcept;

  private:
    DeviceState& device_;
    std::mutex mutex_;
    std::vector<std::shared_ptr<StreamState>> free_;  // capacity: every state made (never reallocates)
    std::size_t created_ = 0;
};

// Calls release hooks (DLPack deleters, for instance) once the events they wait for have completed.
//
// Note [Deferred release]
// Borrowed memory goes back to its owner only after cudarc's uses of it have completed on the device, and
// the host must not block for that. A CUDA host callback (cuLaunchHostFunc) could run the hook at the
// right moment, but a callback must not call CUDA, and a framework's deleter may. So each hook waits in a
// per-device queue with the events of the uses it must follow; the queue is polled (cuEventQuery, never a
// wait) when memory is allocated or borrowed and after every synchronize, and at device teardown it waits
// for what is left. A hook therefore runs on a thread that calls into cudarc, outside every cudarc lock.
// A poll that finds nothing ready lets the next kSkippedPolls allocations and borrows pass without one: a
// step that borrows hundreds of tensors would otherwise query the same pending event at every borrow. A
// host wait always polls. So a hook runs at most that many allocations or borrows after its events
// completed, or at the next host wait.
class DeferredReleases {
  public:
    explicit DeferredReleases(DeviceState& device) noexcept : device_(device) {}
    DeferredReleases(const DeferredReleases&) = delete;
    DeferredReleases& operator=(const DeferredReleases&) = delete;
    ~DeferredReleases();

    // Calls `hook` once every event has completed (at once when there are none). Never throws: without
    // memory to queue, it waits on the host (counted) and calls the hook. Hooks often share their events
    // (a step's releases wait for one event per stream): a hook queued with the same events as the last
    // one joins its group, so a poll costs one query per distinct event and one check per group, however
    // many hooks wait (a step that borrows hundreds of tensors polls at each borrow).
    void add(std::span<const EventRef> events, ReleaseHook hook) noexcept;
    // At an allocation or a borrow: calls the hooks whose events have completed, unless a recent poll found
    // nothing ready (Note [Deferred release]). One relaxed load when nothing is queued.
    // Note: not during a capture on this thread, where an event query would invalidate the capture.
    void poll() noexcept {
        if (queued_.load(std::memory_order_relaxed) == 0 || capture_on_this_thread()) return;
        // Note: a relaxed load and store, not an atomic decrement: a count two threads both decrement
        // once only skips one poll less.
        if (const unsigned skip = skip_.load(std::memory_order_relaxed); skip != 0) {
            skip_.store(skip - 1, std::memory_order_relaxed);
            return;
        }
        poll_slow();
    }
    // After a host wait: always polls.
    void poll_now() noexcept {
        if (queued_.load(std::memory_order_relaxed) != 0 && !capture_on_this_thread()) poll_slow();
    }
    // How many polls at allocations and borrows a poll that found nothing ready lets pass.
    static constexpr unsigned kSkippedPolls = 16;
    // Waits on the host for every queued event (counted) and calls every hook (device teardown).
    void drain() noexcept;
    [[nodiscard]] std::size_t queued() const noexcept { return queued_.load(std::memory_order_relaxed); }
    // How many groups the queued hooks form (tests).
    [[nodiscard]] std::size_t groups() {
        std::lock_guard lock(mutex_);
        return groups_.size();
    }

  private:
    // Hooks that wait for the same events, in the order they were queued.
    struct Group {
        std::vector<EventRef> events;
        std::vector<ReleaseHook> hooks;
    };
    void poll_slow() noexcept;
    static void finish(Group& group) noexcept;
    // Whether one of groups[0, end) waits for `event` too.
    static bool queued_before(const std::vector<Group>& groups, std::size_t end,
                              const SharedEvent* event) noexcept;

    DeviceState& device_;
    std::mutex mutex_;
    std::vector<Group> groups_;
    std::atomic<std::size_t> queued_{0};  // hooks, over all groups
    std::atomic<unsigned> skip_{0};       // polls still to let pass
};

// Polls a device's release queue when it goes out of scope, after the scopes declared after it (so outside
// their context: hooks run in the caller's own), whether or not an exception is on its way.
class PollReleasesOnExit {
  public:
    explicit PollReleasesOnExit(DeviceState& device) noexcept : device_(device) {}
    PollReleasesOnExit(const PollReleasesOnExit&) = delete;
    PollReleasesOnExit& operator=(const PollReleasesOnExit&) = delete;
    ~PollReleasesOnExit();

  private:
    DeviceState& device_;
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
    // Waits on the host for all of the device's work (counted): the fallback when an ordering that should
    // be enqueued could not be. Never throws.
    void synchronize_noexcept() noexcept;
    // Throws the named error for a failing call of `entry` on this device (DeviceLost for a sticky error,
    // and for any failure once the device is lost). The error names the backend's function (Note [One
    // driver list]), followed by `context` as given (" (kernel 'saxpy')").
    void check(sys::Result result, sys::Entry entry) const {
        if (result != sys::kSuccess) [[unlikely]]
            throw_error(result, entry);
    }
    [[noreturn]] void throw_error(sys::Result result, sys::Entry entry, std::string_view context = {}) const;
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
    void defer(sys::Result result, sys::Entry entry) const noexcept;
    void defer(const Error& error) const noexcept;
    void rethrow_deferred_error();

    [[nodiscard]] const sys::DriverApi& api() const noexcept { return api_; }
    [[nodiscard]] int ordinal() const noexcept { return ordinal_; }
    [[nodiscard]] sys::Device device() const noexcept { return device_; }
    [[nodiscard]] sys::Context context() const noexcept { return context_; }
    [[nodiscard]] AtomicCounters& counters() noexcept { return counters_; }
    [[nodiscard]] EventPool& events() noexcept { return events_; }
    [[nodiscard]] StreamPool& streams() noexcept { return streams_; }
    [[nodiscard]] DeferredReleases& releases() noexcept { return releases_; }
    // `priority` clamped to the device's range (read once at open).
    [[nodiscard]] int clamp_priority(int priority) const noexcept;
    [[nodiscard]] MemorySource& memory() noexcept { return *memory_; }
    // The source of DeviceSlice::managed memory, made on first use.
    [[nodiscard]] MemorySource& managed_memory();
    [[nodiscard]] cudarc::MemorySource memory_source() const noexcept { return memory_source_; }
    [[nodiscard]] Stream& default_stream() noexcept { return *default_stream_; }
    [[nodiscard]] const std::shared_ptr<StreamState>& default_stream_state() const noexcept;

    // An event recorded on `stream` now (pooled; counted). Note: the caller holds a context scope, as for
    // wait_event (one scope covers a record and its wait; see Note [Context scope]).
    [[nodiscard]] sys::Event record_event(sys::Stream stream);
    // Records `event` (owned by the caller) on `stream` now (counted).
    void record_into(sys::Event event, sys::Stream stream);
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
    void enable_peer_access(DeviceState& peer);

  private:
    friend class ContextScope;
    // Marks the device lost with `cause` (the first sticky error) unless it is already; noexcept so that
    // destructors can call it.
    void mark_lost(const Error& cause) const noexcept;

    const sys::DriverApi& api_;
    int ordinal_;
    // Changes whenever a device state is created, so that peer access granted to an earlier state's
    // context (peers_) never counts for a new one.
    std::uint64_t generation_;
    sys::Device device_ = 0;
    sys::Context context_ = nullptr;
    AtomicCounters counters_;
    EventPool events_{*this};
    StreamPool streams_{*this};
    DeferredReleases releases_{*this};
    int priority_low_ = 0;   // numerically largest: least urgent
    int priority_high_ = 0;  // numerically smallest: most urgent
    cudarc::MemorySource memory_source_;
    std::unique_ptr<MemorySource> memory_;
    std::once_flag managed_once_;
    std::unique_ptr<MemorySource> managed_memory_;
    std::unique_ptr<Stream> default_stream_;
    mutable std::mutex deferred_mutex_;
    mutable std::optional<Error> deferred_;
    mutable std::atomic<bool> lost_{false};
    mutable std::mutex lost_mutex_;
    mutable std::optional<Error> lost_cause_;  // the first sticky error
    // Per peer ordinal: the generation of the peer's state whose context this one has peer access to (0:
    // none). Note: a generation, not a flag: when a peer's state is released and opened again its primary
    // context may be new, and access to the old one says nothing about it.
    static constexpr int kMaxPeerOrdinals = 64;
    std::array<std::atomic<std::uint64_t>, kMaxPeerOrdinals> peers_{};
};

// Note [No CUDA in host functions]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The driver forbids CUDA calls inside a host function (cuLaunchHostFunc): one may deadlock or fail. cudarc
// cannot stop a user's function from calling the driver itself, but it can refuse its own calls: a build
// with assertions (no NDEBUG) or with CUDARC_DEBUG_VIEWS marks the driver thread while a host function runs
// (in_host_function), and every call that binds a context there throws instead of reaching the driver
// (the error is then kept for rethrow_deferred_error, like any exception from the function).
#if !defined(NDEBUG) || CUDARC_DEBUG_VIEWS
#define CUDARC_CHECK_HOST_FUNCTIONS 1
#else
#define CUDARC_CHECK_HOST_FUNCTIONS 0
#endif
[[nodiscard]] bool& in_host_function() noexcept;
[[noreturn]] void throw_cuda_call_in_host_function();

inline ContextScope::ContextScope(const DeviceState& device) : device_(&device) {
    if (device.lost()) [[unlikely]]
        device.throw_lost();
#if CUDARC_CHECK_HOST_FUNCTIONS
    if (in_host_function()) [[unlikely]]
        throw_cuda_call_in_host_function();
#endif
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
//
// Note [Stream identity]
// Hazard entries and the allocator's per-stream pools must name a stream by something that can never come
// to mean another stream. A pooled or default stream's state lives as long as its device, and cudarc
// never destroys such a stream's handle while the device lives, so its handle value is its key. A foreign
// stream (Stream::wrap) may be destroyed by its owner once its wrapper is gone, and its handle value then
// reused by an unrelated stream: its key is its state's address with the low bit set (handles are
// aligned, so the two kinds never collide), and the state is retired when the wrapper is destroyed: a
// final event is recorded on the stream, and from then on the state stands for "everything up to that
// event" without ever touching the handle again. The allocator moves a retired key's blocks to the
// default stream, which first waits for the final event.
class StreamState : public std::enable_shared_from_this<StreamState> {
  public:
    // Takes an event for order_before() from the device's pool (throws when none can be created).
    StreamState(DeviceState& device, sys::Stream handle, StreamOwnership ownership, int priority);
    StreamState(const StreamState&) = delete;
    StreamState& operator=(const StreamState&) = delete;
    ~StreamState();

    [[nodiscard]] DeviceState& device() const noexcept { return device_; }
    [[nodiscard]] sys::Stream handle() const noexcept { return handle_; }
    [[nodiscard]] StreamOwnership ownership() const noexcept { return ownership_; }
    [[nodiscard]] int priority() const noexcept { return priority_; }
    // Note [Stream identity].
    [[nodiscard]] std::uintptr_t key() const noexcept { return key_; }
    // Note [Stream timelines]: the stream's position, its events and how far it has waited for others.
    [[nodiscard]] Timeline& timeline() noexcept { return timeline_; }
    [[nodiscard]] const Timeline& timeline() const noexcept { return timeline_; }

    // An event that completes when everything submitted to this stream so far has completed (after
    // retirement: its final event; null when that work is known complete).
    [[nodiscard]] EventRef mark() { return timeline_.event_covering(kEverythingSoFar); }
    // Makes `waiter` wait for everything submitted to this stream so far (or, once retired, its final
    // work): a join. Counted; a no-op when `waiter` is this stream. Uses the state's own event, so it touches
    // no pool (Note [Waits capture the event] in core/event_pool.hpp); the waiter's clock learns it.
    void order_before(StreamState& waiter);
    // Called once, by the owning Stream, before the handle may go away. `final_event` (owned from now on)
    // completes after the stream's last work; null means that work is known to be complete.
    void retire(sys::Event final_event) noexcept;
    [[nodiscard]] bool alive() const noexcept { return !timeline_.retired(); }

    // Note [Capture overlay]: the capture this stream takes part in (null: none), and an event recorded
    // just before it joined, which stands for its work outside the capture. Set and read only by the
    // capturing thread.
    [[nodiscard]] CaptureSession* capture() const noexcept { return capture_; }
    [[nodiscard]] const EventRef& precapture_mark() const noexcept { return precapture_; }
    void enter_capture(CaptureSession* capture, EventRef precapture_mark) noexcept;
    void leave_capture() noexcept;

  private:
    DeviceState& device_;
    sys::Stream handle_;
    StreamOwnership ownership_;
    int priority_;
    std::uintptr_t key_;
    Timeline timeline_;
    sys::Event scratch_ = nullptr;  // for order_before
    CaptureSession* capture_ = nullptr;
    EventRef precapture_;  // set while capture_ is
};

}  // namespace cudarc::detail

/// @file
/// cudarc::Stream — an ordered queue of device work; forks from a parent and joins back into it.
#pragma once

#include <concepts>
#include <cstddef>

#include <memory>
#include <utility>

#include "cudarc/detail/internals.hpp"
#include "cudarc/detail/native_handles.hpp"
#include "cudarc/export.hpp"

namespace cudarc {

class Device;
class Event;

namespace detail {
class DeviceState;
class StreamState;

/// A host function queued by Stream::host_function, type-erased (it may be move-only).
class HostTask {
  public:
    HostTask() = default;
    HostTask(const HostTask&) = delete;
    HostTask& operator=(const HostTask&) = delete;
    virtual ~HostTask() = default;
    virtual void run() = 0;
};
template <typename F>
class HostTaskOf final : public HostTask {
  public:
    explicit HostTaskOf(F f) : f_(std::move(f)) {}
    void run() override { f_(); }

  private:
    F f_;
};
}  // namespace detail

/// How a created or forked stream is made.
struct StreamOptions {
    /// CUDA stream priority: lower numbers run first; 0 is the default. Clamped to the device's range.
    int priority = 0;
};

/// An ordered queue of device work on one device. Move-only. Three kinds:
///  - created (Device::create_stream): owned; its handle comes from the device's stream pool and goes back
///    to it when the object is destroyed (pooled handles are destroyed with the device, so a handle's value
///    names one stream for the device's whole life);
///  - forked (Stream::fork): owned and pooled the same way; it first waits for the parent's work so far,
///    and its destructor makes the parent wait for the child's last work (an event and cuStreamWaitEvent:
///    the host never blocks);
///  - wrapped (Stream::wrap): a foreign stream, e.g. another framework's current stream, never destroyed
///    by cudarc. It must outlive its wrapper, and nothing more: destroying the wrapper records a final
///    event on the stream, and buffers or allocations that used it order after that event from then on
///    without touching the handle again (docs/architecture.md, "Foreign streams").
/// A stream is used by one host thread at a time.
class CUDARC_API Stream {
  public:
    /// Wraps a stream created elsewhere without taking ownership. Throws when it does not belong to
    /// `device`'s context (on CUDA; HIP cannot tell a stream's device). The stream must stay valid until
    /// the wrapper is destroyed.
    [[nodiscard]] static Stream wrap(const Device& device, NativeStream foreign);
    /// A null stream is the legacy stream (Note [No legacy stream] in device.hpp): wrapping it does not
    /// compile (as CCCL deletes stream_ref(nullptr_t)).
    static Stream wrap(const Device& device, std::nullptr_t) = delete;

    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    /// Takes over `other`'s stream; the moved-from Stream may only be destroyed or assigned to.
    Stream(Stream&& other) noexcept;
    /// Releases this stream (as on destruction: a forked one joins its parent) and takes over `other`'s.
    Stream& operator=(Stream&& other) noexcept;
    /// A forked stream joins its parent (an event and a cross-stream wait) and goes back to the pool; a
    /// created one goes back to the pool; a wrapped one records a final event on the foreign stream. Never
    /// blocks the host (unless that record fails: then it waits for the stream, or for the whole device
    /// where that wait fails too, counted). Never throws.
    ~Stream();

    /// A child stream that first waits for this stream's work so far, and joins back on destruction. Forked
    /// from a stream being captured, the child takes part in the capture (docs/graphs.md). Costs an event
    /// record and a cross-stream wait here and again at the join (the stream comes from the device's pool);
    /// the host never blocks.
    [[nodiscard]] Stream fork(const StreamOptions& options = {});
    /// Makes this stream wait for the work submitted to `other` so far, `other` on this device or another.
    /// Never blocks the host. During a capture: a stream that joins a captured one takes part in the capture
    /// from then on; a captured stream cannot join one outside the capture (throws).
    void join(const Stream& other);
    /// Makes this stream wait for `event`'s last record. During a capture, waiting for an event recorded
    /// inside it makes this stream take part; a captured stream waiting for an event recorded outside gets an
    /// event-wait node (each replay waits for the event's latest record).
    void wait(const Event& event);

    /// Enqueues `f()` in stream order (cuLaunchHostFunc): it runs on a driver thread once the work
    /// submitted before it has completed, and work submitted after it waits for it. Never blocks the host.
    /// The driver's rule: `f` must not call CUDA, so no cudarc call that reaches the driver either (a build
    /// with assertions or CUDARC_DEBUG_VIEWS throws from such a call: Note [No CUDA in host functions]).
    /// Keep `f` short: the stream stalls while it runs. An exception thrown by `f` is caught and kept for
    /// Device::rethrow_deferred_error. Throws inside a graph capture, and where the driver has no host
    /// functions.
    template <typename F>
    requires std::invocable<F&>
    void host_function(F f) { enqueue_host_task(std::make_unique<detail::HostTaskOf<F>>(std::move(f))); }

    /// Blocks the host until the stream's work completes (counted). Throws inside a graph capture.
    void synchronize();
    /// True when all work submitted so far has completed. Never blocks. Throws inside a graph capture.
    [[nodiscard]] bool query() const;
    /// True while work on this stream is being captured into a graph (an invalidated capture counts until
    /// it is ended). One driver query; never blocks.
    [[nodiscard]] bool is_capturing() const;

    /// The driver's handle (CUstream; hipStream_t on HIP). Work enqueued through it bypasses hazard tracking.
    [[nodiscard]] NativeStream native() const noexcept;
    /// False for a wrapped foreign stream, true for created and forked ones.
    [[nodiscard]] bool owned() const noexcept;
    /// The stream's priority (a created or forked one's, clamped to the device's range).
    [[nodiscard]] int priority() const;
    /// The ordinal of the stream's device.
    [[nodiscard]] int device_ordinal() const noexcept;
    /// A handle to the device this stream belongs to.
    [[nodiscard]] Device device() const;

  private:
    friend struct detail::Internals;  // Note [Internal access]
    Stream(std::shared_ptr<detail::DeviceState> keep_alive, std::shared_ptr<detail::StreamState> state,
           const std::shared_ptr<detail::StreamState>& parent) noexcept;

    void release() noexcept;
    void enqueue_host_task(std::unique_ptr<detail::HostTask> task);

    void join_parent() noexcept;

    // Note: member order matters: the device state must outlive the stream states.
    std::shared_ptr<detail::DeviceState> keep_alive_;  // null for a device's own default stream
    std::shared_ptr<detail::StreamState> state_;
    // Set for forked streams: joined on destruction. Note [Stream identity]: a pooled or default parent's
    // state lives as long as the device; only a foreign parent needs the reference.
    detail::StreamState* parent_ = nullptr;
    std::shared_ptr<detail::StreamState> parent_keep_;
};

/// @cond INTERNAL
inline detail::StreamState& detail::Internals::stream_state(const Stream& stream) noexcept {
    return *stream.state_;
}
inline const std::shared_ptr<detail::StreamState>& detail::Internals::shared_stream_state(
    const Stream& stream) noexcept {
    return stream.state_;
}
inline Stream detail::Internals::make_stream(std::shared_ptr<DeviceState> keep_alive,
                                             std::shared_ptr<StreamState> state,
                                             const std::shared_ptr<StreamState>& parent) noexcept {
    return Stream(std::move(keep_alive), std::move(state), parent);
}
/// @endcond

}  // namespace cudarc

/// @file
/// cudarc::Event — a marker in a stream: record, wait, query, synchronize, time.
#pragma once

#include <cstdint>
#include <memory>

#include "cudarc/detail/internals.hpp"
#include "cudarc/detail/native_handles.hpp"
#include "cudarc/export.hpp"

namespace cudarc {

class Device;
class Stream;

namespace detail {
class DeviceState;
}

/// Whether an event can measure elapsed time. Timing costs a timestamp per record, so it is opt-in.
enum class EventTiming { disabled, enabled };

/// An event from the device's pool (timing events are created fresh). Move-only; returned to the pool on
/// destruction.
class CUDARC_API Event {
  public:
    /// An event of `device`: a timing-disabled one comes from the device's pool (no driver call once the pool
    /// holds one); a timing one is created with cuEventCreate. Throws Error when creation fails.
    explicit Event(const Device& device, EventTiming timing = EventTiming::disabled);
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    /// Takes over `other`'s event; `other` is left empty.
    Event(Event&& other) noexcept;
    /// Releases this event (back to the pool, or destroyed) and takes over `other`'s.
    Event& operator=(Event&& other) noexcept;
    /// Returns the event to the device's pool (a timing event, or one last recorded inside a capture, is
    /// destroyed instead). Never throws.
    ~Event();

    /// Captures the work submitted to `stream` so far. Recorded on a stream that is being captured into a
    /// graph, it marks a point of the captured work: streams may wait for it inside the capture (a graph
    /// dependency), but nothing can wait for it, query it or synchronize with it after the capture until it
    /// is recorded again (docs/graphs.md).
    void record(Stream& stream);
    /// True when the captured work has completed (or the event was never recorded). Never blocks. Throws
    /// during a graph capture on this thread, and for an event last recorded inside a capture.
    [[nodiscard]] bool query() const;
    /// Blocks the host until the captured work completes (counted). Throws like query().
    void synchronize() const;
    /// Milliseconds between two recorded timing events of one device; both must have completed. Throws like
    /// query().
    [[nodiscard]] static float elapsed_ms(const Event& start, const Event& end);

    /// The driver's event handle (CUevent or hipEvent_t); null after a move. Still owned by this Event.
    [[nodiscard]] NativeEvent native() const noexcept { return event_; }
    /// True for an EventTiming::enabled event.
    [[nodiscard]] bool timing() const noexcept { return timing_ == EventTiming::enabled; }

  private:
    friend struct detail::Internals;  // Note [Internal access]
    void release() noexcept;
    void refuse_if_captured(const char* what) const;

    std::shared_ptr<detail::DeviceState> device_;
    NativeEvent event_ = nullptr;
    EventTiming timing_ = EventTiming::disabled;
    std::uint64_t recorded_in_capture_ = 0;
};

/// @cond INTERNAL
inline std::uint64_t detail::Internals::recorded_in_capture(const Event& event) noexcept {
    return event.recorded_in_capture_;
}
/// @endcond

}  // namespace cudarc

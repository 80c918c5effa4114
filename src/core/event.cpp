#include "cudarc/event.hpp"

#include <utility>

#include <fmt/format.h>

#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "cudarc/device.hpp"
#include "cudarc/stream.hpp"

namespace cudarc {

Event::Event(const Device& device, EventTiming timing)
    : device_(detail::Internals::device_state(device)), timing_(timing) {
    if (timing == EventTiming::disabled) {
        event_ = device_->events().acquire();
    } else {
        const auto scope = device_->bind();
        device_->check(device_->api().event_create(&event_, sys::kEventDefault), sys::Entry::event_create);
    }
}

Event::Event(Event&& other) noexcept
    : device_(std::move(other.device_)),
      event_(std::exchange(other.event_, nullptr)),
      timing_(other.timing_),
      recorded_in_capture_(std::exchange(other.recorded_in_capture_, 0)) {}

Event& Event::operator=(Event&& other) noexcept {
    if (this != &other) {
        release();
        device_ = std::move(other.device_);
        event_ = std::exchange(other.event_, nullptr);
        timing_ = other.timing_;
        recorded_in_capture_ = std::exchange(other.recorded_in_capture_, 0);
    }
    return *this;
}

Event::~Event() {
    release();
}

void Event::release() noexcept {
    if (event_ == nullptr) return;
    // Note [Capture overlay]: one last recorded inside a capture is not fit for the pool.
    if (timing_ == EventTiming::disabled && recorded_in_capture_ == 0) {
        device_->events().release(event_);
    } else {
        const auto scope = device_->bind_or_defer();
        device_->defer(device_->api().event_destroy(event_), sys::Entry::event_destroy);
    }
    event_ = nullptr;
}

void Event::record(Stream& stream) {
    if (&detail::Internals::stream_state(stream).device() != device_.get()) {
        throw Error("cudarc: Event::record: the stream belongs to another device than the event");
    }
    const auto scope = device_->bind();
    device_->check(device_->api().event_record(event_, stream.native()), sys::Entry::event_record);
    detail::AtomicCounters::bump(device_->counters().events_recorded);
    // Note [Capture overlay]: an event recorded inside a capture is a point of the captured work only.
    const detail::CaptureSession* capture = detail::Internals::stream_state(stream).capture();
    recorded_in_capture_ = capture != nullptr ? capture->serial() : 0;
}

void Event::refuse_if_captured(const char* what) const {
    detail::refuse_in_capture(what, "the driver refuses event queries and waits from a capturing thread");
    if (recorded_in_capture_ != 0) {
        throw Error(fmt::format(
            "cudarc: {}: the event was last recorded inside a graph capture, where it marks a point of the "
            "captured work, not of work that runs; record it again outside the capture first",
            what));
    }
}

bool Event::query() const {
    refuse_if_captured("Event::query");
    const auto scope = device_->bind();
    const sys::Result r = device_->api().event_query(event_);
    if (r == sys::kErrorNotReady) return false;
    device_->check(r, sys::Entry::event_query);
    return true;
}

void Event::synchronize() const {
    refuse_if_captured("Event::synchronize");
    const auto scope = device_->bind();
    device_->check(device_->api().event_synchronize(event_), sys::Entry::event_synchronize);
    detail::AtomicCounters::bump(device_->counters().event_synchronizes);
}

float Event::elapsed_ms(const Event& start, const Event& end) {
    if (!start.timing() || !end.timing()) {
        throw Error("cudarc: Event::elapsed_ms needs two events created with EventTiming::enabled");
    }
    if (start.device_ != end.device_) {
        throw Error(
            fmt::format("cudarc: Event::elapsed_ms: the events belong to different devices ({} and {})",
                        start.device_->ordinal(), end.device_->ordinal()));
    }
    start.refuse_if_captured("Event::elapsed_ms");
    end.refuse_if_captured("Event::elapsed_ms");
    float ms = 0.0f;
    const auto scope = start.device_->bind();
    start.device_->check(start.device_->api().event_elapsed_time(&ms, start.event_, end.event_),
                         sys::Entry::event_elapsed_time);
    return ms;
}

}  // namespace cudarc

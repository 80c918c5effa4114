#include "cudarc/stream.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/peer_access.hpp"
#include "cudarc/device.hpp"
#include "cudarc/event.hpp"

namespace cudarc {
namespace detail {

namespace {
std::uintptr_t key_for(const StreamState* state, sys::Stream handle, StreamOwnership ownership) noexcept {
    // Note [Stream identity]: handles are at least 2-aligned, so a foreign key (odd) never equals one.
    if (ownership == StreamOwnership::foreign) return reinterpret_cast<std::uintptr_t>(state) | 1u;
    return reinterpret_cast<std::uintptr_t>(handle);
}
}  // namespace

StreamState::StreamState(DeviceState& device, sys::Stream handle, StreamOwnership ownership, int priority)
    : device_(device),
      handle_(handle),
      ownership_(ownership),
      priority_(priority),
      key_(key_for(this, handle, ownership)),
      timeline_(*this, nullptr),
      scratch_(device.events().acquire()) {}

StreamState::~StreamState() {
    device_.events().release(scratch_);
}

void StreamState::enter_capture(CaptureSession* capture, EventRef precapture_mark) noexcept {
    capture_ = capture;
    precapture_ = std::move(precapture_mark);
}

void StreamState::leave_capture() noexcept {
    capture_ = nullptr;
    precapture_ = EventRef();
}

void StreamState::order_before(StreamState& waiter) {
    if (captures_underway.load(std::memory_order_relaxed) != 0 && order_before_in_capture(*this, waiter))
        return;  // Note [Capture overlay]
    if (&waiter == this || (waiter.handle() == handle_ && alive())) return;
    timeline_.order_before(waiter.timeline(), scratch_);
}

void StreamState::retire(sys::Event final_event) noexcept {
    EventRef final_ref;
    if (final_event != nullptr) {
        auto* shared = new (std::nothrow) SharedEvent(device_, final_event, timeline_.position(), key_);
        if (shared == nullptr) {
            // Without the object, wait for the work here (counted) and retire it as complete.
            const auto scope = device_.bind_or_defer();
            device_.defer(device_.api().event_synchronize(final_event), sys::Entry::event_synchronize);
            AtomicCounters::bump(device_.counters().event_synchronizes);
            device_.events().release(final_event);
        } else {
            final_ref = EventRef::adopt(shared);
        }
    }
    timeline_.retire(std::move(final_ref));
}

StreamPool::~StreamPool() {
    clear();
}

std::shared_ptr<StreamState> StreamPool::acquire(int priority) {
    {
        std::lock_guard lock(mutex_);
        for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
            if ((*it)->priority() == priority) {
                std::shared_ptr<StreamState> state = std::move(*it);
                free_.erase(std::next(it).base());
                return state;
            }
        }
    }
    const auto scope = device_.bind();
    sys::Stream stream = nullptr;
    device_.check(device_.api().stream_create_with_priority(&stream, sys::kStreamNonBlocking, priority),
                  sys::Entry::stream_create_with_priority);
    try {
        auto state = std::make_shared<StreamState>(device_, stream, StreamOwnership::pooled, priority);
        // Room for every state ever made, so that release() never needs memory: a pooled state must live
        // as long as the device, since buffers name its timeline (Note [Stream identity]).
        std::lock_guard lock(mutex_);
        free_.reserve(++created_);
        return state;
    } catch (...) {
        device_.defer(device_.api().stream_destroy(stream), sys::Entry::stream_destroy);
        throw;
    }
}

void StreamPool::release(std::shared_ptr<StreamState> state) noexcept {
    // Note [Capture overlay]: a captured stream stays out of the pool until its capture ends (whatever
    // another owner enqueued on it meanwhile would be captured).
    if (state->capture() != nullptr && state->capture()->keep_until_end(state)) return;
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(state));  // never allocates: acquire() made room
}

void StreamPool::clear() noexcept {
    std::vector<std::shared_ptr<StreamState>> states;
    {
        std::lock_guard lock(mutex_);
        states.swap(free_);
    }
    for (const auto& state : states) {
        state->retire(nullptr);
        device_.defer(device_.api().stream_destroy(state->handle()), sys::Entry::stream_destroy);
    }
}

}  // namespace detail

using detail::capture_prepare_join;
using detail::capture_prepare_wait;
using detail::captures_underway;
using detail::DeviceState;
using detail::refuse_in_capture;
using detail::StreamState;

namespace {

std::shared_ptr<StreamState> pooled_stream_state(DeviceState& device, const StreamOptions& options) {
    return device.streams().acquire(device.clamp_priority(options.priority));
}

}  // namespace

Stream::Stream(std::shared_ptr<DeviceState> keep_alive, std::shared_ptr<StreamState> state,
               const std::shared_ptr<StreamState>& parent) noexcept
    : keep_alive_(std::move(keep_alive)), state_(std::move(state)), parent_(parent.get()) {
    if (parent_ != nullptr && parent_->ownership() == detail::StreamOwnership::foreign) parent_keep_ = parent;
}

Stream::Stream(Stream&& other) noexcept
    : keep_alive_(std::move(other.keep_alive_)),
      state_(std::move(other.state_)),
      parent_(std::exchange(other.parent_, nullptr)),
      parent_keep_(std::move(other.parent_keep_)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
    if (this != &other) {
        release();
        keep_alive_ = std::move(other.keep_alive_);
        state_ = std::move(other.state_);
        parent_ = std::exchange(other.parent_, nullptr);
        parent_keep_ = std::move(other.parent_keep_);
    }
    return *this;
}

Stream::~Stream() {
    release();
}

namespace {
// Waits on the host for `stream`'s work (counted), or for the whole device where that wait fails: for an
// ordering that could not be enqueued. Failures are deferred. In the stream's device's context.
void wait_on_host(DeviceState& device, sys::Stream stream) noexcept {
    const sys::Result synced = device.api().stream_synchronize(stream);
    detail::AtomicCounters::bump(device.counters().stream_synchronizes);
    if (synced == sys::kSuccess) return;
    device.defer(synced, sys::Entry::stream_synchronize);
    device.synchronize_noexcept();
}
}  // namespace

void Stream::join_parent() noexcept {
    DeviceState& device = state_->device();
    if (!parent_->alive()) return;  // a foreign parent whose wrapper is gone: nothing left to join into
    // Note [Capture overlay]: a join into or out of a capture under way.
    if (detail::captures_underway.load(std::memory_order_relaxed) != 0 &&
        detail::capture_join_parent(*state_, *parent_))
        return;
    try {
        state_->order_before(*parent_);
        return;
    } catch (const Error& error) {
        device.defer(error);  // for Device::rethrow_deferred_error
    } catch (...) {
    }
    // The join could not be enqueued: make the child's work complete on the host instead, so that the
    // parent's later work still comes after it.
    const auto scope = device.bind_or_defer();
    wait_on_host(device, state_->handle());
}

void Stream::release() noexcept {
    if (!state_) return;
    DeviceState& device = state_->device();
    switch (state_->ownership()) {
        case detail::StreamOwnership::pooled:
            // Note [Stream identity]: the handle and its state go back to the pool together, so buffers
            // that used this stream keep naming a live queue: no final event is needed.
            if (parent_ != nullptr) join_parent();
            device.streams().release(std::move(state_));
            break;
        case detail::StreamOwnership::owned:
        case detail::StreamOwnership::foreign: {
            // Record where the stream's work ends; buffers and allocations that used it order after that
            // event from now on. If the record fails, wait for the stream on the host (counted) and retire
            // it as complete, so that no later access waits on a missing event.
            sys::Event final_event = nullptr;
            const auto scope = device.bind_or_defer();
            try {
                final_event = device.record_event(state_->handle());
            } catch (const Error& error) {
                device.defer(error);
            } catch (...) {
            }
            if (final_event == nullptr) wait_on_host(device, state_->handle());
            state_->retire(final_event);
            if (state_->ownership() == detail::StreamOwnership::foreign) {
                device.memory().retire_stream(*state_);
            } else {
                // Note: cuStreamDestroy returns at once; work already queued still runs to completion.
                device.defer(device.api().stream_destroy(state_->handle()), sys::Entry::stream_destroy);
            }
            break;
        }
    }
    parent_ = nullptr;
    parent_keep_.reset();
    state_.reset();
    keep_alive_.reset();
}

Stream Stream::wrap(const Device& device, NativeStream foreign) {
    if (foreign == nullptr || foreign == sys::legacy_stream()) {
        // Note [No legacy stream]. (The literal nullptr does not compile: stream.hpp.)
        throw Error(fmt::format(
            "cudarc: Stream::wrap: the stream is {}, which names the legacy stream; wrap a created "
            "stream, or use device.default_stream() or device.create_stream()",
            foreign == nullptr ? "null" : "CU_STREAM_LEGACY (0x1)"));
    }
    if (foreign == sys::per_thread_stream()) {
        // Note [Stream identity]: hazard tracking takes two wrappers of one handle value for one queue of
        // work; this value names a different stream on each thread, so two wrappers on two threads would
        // never be ordered (stale data, silently).
        throw Error(
            "cudarc: Stream::wrap: the stream is CU_STREAM_PER_THREAD (0x2), which names a different stream "
            "on "
            "each thread; wrap a created stream (for the CUDA runtime's per-thread default stream, create a "
            "stream instead), or use device.default_stream() or device.create_stream()");
    }
    const auto& state = detail::Internals::device_state(device);
    const auto scope = state->bind();
    sys::Context context = nullptr;
    // HIP has no cuStreamGetCtx (its slot is null): there the stream's device cannot be checked here.
    const bool checkable = state->api().stream_get_ctx != nullptr;
    if (checkable) state->check(state->api().stream_get_ctx(foreign, &context), sys::Entry::stream_get_ctx);
    if (checkable && context != state->context()) {
        throw Error(
            fmt::format("cudarc: Stream::wrap: the stream belongs to another context than device {}'s "
                        "primary context (a stream of another device?)",
                        device.ordinal()));
    }
    int priority = 0;
    if (state->api().stream_get_priority(foreign, &priority) != sys::kSuccess) priority = 0;
    return Stream(state,
                  std::make_shared<StreamState>(*state, foreign, detail::StreamOwnership::foreign, priority),
                  nullptr);
}

Stream Stream::fork(const StreamOptions& options) {
    DeviceState& device = state_->device();
    // From here the Stream owns the pooled state: its destructor returns it to the pool (and joins).
    Stream stream(device.shared_from_this(), pooled_stream_state(device, options), state_);
    // Note [Capture overlay]: a child of a captured stream takes part in the capture.
    if (state_->capture() != nullptr) state_->capture()->join(*stream.state_, detail::CaptureRole::forked);
    state_->order_before(*stream.state_);
    return stream;
}

void Stream::join(const Stream& other) {
    if (&detail::Internals::stream_state(other).device() != &state_->device()) {
        if (captures_underway.load(std::memory_order_relaxed) != 0) {
            detail::refuse_across_devices_in_capture(
                "Stream::join", *state_, detail::Internals::stream_state(other).device().ordinal(),
                state_->device().ordinal(), detail::Internals::stream_state(other).capture() != nullptr);
        }
        detail::join_across_devices(
            *state_, detail::Internals::stream_state(other));  // an event of one device, waited on by another
        return;
    }
    if (captures_underway.load(std::memory_order_relaxed) != 0)
        capture_prepare_join(*state_, detail::Internals::stream_state(other));
    detail::Internals::stream_state(other).order_before(*state_);
}

void Stream::wait(const Event& event) {
    DeviceState& device = state_->device();
    unsigned flags = 0;
    if (captures_underway.load(std::memory_order_relaxed) != 0 ||
        detail::Internals::recorded_in_capture(event) != 0)
        flags = capture_prepare_wait(*state_, detail::Internals::recorded_in_capture(event));
    const auto scope = device.bind();
    device.check(device.api().stream_wait_event(state_->handle(), event.native(), flags),
                 sys::Entry::stream_wait_event);
    detail::AtomicCounters::bump(device.counters().cross_stream_waits);
}

void Stream::synchronize() {
    refuse_in_capture("Stream::synchronize", "it would wait for work the capture records without running");
    DeviceState& device = state_->device();
    const detail::PollReleasesOnExit poll(device);  // as in Device::synchronize
    const auto scope = device.bind();
    device.check(device.api().stream_synchronize(state_->handle()), sys::Entry::stream_synchronize);
    detail::AtomicCounters::bump(device.counters().stream_synchronizes);
}

bool Stream::query() const {
    refuse_in_capture("Stream::query", "the driver refuses stream queries from a capturing thread");
    DeviceState& device = state_->device();
    const auto scope = device.bind();
    const sys::Result r = device.api().stream_query(state_->handle());
    if (r == sys::kErrorNotReady) return false;
    device.check(r, sys::Entry::stream_query);
    return true;
}

bool Stream::is_capturing() const {
    DeviceState& device = state_->device();
    const auto scope = device.bind();
    try {
        return sys::stream_is_capturing(device.api(), state_->handle(), device.ordinal());
    } catch (...) {
        device.rethrow_current();  // a sticky error loses the device (Note [Lost devices])
    }
}

NativeStream Stream::native() const noexcept {
    return state_->handle();
}
bool Stream::owned() const noexcept {
    return state_->ownership() != detail::StreamOwnership::foreign;
}
int Stream::priority() const {
    return state_->priority();
}
int Stream::device_ordinal() const noexcept {
    return state_->device().ordinal();
}
Device Stream::device() const {
    return detail::Internals::make_device(state_->device().shared_from_this());
}

Stream Device::create_stream(const StreamOptions& options) const {
    return detail::Internals::make_stream(state_, pooled_stream_state(*state_, options), nullptr);
}

Stream Device::create_stream() const {
    return create_stream(StreamOptions{});
}

}  // namespace cudarc

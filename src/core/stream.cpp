#include "cudarc/stream.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/device_state.hpp"
#include "cudarc/device.hpp"
#include "cudarc/event.hpp"

namespace cudarc {
namespace detail {

StreamState::~StreamState() {
    if (final_event_ != nullptr) device_.events().release(final_event_);
}

bool StreamState::alive() const {
    std::lock_guard lock(mutex_);
    return !retired_;
}

sys::Event StreamState::mark() {
    std::lock_guard lock(mutex_);
    const auto scope = device_.bind();
    if (!retired_) return device_.record_event(handle_);
    // Note: the stream is gone; its final event stands for its work. Hand out a fresh event (callers own
    // what they get) that the default stream records after waiting for that final event.
    sys::Stream proxy = device_.default_stream_state()->handle();
    device_.wait_event(proxy, final_event_);
    return device_.record_event(proxy);
}

void StreamState::order_before(sys::Stream waiter) {
    std::lock_guard lock(mutex_);
    if (!retired_ && waiter == handle_) return;
    const auto scope = device_.bind();
    if (retired_) {
        device_.wait_event(waiter, final_event_);
        return;
    }
    sys::Event event = device_.record_event(handle_);
    try {
        device_.wait_event(waiter, event);
    } catch (...) {
        device_.events().release(event);
        throw;
    }
    device_.events().release(event);
}

void StreamState::retire(sys::Event final_event) noexcept {
    std::lock_guard lock(mutex_);
    retired_ = true;
    final_event_ = final_event;
}

StreamPool::~StreamPool() {
    clear();
}

sys::Stream StreamPool::acquire(int priority) {
    {
        std::lock_guard lock(mutex_);
        for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
            if (it->first == priority) {
                const sys::Stream stream = it->second;
                free_.erase(std::next(it).base());
                return stream;
            }
        }
    }
    const auto scope = device_.bind();
    sys::Stream stream = nullptr;
    device_.check(device_.api().stream_create_with_priority(&stream, sys::kStreamNonBlocking, priority),
                  "cuStreamCreateWithPriority");
    return stream;
}

void StreamPool::release(sys::Stream stream, int priority) noexcept {
    try {
        std::lock_guard lock(mutex_);
        free_.emplace_back(priority, stream);
    } catch (...) {
        device_.defer(device_.api().stream_destroy(stream), "cuStreamDestroy");
    }
}

void StreamPool::clear() noexcept {
    std::vector<std::pair<int, sys::Stream>> streams;
    {
        std::lock_guard lock(mutex_);
        streams.swap(free_);
    }
    for (const auto& entry : streams)
        device_.defer(device_.api().stream_destroy(entry.second), "cuStreamDestroy");
}

}  // namespace detail

using detail::DeviceState;
using detail::StreamState;

namespace {

// A stream from the device's pool. Note: owned streams are never destroyed while the device lives, so a
// stream handle's value names one stream for the device's whole life (the caching allocator keys cached
// blocks by it).
std::shared_ptr<StreamState> pooled_stream_state(DeviceState& device, const StreamOptions& options) {
    const int priority = device.clamp_priority(options.priority);
    sys::Stream handle = device.streams().acquire(priority);
    try {
        return std::make_shared<StreamState>(device, handle, detail::StreamOwnership::pooled, priority);
    } catch (...) {
        device.streams().release(handle, priority);
        throw;
    }
}

}  // namespace

Stream::Stream(std::shared_ptr<DeviceState> keep_alive, std::shared_ptr<StreamState> state,
               std::shared_ptr<StreamState> parent) noexcept
    : keep_alive_(std::move(keep_alive)), state_(std::move(state)), parent_(std::move(parent)) {}

Stream::Stream(Stream&& other) noexcept
    : keep_alive_(std::move(other.keep_alive_)),
      state_(std::move(other.state_)),
      parent_(std::move(other.parent_)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
    if (this != &other) {
        release();
        keep_alive_ = std::move(other.keep_alive_);
        state_ = std::move(other.state_);
        parent_ = std::move(other.parent_);
    }
    return *this;
}

Stream::~Stream() {
    release();
}

void Stream::release() noexcept {
    if (!state_) return;
    DeviceState& device = state_->device();
    const auto ownership = state_->ownership();
    if (ownership != detail::StreamOwnership::foreign) {
        // Record where the stream's work ends: a forked child's parent waits for it (the join), and buffers
        // that used this stream order their release after it.
        sys::Event final_event = nullptr;
        const auto scope = device.bind_or_defer();
        try {
            final_event = device.record_event(state_->handle());
            if (parent_) device.wait_event(parent_->handle(), final_event);
        } catch (const Error& error) {
            device.defer(error);  // for Device::rethrow_deferred_error; the stream is still destroyed below
        } catch (...) {
        }
        state_->retire(final_event);
        if (ownership == detail::StreamOwnership::pooled) {
            device.streams().release(state_->handle(), state_->priority());
        } else {
            // Note: cuStreamDestroy returns at once; work already queued still runs to completion.
            device.defer(device.api().stream_destroy(state_->handle()), "cuStreamDestroy");
        }
    }
    parent_.reset();
    state_.reset();
    keep_alive_.reset();
}

Stream Stream::wrap(const Device& device, NativeStream foreign) {
    const auto& state = device.state();
    const auto scope = state->bind();
    sys::Context context = nullptr;
    state->check(state->api().stream_get_ctx(foreign, &context), "cuStreamGetCtx");
    if (context != state->context()) {
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
    auto child = pooled_stream_state(device, options);
    // From here the Stream owns the handle: its destructor returns it to the pool.
    Stream stream(device.shared_from_this(), child, state_);
    state_->order_before(child->handle());
    return stream;
}

void Stream::join(const Stream& other) {
    if (&other.state().device() != &state_->device()) {
        throw Error(
            fmt::format("cudarc: Stream::join: the other stream is on device {}, this one on device {}",
                        other.device_ordinal(), device_ordinal()));
    }
    other.state().order_before(state_->handle());
}

void Stream::wait(const Event& event) {
    DeviceState& device = state_->device();
    const auto scope = device.bind();
    device.wait_event(state_->handle(), event.native());
}

void Stream::synchronize() {
    DeviceState& device = state_->device();
    const auto scope = device.bind();
    device.check(device.api().stream_synchronize(state_->handle()), "cuStreamSynchronize");
    detail::AtomicCounters::bump(device.counters().stream_synchronizes);
}

bool Stream::query() const {
    DeviceState& device = state_->device();
    const auto scope = device.bind();
    const sys::Result r = device.api().stream_query(state_->handle());
    if (r == sys::kErrorNotReady) return false;
    device.check(r, "cuStreamQuery");
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
    return Device(state_->device().shared_from_this());
}

Stream Device::create_stream(const StreamOptions& options) const {
    return Stream(state_, pooled_stream_state(*state_, options), nullptr);
}

Stream Device::create_stream() const {
    return create_stream(StreamOptions{});
}

}  // namespace cudarc

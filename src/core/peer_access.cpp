// Peer access between devices, copies between them, and the cross-device half of hazard tracking
// (Note [Hazard tracking across devices] in core/peer_access.hpp).
#include "core/peer_access.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/hazard_tracker.hpp"
#include "cudarc/device.hpp"
#include "cudarc/stream.hpp"

namespace cudarc {
namespace detail {

void order_uses_on_own_device(DeviceState& device, StreamState* home, std::vector<StreamUse>& uses) noexcept {
    const auto elsewhere = [&](const StreamUse& use) { return &use.stream->device() != &device; };
    if (std::none_of(uses.begin(), uses.end(), elsewhere)) return;  // the common case: nothing to do
    StreamState& waiter = home != nullptr && home->alive() ? *home : *device.default_stream_state();
    bool waited = false;
    for (StreamUse& use : uses) {
        if (!elsewhere(use)) continue;
        DeviceState& other = use.stream->device();
        try {
            wait_for_use(waiter, *use.stream, use.event);  // Note [Cross-stream ordering]
            waited = true;
        } catch (const Error& error) {
            // No wait could be enqueued: wait on the host rather than free memory another device may
            // still use.
            device.defer(error);
            if (use.event != nullptr) {
                const auto scope = other.bind_or_defer();
                other.defer(other.api().event_synchronize(use.event), sys::Entry::event_synchronize);
                AtomicCounters::bump(other.counters().event_synchronizes);
            } else {
                other.synchronize_noexcept();
            }
        } catch (...) {
            other.synchronize_noexcept();
        }
        if (use.event != nullptr) other.events().release(use.event);
        use.event = nullptr;
        use.stream.reset();
    }
    std::erase_if(uses, [](const StreamUse& use) { return !use.stream; });
    if (!waited) return;
    // The waiter's work from here on follows those uses; an event it recorded before does not.
    const auto it = std::find_if(uses.begin(), uses.end(),
                                 [&](const StreamUse& use) { return use.stream.get() == &waiter; });
    if (it != uses.end()) {
        if (it->event != nullptr) device.events().release(std::exchange(it->event, nullptr));
        return;
    }
    try {
        uses.push_back(StreamUse{waiter.shared_from_this(), nullptr});
    } catch (...) {
        device.synchronize_noexcept();  // no memory for the entry: the waits complete on the host instead
    }
}

void copy_across_devices(Stream& stream, Buffer& dst, DevicePtr dst_ptr, Buffer& src, DevicePtr src_ptr,
                         std::size_t bytes) {
    if (!dst.device() || !src.device())
        throw Error("cudarc: use of an empty (default-constructed or moved-from) slice");
    DeviceState& device = detail::Internals::stream_state(stream).device();
    if (&device != dst.device().get() && &device != src.device().get()) {
        throw Error(
            fmt::format("cudarc::copy: the copy runs from device {} to device {}, the stream is on device "
                        "{}: use a stream of "
                        "either device",
                        src.device_ordinal(), dst.device_ordinal(), device.ordinal()));
    }
    if (captures_underway.load(std::memory_order_relaxed) != 0) {
        const auto src_offset = static_cast<std::size_t>(src_ptr - src.ptr());
        const auto dst_offset = static_cast<std::size_t>(dst_ptr - dst.ptr());
        refuse_across_devices_in_capture(
            "cudarc::copy", detail::Internals::stream_state(stream), src.device_ordinal(),
            dst.device_ordinal(),
            capture_would_take(src.hazards(), detail::Internals::stream_state(stream), src_offset, bytes,
                               Access::read) ||
                capture_would_take(dst.hazards(), detail::Internals::stream_state(stream), dst_offset, bytes,
                                   Access::write));
    }
    const sys::DriverApi& api = device.api();
    const auto memcpy_peer_async = sys::require(api, api.memcpy_peer_async, sys::Entry::memcpy_peer_async);
    // Note: a copy needs no peer access: without it the driver stages the copy through host memory.
    src.hazards().before_access(detail::Internals::stream_state(stream),
                                static_cast<std::size_t>(src_ptr - src.ptr()), bytes, Access::read);
    dst.hazards().before_access(detail::Internals::stream_state(stream),
                                static_cast<std::size_t>(dst_ptr - dst.ptr()), bytes, Access::write);
    const auto scope = device.bind();
    device.check(memcpy_peer_async(dst_ptr, dst.device()->context(), src_ptr, src.device()->context(), bytes,
                                   stream.native()),
                 sys::Entry::memcpy_peer_async);
    src.hazards().after_access(detail::Internals::stream_state(stream));
    dst.hazards().after_access(detail::Internals::stream_state(stream));
}

void join_across_devices(StreamState& waiter, StreamState& other) {
    // An event of `other`'s device, waited for on `waiter`'s (Note [Cross-stream ordering]).
    sys::Event event = nullptr;
    try {
        wait_for_use(waiter, other, event);
    } catch (...) {
        if (event != nullptr) other.device().events().release(event);
        throw;
    }
    if (event != nullptr) other.device().events().release(event);  // safe: the wait captured its state
}

void throw_other_device_buffer(const char* what, int owner, int user) {
    throw Error(
        fmt::format("{}: a buffer on device {} was used with a stream of device {}; to let device {} use "
                    "device {}'s memory, "
                    "enable peer access first (device{}.enable_peer_access(device{}))",
                    what, owner, user, user, owner, user, owner));
}

void DeviceState::enable_peer_access(DeviceState& peer) {
    if (&peer == this) {
        throw Error(
            fmt::format("cudarc: Device::enable_peer_access: device {} is not its own peer (it always uses "
                        "its own memory)",
                        ordinal_));
    }
    if (peer.ordinal_ >= kMaxPeerOrdinals) {
        throw Error(
            fmt::format("cudarc: Device::enable_peer_access: device ordinal {} is beyond the {} cudarc "
                        "tracks peer access for",
                        peer.ordinal_, kMaxPeerOrdinals));
    }
    if (can_use_memory_of(peer)) return;  // idempotent
    int can_access = 0;
    check(sys::require(api_, api_.device_can_access_peer, sys::Entry::device_can_access_peer)(
              &can_access, device_, peer.device_),
          sys::Entry::device_can_access_peer);
    if (can_access == 0) {
        throw Error(
            fmt::format("cudarc: Device::enable_peer_access: device {} cannot access device {}'s memory "
                        "directly (cuDeviceCanAccessPeer: no NVLink or PCIe peer-to-peer path between "
                        "them); cudarc::copy between them still works, staged through host memory",
                        ordinal_, peer.ordinal_),
            ordinal_, api_.backend);
    }
    const auto enable = sys::require(api_, api_.ctx_enable_peer_access, sys::Entry::ctx_enable_peer_access);
    const ContextScope scope = bind();
    const sys::Result result = enable(peer.context_, 0);
    // Note: already enabled is success: another library (or an earlier state of this device) enabled it on
    // the same primary context.
    if (result != sys::kErrorPeerAccessAlreadyEnabled) check(result, sys::Entry::ctx_enable_peer_access);
    // Memory the context-wide switch does not cover (expandable segments' chunks) is opened one by one.
    peer.memory().grant_access(device_);
    peers_[static_cast<std::size_t>(peer.ordinal_)].store(peer.generation_, std::memory_order_release);
}

}  // namespace detail

bool Device::can_access_peer(const Device& other) const {
    if (other.state_ == state_) return false;  // a device is not its own peer
    const sys::DriverApi& api = state_->api();
    int can_access = 0;
    state_->check(sys::require(api, api.device_can_access_peer, sys::Entry::device_can_access_peer)(
                      &can_access, state_->device(), other.state_->device()),
                  sys::Entry::device_can_access_peer);
    return can_access != 0;
}

void Device::enable_peer_access(const Device& other) const {
    state_->enable_peer_access(*other.state_);
}

bool Device::peer_access_enabled(const Device& other) const noexcept {
    return other.state_ != state_ && state_->can_use_memory_of(*other.state_);
}

}  // namespace cudarc

// Peer access between devices, copies between them, and the cross-device half of hazard tracking
// (Note [Hazard tracking across devices] in core/peer_access.hpp).
#include "core/peer_access.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/buffer.hpp"
#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/operation.hpp"
#include "cudarc/device.hpp"
#include "cudarc/stream.hpp"

namespace cudarc {
namespace detail {

void order_uses_on_own_device(DeviceState& device, StreamState* home,
                              std::vector<TimelineUse>& uses) noexcept {
    const auto elsewhere = [&](const TimelineUse& use) { return &use.stream->device() != &device; };
    if (std::none_of(uses.begin(), uses.end(), elsewhere)) return;  // the common case: nothing to do
    StreamState& waiter = home != nullptr && home->alive() ? *home : *device.default_stream_state();
    bool waited = false;
    for (TimelineUse& use : uses) {
        if (!elsewhere(use)) continue;
        DeviceState& other = use.stream->device();
        try {
            waiter.timeline().wait_for(*use.timeline, use.position);  // Note [Cross-stream ordering]
            waited = true;
        } catch (const Error& error) {
            // No wait could be enqueued: wait on the host rather than free memory another device may
            // still use.
            device.defer(error);
            try {
                const EventRef event = use.timeline->event_covering(use.position);
                if (event) {
                    const auto scope = other.bind_or_defer();
                    other.defer(other.api().event_synchronize(event->handle()),
                                sys::Entry::event_synchronize);
                    AtomicCounters::bump(other.counters().event_synchronizes);
                }
            } catch (...) {
                other.synchronize_noexcept();
            }
        } catch (...) {
            other.synchronize_noexcept();
        }
        use.stream.reset();
    }
    std::erase_if(uses, [](const TimelineUse& use) { return !use.stream; });
    if (!waited) return;
    // The waiter's work from here on follows those uses: whoever needs an event for its use records one
    // after the waits (everything it has submitted so far).
    const auto it = std::find_if(uses.begin(), uses.end(),
                                 [&](const TimelineUse& use) { return use.timeline == &waiter.timeline(); });
    if (it != uses.end()) {
        it->position = kEverythingSoFar;
        return;
    }
    try {
        uses.push_back(TimelineUse{waiter.shared_from_this(), &waiter.timeline(), kEverythingSoFar});
    } catch (...) {
        device.synchronize_noexcept();  // no memory for the entry: the waits complete on the host instead
    }
}

void copy_across_devices(Stream& stream, Buffer& dst, DevicePtr dst_ptr, Buffer& src, DevicePtr src_ptr,
                         std::size_t bytes) {
    StreamState& s = detail::Internals::stream_state(stream);
    DeviceState& device = s.device();
    if (&device != &dst.device() && &device != &src.device()) {
        throw Error(
            fmt::format("cudarc::copy: the copy runs from device {} to device {}, the stream is on device "
                        "{}: use a stream of either device",
                        src.device_ordinal(), dst.device_ordinal(), device.ordinal()));
    }
    const auto src_offset = static_cast<std::size_t>(src_ptr - src.ptr());
    const auto dst_offset = static_cast<std::size_t>(dst_ptr - dst.ptr());
    if (captures_underway.load(std::memory_order_relaxed) != 0) {
        refuse_across_devices_in_capture(
            "cudarc::copy", s, src.device_ordinal(), dst.device_ordinal(),
            capture_would_take(src.hazards(), s, src_offset, bytes, Access::read) ||
                capture_would_take(dst.hazards(), s, dst_offset, bytes, Access::write));
    }
    const sys::DriverApi& api = device.api();
    const auto memcpy_peer_async = sys::require(api, api.memcpy_peer_async, sys::Entry::memcpy_peer_async);
    // Note: a copy needs no peer access: without it the driver stages the copy through host memory.
    Operation op(s);
    op.access(src.hazards(), src_offset, bytes, Access::read);
    op.access(dst.hazards(), dst_offset, bytes, Access::write);
    op.order();
    const auto scope = device.bind();
    device.check(memcpy_peer_async(dst_ptr, dst.device().context(), src_ptr, src.device().context(), bytes,
                                   s.handle()),
                 sys::Entry::memcpy_peer_async);
    op.complete();
}

void join_across_devices(StreamState& waiter, StreamState& other) {
    // An event of `other`'s device, waited for on `waiter`'s (Note [Cross-stream ordering]).
    waiter.timeline().wait_for(other.timeline(), kEverythingSoFar);
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

// Peer access between devices, copies between them, and the cross-device half of hazard tracking
// (Note [Hazard tracking across devices] in core/peer_access.hpp).
#include "core/peer_access.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/device_state.hpp"
#include "cudarc/device.hpp"
#include "cudarc/stream.hpp"

namespace cudarc {
namespace detail {

void order_after_other_device(StreamState& waiter, StreamUse& use) {
    if (use.event == nullptr) use.event = use.stream->mark();  // on the use's device, from its pool
    DeviceState& device = waiter.device();
    device.bind();  // mark() bound the other device
    device.wait_event(waiter.handle(), use.event);
}

void order_home_after_other_devices(DeviceState& device, StreamState& home,
                                    std::vector<StreamUse>& uses) noexcept {
    bool dropped = false;
    for (StreamUse& use : uses) {
        if (!use.stream || &use.stream->device() == &device) continue;
        DeviceState& other = use.stream->device();
        StreamState* waiter = nullptr;
        try {
            waiter = home.alive() ? &home : device.default_stream_state().get();
            if (use.event == nullptr) use.event = use.stream->mark();
            device.bind();
            device.wait_event(waiter->handle(), use.event);
        } catch (const Error& error) {
            device.defer(error);
            waiter = nullptr;
        } catch (...) {
            waiter = nullptr;
        }
        if (waiter == nullptr) {
            // No wait could be enqueued: wait on the host rather than free memory another device may still
            // use.
            if (use.event != nullptr) {
                other.defer(other.api().event_synchronize(use.event), "cuEventSynchronize");
            } else {
                other.bind();
                other.defer(other.api().ctx_synchronize(), "cuCtxSynchronize");
            }
        }
        if (use.event != nullptr) other.events().release(use.event);
        use.event = nullptr;
        if (waiter != nullptr && waiter != &home) {
            use.stream = waiter->shared_from_this();  // the free must wait for the default stream now
        } else {
            use.stream.reset();  // ordered by the home stream itself
            dropped = true;
        }
    }
    if (dropped) std::erase_if(uses, [](const StreamUse& use) { return !use.stream; });
}

void copy_across_devices(Stream& stream, Buffer& dst, DevicePtr dst_ptr, Buffer& src, DevicePtr src_ptr,
                         std::size_t bytes) {
    if (!dst.device() || !src.device())
        throw Error("cudarc: use of an empty (default-constructed or moved-from) DeviceSlice");
    DeviceState& device = stream.state().device();
    if (&device != dst.device().get() && &device != src.device().get()) {
        throw Error(
            fmt::format("cudarc::copy: the copy runs from device {} to device {}, the stream is on device "
                        "{}: use a stream of "
                        "either device",
                        src.device_ordinal(), dst.device_ordinal(), device.ordinal()));
    }
    const sys::DriverApi& api = device.api();
    const auto memcpy_peer_async = sys::require(api, api.memcpy_peer_async, "cuMemcpyPeerAsync");
    // Note: a copy needs no peer access: without it the driver stages the copy through host memory.
    src.hazards().before_access(stream.state(), Access::read);
    dst.hazards().before_access(stream.state(), Access::write);
    device.bind();
    device.check(memcpy_peer_async(dst_ptr, dst.device()->context(), src_ptr, src.device()->context(), bytes,
                                   stream.native()),
                 "cuMemcpyPeerAsync");
}

void join_across_devices(StreamState& waiter, StreamState& other) {
    DeviceState& device = waiter.device();
    DeviceState& other_device = other.device();
    const sys::Event event = other.mark();
    try {
        device.bind();
        device.wait_event(waiter.handle(), event);
    } catch (...) {
        other_device.events().release(event);
        throw;
    }
    other_device.events().release(event);  // safe: the wait captured the event's state
}

void throw_other_device_buffer(const char* what, int owner, int user) {
    throw Error(
        fmt::format("{}: a buffer on device {} was used with a stream of device {}; to let device {} use "
                    "device {}'s memory, "
                    "enable peer access first (device{}.enable_peer_access(device{}))",
                    what, owner, user, user, owner, user, owner));
}

void DeviceState::enable_peer_access(const DeviceState& peer) {
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
    check(sys::require(api_, api_.device_can_access_peer, "cuDeviceCanAccessPeer")(&can_access, device_,
                                                                                   peer.device_),
          "cuDeviceCanAccessPeer");
    if (can_access == 0) {
        throw Error(
            fmt::format("cudarc: Device::enable_peer_access: device {} cannot access device {}'s memory "
                        "directly (cuDeviceCanAccessPeer: no NVLink or PCIe peer-to-peer path between "
                        "them); cudarc::copy between them still works, staged through host memory",
                        ordinal_, peer.ordinal_),
            ordinal_, api_.backend);
    }
    const auto enable = sys::require(api_, api_.ctx_enable_peer_access, "cuCtxEnablePeerAccess");
    bind();
    const sys::Result result = enable(peer.context_, 0);
    // Note: already enabled is success: another library (or an earlier state of this device) enabled it on
    // the same primary context.
    if (result != sys::kErrorPeerAccessAlreadyEnabled) check(result, "cuCtxEnablePeerAccess");
    peers_[static_cast<std::size_t>(peer.ordinal_)].store(peer.generation_, std::memory_order_release);
}

}  // namespace detail

bool Device::can_access_peer(const Device& other) const {
    if (other.state_ == state_) return false;  // a device is not its own peer
    const sys::DriverApi& api = state_->api();
    int can_access = 0;
    state_->check(sys::require(api, api.device_can_access_peer, "cuDeviceCanAccessPeer")(
                      &can_access, state_->device(), other.state_->device()),
                  "cuDeviceCanAccessPeer");
    return can_access != 0;
}

void Device::enable_peer_access(const Device& other) const {
    state_->enable_peer_access(*other.state_);
}

bool Device::peer_access_enabled(const Device& other) const noexcept {
    return other.state_ != state_ && state_->can_use_memory_of(*other.state_);
}

}  // namespace cudarc

// Work that spans two devices: peer copies and hazard tracking across devices.
//
// Note [Hazard tracking across devices]: a buffer's hazard state may name streams of other devices: a copy
// between devices runs on one stream and touches both buffers, and a launch, copy or collective may use
// another device's memory once peer access is enabled. The rules stay those of one device: an access
// waits for the conflicting earlier uses on other streams. Only the mechanics differ, and they live here:
//  - the event is recorded on the earlier use's stream, from that stream's device's pool, and returned there;
//    the waiting stream's device makes the wait (cuStreamWaitEvent takes an event of another device) and
//    counts it;
//  - when the buffer is freed, its home stream first waits for every use on another device, so that memory
//    sources (whose events and pools are per device) only ever see uses of their own device.
#pragma once

#include <cstddef>
#include <vector>

#include "cudarc/detail/buffer.hpp"

namespace cudarc::detail {

class DeviceState;
class StreamState;

// Makes `waiter` wait for `use`, a use on a stream of another device (recording its event on first need).
void order_after_other_device(StreamState& waiter, StreamUse& use);

// Replaces every use in `uses` made on another device than `device` by a wait of `home` (or, once `home` is
// gone, of `device`'s default stream) on that use. Never throws: when a wait cannot be enqueued the host
// waits for the use instead (and the error is deferred).
void order_home_after_other_devices(DeviceState& device, StreamState& home,
                                    std::vector<StreamUse>& uses) noexcept;

// cudarc::copy between buffers of two devices, on `stream` (a stream of either device): cuMemcpyPeerAsync.
void copy_across_devices(Stream& stream, Buffer& dst, DevicePtr dst_ptr, Buffer& src, DevicePtr src_ptr,
                         std::size_t bytes);

// Stream::join for streams of two devices.
void join_across_devices(StreamState& waiter, StreamState& other);

// The error for a buffer of `owner` used with a stream of `user` that has no peer access to it.
[[noreturn]] void throw_other_device_buffer(const char* what, int owner, int user);

}  // namespace cudarc::detail

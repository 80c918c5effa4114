// Work that spans two devices: peer copies and hazard tracking across devices.
//
// Note [Hazard tracking across devices]: a buffer's hazard state may name streams of other devices: a copy
// between devices runs on one stream and touches both buffers, and a launch, copy or collective may use
// another device's memory once peer access is enabled. The rules stay those of one device (Note [Range
// hazards]): an access waits for the conflicting earlier uses on other streams. Only the mechanics differ:
//  - every wait goes through the timelines (Note [Cross-stream ordering] in core/operation.hpp), which
//    record the event on the earlier use's stream, from that stream's device's pool, and make the waiting
//    stream's device enqueue the wait (cuStreamWaitEvent takes an event of another device) and count it;
//  - when a buffer is freed or a borrowed one released, a stream of the buffer's device first waits for every
//    use on another device (order_uses_on_own_device), so that memory sources and the release queue, whose
//    events and pools are per device, only ever see uses of their own device.
#pragma once

#include <cstddef>
#include <vector>

#include "core/hazard_state.hpp"
#include "cudarc/detail/buffer.hpp"

namespace cudarc::detail {

class DeviceState;
class StreamState;

// Replaces the uses in `uses` made on another device than `device` by one use of `home` (or, when `home` is
// null or retired, of `device`'s default stream), after making that stream wait for each of them; that
// stream's use becomes "everything it submitted so far", which covers the waits. Never throws: when a wait
// cannot be enqueued the host waits for the use instead (counted on the use's device, the error deferred
// to `device`).
void order_uses_on_own_device(DeviceState& device, StreamState* home,
                              std::vector<TimelineUse>& uses) noexcept;

// cudarc::copy between buffers of two devices, on `stream` (a stream of either device): cuMemcpyPeerAsync,
// hazard-tracked on exactly the bytes copied.
void copy_across_devices(Stream& stream, Buffer& dst, DevicePtr dst_ptr, Buffer& src, DevicePtr src_ptr,
                         std::size_t bytes);

// Stream::join for streams of two devices.
void join_across_devices(StreamState& waiter, StreamState& other);

// The error for a buffer of `owner` used with a stream of `user` that has no peer access to it.
[[noreturn]] void throw_other_device_buffer(const char* what, int owner, int user);

}  // namespace cudarc::detail

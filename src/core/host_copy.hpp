// How a device-to-host copy completes: the one rule every such copy in the library follows.
#pragma once

#include "sys/driver_api.hpp"

namespace cudarc::detail {

class DeviceState;

// Note [Pageable copies already block]: cuMemcpyDtoHAsync into pageable host memory returns only once
// the data is there (the driver stages it), so a stream synchronize after it would be a redundant round
// trip; into page-locked memory the copy is truly asynchronous and the stream must be synchronized before
// the host reads. Each path is counted (Counters::blocking_copies or stream_synchronizes), so tests can
// prove that no synchronization is redundant. Memory whose kind the driver cannot tell counts as
// page-locked (a synchronize too many is safe; one too few is not).
//
// Call after enqueueing the copy into `dst` on `stream`, with the device bound. `always_synchronize` makes
// it synchronize whatever `dst` is (a managed source, for which no driver documentation spells out when
// the copy returns).
void complete_copy_to_host(DeviceState& device, sys::Stream stream, const void* dst, bool always_synchronize);

}  // namespace cudarc::detail

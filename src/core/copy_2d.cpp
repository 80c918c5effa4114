// Note [2D copies]
// ~~~~~~~~~~~~~~~~
// cudarc::copy_2d moves `height` rows of `width_bytes` with one cuMemcpy2DAsync. What hazard tracking
// records: on a device side (a PitchedView), the byte span from the first row's start to the last row's
// end, padding between rows included (one range per copy, not one per row: a superset of the bytes
// touched, which can only add waits, never lose one; rows written by other means than cudarc's 2D copies
// are the caller's business, as for any raw pointer). On a pinned side the rows are contiguous, so the
// span is exact. A pageable host side is not tracked: a copy into it returns once the data is there, as
// cudarc::copy's does (Note [Pageable copies already block]), and one out of it is staged by the driver
// before the call returns. Inside a graph capture, pageable host sides are refused (a replay would read or
// write that memory long after the call), as for cudarc::copy.
#include <fmt/format.h>

#include "core/buffer.hpp"
#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/host_copy.hpp"
#include "core/operation.hpp"
#include "core/pinned_state.hpp"
#include "core/profiler.hpp"
#include "cudarc/pitched.hpp"

namespace cudarc::detail {

namespace {

std::size_t span_bytes(std::size_t width_bytes, std::size_t height, std::size_t pitch) noexcept {
    return (height - 1) * pitch + width_bytes;
}

void fill(sys::Memcpy2D& copy, const Side2D& side, bool source) {
    const bool device = side.kind == Side2D::Kind::device;
    const int type = static_cast<int>(device ? sys::kMemoryTypeDevice : sys::kMemoryTypeHost);
    if (source) {
        copy.src_memory_type = type;
        copy.src_device = device ? side.device_ptr : 0;
        copy.src_host = device ? nullptr : side.host;
        copy.src_pitch = side.pitch;
    } else {
        copy.dst_memory_type = type;
        copy.dst_device = device ? side.device_ptr : 0;
        copy.dst_host = device ? nullptr : side.host;
        copy.dst_pitch = side.pitch;
    }
}

// Declares `side`'s access on `op` (Note [2D copies]); checks that `stream` may use device memory.
void access(Operation& op, const StreamState& stream, const Side2D& side, std::size_t width_bytes,
            std::size_t height, Access how) {
    const std::size_t bytes = span_bytes(width_bytes, height, side.pitch);
    if (side.kind == Side2D::Kind::device) {
        Buffer& buffer = non_empty(side.buffer, "cudarc::copy_2d");
        buffer.check_stream(stream);
        op.access(buffer.hazards(), static_cast<std::size_t>(side.device_ptr - buffer.ptr()), bytes, how);
    } else if (side.kind == Side2D::Kind::pinned) {
        if (side.pinned == nullptr)
            throw Error("cudarc::copy_2d: use of an empty (default-constructed or moved-from) PinnedBuffer");
        op.access(side.pinned->hazards(), side.offset, bytes, how);
    }
}

}  // namespace

void copy_2d(Stream& stream, const Side2D& dst, const Side2D& src, std::size_t width_bytes,
             std::size_t height) {
    if (width_bytes == 0 || height == 0) return;
    if (dst.kind != Side2D::Kind::device && src.kind != Side2D::Kind::device)
        throw Error("cudarc::copy_2d: one side must be device memory");
    if (dst.kind == Side2D::Kind::host || src.kind == Side2D::Kind::host) {
        refuse_in_capture("cudarc::copy_2d with pageable host memory",
                          "the graph would use that memory at every replay, after it may be gone; use a "
                          "PinnedBuffer");
    }
    const ProfilerRange range("cudarc: copy");  // Note [Profiler ranges]
    StreamState& s = Internals::stream_state(stream);
    Operation op(s);
    access(op, s, src, width_bytes, height, Access::read);
    access(op, s, dst, width_bytes, height, Access::write);
    op.order();
    sys::Memcpy2D copy;
    fill(copy, src, true);
    fill(copy, dst, false);
    copy.width_in_bytes = width_bytes;
    copy.height = height;
    DeviceState& device = s.device();
    const auto scope = device.bind();
    const sys::DriverApi& api = device.api();
    device.check(sys::require(api, api.memcpy_2d_async, sys::Entry::memcpy_2d_async)(&copy, s.handle()),
                 sys::Entry::memcpy_2d_async);
    op.complete();
    // Note [Pageable copies already block]: into host memory the copy completes through here.
    if (dst.kind == Side2D::Kind::host) {
        const bool managed = src.kind == Side2D::Kind::device && src.buffer->managed();
        complete_copy_to_host(device, s.handle(), dst.host, managed);
    }
}

}  // namespace cudarc::detail

#include "cudarc/pinned.hpp"

#include <fmt/format.h>

#include <utility>

#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "cudarc/device.hpp"

namespace cudarc::detail {

PinnedAllocation::PinnedAllocation(const Device& device, std::size_t bytes) : device_(device.state()) {
    if (bytes == 0) return;
    device_->bind();
    const sys::Result r = device_->api().mem_host_alloc(&data_, bytes, sys::kMemHostAllocPortable);
    if (r == sys::kErrorOutOfMemory) {
        throw Error(fmt::format("cudarc: PinnedBuffer: cannot page-lock {} bytes of host memory", bytes));
    }
    device_->check(r, "cuMemHostAlloc");
}

PinnedAllocation::PinnedAllocation(PinnedAllocation&& other) noexcept
    : device_(std::move(other.device_)),
      data_(std::exchange(other.data_, nullptr)),
      last_copy_(std::exchange(other.last_copy_, nullptr)) {}

PinnedAllocation& PinnedAllocation::operator=(PinnedAllocation&& other) noexcept {
    if (this != &other) {
        release();
        device_ = std::move(other.device_);
        data_ = std::exchange(other.data_, nullptr);
        last_copy_ = std::exchange(other.last_copy_, nullptr);
    }
    return *this;
}

PinnedAllocation::~PinnedAllocation() {
    release();
}

void PinnedAllocation::release() noexcept {
    if (!device_) return;
    try {
        synchronize();
    } catch (const Error& error) {
        device_->defer(error);
    }
    if (data_ != nullptr) device_->defer(device_->api().mem_free_host(data_), "cuMemFreeHost");
    data_ = nullptr;
    device_.reset();
}

void PinnedAllocation::note_copy(Stream& stream) {
    // Note [Capture overlay]: a captured copy runs at each replay; an event recorded inside the capture could
    // not be waited for afterwards. Synchronize with the replay's stream instead.
    if (stream.state().capture() != nullptr) return;
    if (last_copy_ != nullptr) {
        device_->events().release(last_copy_);
        last_copy_ = nullptr;
    }
    last_copy_ = device_->record_event(stream.native());
}

void PinnedAllocation::copy_from_device_async(Stream& stream, void* dst, Buffer& src, DevicePtr src_ptr,
                                              std::size_t bytes) {
    if (bytes == 0) return;
    prepare_access(stream, src, src_ptr, bytes, Access::read);
    device_->bind();
    device_->check(device_->api().memcpy_dtoh_async(dst, src_ptr, bytes, stream.native()),
                   "cuMemcpyDtoHAsync");
    finish_access(stream, src);
    note_copy(stream);
}

void PinnedAllocation::copy_to_device_async(Stream& stream, Buffer& dst, DevicePtr dst_ptr, const void* src,
                                            std::size_t bytes) {
    if (bytes == 0) return;
    prepare_access(stream, dst, dst_ptr, bytes, Access::write);
    device_->bind();
    device_->check(device_->api().memcpy_htod_async(dst_ptr, src, bytes, stream.native()),
                   "cuMemcpyHtoDAsync");
    finish_access(stream, dst);
    note_copy(stream);
}

void PinnedAllocation::synchronize() {
    if (last_copy_ == nullptr) return;
    refuse_in_capture("PinnedBuffer::synchronize", "the driver refuses event waits from a capturing thread");
    device_->bind();
    device_->check(device_->api().event_synchronize(last_copy_), "cuEventSynchronize");
    AtomicCounters::bump(device_->counters().event_synchronizes);
    device_->events().release(last_copy_);
    last_copy_ = nullptr;
}

bool PinnedAllocation::ready() const {
    if (last_copy_ == nullptr) return true;
    refuse_in_capture("PinnedBuffer::ready", "the driver refuses event queries from a capturing thread");
    device_->bind();
    const sys::Result r = device_->api().event_query(last_copy_);
    if (r == sys::kErrorNotReady) return false;
    device_->check(r, "cuEventQuery");
    return true;
}

}  // namespace cudarc::detail

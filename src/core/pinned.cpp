#include "cudarc/pinned.hpp"

#include <fmt/format.h>

#include <utility>

#include "core/device_state.hpp"
#include "cudarc/device.hpp"

namespace cudarc::detail {

PinnedAllocation::PinnedAllocation(const Device& device, std::size_t bytes) : device_(device.state()) {
    if (bytes == 0) return;
    const auto scope = device_->bind();
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
    const auto scope = device_->bind_or_defer();
    try {
        synchronize();
    } catch (const Error& error) {
        device_->defer(error);
    } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory while describing the failure
    }
    if (data_ != nullptr) device_->defer(device_->api().mem_free_host(data_), "cuMemFreeHost");
    data_ = nullptr;
    device_.reset();
}

void PinnedAllocation::note_copy(Stream& stream) {
    if (last_copy_ != nullptr) {
        device_->events().release(last_copy_);
        last_copy_ = nullptr;
    }
    last_copy_ = device_->record_event(stream.native());
}

void PinnedAllocation::copy_from_device_async(Stream& stream, void* dst, Buffer& src, DevicePtr src_ptr,
                                              std::size_t bytes) {
    if (bytes == 0) return;
    prepare_access(stream, src, Access::read);
    const auto scope = device_->bind();
    device_->check(device_->api().memcpy_dtoh_async(dst, src_ptr, bytes, stream.native()),
                   "cuMemcpyDtoHAsync");
    note_copy(stream);
}

void PinnedAllocation::copy_to_device_async(Stream& stream, Buffer& dst, DevicePtr dst_ptr, const void* src,
                                            std::size_t bytes) {
    if (bytes == 0) return;
    prepare_access(stream, dst, Access::write);
    const auto scope = device_->bind();
    device_->check(device_->api().memcpy_htod_async(dst_ptr, src, bytes, stream.native()),
                   "cuMemcpyHtoDAsync");
    note_copy(stream);
}

void PinnedAllocation::synchronize() {
    if (last_copy_ == nullptr) return;
    const auto scope = device_->bind();
    device_->check(device_->api().event_synchronize(last_copy_), "cuEventSynchronize");
    AtomicCounters::bump(device_->counters().event_synchronizes);
    device_->events().release(last_copy_);
    last_copy_ = nullptr;
}

bool PinnedAllocation::ready() const {
    if (last_copy_ == nullptr) return true;
    const auto scope = device_->bind();
    const sys::Result r = device_->api().event_query(last_copy_);
    if (r == sys::kErrorNotReady) return false;
    device_->check(r, "cuEventQuery");
    return true;
}

}  // namespace cudarc::detail

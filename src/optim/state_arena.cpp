#include "optim/state_arena.hpp"

#include <fmt/format.h>

#include <utility>

#include "core/device_state.hpp"
#include "cudarc/error.hpp"

namespace cudarc::optim::detail {

using cudarc::detail::AtomicCounters;
using cudarc::detail::DeviceState;

bool StateArena::managed_supported(const Device& device) {
    const sys::DriverApi& api = device.state()->api();
    if (api.mem_alloc_managed == nullptr || api.mem_prefetch_async == nullptr) return false;
    return device.attribute(sys::attr::kConcurrentManagedAccess) != 0;
}

StateArena::StateArena(Stream& stream, std::size_t bytes, bool managed) : bytes_(bytes) {
    if (bytes == 0) throw Error("cudarc::optim: an optimizer state arena of 0 bytes");
    if (!managed) {
        device_memory_ = DeviceSlice<std::byte>::zeros(stream, bytes);
        return;
    }
    DeviceState& device = stream.state().device();
    const auto scope = device.bind();
    const sys::DriverApi& api = device.api();
    DevicePtr ptr = 0;
    const sys::Result result = api.mem_alloc_managed(&ptr, bytes, sys::kMemAttachGlobal);
    if (result == sys::kErrorOutOfMemory) {
        throw Error(fmt::format(
            "cudarc::optim: cannot allocate {} bytes of managed memory for optimizer state", bytes));
    }
    device.check(result, "cuMemAllocManaged");
    AtomicCounters::bump(device.counters().driver_allocations);
    device_state_ = device.shared_from_this();
    managed_ = ptr;
    try {
        last_use_ = stream.shared_state();
        device.check(api.memset_d8_async(ptr, 0, bytes, stream.native()), "cuMemsetD8Async");
        prefetch(stream, 0, bytes);
    } catch (...) {
        release();
        throw;
    }
}

StateArena::StateArena(StateArena&& other) noexcept
    : bytes_(std::exchange(other.bytes_, 0)),
      device_memory_(std::move(other.device_memory_)),
      device_state_(std::move(other.device_state_)),
      managed_(std::exchange(other.managed_, 0)),
      last_use_(std::move(other.last_use_)) {}

StateArena& StateArena::operator=(StateArena&& other) noexcept {
    if (this != &other) {
        release();
        bytes_ = std::exchange(other.bytes_, 0);
        device_memory_ = std::move(other.device_memory_);
        device_state_ = std::move(other.device_state_);
        managed_ = std::exchange(other.managed_, 0);
        last_use_ = std::move(other.last_use_);
    }
    return *this;
}

StateArena::~StateArena() {
    release();
}

void StateArena::release() noexcept {
    if (managed_ == 0) return;
    DeviceState& device = *device_state_;
    const auto scope = device.bind_or_defer();
    const sys::DriverApi& api = device.api();
    // Note: managed memory has no stream-ordered free; the kernels that use it must be done first.
    if (last_use_) {
        try {
            const sys::Event done = last_use_->mark();
            device.defer(api.event_synchronize(done), "cuEventSynchronize");
            AtomicCounters::bump(device.counters().event_synchronizes);
            device.events().release(done);
        } catch (const Error& error) {
            device.defer(error);
        } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory while describing the failure
        }
    }
    device.defer(api.mem_free(managed_), "cuMemFree");
    AtomicCounters::bump(device.counters().driver_frees);
    managed_ = 0;
    last_use_.reset();
    device_state_.reset();
}

DevicePtr StateArena::base() const noexcept {
    return managed_ != 0 ? managed_ : device_memory_.device_ptr();
}

void StateArena::prepare(Stream& stream) {
    if (managed_ == 0) {
        cudarc::detail::prepare_access(stream, device_memory_.buffer(), cudarc::detail::Access::write);
        return;
    }
    if (&stream.state().device() != device_state_.get()) {
        throw Error(fmt::format("cudarc::optim: a stream of device {} used with optimizer state on device {}",
                                stream.device_ordinal(), device_state_->ordinal()));
    }
    if (last_use_.get() != &stream.state()) {
        if (last_use_) last_use_->order_before(stream.native());
        last_use_ = stream.shared_state();
    }
}

void StateArena::prefetch(Stream& stream, std::size_t offset, std::size_t bytes) {
    if (managed_ == 0 || bytes == 0) return;
    DeviceState& device = *device_state_;
    const auto scope = device.bind();
    const sys::DriverApi& api = device.api();
    if (api.stream_is_capturing != nullptr) {
        int status = sys::kStreamCaptureStatusNone;
        device.check(api.stream_is_capturing(stream.native(), &status), "cuStreamIsCapturing");
        // Note: a prefetch is not a graph node; a replay finds the pages where the last step left them.
        if (status != sys::kStreamCaptureStatusNone) return;
    }
    prefetch_raw(stream.native(), offset, bytes);
}

void StateArena::prefetch_raw(sys::Stream stream, std::size_t offset, std::size_t bytes) {
    if (managed_ == 0 || bytes == 0) return;
    DeviceState& device = *device_state_;
    const auto scope = device.bind();
    device.check(device.api().mem_prefetch_async(managed_ + offset, bytes, device.device(), stream),
                 "cuMemPrefetchAsync");
}

void StateArena::copy_to_host(Stream& stream, std::size_t offset, void* dst, std::size_t bytes) {
    if (bytes == 0) return;
    if (managed_ == 0) {
        cudarc::detail::copy_device_to_host(stream, dst, device_memory_.buffer(), base() + offset, bytes);
        return;
    }
    prepare(stream);
    DeviceState& device = *device_state_;
    const auto scope = device.bind();
    device.check(device.api().memcpy_dtoh_async(dst, managed_ + offset, bytes, stream.native()),
                 "cuMemcpyDtoHAsync");
    // Note: an explicit synchronize, since whether a copy from managed memory to pageable memory returns
    // before it completes is not spelled out for every driver; this path only serves explicit reads.
    stream.synchronize();
}

void StateArena::copy_from_host(Stream& stream, std::size_t offset, const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    if (managed_ == 0) {
        cudarc::detail::copy_host_to_device(stream, device_memory_.buffer(), base() + offset, src, bytes);
        return;
    }
    prepare(stream);
    DeviceState& device = *device_state_;
    const auto scope = device.bind();
    device.check(device.api().memcpy_htod_async(managed_ + offset, src, bytes, stream.native()),
                 "cuMemcpyHtoDAsync");
}

void StateArena::zero(Stream& stream, std::size_t offset, std::size_t bytes) {
    if (bytes == 0) return;
    if (managed_ == 0) {
        cudarc::detail::memset_bytes(stream, device_memory_.buffer(), base() + offset, 0, bytes);
        return;
    }
    prepare(stream);
    DeviceState& device = *device_state_;
    const auto scope = device.bind();
    device.check(device.api().memset_d8_async(managed_ + offset, 0, bytes, stream.native()),
                 "cuMemsetD8Async");
}

}  // namespace cudarc::optim::detail

#include "cudarc/pinned.hpp"

#include <fmt/format.h>

#include <new>
#include <utility>
#include <vector>

#include "core/buffer.hpp"
#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/operation.hpp"
#include "cudarc/device.hpp"

namespace cudarc::detail {

PinnedAllocation::PinnedAllocation(const Device& device, std::size_t bytes)
    : device_(detail::Internals::device_state(device)) {
    if (bytes == 0) return;
    const auto scope = device_->bind();
    const sys::Result r = device_->api().mem_host_alloc(&data_, bytes, sys::kMemHostAllocPortable);
    if (r == sys::kErrorOutOfMemory) {
        const Error cause =
            sys::make_error(device_->api(), sys::Entry::mem_host_alloc, r, device_->ordinal());
        OutOfMemory::Figures figures;
        figures.requested = bytes;
        throw OutOfMemory(
            fmt::format(
                "cudarc: PinnedBuffer: cannot page-lock {} bytes of host memory ({}). Page-locked memory "
                "is bounded by the host's RAM and by the memlock limit (`ulimit -l`; "
                "/etc/security/limits.conf, or `--ulimit memlock=-1` for a container): use fewer or "
                "smaller pinned buffers, or raise the limit",
                bytes, cause.what()),
            cause, figures);
    }
    device_->check(r, sys::Entry::mem_host_alloc);
}

PinnedAllocation::PinnedAllocation(PinnedAllocation&& other) noexcept
    : device_(std::move(other.device_)),
      data_(std::exchange(other.data_, nullptr)),
      copy_device_(std::move(other.copy_device_)),
      last_copy_(std::exchange(other.last_copy_, nullptr)),
      untracked_copy_(std::exchange(other.untracked_copy_, false)) {}

PinnedAllocation& PinnedAllocation::operator=(PinnedAllocation&& other) noexcept {
    if (this != &other) {
        release();
        device_ = std::move(other.device_);
        data_ = std::exchange(other.data_, nullptr);
        copy_device_ = std::move(other.copy_device_);
        last_copy_ = std::exchange(other.last_copy_, nullptr);
        untracked_copy_ = std::exchange(other.untracked_copy_, false);
    }
    return *this;
}

PinnedAllocation::~PinnedAllocation() {
    release();
}

namespace {
// A page-locked allocation whose last copy may still run, freed once that copy's event has completed.
struct QueuedPinnedFree {
    std::shared_ptr<DeviceState> device;  // the owner (the hook may run on the copy's device's queue)
    void* data;
};

void free_queued_pinned(void* context) noexcept {
    auto* queued = static_cast<QueuedPinnedFree*>(context);
    {
        const auto scope = queued->device->bind_or_defer();
        queued->device->defer(queued->device->api().mem_free_host(queued->data), sys::Entry::mem_free_host);
    }
    delete queued;
}
}  // namespace

void PinnedAllocation::release() noexcept {
    if (!device_) return;
    if (last_copy_ != nullptr && capture_on_this_thread()) [[unlikely]] {
        // Note [Capture overlay]: the capturing thread may not wait for the last copy (an event wait, or
        // the context-wide fallback below, would invalidate the capture): the memory is freed once the copy's
        // event has completed (Note [Deferred release]); without memory to queue it, it is leaked.
        // Note: the hook waits in the queue of the copy's device, whose event it is.
        auto* queued = new (std::nothrow) QueuedPinnedFree{device_, data_};
        std::vector<EventRef> events;
        auto* shared = new (std::nothrow) SharedEvent(*copy_device_, last_copy_, 0, 0);
        try {
            if (shared != nullptr) events.push_back(EventRef::adopt(shared));
        } catch (...) {  // NOLINT(bugprone-empty-catch): handled below, as no memory for `queued`
            EventRef::adopt(shared);  // gives the event back
            shared = nullptr;
        }
        if (queued != nullptr && !events.empty()) {
            copy_device_->releases().add(std::move(events), ReleaseHook{&free_queued_pinned, queued});
        } else {
            delete queued;
            if (shared == nullptr) copy_device_->events().release(last_copy_);
        }
        last_copy_ = nullptr;
        data_ = nullptr;
        untracked_copy_ = false;
        copy_device_.reset();
        device_.reset();
        return;
    }
    try {
        synchronize();
    } catch (const Error& error) {
        copy_device_->defer(error);
    } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory while describing the failure
    }
    if (last_copy_ != nullptr) {
        // The wait for the last copy failed: wait for the whole device of the copy instead before the
        // memory goes.
        const auto scope = copy_device_->bind_or_defer();
        const sys::Result waited = copy_device_->api().ctx_synchronize();
        if (waited == sys::kSuccess) {
            AtomicCounters::bump(copy_device_->counters().context_synchronizes);
        } else {
            copy_device_->defer(waited, sys::Entry::ctx_synchronize);
            untracked_copy_ = true;
        }
        copy_device_->events().release(last_copy_);
        last_copy_ = nullptr;
    }
    // Note: memory a copy may still be transferring into is leaked rather than freed under the DMA engine
    // (the error that caused it is deferred); on a lost device nothing transfers any more.
    const bool copy_stopped = !untracked_copy_ || (copy_device_ ? copy_device_ : device_)->lost();
    if (data_ != nullptr && copy_stopped) {
        const auto scope = device_->bind_or_defer();
        device_->defer(device_->api().mem_free_host(data_), sys::Entry::mem_free_host);
    }
    data_ = nullptr;
    untracked_copy_ = false;
    copy_device_.reset();
    device_.reset();
}

// Records the event that the destructor and synchronize() wait for. Note: the new event is recorded before
// the previous one is given up, so a failing record never leaves a queued copy untracked: the copy is then
// waited for on the host (counted) before the error is thrown, and if even that fails the memory is never
// freed (see release()).
// Note: the event comes from the stream's device (an event of one context cannot be recorded on another's
// stream), with that device's context current, as for the copy itself.
void PinnedAllocation::note_copy(Stream& stream) {
    // Note [Capture overlay]: a captured copy runs at each replay; an event recorded inside the capture could
    // not be waited for afterwards. Synchronize with the replay's stream instead.
    if (detail::Internals::stream_state(stream).capture() != nullptr) return;
    const std::shared_ptr<DeviceState> device =
        detail::Internals::stream_state(stream).device().shared_from_this();
    sys::Event event = nullptr;
    try {
        event = device->record_event(stream.native());
    } catch (...) {
        const sys::Result waited = device->api().stream_synchronize(stream.native());
        if (waited == sys::kSuccess) {
            AtomicCounters::bump(device->counters().stream_synchronizes);
        } else {
            untracked_copy_ = true;
            copy_device_ = device;  // the device whose loss stops the untracked copy
        }
        device->rethrow_current();
    }
    if (last_copy_ != nullptr) copy_device_->events().release(last_copy_);
    last_copy_ = event;
    copy_device_ = device;
}

void PinnedAllocation::copy_from_device_async(Stream& stream, void* dst, Buffer* src_buffer,
                                              DevicePtr src_ptr, std::size_t bytes) {
    if (bytes == 0) return;
    Buffer& src = non_empty(src_buffer, "PinnedBuffer::copy_from_device_async");
    StreamState& s = Internals::stream_state(stream);
    src.check_stream(s);
    Operation op(s);
    op.access(src.hazards(), static_cast<std::size_t>(src_ptr - src.ptr()), bytes, Access::read);
    op.order();
    DeviceState& device = s.device();
    const auto scope = device.bind();
    device.check(device.api().memcpy_dtoh_async(dst, src_ptr, bytes, stream.native()), sys::Entry::memcpy_dtoh_async);
    op.complete();
    note_copy(stream);
}

void PinnedAllocation::copy_to_device_async(Stream& stream, Buffer* dst_buffer, DevicePtr dst_ptr,
                                            const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    Buffer& dst = non_empty(dst_buffer, "PinnedBuffer::copy_to_device_async");
    StreamState& s = Internals::stream_state(stream);
    dst.check_stream(s);
    Operation op(s);
    op.access(dst.hazards(), static_cast<std::size_t>(dst_ptr - dst.ptr()), bytes, Access::write);
    op.order();
    DeviceState& device = s.device();
    const auto scope = device.bind();
    device.check(device.api().memcpy_htod_async(dst_ptr, src, bytes, stream.native()), sys::Entry::memcpy_htod_async);
    op.complete();
    note_copy(stream);
}

void PinnedAllocation::synchronize() {
    if (last_copy_ == nullptr) return;
    refuse_in_capture("PinnedBuffer::synchronize", "the driver refuses event waits from a capturing thread");
    DeviceState& device = *copy_device_;
    const auto scope = device.bind();
    device.check(device.api().event_synchronize(last_copy_), sys::Entry::event_synchronize);
    AtomicCounters::bump(device.counters().event_synchronizes);
    device.events().release(last_copy_);
    last_copy_ = nullptr;
}

bool PinnedAllocation::ready() const {
    if (last_copy_ == nullptr) return true;
    refuse_in_capture("PinnedBuffer::ready", "the driver refuses event queries from a capturing thread");
    const DeviceState& device = *copy_device_;
    const auto scope = device.bind();
    const sys::Result r = device.api().event_query(last_copy_);
    if (r == sys::kErrorNotReady) return false;
    device.check(r, sys::Entry::event_query);
    return true;
}

}  // namespace cudarc::detail

// Note [Pinned memory] (core/pinned_state.hpp): page-locked host memory tracked per byte range.
#include "cudarc/pinned.hpp"

#include <fmt/format.h>

#include <new>
#include <utility>
#include <vector>

#include "core/buffer.hpp"
#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/operation.hpp"
#include "core/pinned_state.hpp"
#include "core/profiler.hpp"
#include "cudarc/device.hpp"

namespace cudarc::detail {

PinnedState::PinnedState(std::shared_ptr<DeviceState> device, void* data, std::size_t bytes,
                         bool registered) noexcept
    : device_(std::move(device)),
      data_(data),
      bytes_(bytes),
      registered_(registered),
      hazards_(bytes, nullptr, device_.get()) {
    hazards_.set_address(
        static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(data)));  // names it in traces
}

namespace {

// Frees (or unregisters) the memory. Never throws.
void give_back_memory(DeviceState& device, void* data, bool registered) noexcept {
    if (data == nullptr) return;
    const auto scope = device.bind_or_defer();
    const sys::DriverApi& api = device.api();
    if (registered) {
        if (api.mem_host_unregister != nullptr)
            device.defer(api.mem_host_unregister(data), sys::Entry::mem_host_unregister);
    } else {
        device.defer(api.mem_free_host(data), sys::Entry::mem_free_host);
    }
}

// Page-locked memory whose copies may still run, given back once their events have completed.
struct QueuedPinnedFree {
    std::shared_ptr<DeviceState> device;  // the owner (the hook may run on another device's queue)
    void* data;
    bool registered;
};

void free_queued_pinned(void* context) noexcept {
    auto* queued = static_cast<QueuedPinnedFree*>(context);
    give_back_memory(*queued->device, queued->data, queued->registered);
    delete queued;
}

// Blocks until `use` has completed; false when that could not be made sure (the error deferred).
bool wait_for_use(const TimelineUse& use) noexcept {
    DeviceState& fallback = use.stream->device();
    try {
        const EventRef event = use.timeline->event_covering(use.position);
        if (!event) return true;  // a retired stream whose work is known complete
        DeviceState& device = event->device();
        const auto scope = device.bind_or_defer();
        const sys::Result r = device.api().event_synchronize(event->handle());
        if (r == sys::kSuccess) {
            AtomicCounters::bump(device.counters().event_synchronizes);
            return true;
        }
        device.defer(r, sys::Entry::event_synchronize);
    } catch (const Error& error) {
        fallback.defer(error);
    } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory; the device wait below covers it
    }
    // The event could not be recorded or waited for: wait for the whole device of the stream instead.
    const auto scope = fallback.bind_or_defer();
    const sys::Result waited = fallback.api().ctx_synchronize();
    if (waited == sys::kSuccess) {
        AtomicCounters::bump(fallback.counters().context_synchronizes);
        return true;
    }
    fallback.defer(waited, sys::Entry::ctx_synchronize);
    return fallback.lost();  // on a lost device nothing transfers any more
}

}  // namespace

void PinnedState::release() noexcept {
    hazards_.detach_link();
    std::vector<TimelineUse> uses;
    try {
        hazards_.take_uses(uses);
    } catch (...) {
        // No memory for the list: every copy of this memory ran on some device's stream; wait for this one
        // (the common case), and leak rather than risk the others.
        hazards_.clear();
        device_->synchronize_noexcept();
        return;
    }
    if (!uses.empty() && capture_on_this_thread()) [[unlikely]] {
        // Note [Pinned memory]: the capturing thread may not wait; the device's release queue gives the
        // memory back once the copies' events have completed. Events of several devices cannot share one
        // queue entry: then the memory is leaked (the error deferred).
        DeviceState* queue = nullptr;
        bool one_device = true;
        std::vector<EventRef> events;
        try {
            for (const TimelineUse& use : uses) {
                EventRef event = use.timeline->event_covering(use.position);
                if (!event) continue;
                if (queue != nullptr && queue != &event->device()) one_device = false;
                queue = &event->device();
                events.push_back(std::move(event));
            }
        } catch (...) {
            one_device = false;
        }
        auto* queued =
            one_device ? new (std::nothrow) QueuedPinnedFree{device_, data_, registered_} : nullptr;
        if (queued != nullptr) {
            (queue != nullptr ? *queue : *device_)
                .releases()
                .add(events, ReleaseHook{&free_queued_pinned, queued});
        } else {
            device_->defer(
                Error("cudarc: a PinnedBuffer destroyed inside a graph capture, with copies of "
                      "several devices pending, was leaked"));
        }
        data_ = nullptr;
        return;
    }
    bool stopped = true;
    for (const TimelineUse& use : uses) stopped = wait_for_use(use) && stopped;
    // Note: memory a copy may still be transferring into is leaked rather than freed under the DMA engine.
    if (stopped) give_back_memory(*device_, data_, registered_);
    data_ = nullptr;
}

// ---- PinnedAllocation --------------------------------------------------------------------------------

PinnedAllocation::PinnedAllocation(const Device& device, std::size_t bytes) {
    if (bytes == 0) return;
    const std::shared_ptr<DeviceState>& d = Internals::device_state(device);
    void* data = nullptr;
    {
        const auto scope = d->bind();
        const sys::Result r = d->api().mem_host_alloc(&data, bytes, sys::kMemHostAllocPortable);
        if (r == sys::kErrorOutOfMemory) {
            const Error cause = sys::make_error(d->api(), sys::Entry::mem_host_alloc, r, d->ordinal());
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
        d->check(r, sys::Entry::mem_host_alloc);
    }
    state_ = new (std::nothrow) PinnedState(d, data, bytes, false);
    if (state_ == nullptr) {
        give_back_memory(*d, data, false);
        throw std::bad_alloc();
    }
    data_ = data;
}

PinnedAllocation PinnedAllocation::register_memory(const Device& device, void* ptr, std::size_t bytes) {
    PinnedAllocation allocation;
    if (bytes == 0) return allocation;
    if (ptr == nullptr) throw Error("cudarc: PinnedBuffer::register_memory of a null pointer");
    const std::shared_ptr<DeviceState>& d = Internals::device_state(device);
    {
        const auto scope = d->bind();
        const sys::DriverApi& api = d->api();
        d->check(sys::require(api, api.mem_host_register, sys::Entry::mem_host_register)(
                     ptr, bytes, sys::kMemHostRegisterPortable),
                 sys::Entry::mem_host_register);
    }
    allocation.state_ = new (std::nothrow) PinnedState(d, ptr, bytes, true);
    if (allocation.state_ == nullptr) {
        give_back_memory(*d, ptr, true);
        throw std::bad_alloc();
    }
    allocation.data_ = ptr;
    return allocation;
}

void PinnedAllocation::release() noexcept {
    if (state_ == nullptr) return;
    state_->release();
    delete state_;
    state_ = nullptr;
    data_ = nullptr;
}

// ---- Copies and host accesses --------------------------------------------------------------------------

namespace {
PinnedState& non_empty_pinned(PinnedState* state, const char* what) {
    if (state == nullptr)
        throw Error(
            fmt::format("{}: use of an empty (default-constructed or moved-from) PinnedBuffer", what));
    return *state;
}
}  // namespace

void copy_device_to_pinned(Stream& stream, PinnedState* dst_state, std::size_t dst_offset, Buffer* src_buffer,
                           DevicePtr src_ptr, std::size_t bytes) {
    if (bytes == 0) return;
    const ProfilerRange range("cudarc: copy");  // Note [Profiler ranges]
    Buffer& src = non_empty(src_buffer, "cudarc::copy (device to pinned)");
    PinnedState& dst = non_empty_pinned(dst_state, "cudarc::copy (device to pinned)");
    StreamState& s = Internals::stream_state(stream);
    src.check_stream(s);
    Operation op(s);
    op.access(src.hazards(), static_cast<std::size_t>(src_ptr - src.ptr()), bytes, Access::read);
    op.access(dst.hazards(), dst_offset, bytes, Access::write);
    op.order();
    DeviceState& device = s.device();
    const auto scope = device.bind();
    device.check(device.api().memcpy_dtoh_async(static_cast<std::byte*>(dst.data()) + dst_offset, src_ptr,
                                                bytes, s.handle()),
                 sys::Entry::memcpy_dtoh_async);
    op.complete();
}

void copy_pinned_to_device(Stream& stream, Buffer* dst_buffer, DevicePtr dst_ptr, PinnedState* src_state,
                           std::size_t src_offset, std::size_t bytes) {
    if (bytes == 0) return;
    const ProfilerRange range("cudarc: copy");
    Buffer& dst = non_empty(dst_buffer, "cudarc::copy (pinned to device)");
    PinnedState& src = non_empty_pinned(src_state, "cudarc::copy (pinned to device)");
    StreamState& s = Internals::stream_state(stream);
    dst.check_stream(s);
    Operation op(s);
    op.access(dst.hazards(), static_cast<std::size_t>(dst_ptr - dst.ptr()), bytes, Access::write);
    op.access(src.hazards(), src_offset, bytes, Access::read);
    op.order();
    DeviceState& device = s.device();
    const auto scope = device.bind();
    device.check(device.api().memcpy_htod_async(
                     dst_ptr, static_cast<const std::byte*>(src.data()) + src_offset, bytes, s.handle()),
                 sys::Entry::memcpy_htod_async);
    op.complete();
}

namespace {
Needs host_needs(PinnedState& state, std::size_t offset, std::size_t bytes, HostAccess access) {
    Needs needs;
    state.hazards().collect_for_host(offset, bytes,
                                     access == HostAccess::write ? Access::write : Access::read, needs);
    return needs;
}
}  // namespace

void pinned_wait(PinnedState* state, std::size_t offset, std::size_t bytes, HostAccess access) {
    if (state == nullptr || bytes == 0) return;
    const Needs needs = host_needs(*state, offset, bytes, access);
    if (needs.empty()) return;
    refuse_in_capture("PinnedBuffer::wait", "the driver refuses event waits from a capturing thread");
    for (std::size_t i = 0; i < needs.size(); ++i) {
        const EventRef event = needs[i].timeline->event_covering(needs[i].position);
        if (!event) continue;
        DeviceState& device = event->device();
        const auto scope = device.bind();
        device.check(device.api().event_synchronize(event->handle()), sys::Entry::event_synchronize);
        AtomicCounters::bump(device.counters().event_synchronizes);
    }
}

bool pinned_ready(PinnedState* state, std::size_t offset, std::size_t bytes, HostAccess access) {
    if (state == nullptr || bytes == 0) return true;
    const Needs needs = host_needs(*state, offset, bytes, access);
    if (needs.empty()) return true;
    refuse_in_capture("PinnedBuffer::ready", "the driver refuses event queries from a capturing thread");
    for (std::size_t i = 0; i < needs.size(); ++i) {
        const EventRef event = needs[i].timeline->event_covering(needs[i].position);
        if (!event) continue;
        DeviceState& device = event->device();
        const auto scope = device.bind();
        const sys::Result r = device.api().event_query(event->handle());
        if (r == sys::kErrorNotReady) return false;
        device.check(r, sys::Entry::event_query);
    }
    return true;
}

}  // namespace cudarc::detail

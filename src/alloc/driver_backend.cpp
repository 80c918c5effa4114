#include "alloc/driver_backend.hpp"

namespace cudarc::alloc {
namespace {

// Makes the device's context current for one call when another is, and puts the previous one back.
// Note: the device's own threads usually have it current already; then this is one cheap query.
class ScopedContext {
  public:
    ScopedContext(const sys::DriverApi& api, sys::Context context, int device,
                  const DriverBackendHooks& hooks)
        : api_(api), hooks_(hooks) {
        if (context == nullptr || api.ctx_get_current == nullptr || api.ctx_set_current == nullptr) return;
        sys::Context current = nullptr;
        sys::check(api, api.ctx_get_current(&current), sys::Entry::ctx_get_current, device);
        if (current == context) return;
        sys::check(api, api.ctx_set_current(context), sys::Entry::ctx_set_current, device);
        previous_ = current;
        restore_ = true;
    }
    ScopedContext(const ScopedContext&) = delete;
    ScopedContext& operator=(const ScopedContext&) = delete;
    ~ScopedContext() {
        if (!restore_) return;
        const sys::Result result = api_.ctx_set_current(previous_);
        if (result != sys::kSuccess && hooks_.defer != nullptr)
            hooks_.defer(hooks_.owner, result, sys::Entry::ctx_set_current);
    }

  private:
    const sys::DriverApi& api_;
    const DriverBackendHooks& hooks_;
    sys::Context previous_ = nullptr;
    bool restore_ = false;
};

sys::Stream to_stream(StreamKey stream) noexcept {
    return reinterpret_cast<sys::Stream>(stream);
}

}  // namespace

DriverBackend::DriverBackend(const sys::DriverApi& api, int device_ordinal, sys::Context context,
                             DriverBackendHooks hooks)
    : api_(api), device_(device_ordinal), context_(context), hooks_(hooks) {
    if (hooks.record_event == nullptr || hooks.release_event == nullptr) {
        throw Error("cudarc: the allocator's driver backend needs record_event and release_event hooks");
    }
}

std::optional<DevicePtr> DriverBackend::allocate_segment(std::size_t bytes) {
    ScopedContext scope(api_, context_, device_, hooks_);
    DevicePtr ptr = 0;
    const sys::Result result = sys::require(api_, api_.mem_alloc, sys::Entry::mem_alloc)(&ptr, bytes);
    if (result == sys::kErrorOutOfMemory) return std::nullopt;
    sys::check(api_, result, sys::Entry::mem_alloc, device_);
    count(DriverBackendHooks::Call::driver_allocation);
    return ptr;
}

void DriverBackend::free_segment(DevicePtr ptr, std::size_t /*bytes*/) {
    ScopedContext scope(api_, context_, device_, hooks_);
    sys::check(api_, sys::require(api_, api_.mem_free, sys::Entry::mem_free)(ptr), sys::Entry::mem_free,
               device_);
    count(DriverBackendHooks::Call::driver_free);
}

EventHandle DriverBackend::record_event(StreamKey stream) {
    return hooks_.record_event(hooks_.owner, stream);
}

bool DriverBackend::event_completed(EventHandle event) {
    const sys::Result result = sys::require(api_, api_.event_query, sys::Entry::event_query)(event);
    if (result == sys::kErrorNotReady) return false;
    sys::check(api_, result, sys::Entry::event_query, device_);
    return true;
}

void DriverBackend::synchronize_event(EventHandle event) {
    count(DriverBackendHooks::Call::host_blocking_wait);
    sys::check(api_, sys::require(api_, api_.event_synchronize, sys::Entry::event_synchronize)(event),
               sys::Entry::event_synchronize, device_);
}

void DriverBackend::release_event(EventHandle event) noexcept {
    hooks_.release_event(hooks_.owner, event);
}

bool DriverBackend::stream_capturing(StreamKey stream) {
    const sys::Stream native =
        hooks_.stream_of != nullptr ? hooks_.stream_of(hooks_.owner, stream) : to_stream(stream);
    return sys::stream_is_capturing(api_, native, device_);
}

std::pair<std::size_t, std::size_t> DriverBackend::memory_info() {
    ScopedContext scope(api_, context_, device_, hooks_);
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    sys::check(api_,
               sys::require(api_, api_.mem_get_info, sys::Entry::mem_get_info)(&free_bytes, &total_bytes),
               sys::Entry::mem_get_info, device_);
    return {free_bytes, total_bytes};
}

}  // namespace cudarc::alloc

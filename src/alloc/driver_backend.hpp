// The caching allocator's real backend: segments from cuMemAlloc, events from the device's pool.
#pragma once

#include "alloc/backend.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::alloc {

// What the device lends the backend. Plain function pointers plus the device as `owner`: cheap to
// call, and the allocator never needs to know the device's types.
struct DriverBackendHooks {
    void* owner = nullptr;  // passed back to every hook
    // Required: take an event from the device's pool and record it on `stream`.
    EventHandle (*record_event)(void* owner, StreamKey stream) = nullptr;
    // Required: give an event back to the pool. Must not throw.
    void (*release_event)(void* owner, EventHandle event) noexcept = nullptr;

    // Optional: the native stream behind a key (default: the key is the handle's value).
    sys::Stream (*stream_of)(void* owner, StreamKey stream) noexcept = nullptr;

    // Optional: told of every driver call the device counts.
    enum class Call { host_blocking_wait, driver_allocation, driver_free };
    void (*count)(void* owner, Call call) noexcept = nullptr;
    // Optional: a failure nothing can throw (the previous context could not be put back), kept for the
    // device's Device::rethrow_deferred_error.
    void (*defer)(void* owner, sys::Result result, sys::Entry entry) noexcept = nullptr;
};

class DriverBackend final : public AllocatorBackend {
  public:
    // `context` (may be null) is made current around the calls that need it (allocate, free, memory
    // info) when another context is current. `api` must outlive the backend (sys::driver() does).
    // Throws cudarc::Error when a required hook is missing.
    DriverBackend(const sys::DriverApi& api, int device_ordinal, sys::Context context,
                  DriverBackendHooks hooks);

    [[nodiscard]] std::optional<DevicePtr> allocate_segment(std::size_t bytes) override;
    void free_segment(DevicePtr ptr, std::size_t bytes) override;
    [[nodiscard]] EventHandle record_event(StreamKey stream) override;
    [[nodiscard]] bool event_completed(EventHandle event) override;
    void synchronize_event(EventHandle event) override;
    void release_event(EventHandle event) noexcept override;
    [[nodiscard]] bool stream_capturing(StreamKey stream) override;
    [[nodiscard]] std::pair<std::size_t, std::size_t> memory_info() override;
    [[nodiscard]] int device_ordinal() const noexcept override { return device_; }
    [[nodiscard]] Backend backend() const noexcept override { return api_.backend; }

  private:
    void count(DriverBackendHooks::Call call) const noexcept {
        if (hooks_.count != nullptr) hooks_.count(hooks_.owner, call);
    }

    const sys::DriverApi& api_;
    int device_;
    sys::Context context_;
    DriverBackendHooks hooks_;
};

}  // namespace cudarc::alloc

#include "core/managed_source.hpp"

#include <fmt/format.h>

#include "core/device_state.hpp"
#include "core/stream_ordered_source.hpp"

namespace cudarc::detail {
namespace {

class ManagedSource final : public MemoryResource {
  public:
    explicit ManagedSource(DeviceState& device)
        : device_(device), prefetches_(supports_managed_memory(device)) {}

    MemoryBlock allocate(std::size_t bytes, StreamState& /*stream*/) override {
        // Note [Capture overlay]: cuMemAllocManaged from a capturing thread, like cuMemAlloc, would
        // invalidate the capture.
        if (capture_on_this_thread()) {
            throw Error(
                fmt::format("cudarc: allocating {} bytes of managed memory inside a graph capture: "
                            "cuMemAllocManaged would "
                            "invalidate the capture; allocate it before capturing (nothing was done, and the "
                            "capture goes "
                            "on)",
                            bytes));
        }
        const sys::DriverApi& api = device_.api();
        device_.bind();
        DevicePtr ptr = 0;
        const sys::Result r =
            sys::require(api, api.mem_alloc_managed, "cuMemAllocManaged")(&ptr, bytes, sys::kMemAttachGlobal);
        if (r == sys::kErrorOutOfMemory) throw make_out_of_memory(device_, bytes, 0, 0);
        device_.check(r, "cuMemAllocManaged");
        AtomicCounters::bump(device_.counters().driver_allocations);
        return {ptr, nullptr};
    }

    void deallocate(const MemoryBlock& block, std::size_t /*bytes*/, StreamState& home,
                    std::vector<StreamUse> uses) noexcept override {
        const sys::DriverApi& api = device_.api();
        try {
            device_.bind();
            // Note: cuMemFree is not stream-ordered, so every use must be complete first: wait on the host
            // for each one's event, or for the home stream when it was the only user (its later work
            // orders after its own use anyway).
            if (uses.empty()) uses.push_back({home.shared_from_this(), nullptr});
            for (StreamUse& use : uses) {
                if (use.event == nullptr) use.event = use.stream->mark();
                device_.check(api.event_synchronize(use.event), "cuEventSynchronize");
                AtomicCounters::bump(device_.counters().event_synchronizes);
            }
        } catch (const Error& error) {
            device_.defer(error);  // a failed wait means a broken device: the memory is freed regardless
        } catch (...) {
        }
        device_.defer(api.mem_free(block.ptr), "cuMemFree");
        AtomicCounters::bump(device_.counters().driver_frees);
        for (StreamUse& use : uses) {
            if (use.event != nullptr) device_.events().release(use.event);
        }
    }

    [[nodiscard]] bool managed() const noexcept override { return true; }

    void prefetch(StreamState& stream, DevicePtr ptr, std::size_t bytes) override {
        if (!prefetches_ || bytes == 0) return;
        device_.bind();
        device_.check(device_.api().mem_prefetch_async(ptr, bytes, device_.device(), stream.handle()),
                      "cuMemPrefetchAsync");
    }

  private:
    DeviceState& device_;
    bool prefetches_;  // the device accesses managed memory concurrently, and the driver can prefetch
};

}  // namespace

bool supports_managed_memory(const DeviceState& device) {
    const sys::DriverApi& api = device.api();
    if (api.mem_alloc_managed == nullptr || api.mem_prefetch_async == nullptr) return false;
    int concurrent = 0;
    device.check(api.device_get_attribute(&concurrent, sys::attr::kConcurrentManagedAccess, device.device()),
                 "cuDeviceGetAttribute");
    return concurrent != 0;
}

std::unique_ptr<MemoryResource> make_managed_source(DeviceState& device) {
    return std::make_unique<ManagedSource>(device);
}

}  // namespace cudarc::detail

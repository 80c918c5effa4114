#include "core/managed_source.hpp"

#include <fmt/format.h>

#include <atomic>

#include "core/device_state.hpp"
#include "core/stream_ordered_source.hpp"

namespace cudarc::detail {
namespace {

class ManagedSource final : public MemorySource {
  public:
    explicit ManagedSource(DeviceState& device)
        : device_(device), prefetches_(supports_managed_memory(device)) {}

    MemoryBlock allocate(std::size_t bytes, StreamState& /*stream*/) override {
        // Note [Capture overlay]: cuMemAllocManaged from a capturing thread, like cuMemAlloc, would
        // invalidate the capture.
        if (capture_on_this_thread()) {
            throw Error(
                fmt::format("cudarc: allocating {} bytes of managed memory inside a graph capture: {} would "
                            "invalidate the capture; allocate it before capturing (nothing was done, and the "
                            "capture goes on)",
                            bytes, sys::entry_name(device_.api().backend, sys::Entry::mem_alloc_managed)));
        }
        const sys::DriverApi& api = device_.api();
        const auto scope = device_.bind();  // throws DeviceLost for a lost device
        DevicePtr ptr = 0;
        const sys::Result r = sys::require(api, api.mem_alloc_managed, sys::Entry::mem_alloc_managed)(
            &ptr, bytes, sys::kMemAttachGlobal);
        if (r == sys::kErrorOutOfMemory) {
            out_of_memory_errors_.fetch_add(1, std::memory_order_relaxed);
            const AllocatorStats figures = stats();
            throw make_out_of_memory(device_, bytes, figures.allocated_bytes, figures.reserved_bytes,
                                     "cudarc's managed memory");
        }
        device_.check(r, sys::Entry::mem_alloc_managed);
        AtomicCounters::bump(device_.counters().driver_allocations);
        live_allocations_.fetch_add(1, std::memory_order_relaxed);
        live_bytes_.fetch_add(bytes, std::memory_order_relaxed);
        return {ptr, nullptr};
    }

    void deallocate(const MemoryBlock& block, std::size_t bytes, StreamState& home,
                    std::vector<StreamUse> uses) noexcept override {
        const sys::DriverApi& api = device_.api();
        const auto scope = device_.bind_or_defer();
        bool waited = false;
        try {
            // Note: cuMemFree is not stream-ordered, so every use must be complete first: wait on the host
            // for each one's event, or for the home stream when it was the only user (its later work
            // orders after its own use anyway).
            if (uses.empty()) uses.push_back({home.shared_from_this(), {}});
            for (StreamUse& use : uses) {
                if (!use.event) use.event = use.stream->mark();
                if (!use.event) continue;  // a retired stream whose work is known complete
                device_.check(api.event_synchronize(use.event->handle()), sys::Entry::event_synchronize);
                AtomicCounters::bump(device_.counters().event_synchronizes);
            }
            waited = true;
        } catch (const Error& error) {
            device_.defer(error);
        } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory while gathering the uses
        }
        if (!waited) {
            // Note [Free after a failed record]: wait for the whole device instead.
            const sys::Result synchronized = api.ctx_synchronize();
            if (synchronized == sys::kSuccess) {
                AtomicCounters::bump(device_.counters().context_synchronizes);
                waited = true;
            } else {
                device_.defer(synchronized, sys::Entry::ctx_synchronize);
            }
        }
        if (waited || device_.lost()) {
            device_.defer(api.mem_free(block.ptr), sys::Entry::mem_free);
            AtomicCounters::bump(device_.counters().driver_frees);
            live_allocations_.fetch_sub(1, std::memory_order_relaxed);
            live_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
        }
    }

    [[nodiscard]] bool managed() const noexcept override { return true; }

    void prefetch(StreamState& stream, DevicePtr ptr, std::size_t bytes) override {
        if (!prefetches_ || bytes == 0) return;
        const auto scope = device_.bind();
        device_.check(device_.api().mem_prefetch_async(ptr, bytes, device_.device(), stream.handle()),
                      sys::Entry::mem_prefetch_async);
    }

    // The bytes of live managed allocations (nothing is cached: reserved is allocated), for the figures of
    // an OutOfMemory. Note: Device::allocator_stats reports the device's memory source, not this one.
    [[nodiscard]] AllocatorStats stats() const override {
        AllocatorStats out;
        out.live_allocations = live_allocations_.load(std::memory_order_relaxed);
        out.allocated_bytes = out.active_bytes = out.reserved_bytes =
            live_bytes_.load(std::memory_order_relaxed);
        out.out_of_memory_errors = out_of_memory_errors_.load(std::memory_order_relaxed);
        return out;
    }

  private:
    DeviceState& device_;
    bool prefetches_;  // the device accesses managed memory concurrently, and the driver can prefetch
    std::atomic<std::size_t> live_allocations_{0};
    std::atomic<std::size_t> live_bytes_{0};
    std::atomic<std::uint64_t> out_of_memory_errors_{0};
};

}  // namespace

bool supports_managed_memory(const DeviceState& device) {
    const sys::DriverApi& api = device.api();
    if (api.mem_alloc_managed == nullptr || api.mem_prefetch_async == nullptr) return false;
    int concurrent = 0;
    device.check(api.device_get_attribute(&concurrent, sys::attr::kConcurrentManagedAccess, device.device()),
                 sys::Entry::device_get_attribute);
    return concurrent != 0;
}

std::unique_ptr<MemorySource> make_managed_source(DeviceState& device) {
    return std::make_unique<ManagedSource>(device);
}

}  // namespace cudarc::detail

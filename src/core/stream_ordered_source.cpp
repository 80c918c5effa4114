#include "core/stream_ordered_source.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <limits>

#include "core/device_state.hpp"

namespace cudarc::detail {
namespace {

class StreamOrderedSource final : public MemoryResource {
  public:
    explicit StreamOrderedSource(DeviceState& device) : device_(device) {
        const sys::DriverApi& api = device.api();
        int pools_supported = 0;
        if (api.mem_alloc_async != nullptr && api.device_get_default_mem_pool != nullptr &&
            api.device_get_attribute(&pools_supported, sys::attr::kMemoryPoolsSupported, device.device()) ==
                sys::kSuccess &&
            pools_supported != 0) {
            sys::MemoryPool pool = nullptr;
            device.check(api.device_get_default_mem_pool(&pool, device.device()),
                         "cuDeviceGetDefaultMemPool");
            std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
            device.check(api.mem_pool_set_attribute(pool, sys::kMemPoolAttrReleaseThreshold, &threshold),
                         "cuMemPoolSetAttribute");
            pooled_ = true;
        }
    }

    MemoryBlock allocate(std::size_t bytes, StreamState& stream) override {
        const sys::DriverApi& api = device_.api();
        if (!pooled_ && capture_on_this_thread()) {
            throw Error(fmt::format(
                "cudarc: allocating {} bytes inside a graph capture: this device has no stream-ordered pool, "
                "and cuMemAlloc would invalidate the capture; allocate before capturing",
                bytes));
        }
        device_.bind();
        DevicePtr ptr = 0;
        const sys::Result r =
            pooled_ ? api.mem_alloc_async(&ptr, bytes, stream.handle()) : api.mem_alloc(&ptr, bytes);
        if (r == sys::kErrorOutOfMemory) throw make_out_of_memory(device_, bytes, 0, 0);
        device_.check(r, pooled_ ? "cuMemAllocAsync" : "cuMemAlloc");
        AtomicCounters::bump(device_.counters().driver_allocations);
        return {ptr, nullptr};
    }

    void deallocate(const MemoryBlock& block, std::size_t, StreamState& home,
                    std::vector<StreamUse> uses) noexcept override {
        const sys::DriverApi& api = device_.api();
        try {
            device_.bind();
            if (pooled_) {
                // Free on the home stream once it has waited for every other stream's use.
                StreamState& freer = home.alive() ? home : *device_.default_stream_state();
                for (StreamUse& use : uses) {
                    if (use.stream.get() == &freer) continue;
                    if (use.event != nullptr) {
                        device_.wait_event(freer.handle(), use.event);
                    } else {
                        use.stream->order_before(freer.handle());
                    }
                }
                if (&freer != &home) home.order_before(freer.handle());
                device_.defer(api.mem_free_async(block.ptr, freer.handle()), "cuMemFreeAsync");
            } else {
                // cuMemFree is not stream-ordered: wait on the host for every use first (counted).
                home.order_before(device_.default_stream_state()->handle());
                for (StreamUse& use : uses)
                    use.stream->order_before(device_.default_stream_state()->handle());
                device_.check(api.stream_synchronize(device_.default_stream_state()->handle()),
                              "cuStreamSynchronize");
                AtomicCounters::bump(device_.counters().stream_synchronizes);
                device_.defer(api.mem_free(block.ptr), "cuMemFree");
            }
            AtomicCounters::bump(device_.counters().driver_frees);
        } catch (const Error& error) {
            device_.defer(error);
        } catch (...) {
        }
        for (StreamUse& use : uses) device_.events().release(use.event);
    }

  private:
    DeviceState& device_;
    bool pooled_ = false;
};

}  // namespace

std::unique_ptr<MemoryResource> make_stream_ordered_source(DeviceState& device) {
    return std::make_unique<StreamOrderedSource>(device);
}

OutOfMemory make_out_of_memory(DeviceState& device, std::size_t requested, std::size_t allocated,
                               std::size_t reserved) {
    OutOfMemory::Figures figures;
    figures.requested = requested;
    figures.allocated = allocated;
    figures.reserved = reserved;
    if (device.api().mem_get_info(&figures.device_free, &figures.device_total) != sys::kSuccess) {
        figures.device_free = figures.device_total = 0;
    }
    return OutOfMemory(device.ordinal(), figures, device.api().backend);
}

}  // namespace cudarc::detail

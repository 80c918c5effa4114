#include "core/stream_ordered_source.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <limits>

#include "core/device_state.hpp"
#include "core/memory_history.hpp"
#include "cudarc/detail/buffer.hpp"

namespace cudarc::detail {
namespace {

class StreamOrderedSource final : public MemorySource {
  public:
    explicit StreamOrderedSource(DeviceState& device) : device_(device) {
        const sys::DriverApi& api = device.api();
        int pools_supported = 0;
        if (api.mem_alloc_async != nullptr && api.device_get_default_mem_pool != nullptr) {
            const sys::Result asked =
                api.device_get_attribute(&pools_supported, sys::attr::kMemoryPoolsSupported, device.device());
            // Note: a driver that does not know the attribute has no pools (pools_supported stays 0); any
            // other failure is an error, not a silent fallback to cuMemAlloc, whose frees wait on the host.
            if (asked != sys::kErrorInvalidValue) device.check(asked, sys::Entry::device_get_attribute);
        }
        if (pools_supported != 0) {
            device.check(api.device_get_default_mem_pool(&pool_, device.device()),
                         sys::Entry::device_get_default_mem_pool);
            std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
            device.check(api.mem_pool_set_attribute(pool_, sys::kMemPoolAttrReleaseThreshold, &threshold),
                         sys::Entry::mem_pool_set_attribute);
        }
    }

    MemoryBlock allocate(std::size_t bytes, StreamState& stream) override {
        if (!pooled() && capture_on_this_thread()) {
            throw Error(fmt::format(
                "cudarc: allocating {} bytes inside a graph capture: this device has no stream-ordered pool, "
                "and cuMemAlloc would invalidate the capture; allocate before capturing",
                bytes));
        }
        const auto scope = device_.bind();  // throws DeviceLost for a lost device
        DevicePtr ptr = 0;
        sys::Result r = allocate_once(ptr, bytes, stream);
        if (r == sys::kErrorOutOfMemory && pooled() &&
            captures_underway.load(std::memory_order_relaxed) == 0) {
            // Freed memory the pool still reserves counts against the device: give it back and retry once
            // (not during a capture, which gives nothing back: see empty_cache).
            trim();
            r = allocate_once(ptr, bytes, stream);
        }
        if (r == sys::kErrorOutOfMemory) {
            out_of_memory_errors_.fetch_add(1, std::memory_order_relaxed);
            const AllocatorStats figures = stats();
            throw make_out_of_memory(device_, bytes, figures.allocated_bytes, figures.reserved_bytes,
                                     pooled() ? "the driver's memory pool" : "the driver");
        }
        device_.check(r, pooled() ? sys::Entry::mem_alloc_async : sys::Entry::mem_alloc);
        AtomicCounters::bump(device_.counters().driver_allocations);
        live_allocations_.fetch_add(1, std::memory_order_relaxed);
        if (!pooled()) unpooled_bytes_.fetch_add(bytes, std::memory_order_relaxed);
        if (history_.recording()) record(MemoryHistory::Action::allocate, ptr, bytes, stream);
        return {ptr, nullptr};
    }

    void deallocate(const MemoryBlock& block, std::size_t bytes, StreamState& home,
                    std::vector<StreamUse> uses) noexcept override {
        const sys::DriverApi& api = device_.api();
        if (history_.recording()) record(MemoryHistory::Action::free, block.ptr, bytes, home);
        bool ordered = false;
        try {
            const auto scope = device_.bind();
            if (pooled()) {
                // Free on the home stream once it has waited for every other stream's use.
                StreamState& freer = home.alive() ? home : *device_.default_stream_state();
                for (StreamUse& use : uses) {
                    if (use.stream.get() == &freer) continue;
                    if (use.event) {
                        device_.wait_event(freer.handle(), use.event->handle());
                    } else {
                        use.stream->order_before(freer);
                    }
                }
                if (&freer != &home) home.order_before(freer);
                ordered = true;
                free_now(block.ptr, freer.handle());
            } else {
                // cuMemFree is not stream-ordered: wait on the host for every use first (counted).
                home.order_before(*device_.default_stream_state());
                for (StreamUse& use : uses) use.stream->order_before(*device_.default_stream_state());
                device_.check(api.stream_synchronize(device_.default_stream_state()->handle()),
                              sys::Entry::stream_synchronize);
                AtomicCounters::bump(device_.counters().stream_synchronizes);
                ordered = true;
                free_now(block.ptr, nullptr);
            }
        } catch (const Error& error) {
            device_.defer(error);
        } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory while describing the failure
        }
        uses.clear();  // the events go back before any host wait below
        if (!ordered) free_after_host_wait(block.ptr);
        live_allocations_.fetch_sub(1, std::memory_order_relaxed);
        if (!pooled()) unpooled_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    }

    // Note: memory whose cuMemFreeAsync is still queued on a stream is in use for the pool; it is released
    // by the next empty_cache() after that stream reaches the free. While a capture is under way it gives
    // nothing back, as the caching allocator does (Note [Capture overlay]).
    void empty_cache() override {
        if (pooled() && captures_underway.load(std::memory_order_relaxed) == 0) trim();
    }

    // The pool's own figures (cuMemPoolGetAttribute): reserved is what it holds from the device, allocated
    // what allocations use. Without a pool, the bytes of live cuMemAlloc allocations.
    AllocatorStats stats() const override {
        AllocatorStats out;
        out.live_allocations = live_allocations_.load(std::memory_order_relaxed);
        out.out_of_memory_errors = out_of_memory_errors_.load(std::memory_order_relaxed);
        if (!pooled()) {
            out.allocated_bytes = out.reserved_bytes = out.active_bytes = unpooled_bytes_.load();
            return out;
        }
        out.reserved_bytes = pool_attribute(sys::kMemPoolAttrReservedMemCurrent);
        out.peak_reserved_bytes = pool_attribute(sys::kMemPoolAttrReservedMemHigh);
        out.allocated_bytes = pool_attribute(sys::kMemPoolAttrUsedMemCurrent);
        out.peak_allocated_bytes = pool_attribute(sys::kMemPoolAttrUsedMemHigh);
        out.active_bytes = out.allocated_bytes;
        return out;
    }

    void reset_peak() override {
        if (!pooled() || device_.api().mem_pool_set_attribute == nullptr) return;
        for (const int attribute : {sys::kMemPoolAttrReservedMemHigh, sys::kMemPoolAttrUsedMemHigh}) {
            std::uint64_t zero = 0;  // the only value these accept: restart from the current figure
            device_.check(device_.api().mem_pool_set_attribute(pool_, attribute, &zero),
                          sys::Entry::mem_pool_set_attribute);
        }
    }

    // The driver's pool shows no segments: the snapshot has the timeline only.
    AllocatorSnapshot snapshot() const override {
        AllocatorSnapshot out;
        out.source = "stream_ordered";
        out.timeline = history_.events();
        return out;
    }

    void record_history(std::size_t max_entries) override {
        const AllocatorStats figures = stats();
        history_.start(max_entries, figures.allocated_bytes, figures.reserved_bytes);
    }

  private:
    [[nodiscard]] bool pooled() const noexcept { return pool_ != nullptr; }

    // Frees `ptr` now: ordered on `stream` (pooled), or at once (cuMemFree). The caller holds a context
    // scope. A refusal is deferred: the driver keeps the memory.
    void free_now(DevicePtr ptr, sys::Stream stream) noexcept {
        const sys::DriverApi& api = device_.api();
        if (pooled()) {
            device_.defer(api.mem_free_async(ptr, stream), sys::Entry::mem_free_async);
        } else {
            device_.defer(api.mem_free(ptr), sys::Entry::mem_free);
        }
        AtomicCounters::bump(device_.counters().driver_frees);
    }

    // Note [Free after a failed record] (memory_source.hpp): the uses could not be ordered before the free,
    // so the host waits for the whole device and frees then; if even that fails the memory stays out of
    // reach (never freed), unless the device is lost.
    void free_after_host_wait(DevicePtr ptr) noexcept {
        const auto scope = device_.bind_or_defer();
        const sys::Result waited = device_.api().ctx_synchronize();
        if (waited == sys::kSuccess) {
            AtomicCounters::bump(device_.counters().context_synchronizes);
        } else {
            device_.defer(waited, sys::Entry::ctx_synchronize);
            if (!device_.lost()) return;
        }
        // Every use has completed: any stream may free it.
        free_now(ptr, device_.default_stream_state()->handle());
    }

    // The pool's reserved figure is its own (it grows in chunks and shrinks when trimmed): read with each
    // event while recording.
    void record(MemoryHistory::Action action, DevicePtr ptr, std::size_t bytes,
                const StreamState& stream) noexcept {
        try {
            history_.set_reserved(stats().reserved_bytes);
        } catch (...) {  // NOLINT(bugprone-empty-catch): the event keeps the last figure
        }
        history_.record(action, ptr, bytes, stream.key());
    }

    sys::Result allocate_once(DevicePtr& ptr, std::size_t bytes, StreamState& stream) {
        const sys::DriverApi& api = device_.api();
        return pooled() ? api.mem_alloc_async(&ptr, bytes, stream.handle()) : api.mem_alloc(&ptr, bytes);
    }

    void trim() {
        const sys::DriverApi& api = device_.api();
        device_.check(sys::require(api, api.mem_pool_trim_to, sys::Entry::mem_pool_trim_to)(pool_, 0),
                      sys::Entry::mem_pool_trim_to);
    }

    // 0 when the driver cannot tell (no cuMemPoolGetAttribute).
    [[nodiscard]] std::size_t pool_attribute(int attribute) const {
        const sys::DriverApi& api = device_.api();
        if (api.mem_pool_get_attribute == nullptr) return 0;
        std::uint64_t value = 0;
        device_.check(api.mem_pool_get_attribute(pool_, attribute, &value),
                      sys::Entry::mem_pool_get_attribute);
        return static_cast<std::size_t>(value);
    }

    DeviceState& device_;
    sys::MemoryPool pool_ = nullptr;  // null: no memory pools (cuMemAlloc / cuMemFree)
    std::atomic<std::size_t> live_allocations_{0};
    std::atomic<std::size_t> unpooled_bytes_{0};
    std::atomic<std::uint64_t> out_of_memory_errors_{0};
    MemoryHistory history_;
};

}  // namespace

std::unique_ptr<MemorySource> make_stream_ordered_source(DeviceState& device) {
    return std::make_unique<StreamOrderedSource>(device);
}

OutOfMemory make_out_of_memory(DeviceState& device, std::size_t requested, std::size_t allocated,
                               std::size_t reserved, std::string_view holder) {
    OutOfMemory::Figures figures;
    figures.requested = requested;
    figures.allocated = allocated;
    figures.reserved = reserved;
    if (device.api().mem_get_info(&figures.device_free, &figures.device_total) != sys::kSuccess) {
        figures.device_free = figures.device_total = 0;
    }
    return OutOfMemory(device.ordinal(), figures, device.api().backend, holder);
}

}  // namespace cudarc::detail

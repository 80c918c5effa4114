// The device's caching memory source: the caching allocator, and the allocator's backend over the device
// (its context, driver table, event pool and counters), with fixed segments (MemorySource::caching_allocator)
// or expandable ones (MemorySource::expandable, over VirtualMemory). It sits above core
// (docs/architecture.md): core reaches it only through detail::MemorySource, make_caching_source and
// make_expandable_source.
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "alloc/caching_allocator.hpp"
#include "alloc/virtual_memory.hpp"
#include "core/memory_history.hpp"
#include "core/memory_source.hpp"

namespace cudarc::alloc {

class CachingSource final : public detail::MemorySource, private AllocatorBackend {
  public:
    // Throws cudarc::Error for an invalid configuration, and (Segments::expandable) when the driver or the
    // device has no virtual memory management.
    CachingSource(detail::DeviceState& device, const AllocatorConfig& config,
                  Segments segments = Segments::fixed);

    // detail::MemorySource
    detail::MemoryBlock allocate(std::size_t bytes, detail::StreamState& stream) override;
    void deallocate(const detail::MemoryBlock& block, std::size_t bytes, detail::StreamState& home,
                    std::vector<detail::StreamUse> uses) noexcept override;
    void empty_cache() override { allocator_.empty_cache(); }
    void retire_stream(detail::StreamState& stream) noexcept override;
    [[nodiscard]] AllocatorStats stats() const override { return allocator_.stats(); }
    void reset_peak() override { allocator_.reset_peak(); }
    [[nodiscard]] AllocatorSnapshot snapshot() const override;
    void record_history(std::size_t max_entries) override;
    void grant_access(sys::Device user) override;
    [[nodiscard]] std::optional<detail::SourceCaptureId> begin_capture(detail::StreamState& origin) override;
    void join_capture(detail::SourceCaptureId capture, detail::StreamState& stream) override;
    void end_capture(detail::StreamState& origin) override;
    void release_capture(detail::SourceCaptureId capture,
                         const std::shared_ptr<detail::StreamState>& last_stream) noexcept override;

    // For tests and benchmarks that drive the allocator itself.
    [[nodiscard]] CachingAllocator& allocator() noexcept { return allocator_; }

  private:
    // AllocatorBackend: segments from cuMemAlloc in the device's context (Note [Context scope]), events
    // from the device's pool, and every driver allocation, free and host wait counted on the device.
    [[nodiscard]] std::optional<DevicePtr> allocate_segment(std::size_t bytes) override;
    void free_segment(DevicePtr ptr, std::size_t bytes) override;
    [[nodiscard]] EventHandle record_event(StreamKey stream) override;
    [[nodiscard]] bool event_completed(EventHandle event) override;
    void synchronize_event(EventHandle event) override;
    void release_event(EventHandle event) noexcept override;
    [[nodiscard]] bool stream_capturing(StreamKey stream) override;
    [[nodiscard]] std::pair<std::size_t, std::size_t> memory_info() override;
    [[nodiscard]] int device_ordinal() const noexcept override;
    [[nodiscard]] Backend backend() const noexcept override;
    // Expandable segments, through virtual_memory_.
    [[nodiscard]] std::size_t mapping_granularity() override;
    [[nodiscard]] std::optional<DevicePtr> reserve_address_range(std::size_t bytes,
                                                                 std::size_t alignment) override;
    void free_address_range(DevicePtr ptr, std::size_t bytes) override;
    [[nodiscard]] bool map_chunks(DevicePtr ptr, std::size_t bytes, std::size_t chunk) override;
    void unmap_chunk(DevicePtr ptr, std::size_t chunk) override;
    void synchronize_device() override;

    void defer_current() const noexcept;
    void free_after_host_wait(const Allocation& allocation) noexcept;

    detail::DeviceState& device_;
    std::optional<VirtualMemory> virtual_memory_;  // Segments::expandable only
    detail::MemoryHistory history_;
    // Note: declared after what the backend uses and destroyed first; its destructor still calls the backend.
    CachingAllocator allocator_;
};

}  // namespace cudarc::alloc

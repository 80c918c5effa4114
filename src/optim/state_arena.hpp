// One parameter group's optimizer state: a single zero-initialized allocation, in device memory (from the
// device's memory source, hazard-tracked like any DeviceSlice) or in managed memory (paged state).
#pragma once

#include <cstddef>
#include <memory>

#include "cudarc/device.hpp"
#include "cudarc/slice.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::detail {
class DeviceState;
class StreamState;
}  // namespace cudarc::detail

namespace cudarc::optim::detail {

// Note: one allocation per group, not per tensor, so a step of 1000 tensors checks one hazard state
// for all their state and prefetches (paged state) with one call.
class StateArena {
  public:
    // Whether `device` can hold paged state: managed memory that the device accesses concurrently with
    // the host (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS), with prefetching in the driver table.
    [[nodiscard]] static bool managed_supported(const Device& device);

    StateArena() = default;
    // `bytes` (> 0) zero-filled on `stream`; in managed memory when `managed` (the caller checked support).
    StateArena(Stream& stream, std::size_t bytes, bool managed);
    StateArena(const StateArena&) = delete;
    StateArena& operator=(const StateArena&) = delete;
    StateArena(StateArena&& other) noexcept;
    StateArena& operator=(StateArena&& other) noexcept;
    // Managed memory: waits (on the host) for its last use, then frees it. Device memory goes back to
    // the allocator ordered after its uses, as any DeviceSlice.
    ~StateArena();

    [[nodiscard]] DevicePtr base() const noexcept;
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
    [[nodiscard]] bool managed() const noexcept { return managed_ != 0; }

    // Orders kernels that read and write the arena on `stream` after earlier uses on other streams.
    void prepare(Stream& stream);
    // Managed memory: enqueues a prefetch of [offset, offset + bytes) to the device on `stream` (no-op for
    // device memory, and while `stream` is being captured into a graph).
    void prefetch(Stream& stream, std::size_t offset, std::size_t bytes);
    // The same on a raw stream handle (the legacy baseline), without hazard bookkeeping.
    void prefetch_raw(sys::Stream stream, std::size_t offset, std::size_t bytes);

    // Blocking copy to the host, ordered after the arena's earlier uses.
    void copy_to_host(Stream& stream, std::size_t offset, void* dst, std::size_t bytes);
    // Asynchronous copy from (pageable) host memory, which may be reused on return.
    void copy_from_host(Stream& stream, std::size_t offset, const void* src, std::size_t bytes);
    // Asynchronous zero fill.
    void zero(Stream& stream, std::size_t offset, std::size_t bytes);

  private:
    void release() noexcept;
    [[nodiscard]] cudarc::detail::DeviceState& managed_device() const noexcept { return *device_state_; }

    std::size_t bytes_ = 0;
    DeviceSlice<std::byte> device_memory_;  // device placement
    // Managed placement: the allocation and the last stream that used it.
    std::shared_ptr<cudarc::detail::DeviceState> device_state_;
    DevicePtr managed_ = 0;
    std::shared_ptr<cudarc::detail::StreamState> last_use_;
};

}  // namespace cudarc::optim::detail

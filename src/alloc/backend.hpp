// The caching allocator's seam: everything it needs from a device, and nothing more.
//
// Note: the allocator's bookkeeping is tested without a GPU through a fake of this interface
// (tests/host/alloc_fake_backend.hpp); the real one is the device's caching source (caching_source.hpp),
// over the driver table, the device's event pool and its counters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "sys/driver_api.hpp"

namespace cudarc::alloc {

// Identity of a stream, never reused for another stream while anything is cached under it (the device's
// Note [Stream identity]: a cudarc-owned handle's value, or a foreign stream's own key; tests use small
// integers).
using StreamKey = std::uintptr_t;

// An event the backend hands out and takes back (an opaque pointer: the device's caching source passes
// references to its shared events, Note [Stream timelines]; tests fake it).
struct OpaqueEvent;
using EventHandle = OpaqueEvent*;

// A use of a block on `stream`: `event` was recorded on `stream` after its last use of the block.
// Handing one to the allocator passes a reference to it (the allocator gives it back with release_event).
// A null `event` asks the allocator to record one on `stream` when the block is freed (not on the
// block's own stream). An event on the block's own stream gates its reuse like any other: pass one
// only when the stream's identity may not last (a foreign stream whose handle could be reused).
struct PendingUse {
    StreamKey stream = 0;
    EventHandle event = nullptr;
};

class AllocatorBackend {
  public:
    AllocatorBackend() = default;
    AllocatorBackend(const AllocatorBackend&) = delete;
    AllocatorBackend& operator=(const AllocatorBackend&) = delete;
    virtual ~AllocatorBackend() = default;

    // A new segment of exactly `bytes`, or nullopt when the device is out of memory. Other
    // failures throw cudarc::Error.
    [[nodiscard]] virtual std::optional<DevicePtr> allocate_segment(std::size_t bytes) = 0;
    virtual void free_segment(DevicePtr ptr, std::size_t bytes) = 0;

    // An event from the device's pool, recorded on `stream` now.
    [[nodiscard]] virtual EventHandle record_event(StreamKey stream) = 0;
    // Non-blocking: has the work before the event finished?
    [[nodiscard]] virtual bool event_completed(EventHandle event) = 0;
    // Host-blocking wait; the allocator calls it only on its out-of-memory path.
    virtual void synchronize_event(EventHandle event) = 0;
    // Back to the pool. Must not throw.
    virtual void release_event(EventHandle event) noexcept = 0;

    // Is a graph capture under way on `stream`? Consulted on the out-of-memory path only.
    [[nodiscard]] virtual bool stream_capturing(StreamKey stream) = 0;
    // Free and total device memory in bytes.
    [[nodiscard]] virtual std::pair<std::size_t, std::size_t> memory_info() = 0;
    // The device ordinal, for error messages.
    [[nodiscard]] virtual int device_ordinal() const noexcept = 0;
    // The device's backend, so that error messages name its driver functions (Note [One driver list]);
    // test fakes stand for CUDA.
    [[nodiscard]] virtual Backend backend() const noexcept { return Backend::cuda; }
};

}  // namespace cudarc::alloc

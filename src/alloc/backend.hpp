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

#include "cudarc/error.hpp"
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

    // Expandable segments (Note [Expandable segments] in alloc/expandable_segments.hpp): address ranges with
    // physical chunks mapped into them on demand. Only an allocator made with Segments::expandable calls
    // these; a backend without virtual memory keeps the defaults, which throw.

    // The size every chunk and every address range is a multiple of (a power of two).
    [[nodiscard]] virtual std::size_t mapping_granularity() { throw_no_virtual_memory(); }
    // A new range of `bytes` of address space, aligned to `alignment`, with nothing mapped, or nullopt when
    // no address space is left. Other failures throw cudarc::Error.
    [[nodiscard]] virtual std::optional<DevicePtr> reserve_address_range(std::size_t /*bytes*/,
                                                                         std::size_t /*alignment*/) {
        throw_no_virtual_memory();
    }
    virtual void free_address_range(DevicePtr /*ptr*/, std::size_t /*bytes*/) { throw_no_virtual_memory(); }
    // Maps physical memory at [ptr, ptr + bytes), one allocation of `chunk` bytes per chunk (so that each
    // can be unmapped on its own), readable and writable by the device and its peers. All or nothing: false
    // when the device is out of memory; other failures throw cudarc::Error. Either way nothing stays mapped.
    [[nodiscard]] virtual bool map_chunks(DevicePtr /*ptr*/, std::size_t /*bytes*/, std::size_t /*chunk*/) {
        throw_no_virtual_memory();
    }
    // Unmaps one chunk that map_chunks mapped, which frees its memory. Unlike a segment's free it does not
    // wait for the device: the caller calls synchronize_device() first.
    virtual void unmap_chunk(DevicePtr /*ptr*/, std::size_t /*chunk*/) { throw_no_virtual_memory(); }
    // Host-blocking: returns once the device has finished all work queued so far.
    virtual void synchronize_device() { throw_no_virtual_memory(); }

  private:
    [[noreturn]] static void throw_no_virtual_memory() {
        throw Error("cudarc: this allocator backend has no virtual memory for expandable segments");
    }
};

}  // namespace cudarc::alloc

// Where memory for buffers comes from: the caching allocator, the driver's stream-ordered pool, or (for
// DeviceSlice::managed) managed memory.
#pragma once

#include <cstddef>
#include <vector>

#include "cudarc/allocator.hpp"
#include "cudarc/detail/buffer.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::detail {

class StreamState;

struct MemoryBlock {
    DevicePtr ptr = 0;
    void* handle = nullptr;  // the source's own bookkeeping
};

class MemoryResource {
  public:
    virtual ~MemoryResource() = default;
    // `bytes` > 0, ordered on `stream`. Throws cudarc::OutOfMemory or cudarc::Error.
    [[nodiscard]] virtual MemoryBlock allocate(std::size_t bytes, StreamState& stream) = 0;
    // Frees `block`, allocated on `home`, after every use in `uses` (events may still be null; the source
    // records them as needed and takes ownership). Never throws.
    virtual void deallocate(const MemoryBlock& block, std::size_t bytes, StreamState& home,
                            std::vector<StreamUse> uses) noexcept = 0;
    // Frees cached memory (no-op for sources that cache nothing).
    virtual void empty_cache() {}
    // Whether the memory is managed (unified): host and device share its addresses.
    [[nodiscard]] virtual bool managed() const noexcept { return false; }
    // Managed memory: migrates [ptr, ptr + bytes) to the device, ordered on `stream` (no-op elsewhere).
    virtual void prefetch(StreamState& /*stream*/, DevicePtr /*ptr*/, std::size_t /*bytes*/) {}
    // `stream` (foreign) was retired: nothing may name its key any more (Note [Stream identity]).
    virtual void retire_stream(StreamState& stream) noexcept { static_cast<void>(stream); }
    // What Device::allocator_stats reports (zeros for sources that keep no figures).
    [[nodiscard]] virtual AllocatorStats stats() const { return {}; }
    // Restarts the peak figures from the current ones.
    virtual void reset_peak() {}
};

}  // namespace cudarc::detail

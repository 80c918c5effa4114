// Memory from cudarc's caching allocator (src/alloc), wired to the device's event pool and counters.
#pragma once

#include <memory>

#include "alloc/caching_allocator.hpp"
#include "core/memory_source.hpp"

namespace cudarc::detail {

class DeviceState;

// The allocator behind a device's caching memory resource, for Device's statistics and controls.
class CachingResource : public MemoryResource {
  public:
    [[nodiscard]] virtual alloc::CachingAllocator& allocator() noexcept = 0;
};

[[nodiscard]] std::unique_ptr<CachingResource> make_caching_source(DeviceState& device,
                                                                   const AllocatorConfig& config);

}  // namespace cudarc::detail

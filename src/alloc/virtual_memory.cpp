#include "alloc/virtual_memory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/device_state.hpp"

namespace cudarc::alloc {
namespace {

sys::MemAccessDesc read_write_for(sys::Device device) noexcept {
    sys::MemAccessDesc desc;
    desc.location.type = sys::kMemLocationTypeDevice;
    desc.location.id = device;
    desc.flags = sys::kMemAccessFlagsProtReadWrite;
    return desc;
}

// Note [A failed unmap or release is tried again]: a chunk whose unmap failed is still mapped, and a handle
// whose release failed still holds its memory, so either would leak the chunk (and a mapped chunk would
// keep its address range from being freed). The call is made once more; a failure the retry undid is
// deferred (Device::rethrow_deferred_error), so it shows without leaving anything behind. Returns the
// first failure when the retry failed too.
template <typename Call>
sys::Result tried_twice(const detail::DeviceState& device, sys::Entry entry, const Call& call) {
    const sys::Result first = call();
    if (first == sys::kSuccess) return first;
    if (call() != sys::kSuccess) return first;
    device.defer(first, entry);
    return sys::kSuccess;
}

}  // namespace

VirtualMemory::VirtualMemory(detail::DeviceState& device) : device_(device) {
    const sys::DriverApi& api = device.api();
    const std::pair<sys::Entry, bool> needed[] = {
        {sys::Entry::mem_address_reserve, api.mem_address_reserve != nullptr},
        {sys::Entry::mem_address_free, api.mem_address_free != nullptr},
        {sys::Entry::mem_create, api.mem_create != nullptr},
        {sys::Entry::mem_release, api.mem_release != nullptr},
        {sys::Entry::mem_map, api.mem_map != nullptr},
        {sys::Entry::mem_unmap, api.mem_unmap != nullptr},
        {sys::Entry::mem_set_access, api.mem_set_access != nullptr},
        {sys::Entry::mem_get_allocation_granularity, api.mem_get_allocation_granularity != nullptr},
    };
    for (const auto& [entry, present] : needed) {
        if (present) continue;
        throw Error(
            fmt::format("cudarc: MemorySource::expandable needs the driver's virtual memory management, "
                        "and the loaded {} driver lacks {} (use MemorySource::caching_allocator, or a "
                        "newer driver)",
                        to_string(api.backend), sys::entry_name(api.backend, entry)),
            device.ordinal(), api.backend);
    }
    // On HIP the attribute may be unknown (the query fails): the calls below then decide.
    int supported = 1;
    if (api.device_get_attribute(&supported, sys::attr::kVirtualMemoryManagementSupported, device.device()) ==
            sys::kSuccess &&
        supported == 0) {
        throw Error(fmt::format("cudarc: MemorySource::expandable needs virtual memory management, which {} "
                                "device {} does not support (use MemorySource::caching_allocator)",
                                to_string(api.backend), device.ordinal()),
                    device.ordinal(), api.backend);
    }
    prop_.type = sys::kMemAllocationTypePinned;
    prop_.location.type = sys::kMemLocationTypeDevice;
    prop_.location.id = device.device();
    const auto scope = device.bind();
    device.check(
        api.mem_get_allocation_granularity(&granularity_, &prop_, sys::kMemAllocationGranularityMinimum),
        sys::Entry::mem_get_allocation_granularity);
    access_.push_back(read_write_for(device.device()));
}

std::optional<DevicePtr> VirtualMemory::reserve(std::size_t bytes, std::size_t alignment) {
    const sys::DriverApi& api = device_.api();
    const auto scope = device_.bind();
    DevicePtr ptr = 0;
    const sys::Result result = api.mem_address_reserve(&ptr, bytes, alignment, 0, 0);
    if (result == sys::kErrorOutOfMemory) return std::nullopt;
    device_.check(result, sys::Entry::mem_address_reserve);
    return ptr;
}

void VirtualMemory::free(DevicePtr ptr, std::size_t bytes) {
    const auto scope = device_.bind();
    device_.check(device_.api().mem_address_free(ptr, bytes), sys::Entry::mem_address_free);
}

bool VirtualMemory::map(DevicePtr ptr, std::size_t bytes, std::size_t chunk) {
    const sys::DriverApi& api = device_.api();
    const auto scope = device_.bind();
    detail::AtomicCounters& counters = device_.counters();
    std::size_t mapped = 0;
    // Undoes what was mapped (its memory was released, so unmapping frees it); reports `failed`'s result
    // unless it is out of memory, which returns false.
    const auto give_up = [&](sys::Result result, sys::Entry failed) {
        for (std::size_t offset = 0; offset < mapped; offset += chunk) {
            if (unmap_chunk(ptr + offset, chunk) == sys::kSuccess)
                detail::AtomicCounters::bump(counters.driver_frees);
        }
        if (result != sys::kErrorOutOfMemory) device_.throw_error(result, failed);
        return false;
    };
    for (; mapped < bytes; mapped += chunk) {
        sys::MemHandle handle = 0;
        if (const sys::Result r = api.mem_create(&handle, chunk, &prop_, 0); r != sys::kSuccess)
            return give_up(r, sys::Entry::mem_create);
        const sys::Result r = api.mem_map(ptr + mapped, chunk, 0, handle, 0);
        // Note [Expandable segments]: the mapping keeps the memory alive; unmapping will free it. Released
        // whether or not the map succeeded (Note [A failed unmap or release is tried again]).
        const sys::Result released =
            tried_twice(device_, sys::Entry::mem_release, [&] { return api.mem_release(handle); });
        if (r != sys::kSuccess) return give_up(r, sys::Entry::mem_map);
        detail::AtomicCounters::bump(counters.driver_allocations);
        if (released != sys::kSuccess) {
            mapped += chunk;  // undone with the others
            return give_up(released, sys::Entry::mem_release);
        }
    }
    const std::vector<sys::MemAccessDesc> descs = access();
    if (const sys::Result r = api.mem_set_access(ptr, bytes, descs.data(), descs.size()); r != sys::kSuccess)
        return give_up(r, sys::Entry::mem_set_access);
    return true;
}

void VirtualMemory::unmap(DevicePtr ptr, std::size_t chunk) {
    const auto scope = device_.bind();
    device_.check(unmap_chunk(ptr, chunk), sys::Entry::mem_unmap);
    detail::AtomicCounters::bump(device_.counters().driver_frees);
}

// Note [A failed unmap or release is tried again].
sys::Result VirtualMemory::unmap_chunk(DevicePtr ptr, std::size_t chunk) const {
    const sys::DriverApi& api = device_.api();
    return tried_twice(device_, sys::Entry::mem_unmap, [&] { return api.mem_unmap(ptr, chunk); });
}

void VirtualMemory::synchronize() {
    const auto scope = device_.bind();
    device_.check(device_.api().ctx_synchronize(), sys::Entry::ctx_synchronize);
    detail::AtomicCounters::bump(device_.counters().context_synchronizes);
}

void VirtualMemory::add_peer(sys::Device peer) {
    std::lock_guard lock(mutex_);
    if (std::none_of(access_.begin(), access_.end(),
                     [peer](const sys::MemAccessDesc& d) { return d.location.id == peer; })) {
        access_.push_back(read_write_for(peer));
    }
}

void VirtualMemory::set_access(DevicePtr ptr, std::size_t bytes) {
    const std::vector<sys::MemAccessDesc> descs = access();
    const auto scope = device_.bind();
    device_.check(device_.api().mem_set_access(ptr, bytes, descs.data(), descs.size()),
                  sys::Entry::mem_set_access);
}

std::vector<sys::MemAccessDesc> VirtualMemory::access() const {
    std::lock_guard lock(mutex_);
    return access_;
}

}  // namespace cudarc::alloc

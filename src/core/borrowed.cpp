// Checks on memory another library owns before cudarc borrows it (cudarc/borrowed.hpp).
#include "cudarc/borrowed.hpp"

#include <fmt/format.h>

#include "core/buffer.hpp"
#include "core/device_state.hpp"
#include "cudarc/detail/checked_size.hpp"

namespace cudarc::detail {

BufferHandle borrow_memory(const Device& device, DevicePtr ptr, std::size_t count, std::size_t element_size,
                           const Stream* owner, ReleaseHook hook) {
    const std::shared_ptr<DeviceState>& state = detail::Internals::device_state(device);
    if (owner != nullptr && &detail::Internals::stream_state(*owner).device() != state.get()) {
        throw Error(
            fmt::format("cudarc::BorrowedSlice: the owner's stream is on device {}, the memory on device {}",
                        owner->device_ordinal(), device.ordinal()));
    }
    const std::size_t bytes = checked_bytes("cudarc::BorrowedSlice", count, element_size);
    StreamState* owner_state = owner != nullptr ? &detail::Internals::stream_state(*owner) : nullptr;
    if (bytes == 0) return Buffer::borrow(state, ptr, 0, owner_state, hook);
    if (ptr == 0) throw Error("cudarc::BorrowedSlice: a null device pointer");

    const sys::DriverApi& api = state->api();
    const auto scope = state->bind();
    // Note: one cuPointerGetAttributes call both checks the memory and gives its allocation's bounds (a
    // framework's step may borrow hundreds of tensors); cuMemGetAddressRange is the fallback.
    DevicePtr base = 0;
    std::size_t size = 0;
    if (api.pointer_get_attributes != nullptr) {
        // Note: cuPointerGetAttributes reports memory no context knows as success with zeroed values.
        unsigned memory_type = 0;
        sys::Context context = nullptr;
        int ordinal = -1;
        int managed = 0;
        int attributes[] = {sys::kPointerAttributeMemoryType,    sys::kPointerAttributeContext,
                            sys::kPointerAttributeDeviceOrdinal, sys::kPointerAttributeIsManaged,
                            sys::kPointerAttributeRangeStart,    sys::kPointerAttributeRangeSize};
        void* data[] = {&memory_type, &context, &ordinal, &managed, &base, &size};
        state->check(api.pointer_get_attributes(6, attributes, data, ptr),
                     sys::Entry::pointer_get_attributes);
        if (managed == 0 && memory_type != sys::kMemoryTypeDevice) {
            throw Error(fmt::format(
                "cudarc::BorrowedSlice: {:#x} is not device memory ({}); borrow memory from cuMemAlloc, "
                "cudaMalloc, a framework's device tensor or cuMemAllocManaged",
                ptr,
                memory_type == sys::kMemoryTypeHost ? "it is page-locked host memory"
                                                    : "no CUDA context knows it"));
        }
        if (managed == 0 && ordinal != device.ordinal()) {
            throw Error(fmt::format("cudarc::BorrowedSlice: {:#x} is memory of device {}, not of device {}",
                                    ptr, ordinal, device.ordinal()));
        }
        if (managed == 0 && context != nullptr && context != state->context()) {
            throw Error(fmt::format(
                "cudarc::BorrowedSlice: {:#x} belongs to another context than device {}'s primary context",
                ptr, device.ordinal()));
        }
    }
    if (size == 0 && api.mem_get_address_range != nullptr) {
        // No range from the attributes (no cuPointerGetAttributes, or a driver that left it unset).
        const sys::Result r = api.mem_get_address_range(&base, &size, ptr);
        // Note [Lost devices]: a sticky error is the device's, not the pointer's.
        if (r != sys::kSuccess && (sys::is_sticky_error(r) || state->lost()))
            state->throw_error(r, sys::Entry::mem_get_address_range);
        if (r != sys::kSuccess) {
            throw Error(fmt::format(
                "cudarc::BorrowedSlice: {:#x} is inside no allocation of device {} ({})", ptr,
                device.ordinal(),
                sys::make_error(api, sys::Entry::mem_get_address_range, r, device.ordinal()).what()));
        }
    }
    if (size != 0) {
        const std::size_t left =
            ptr < base || ptr - base >= size ? 0 : static_cast<std::size_t>(base + size - ptr);
        if (bytes > left) {
            throw Error(fmt::format(
                "cudarc::BorrowedSlice: {} elements ({} bytes) at {:#x} run past the end of their allocation "
                "({} bytes from there to its end)",
                count, bytes, ptr, left));
        }
    }
    return Buffer::borrow(state, ptr, bytes, owner_state, hook);
}

namespace {
Buffer& owned_by_someone(Buffer* buffer, const char* what) {
    Buffer& b = non_empty(buffer, what);
    if (!b.borrowed() || b.owner() == nullptr) {
        throw Error(
            fmt::format("{}: the slice has no owner stream (borrow it with the owner's Stream)", what));
    }
    return b;
}
}  // namespace

void owner_wrote(Buffer* buffer) {
    Buffer& b = owned_by_someone(buffer, "cudarc::BorrowedSlice::owner_wrote");
    b.hazards().reset_to_owner(b.owner()->timeline());
}

void sync_owner(Buffer* buffer) {
    Buffer& b = owned_by_someone(buffer, "cudarc::BorrowedSlice::sync_owner");
    StreamState& owner = *b.owner();
    if (!owner.alive()) throw Error("cudarc::BorrowedSlice::sync_owner: the owner's stream was retired");
    // Note: used by the owner alone since it wrote (the commonest case: stepped on the owner's stream),
    // the owner has nothing to wait for.
    if (b.hazards().owned_by(owner.timeline())) return;
    Needs needs;
    b.hazards().collect_all(owner.timeline(), needs);
    for (std::size_t i = 0; i < needs.size(); ++i)
        owner.timeline().wait_for(*needs[i].timeline, needs[i].position);
}

}  // namespace cudarc::detail

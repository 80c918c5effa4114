/// @file
/// cudarc::Device — one GPU, its primary context and its default stream.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "cudarc/allocator.hpp"
#include "cudarc/counters.hpp"
#include "cudarc/detail/internals.hpp"
#include "cudarc/error.hpp"
#include "cudarc/export.hpp"

namespace cudarc {

class Stream;
struct StreamOptions;

namespace detail {
class DeviceState;
}

/// A compute capability (8.0, 9.0, ...); compares as the pair (major, minor).
struct ComputeCapability {
    /// The major version.
    int major = 0;
    /// The minor version.
    int minor = 0;
    /// Orders by major, then minor.
    friend constexpr auto operator<=>(const ComputeCapability&, const ComputeCapability&) = default;
};

/// Free and total device memory in bytes, as cuMemGetInfo reports them (Device::memory_info).
struct MemoryInfo {
    /// Bytes free on the device (for every process and allocator, not only cudarc's).
    std::size_t free = 0;
    /// The device's total bytes.
    std::size_t total = 0;
};

/// Where DeviceSlice memory comes from (docs/allocator.md).
enum class MemorySource {
    caching_allocator,  ///< cudarc's per-stream caching allocator over cuMemAlloc segments; the default
    stream_ordered,     ///< the driver's pool: cuMemAllocAsync / cuMemFreeAsync, release threshold raised
    expandable,         ///< the caching allocator over expandable segments: one address range per stream and
                        ///< pool, device memory mapped into it in chunks as it grows (virtual memory
                        ///< management)
};

/// "caching_allocator", "stream_ordered", "expandable": the names CUDARC_ALLOCATOR takes.
[[nodiscard]] constexpr std::string_view to_string(MemorySource source) noexcept {
    switch (source) {
        case MemorySource::caching_allocator:
            return "caching_allocator";
        case MemorySource::stream_ordered:
            return "stream_ordered";
        case MemorySource::expandable:
            return "expandable";
    }
    return "unknown";
}

/// Options that take effect when a device is first opened in the process (later opens share that state).
struct DeviceOptions {
    /// Unset: the environment variable CUDARC_ALLOCATOR names it (caching_allocator, expandable or
    /// stream_ordered), else MemorySource::caching_allocator. A value set here wins over the variable.
    std::optional<MemorySource> memory_source;
    AllocatorConfig allocator;  ///< for MemorySource::caching_allocator and MemorySource::expandable
};

/// A GPU. Opening a device retains its primary context (the one the CUDA runtime and frameworks such as
/// PyTorch use, so memory and streams interoperate); the last handle releases it.
///
/// Note [No legacy stream]
/// The default stream is a stream cudarc creates with CU_STREAM_NON_BLOCKING, not the legacy NULL
/// stream, and Stream::wrap refuses the legacy stream. The legacy stream implicitly synchronizes with
/// every other blocking stream in the context, so work there would serialize against unrelated libraries;
/// a created stream orders only what cudarc puts on it, and hazard tracking adds exactly the waits that
/// cross-stream use needs.
///
/// A Device is a shared handle, like CCCL's device_ref or Rust cudarc's Arc<CudaContext>: copies, and
/// opening the same ordinal twice, give handles to one device state (same counters, same allocator), and
/// copying costs a reference count. Buffers and streams keep the device state alive.
class CUDARC_API Device {
  public:
    /// Number of devices visible to the active backend. Throws cudarc::Error when no driver can be loaded.
    [[nodiscard]] static int count();
    /// True when a driver loads and at least one device is visible. Never throws.
    [[nodiscard]] static bool available() noexcept;
    /// The driver's version (for example 13000 for CUDA 13.0).
    [[nodiscard]] static int driver_version();

    /// Opens device `ordinal`. Throws on a bad ordinal (naming the valid range) or a driver failure.
    [[nodiscard]] static Device open(int ordinal = 0, const DeviceOptions& options = {});

    /// Another handle to the same device state; costs a reference count.
    Device(const Device&) = default;
    /// Makes this a handle to `other`'s device state.
    Device& operator=(const Device&) = default;
    /// Takes over a handle; the moved-from Device must only be destroyed or assigned to.
    Device(Device&&) noexcept = default;
    /// Takes over a handle.
    Device& operator=(Device&&) noexcept = default;
    /// Drops this handle; the last handle (streams and buffers hold one too) releases the primary context.
    ~Device();

    /// The device's ordinal, as passed to open().
    [[nodiscard]] int ordinal() const noexcept;
    /// The vendor runtime the device was opened with (CUDA or HIP).
    [[nodiscard]] Backend backend() const noexcept;
    /// The device's name (cuDeviceGetName), as in "NVIDIA H100 80GB HBM3".
    [[nodiscard]] std::string name() const;
    /// The device's 16-byte UUID (cuDeviceGetUuid).
    [[nodiscard]] std::array<unsigned char, 16> uuid() const;
    [[nodiscard]] std::string uuid_string() const;  ///< "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
    /// The PCI bus id (cuDeviceGetPCIBusId), as in "0000:3b:00.0".
    [[nodiscard]] std::string pci_bus_id() const;
    /// The compute capability, read from two device attributes.
    [[nodiscard]] ComputeCapability compute_capability() const;
    /// The architecture to compile for: "sm_90" on CUDA, the offload arch (for example
    /// "gfx90a:sramecc+:xnack-") on HIP.
    [[nodiscard]] std::string arch() const;
    /// The number of streaming multiprocessors.
    [[nodiscard]] int multiprocessor_count() const;
    /// The device's memory in bytes (cuDeviceTotalMem).
    [[nodiscard]] std::size_t total_memory() const;
    /// Free and total device memory now (cuMemGetInfo, one driver call; no synchronization).
    [[nodiscard]] MemoryInfo memory_info() const;
    /// A raw device attribute, by the CUDA driver API's CUdevice_attribute number.
    [[nodiscard]] int attribute(int cu_device_attribute) const;
    /// Whether DeviceSlice::managed memory works here as paged memory should: the device accesses it
    /// concurrently with the host (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS) and the driver can
    /// prefetch it. Where not, managed slices may still be allocated, but prefetch does nothing.
    [[nodiscard]] bool supports_managed_memory() const;

    /// The device's default stream (see the note above).
    [[nodiscard]] Stream& default_stream() const noexcept;
    /// A new stream; it does not wait for anything (use Stream::fork for ordered children). Taken from the
    /// device's stream pool (no driver call when a pooled stream of that priority is free).
    [[nodiscard]] Stream create_stream(const StreamOptions& options) const;
    /// A new stream with default StreamOptions.
    [[nodiscard]] Stream create_stream() const;

    /// Blocks until all work on the device completes (counted as a host synchronization). Throws inside a
    /// graph capture on this thread.
    void synchronize() const;

    /// Peer access (docs/multi-gpu.md). Whether this device can address `other`'s memory directly, over
    /// NVLink or PCIe peer to peer. False for the device itself: a device is not its own peer.
    [[nodiscard]] bool can_access_peer(const Device& other) const;
    /// Lets this device use `other`'s memory directly: afterwards a launch, copy or collective on a stream of
    /// this device may take buffers of `other`, and hazard tracking orders those uses across the two devices.
    /// One direction only: `other` gains no access to this device's memory. Idempotent. Throws when `other`
    /// is this device or can_access_peer(other) is false. cudarc::copy between devices needs no peer access.
    void enable_peer_access(const Device& other) const;
    /// Whether this device has peer access to `other` (enable_peer_access succeeded for it). Never throws.
    [[nodiscard]] bool peer_access_enabled(const Device& other) const noexcept;

    /// A snapshot of the device's counters (synchronizations, waits, events, allocations, launches); subtract
    /// two to count what happened in between.
    [[nodiscard]] Counters counters() const noexcept;

    /// Which memory source DeviceSlice allocations come from.
    [[nodiscard]] MemorySource memory_source() const noexcept;
    /// The memory source's figures. With MemorySource::stream_ordered: the driver pool's reserved and used
    /// bytes (and their peaks), live allocations and out-of-memory errors; the other counts stay zero.
    [[nodiscard]] AllocatorStats allocator_stats() const;
    /// The caching allocator's segments and blocks (none with MemorySource::stream_ordered), and the timeline
    /// recorded so far (see record_memory_history). to_json(snapshot) writes it for tools/plot-memory.
    [[nodiscard]] AllocatorSnapshot allocator_snapshot() const;
    /// Starts recording every allocation and free, and every segment or chunk the memory source takes from or
    /// gives back to the driver, into allocator_snapshot().timeline, keeping the last `max_entries` events.
    /// Recording costs a lock and a clock read per allocation and free. 0 stops it and drops the timeline.
    void record_memory_history(std::size_t max_entries = 100000) const;
    /// Restarts the allocator's peak figures (AllocatorStats::peak_allocated_bytes, peak_reserved_bytes) from
    /// their current values.
    void reset_peak_memory() const;
    /// Returns cached memory that no allocation uses to the driver (with MemorySource::stream_ordered: trims
    /// the driver's pool, cuMemPoolTrimTo).
    void empty_cache() const;

    /// An error a destructor swallowed on this device since the last call, rethrown once. Destructors never
    /// throw; this lets a caller check after the fact.
    void rethrow_deferred_error() const;
    /// True once a sticky error (an illegal memory access in a kernel, a launch timeout) has made the
    /// device's context unusable: every call on it then throws cudarc::DeviceLost, and only a new process
    /// can use the GPU again.
    [[nodiscard]] bool lost() const noexcept;

  private:
    friend struct detail::Internals;  // Note [Internal access]
    explicit Device(std::shared_ptr<detail::DeviceState> state) noexcept;

    std::shared_ptr<detail::DeviceState> state_;
};

/// @cond INTERNAL
inline const std::shared_ptr<detail::DeviceState>& detail::Internals::device_state(
    const Device& device) noexcept {
    return device.state_;
}
inline Device detail::Internals::make_device(std::shared_ptr<DeviceState> state) noexcept {
    return Device(std::move(state));
}
/// @endcond

}  // namespace cudarc

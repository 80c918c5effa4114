/// @file
/// Per-device counters of everything that costs a round trip or a driver allocation.
#pragma once

#include <cstdint>

namespace cudarc {

/// A snapshot of one device's counters. Subtract two snapshots to count what happened in between.
/// Note: these exist so tests can prove that an operation makes no redundant synchronization.
struct Counters {
    std::uint64_t stream_synchronizes = 0;   ///< cuStreamSynchronize made by the library
    std::uint64_t event_synchronizes = 0;    ///< cuEventSynchronize
    std::uint64_t context_synchronizes = 0;  ///< cuCtxSynchronize
    std::uint64_t blocking_copies = 0;       ///< copies that block the host (e.g. into pageable memory)
    std::uint64_t cross_stream_waits = 0;    ///< cuStreamWaitEvent between two different streams
    std::uint64_t events_recorded = 0;       ///< cuEventRecord made by the library
    std::uint64_t driver_allocations = 0;    ///< device memory taken from the driver
    std::uint64_t driver_frees = 0;          ///< device memory given back to the driver
    /// Kernels launched through the library.
    std::uint64_t kernel_launches = 0;

    /// Every call that makes the host wait for the device.
    [[nodiscard]] constexpr std::uint64_t host_blocking_calls() const noexcept {
        return stream_synchronizes + event_synchronizes + context_synchronizes + blocking_copies;
    }
    /// Synchronizations only (blocking copies excluded).
    [[nodiscard]] constexpr std::uint64_t host_synchronizations() const noexcept {
        return stream_synchronizes + event_synchronizes + context_synchronizes;
    }

    /// Each counter minus its value in `before`: what happened between two snapshots.
    [[nodiscard]] constexpr Counters operator-(const Counters& before) const noexcept {
        return {stream_synchronizes - before.stream_synchronizes,
                event_synchronizes - before.event_synchronizes,
                context_synchronizes - before.context_synchronizes,
                blocking_copies - before.blocking_copies,
                cross_stream_waits - before.cross_stream_waits,
                events_recorded - before.events_recorded,
                driver_allocations - before.driver_allocations,
                driver_frees - before.driver_frees,
                kernel_launches - before.kernel_launches};
    }
    /// Equal when every counter is equal.
    friend constexpr bool operator==(const Counters&, const Counters&) = default;
};

}  // namespace cudarc

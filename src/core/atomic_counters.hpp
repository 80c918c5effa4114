// The live, thread-safe form of cudarc::Counters kept per device.
#pragma once

#include <atomic>
#include <cstdint>

#include "cudarc/counters.hpp"

namespace cudarc::detail {

struct AtomicCounters {
    using Counter = std::atomic<std::uint64_t>;
    Counter stream_synchronizes{0};
    Counter event_synchronizes{0};
    Counter context_synchronizes{0};
    Counter blocking_copies{0};
    Counter cross_stream_waits{0};
    Counter events_recorded{0};
    Counter driver_allocations{0};
    Counter driver_frees{0};
    Counter kernel_launches{0};

    // Note: relaxed increments: the counters order nothing, they only count.
    static void bump(Counter& counter) noexcept { counter.fetch_add(1, std::memory_order_relaxed); }

    [[nodiscard]] Counters snapshot() const noexcept {
        auto get = [](const Counter& c) { return c.load(std::memory_order_relaxed); };
        return {get(stream_synchronizes), get(event_synchronizes), get(context_synchronizes),
                get(blocking_copies),     get(cross_stream_waits), get(events_recorded),
                get(driver_allocations),  get(driver_frees),       get(kernel_launches)};
    }
};

}  // namespace cudarc::detail

// FaultInjector: wraps any driver table (the fake one, or the real libcuda) so that chosen calls fail.
//
//     fake::FakeDriver gpu;
//     fake::FaultInjector faults(gpu.api());
//     fake::DriverOverride installed(faults.api());   // before the first Device::open
//     faults.fail_nth(fake::Entry::event_record, 3, 1);  // the 3rd cuEventRecord from now fails
//
// Every call is counted per entry point; a failing call returns its result without reaching the wrapped
// table. A sticky failure also makes every later call (but the few that work on a lost context:
// error names, device queries, context binding) return the same result, like a real sticky error.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "fake_driver/driver_entries.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::fake {

enum class Entry : int {
#define CUDARC_FAKE_ENTRY_ENUM(member, name, ...) member,
    CUDARC_DRIVER_ENTRIES(CUDARC_FAKE_ENTRY_ENUM)
#undef CUDARC_FAKE_ENTRY_ENUM
};

inline constexpr std::size_t kEntryCount = 0
#define CUDARC_FAKE_ENTRY_COUNT(member, name, ...) +1
    CUDARC_DRIVER_ENTRIES(CUDARC_FAKE_ENTRY_COUNT)
#undef CUDARC_FAKE_ENTRY_COUNT
    ;

// The CUDA name of an entry ("cuEventRecord").
[[nodiscard]] const char* cuda_name(Entry entry) noexcept;
// Every entry, in table order.
[[nodiscard]] const std::array<Entry, kEntryCount>& all_entries() noexcept;
// Calls that keep working on a context lost to a sticky error (error names, device queries, context
// binding and release).
[[nodiscard]] bool survives_sticky_error(Entry entry) noexcept;

// Installs a driver table for the process (sys::set_driver_override) and puts the previous one back.
// Note: create it before any Device is opened and let every Device, Stream and buffer go before it.
class DriverOverride {
  public:
    explicit DriverOverride(const sys::DriverApi& api) noexcept;
    DriverOverride(const DriverOverride&) = delete;
    DriverOverride& operator=(const DriverOverride&) = delete;
    ~DriverOverride();

  private:
    const sys::DriverApi* previous_;
};

class FaultInjector {
  public:
    static constexpr std::uint64_t kForever = std::numeric_limits<std::uint64_t>::max();

    struct Fired {
        Entry entry;
        std::uint64_t call = 0;  // 1-based number of the call of `entry` that failed
        sys::Result result = 0;
    };

    // Only one injector may exist at a time (its wrappers are plain functions that find it globally).
    explicit FaultInjector(const sys::DriverApi& inner);
    FaultInjector(const FaultInjector&) = delete;
    FaultInjector& operator=(const FaultInjector&) = delete;
    ~FaultInjector();

    // The wrapped table: install it with DriverOverride.
    [[nodiscard]] const sys::DriverApi& api() const noexcept { return wrapped_; }

    // The `nth` call of `entry` from now (1: the next one) returns `result`, and so do the `count` - 1
    // calls after it (kForever: every later call).
    void fail_nth(Entry entry, std::uint64_t nth, sys::Result result, std::uint64_t count = 1);
    // The `nth` call of `entry` from now returns `result`, and from then on every call that does not
    // survive_sticky_error() returns it too: the context is lost, as after CUDA_ERROR_ILLEGAL_ADDRESS.
    void fail_sticky(Entry entry, std::uint64_t nth, sys::Result result);
    // Forgets every planned failure and the sticky state (counts and the log stay).
    void clear() noexcept;

    // Calls made so far (failed ones included).
    [[nodiscard]] std::uint64_t calls(Entry entry) const noexcept;
    [[nodiscard]] std::array<std::uint64_t, kEntryCount> call_counts() const noexcept;
    // The failures injected so far, in order.
    [[nodiscard]] std::vector<Fired> fired() const;

    // Internal: what the wrappers ask before forwarding. Returns 0 to forward the call.
    [[nodiscard]] sys::Result before_call(Entry entry) noexcept;
    [[nodiscard]] const sys::DriverApi& inner() const noexcept { return inner_; }

  private:
    struct Plan {
        Entry entry;
        std::uint64_t first = 0;  // absolute call number
        std::uint64_t last = 0;
        sys::Result result = 0;
        bool sticky = false;
    };

    sys::DriverApi inner_;
    sys::DriverApi wrapped_;
    std::array<std::atomic<std::uint64_t>, kEntryCount> calls_{};
    std::atomic<bool> armed_{false};  // any plan or sticky state: the fast path skips the lock otherwise
    mutable std::mutex mutex_;
    std::vector<Plan> plans_;
    sys::Result sticky_ = 0;
    std::vector<Fired> fired_;
};

}  // namespace cudarc::fake

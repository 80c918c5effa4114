// A brute-force happens-before model of what cudarc enqueues, for the tracking.* model tests.
//
// HappensBefore wraps a driver table (the fake driver's) and follows the ordering the driver is asked for,
// with vector clocks: each piece of work on a stream ticks that stream's clock; an event record copies the
// stream's clock into the event; a wait joins the event's clock into the stream's; whatever the host sees
// complete (a synchronize, an event query that answers "done", a blocking copy, cuMemFree) joins the
// host's clock, which every later piece of work starts from. Work A happens before work B when B's clock
// has A's tick. Work inside a capture is not work (it runs at replays).
//
// AccessModel keeps, per 16-byte unit of device memory (by address, so that memory reused after a free is
// the same unit), the last write and the reads since, as pieces of work, and checks each new access
// against them: every conflicting pair must be ordered. Memory handed out again must be ordered after every
// use of its earlier life.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "sys/driver_api.hpp"

namespace cudarc::test::model {

constexpr std::size_t kUnit = 16;
constexpr int kMaxStreams = 96;
using Clock = std::array<std::uint32_t, kMaxStreams>;

// One piece of work: a stream's tick, and the clock it ran under.
struct Work {
    int stream = -1;
    std::uint32_t tick = 0;
    Clock clock{};
    std::uint64_t sequence = 0;  // AccessModel: when it recorded the access
    [[nodiscard]] bool valid() const noexcept { return stream >= 0; }
};

// Whether `a` happens before `b`.
[[nodiscard]] inline bool before(const Work& a, const Work& b) noexcept {
    return a.stream == b.stream ? a.tick <= b.tick : b.clock[static_cast<std::size_t>(a.stream)] >= a.tick;
}

class HappensBefore {
  public:
    // Wraps `inner` (kept alive by the caller); install table() with a DriverOverride. One at a time.
    explicit HappensBefore(const sys::DriverApi& inner);
    HappensBefore(const HappensBefore&) = delete;
    HappensBefore& operator=(const HappensBefore&) = delete;
    ~HappensBefore();

    [[nodiscard]] const sys::DriverApi& table() const noexcept { return table_; }
    // The last work enqueued on `stream` (tick 0 when none yet).
    [[nodiscard]] Work last_work(sys::Stream stream);
    // What the host has seen complete.
    [[nodiscard]] Clock host() const;
    // Waits enqueued so far (cuStreamWaitEvent outside captures).
    [[nodiscard]] std::uint64_t waits() const;

    // Called by the wrapped entries.
    void work(sys::Stream stream);
    void record(sys::Event event, sys::Stream stream);
    void wait(sys::Stream stream, sys::Event event);
    void host_sees(sys::Stream stream);
    void host_sees(sys::Event event);
    void host_sees_everything();
    [[nodiscard]] const sys::DriverApi& inner() const noexcept { return inner_; }

  private:
    [[nodiscard]] int id_locked(sys::Stream stream);
    [[nodiscard]] bool capturing(sys::Stream stream) const;

    const sys::DriverApi& inner_;
    sys::DriverApi table_;
    mutable std::recursive_mutex mutex_;
    std::map<sys::Stream, int> ids_;
    std::vector<Clock> streams_;
    std::vector<Work> last_;
    std::map<sys::Event, Clock> events_;
    std::set<sys::Event> captured_events_;
    Clock host_{};
    std::uint64_t waits_ = 0;
};

// One access of an operation, in bytes of device memory.
struct Access {
    DevicePtr address = 0;
    std::size_t bytes = 0;
    bool write = false;
};

class AccessModel {
  public:
    // Checks `accesses`, made by `work`, against the earlier ones, then records them. Returns a description
    // of the first unordered conflict, or empty. `sources`: how many distinct streams the conflicting
    // earlier uses were on (a bound for the waits the operation may enqueue).
    std::string access(const Work& work, const std::vector<Access>& accesses, std::size_t* sources = nullptr);
    // [address, address + bytes) was handed out again (allocated, or lent by its owner) on the stream of
    // `origin` (its last work then): whatever touches it next follows every earlier use, and `origin`.
    void reallocated(DevicePtr address, std::size_t bytes, const Work& origin);
    // Whether every use of [address, address + bytes), other than stream `owner`'s, is complete as far as the
    // host knows (borrowed memory goes back to its owner after cudarc's uses, not after the owner's own).
    // Only the accesses recorded since `since` (a sequence()) count: those of this borrow.
    [[nodiscard]] std::string complete(DevicePtr address, std::size_t bytes, const Clock& host, int owner,
                                       std::uint64_t since) const;
    [[nodiscard]] std::uint64_t sequence() const noexcept { return sequence_; }
    [[nodiscard]] std::size_t checks() const noexcept { return checks_; }

  private:
    struct Unit {
        std::vector<Work> writes;  // more than one only after a reallocation
        std::vector<Work> reads;
    };
    std::map<DevicePtr, Unit> units_;
    std::size_t checks_ = 0;
    std::uint64_t sequence_ = 0;
};

}  // namespace cudarc::test::model

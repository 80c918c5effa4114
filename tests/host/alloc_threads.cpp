// Several host threads allocating and freeing at once, with cross-stream uses whose events complete
// at random: no two live blocks may overlap, and no block may come back before its events completed.
#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "host/alloc_test_support.hpp"

namespace {

using cudarc::DevicePtr;
using cudarc::alloc::Allocation;
using cudarc::alloc::EventHandle;
using cudarc::alloc::PendingUse;
using cudarc::alloc::StreamKey;
using cudarc::test::AllocatorOnFakeDevice;
using cudarc::test::FakeDevice;
using cudarc::test::kKiB;
using cudarc::test::kMiB;

// Every address range the test believes to be in use: live allocations, and freed ones whose events
// have not all been seen complete.
class UsageRegistry {
  public:
    explicit UsageRegistry(FakeDevice& device) : device_(device) {}

    void allocated(const Allocation& a) {
        std::lock_guard lock(mutex_);
        const DevicePtr end = a.ptr + a.size;
        auto it = ranges_.upper_bound(a.ptr);
        if (it != ranges_.begin()) --it;
        while (it != ranges_.end() && it->first < end) {
            const Range& r = it->second;
            if (r.end <= a.ptr) {
                ++it;
                continue;
            }
            if (r.live) {
                problems_.push_back("two live allocations overlap");
            } else if (r.awaiting_recorded_events) {
                // Freed with record_stream and the allocator's events not yet known here: the event may
                // legitimately have completed already (complete_stream), so this reuse cannot be judged.
                ++unjudged_;
            } else {
                for (EventHandle e : r.events) {
                    if (!device_.completed(e))
                        problems_.push_back("a block came back before its events completed");
                }
            }
            it = ranges_.erase(it);
        }
        ranges_[a.ptr] = Range{end, true, {}};
    }
    // Called before the allocator sees the free, so the range is never reused while still marked live.
    // `awaiting_recorded_events`: the allocator will record more events (record_stream); see attach().
    void freed(const Allocation& a, std::vector<EventHandle> events, bool awaiting_recorded_events) {
        std::lock_guard lock(mutex_);
        auto it = ranges_.find(a.ptr);
        if (it == ranges_.end() || !it->second.live) {
            problems_.push_back("freeing a range the registry does not know as live");
            return;
        }
        if (events.empty() && !awaiting_recorded_events) {
            ranges_.erase(it);
        } else {
            it->second.live = false;
            it->second.events = std::move(events);
            it->second.awaiting_recorded_events = awaiting_recorded_events;
        }
    }
    // After free(): the events the allocator recorded for the range, which now gate its reuse too.
    void attach(const Allocation& a, const std::vector<EventHandle>& recorded) {
        std::lock_guard lock(mutex_);
        auto it = ranges_.find(a.ptr);
        if (it == ranges_.end() || it->second.live || !it->second.awaiting_recorded_events) return;  // reused
        it->second.events.insert(it->second.events.end(), recorded.begin(), recorded.end());
        it->second.awaiting_recorded_events = false;
    }
    std::vector<std::string> problems() {
        std::lock_guard lock(mutex_);
        return problems_;
    }
    std::size_t unjudged() {
        std::lock_guard lock(mutex_);
        return unjudged_;
    }

  private:
    struct Range {
        DevicePtr end = 0;
        bool live = false;
        std::vector<EventHandle> events;
        bool awaiting_recorded_events = false;
    };
    FakeDevice& device_;
    std::mutex mutex_;
    std::map<DevicePtr, Range> ranges_;
    std::vector<std::string> problems_;
    std::size_t unjudged_ = 0;
};

}  // namespace

TEST_CASE("alloc.thread_safety") {
    const std::uint64_t seed = cudarc::test::fresh_seed();
    CAPTURE(seed);
    constexpr int kThreads = 4;
    constexpr int kOpsPerThread = 20000;
    constexpr StreamKey kStreams = 4;

    // Over fixed segments and over expandable ones (Note [Expandable segments]).
    cudarc::alloc::Segments segments = cudarc::alloc::Segments::fixed;
    SUBCASE("fixed segments") {}
    SUBCASE("expandable segments") {
        segments = cudarc::alloc::Segments::expandable;
    }
    // Small enough that out-of-memory escalation (cache free, event waits) happens now and then.
    AllocatorOnFakeDevice f(160 * kMiB, {}, segments);
    UsageRegistry registry(*f.device);
    std::atomic<std::uint64_t> out_of_memory{0};
    std::atomic<bool> stop_observer{false};
    std::mutex problems_mutex;
    std::vector<std::string> observer_problems;

    std::thread observer([&] {
        // Snapshots and stats while the workers run: each snapshot must be well formed on its own.
        while (!stop_observer.load()) {
            const auto snap = f.allocator.snapshot();
            (void)f.allocator.stats();
            if (std::string problem = cudarc::test::snapshot_structure_problem(snap); !problem.empty()) {
                std::lock_guard lock(problems_mutex);
                observer_problems.push_back(problem);
            }
            std::this_thread::yield();
        }
    });

    auto worker = [&](int index) {
        std::mt19937_64 rng(seed + static_cast<std::uint64_t>(index) * 0x9e3779b97f4a7c15ull);
        std::uniform_int_distribution<int> percent(0, 99);
        std::uniform_int_distribution<StreamKey> stream_of(1, kStreams);
        struct Live {
            Allocation allocation;
            StreamKey stream;
        };
        std::vector<Live> live;
        std::vector<EventHandle> my_events;
        auto free_one = [&](std::size_t i) {
            const Allocation a = live[i].allocation;
            live[i] = live.back();
            live.pop_back();
            const int how = percent(rng);
            std::vector<PendingUse> uses;
            if (how < 35) {  // used on one or two other streams
                const int n = 1 + percent(rng) % 2;
                for (int k = 0; k < n; ++k) {
                    const StreamKey s = stream_of(rng);
                    uses.push_back(PendingUse{s, f.device->make_event(s)});
                    my_events.push_back(uses.back().event);
                }
            }
            std::vector<EventHandle> gating;
            for (const PendingUse& u : uses) gating.push_back(u.event);  // own-stream events gate too
            // Now and then a raw-pointer user, or a use without an event: the allocator records that
            // stream's event itself.
            const bool raw_user = how >= 35 && how < 50;
            if (how >= 35 && how < 45) f.allocator.record_stream(a.ptr + a.size / 2, stream_of(rng));
            if (how >= 45 && how < 50) uses.push_back(PendingUse{stream_of(rng), nullptr});
            registry.freed(a, gating, raw_user);
            (void)FakeDevice::take_recorded_on_this_thread();
            f.allocator.free(a, uses);
            if (raw_user) registry.attach(a, FakeDevice::take_recorded_on_this_thread());
        };
        for (int op = 0; op < kOpsPerThread; ++op) {
            const int what = percent(rng);
            if (what < 50 || live.empty()) {
                const int kind = percent(rng);
                const std::size_t bytes =
                    kind < 80   ? std::uniform_int_distribution<std::size_t>(1, 256 * kKiB)(rng)
                    : kind < 97 ? std::uniform_int_distribution<std::size_t>(kMiB, 6 * kMiB)(rng)
                                : std::uniform_int_distribution<std::size_t>(10 * kMiB, 24 * kMiB)(rng);
                try {
                    const StreamKey stream = stream_of(rng);
                    const Allocation a = f.allocator.allocate(bytes, stream);
                    registry.allocated(a);
                    live.push_back({a, stream});
                } catch (const cudarc::OutOfMemory&) {
                    out_of_memory.fetch_add(1);
                    while (live.size() > 4) free_one(live.size() - 1);
                }
                if (live.size() > 48) free_one(0);
            } else if (what < 90) {
                free_one(std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng));
            } else if (what < 98) {
                // The device finishes some work: complete a few of this thread's events.
                for (int k = 0; k < 4 && !my_events.empty(); ++k) {
                    const std::size_t i =
                        std::uniform_int_distribution<std::size_t>(0, my_events.size() - 1)(rng);
                    f.device->complete(my_events[i]);
                    my_events[i] = my_events.back();
                    my_events.pop_back();
                }
                f.device->complete_stream(stream_of(rng));
            } else {
                (void)f.allocator.empty_cache();
            }
        }
        while (!live.empty()) free_one(live.size() - 1);
    };

    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
    for (auto& t : threads) t.join();
    stop_observer.store(true);
    observer.join();

    const auto problems = registry.problems();
    CHECK(problems.empty());
    for (std::size_t i = 0; i < problems.size() && i < 5; ++i) MESSAGE(problems[i]);
    CHECK(observer_problems.empty());
    CHECK(f.device->violations().empty());
    MESSAGE("out-of-memory errors during the run: " << out_of_memory.load()
                                                    << "; reuses not judged: " << registry.unjudged());

    f.device->complete_all();
    f.allocator.empty_cache();
    const auto stats = f.allocator.stats();
    CHECK(stats.allocated_bytes == 0);
    CHECK(stats.active_bytes == 0);
    CHECK(stats.live_allocations == 0);
    CHECK(stats.reserved_bytes == 0);
    CHECK(f.device->live_segments() == 0);
    CHECK(f.device->mapped_bytes() == 0);
    CHECK(f.device->live_ranges() == 0);
    CHECK(f.device->unreleased_events() == 0);
    CHECK(cudarc::test::snapshot_problem(f.allocator) == "");
}

// Issue 14, item 6: randomized failure schedules on the fake driver. A random workload (allocations, copies,
// launches, forks, joins, frees, page-locked copies, events, graphs, held-back streams, managed memory and
// its prefetch, peer copies with a second device and peer access, borrowed memory) runs once to count the
// driver calls it makes, then again with one call (or a few, or a sticky error) made to fail. Checked:
//  - no crash, and no exception but cudarc::Error out of any call (a throwing destructor would terminate);
//  - every injected failure surfaces, as an exception naming the driver call or through
//    Device::rethrow_deferred_error (a lost device through DeviceLost);
//  - no leak: the allocator's live counts return to zero, and once the device is closed the fake driver
//    holds nothing (but what a failed destroy call leaves, which the driver refused to free);
//  - the fake saw no misuse (work on freed memory, page-locked memory freed under a copy).
// CUDARC_FAULT_SCHEDULES sets the number of schedules (default 1000); each failure prints its seed, which
// CUDARC_FAULT_SEED replays.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/device_state.hpp"
#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::FakeGpu;

namespace {

constexpr const char* kPtx =
    ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry touch(.param .u64 p, .param .u64 n) { "
    "ret; }\n";
constexpr sys::Result kInjected = 999;  // CUDA_ERROR_UNKNOWN: no code path treats it specially

int schedules_wanted() {
    if (const char* text = std::getenv("CUDARC_FAULT_SCHEDULES")) {
        const int value = std::atoi(text);
        if (value > 0) return value;
    }
    return 1000;
}

// What one run saw.
struct Outcome {
    std::vector<std::string> errors;  // messages of the cudarc::Errors the workload's calls threw
    std::string deferred;             // Device::rethrow_deferred_error's message, if any
    std::string unexpected;           // an exception that is not a cudarc::Error
    AllocatorStats stats_after;
    bool lost = false;
};

// A random workload over device 0, with peer copies from and to device 1 and memory borrowed from "another
// library". Deterministic for a seed until a call fails.
class Workload {
  public:
    Workload(FakeGpu& gpu, Device& device, Device& peer, std::uint64_t seed)
        : gpu_(gpu), device_(device), peer_(peer), rng_(seed) {}

    void run(Outcome& outcome, int operations) {
        for (int i = 0; i < operations; ++i) attempt(outcome, [&] { step(); });
        // Everything goes, in a random order: the destructors' own failures are deferred.
        while (!slices_.empty() || !children_.empty() || !pinned_.empty() || !events_.empty() ||
               !graphs_.empty() || !peer_slices_.empty() || !borrowed_.empty()) {
            switch (pick(7)) {
                case 5:
                    drop(peer_slices_);
                    break;
                case 6:
                    drop(borrowed_);
                    break;
                case 0:
                    drop(slices_);
                    break;
                case 1:
                    drop(children_);
                    break;
                case 2:
                    drop(pinned_);
                    break;
                case 3:
                    drop(events_);
                    break;
                default:
                    drop(graphs_);
                    break;
            }
        }
        module_.reset();
        attempt(outcome, [&] { device_.synchronize(); });
        attempt(outcome, [&] { peer_.synchronize(); });
        // The other library frees its memory once cudarc is done with it (the fake itself: no injection).
        const sys::DriverApi& raw = gpu_.driver.api();
        static_cast<void>(raw.ctx_set_current(gpu_.driver.primary_context(0)));
        for (const DevicePtr ptr : raw_) static_cast<void>(raw.mem_free(ptr));
        raw_.clear();
    }

  private:
    template <typename Body>
    void attempt(Outcome& outcome, Body&& body) {
        try {
            body();
        } catch (const Error& e) {
            outcome.errors.emplace_back(e.what());
        } catch (const std::exception& e) {
            outcome.unexpected = e.what();
        }
    }
    std::size_t pick(std::size_t n) { return static_cast<std::size_t>(rng_() % n); }
    template <typename T>
    void drop(std::vector<T>& items) {
        if (items.empty()) return;
        const std::size_t i = pick(items.size());
        std::swap(items[i], items.back());
        items.pop_back();
    }
    // A stream of the device: the default one, a created one or a forked child.
    Stream& any_stream() {
        const std::size_t n = 1 + streams_.size() + children_.size();
        const std::size_t i = pick(n);
        if (i == 0) return device_.default_stream();
        if (i <= streams_.size()) return streams_[i - 1];
        return children_[i - 1 - streams_.size()];
    }
    std::size_t random_count() {
        switch (pick(4)) {
            case 0:
                return 1 + pick(64);
            case 1:
                return 1 + pick(16384);
            case 2:
                return 262144 + pick(262144);  // 1-2 MiB of ints: the large pool
            default:
                return 4096;
        }
    }

    void step() {
        switch (pick(19)) {
            case 17: {  // a peer copy, to or from device 1, maybe with peer access
                if (slices_.empty()) return;
                if (pick(4) == 0) peer_.enable_peer_access(device_);
                DeviceSlice<int>& a = slices_[pick(slices_.size())];
                if (peer_slices_.size() < 4)
                    peer_slices_.push_back(DeviceSlice<int>::uninitialized(peer_.default_stream(), a.size()));
                DeviceSlice<int>& b = peer_slices_[pick(peer_slices_.size())];
                const std::size_t n = std::min(a.size(), b.size());
                if (pick(2) == 0) {
                    copy(peer_.default_stream(), b.view(0, n), a.view(0, n));
                } else {
                    copy(any_stream(), a.view(0, n), b.view(0, n));
                }
                break;
            }
            case 18: {  // borrowed memory, written from a slice (cuPointerGetAttributes,
                        // cuMemGetAddressRange)
                if (slices_.empty() || raw_.size() >= 4) return;
                DeviceSlice<int>& a = slices_[pick(slices_.size())];
                DevicePtr ptr = 0;
                {
                    const auto scope = cudarc::detail::Internals::device_state(device_)->bind();
                    if (gpu_.driver.api().mem_alloc(&ptr, a.bytes()) != sys::kSuccess) return;
                }
                raw_.push_back(ptr);
                borrowed_.emplace_back(device_, ptr, a.size());
                copy(any_stream(), borrowed_.back().view(), a.view());
                break;
            }
            case 0:
            case 1: {  // allocate
                Stream& s = any_stream();
                slices_.push_back(pick(2) == 0 ? DeviceSlice<int>::zeros(s, random_count())
                                               : DeviceSlice<int>::uninitialized(s, random_count()));
                break;
            }
            case 2: {  // host to device
                std::vector<int> host(random_count(), static_cast<int>(rng_()));
                slices_.push_back(DeviceSlice<int>::from_host(any_stream(), host));
                break;
            }
            case 3: {  // device to host
                if (slices_.empty()) return;
                (void)slices_[pick(slices_.size())].to_vector(any_stream());
                break;
            }
            case 4: {  // device to device, maybe across streams
                if (slices_.size() < 2) return;
                DeviceSlice<int>& a = slices_[pick(slices_.size())];
                DeviceSlice<int>& b = slices_[pick(slices_.size())];
                if (&a == &b) return;
                const std::size_t n = std::min(a.size(), b.size());
                copy(any_stream(), a.view(0, n), b.view(0, n));
                break;
            }
            case 5: {  // launch
                if (slices_.empty()) return;
                if (!module_) module_.emplace(Module::from_ptx(device_, kPtx));
                auto kernel = module_->kernel<void(int*, unsigned long long)>("touch");
                DeviceSlice<int>& a = slices_[pick(slices_.size())];
                launch(any_stream(), LaunchConfig{1, 32}, kernel, a,
                       static_cast<unsigned long long>(a.size()));
                break;
            }
            case 6:
            case 7:  // fork
                if (children_.size() < 6) children_.push_back(any_stream().fork());
                break;
            case 8:  // join: the child's destructor, or an explicit join
                if (children_.empty()) return;
                if (pick(2) == 0) {
                    drop(children_);
                } else {
                    any_stream().join(children_[pick(children_.size())]);
                }
                break;
            case 9:
            case 10:  // free
                drop(slices_);
                break;
            case 11: {  // page-locked copy, waited for now or later
                if (slices_.empty()) return;
                DeviceSlice<int>& a = slices_[pick(slices_.size())];
                PinnedBuffer<int> pinned(device_, a.size());
                pinned.copy_from_device_async(any_stream(), a.view());
                if (pick(2) == 0) pinned.synchronize();
                pinned_.push_back(std::move(pinned));
                break;
            }
            case 12: {  // events
                Event event(device_, pick(2) == 0 ? EventTiming::disabled : EventTiming::enabled);
                event.record(any_stream());
                (void)event.query();
                events_.push_back(std::move(event));
                break;
            }
            case 13: {  // hold a stream back (a long kernel), or let one go
                Stream& s = any_stream();
                if (pick(2) == 0) {
                    gpu_.driver.hold(s.native());
                } else {
                    gpu_.driver.release(s.native());
                }
                break;
            }
            case 14:  // another stream, or the cache back to the driver
                if (pick(2) == 0 && streams_.size() < 3) {
                    streams_.push_back(device_.create_stream());
                } else {
                    device_.empty_cache();
                }
                break;
            case 15: {  // managed memory, prefetched to the device (freed after host waits)
                Stream& s = any_stream();
                slices_.push_back(DeviceSlice<int>::managed(s, random_count()));
                prefetch(s, slices_.back().view());
                break;
            }
            default: {  // a graph: capture a memset of a fresh slice, replay it
                Stream& s = any_stream();
                auto target = DeviceSlice<int>::uninitialized(s, 1 + pick(1024));
                graphs_.push_back(capture(s, [&](Stream& captured) { memset(captured, target.view(), 7); }));
                graphs_.back().launch(s);
                slices_.push_back(std::move(target));
                break;
            }
        }
    }

    FakeGpu& gpu_;
    Device& device_;
    Device& peer_;
    std::mt19937_64 rng_;
    std::vector<DeviceSlice<int>> peer_slices_;
    std::vector<BorrowedSlice<int>> borrowed_;
    std::vector<DevicePtr> raw_;  // the "other library's" allocations behind borrowed_
    std::vector<Stream> streams_;
    std::vector<Stream> children_;
    std::vector<DeviceSlice<int>> slices_;
    std::vector<PinnedBuffer<int>> pinned_;
    std::vector<Event> events_;
    std::vector<Graph> graphs_;
    std::optional<Module> module_;
};

constexpr int kOperations = 60;

struct Injection {
    fake::Entry entry = fake::Entry::init;
    std::uint64_t nth = 0;
    sys::Result result = kInjected;
    bool sticky = false;
};

// Runs the workload for `seed` with `injections` armed once the device is open. Returns what it saw, and
// the fake's live counts after the device is closed in `live_after`.
Outcome run_schedule(std::uint64_t seed, const std::vector<Injection>& injections,
                     std::array<std::uint64_t, fake::kEntryCount>* calls, fake::LiveCounts& live_after,
                     std::vector<std::string>& violations, std::vector<fake::FaultInjector::Fired>& fired) {
    Outcome outcome;
    fake::Options options;
    options.devices = {fake::DeviceSpec{}, fake::DeviceSpec{}};
    FakeGpu gpu(options);
    gpu.driver.define_kernel("touch", {8, 8});
    {
        // Odd seeds run on expandable segments (their virtual memory calls fail too), even ones on the
        // caching allocator.
        DeviceOptions device_options;
        device_options.memory_source =
            seed % 2 == 1 ? MemorySource::expandable : MemorySource::caching_allocator;
        auto device = Device::open(0, device_options);
        auto peer = Device::open(1);
        const auto before = gpu.faults.call_counts();
        for (const Injection& injection : injections) {
            if (injection.sticky) {
                gpu.faults.fail_sticky(injection.entry, injection.nth, injection.result);
            } else {
                gpu.faults.fail_nth(injection.entry, injection.nth, injection.result);
            }
        }
        Workload(gpu, device, peer, seed).run(outcome, kOperations);
        fired = gpu.faults.fired();
        if (calls != nullptr) {
            const auto after = gpu.faults.call_counts();
            for (std::size_t i = 0; i < fake::kEntryCount; ++i) (*calls)[i] = after[i] - before[i];
        }
        gpu.faults.clear();  // the rest is the test's own bookkeeping and the device's teardown
        for (const Device* d : {&device, &peer}) {
            try {
                d->rethrow_deferred_error();
            } catch (const Error& e) {
                outcome.deferred += e.what();
            }
        }
        outcome.stats_after = device.allocator_stats();
        outcome.lost = device.lost() || peer.lost();
    }
    live_after = gpu.driver.live();
    violations = gpu.driver.violations();
    return outcome;
}

bool is_destroy(fake::Entry entry) {
    switch (entry) {
        case fake::Entry::module_unload:
        case fake::Entry::mem_free_host:
        case fake::Entry::event_destroy:
        case fake::Entry::stream_destroy:
        case fake::Entry::graph_destroy:
        case fake::Entry::graph_exec_destroy:
        case fake::Entry::mem_free:
        case fake::Entry::stream_end_capture:  // a capture the driver refused to end keeps its graph
            return true;
        default:
            return false;
    }
}

}  // namespace

TEST_CASE("reliability.random_failure_schedules") {
    // CUDARC_FAULT_SEED replays one schedule (the seed a failure printed). The schedules follow from a fixed
    // base seed, so a run is the same every time (CI's verdict on a commit does not depend on luck);
    // CUDARC_FAULT_BASE_SEED picks other ones: a number, or "random" to explore new schedules.
    const char* replay = std::getenv("CUDARC_FAULT_SEED");
    const std::uint64_t replay_seed = replay != nullptr ? std::strtoull(replay, nullptr, 10) : 0;
    const int schedules = replay_seed != 0 ? 1 : schedules_wanted();
    std::uint64_t base_seed = 0x5eed'c0da'ac00'0001ull;
    if (const char* base = std::getenv("CUDARC_FAULT_BASE_SEED")) {
        base_seed =
            std::string_view(base) == "random" ? std::random_device{}() : std::strtoull(base, nullptr, 10);
    }
    MESSAGE("base seed " << base_seed << " (CUDARC_FAULT_BASE_SEED)");
    std::mt19937_64 seeds(base_seed);
    int fired_total = 0;
    int surfaced_as_exception = 0;
    int surfaced_as_deferred = 0;
    int sticky_runs = 0;
    for (int schedule = 0; schedule < schedules; ++schedule) {
        const std::uint64_t seed = replay_seed != 0 ? replay_seed : seeds();
        CAPTURE(seed);
        // 1. A clean run counts the calls the workload makes.
        std::array<std::uint64_t, fake::kEntryCount> calls{};
        fake::LiveCounts live;
        std::vector<std::string> violations;
        std::vector<fake::FaultInjector::Fired> fired;
        const Outcome clean = run_schedule(seed, {}, &calls, live, violations, fired);
        REQUIRE_MESSAGE(clean.unexpected.empty(), clean.unexpected);
        REQUIRE_MESSAGE(clean.errors.empty(), clean.errors.front());
        REQUIRE(clean.deferred.empty());
        REQUIRE(violations.empty());
        REQUIRE(live == fake::LiveCounts{});

        // 2. Pick calls that fail: a uniformly random call of the run. Not those with a fallback by design:
        // error names (asked for only while describing a failure), pointer attributes (an unknown pointer
        // is treated as page-locked) and parameter info (without it, argument sizes are not checked).
        std::vector<std::pair<fake::Entry, std::uint64_t>> weighted;
        std::uint64_t total = 0;
        for (const fake::Entry entry : fake::all_entries()) {
            if (entry == fake::Entry::get_error_name || entry == fake::Entry::get_error_string ||
                entry == fake::Entry::pointer_get_attributes || entry == fake::Entry::func_get_param_info)
                continue;
            const std::uint64_t n = calls[static_cast<std::size_t>(entry)];
            if (n == 0) continue;
            total += n;
            weighted.emplace_back(entry, n);
        }
        REQUIRE(total > 0);
        std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
        const auto random_call = [&] {
            std::uint64_t at = rng() % total;
            for (const auto& [entry, n] : weighted) {
                if (at < n) return Injection{entry, at + 1, kInjected, false};
                at -= n;
            }
            return Injection{};
        };
        std::vector<Injection> injections;
        const auto kind = rng() % 10;
        if (kind < 7) {
            injections.push_back(random_call());  // one failure
        } else if (kind < 9) {
            for (int i = 0; i < 3; ++i) injections.push_back(random_call());  // a few
        } else {
            Injection sticky = random_call();  // the device is lost there
            sticky.result = fake::kErrorIllegalAddress;
            sticky.sticky = true;
            injections.push_back(sticky);
            ++sticky_runs;
        }
        std::string planned;
        for (const Injection& injection : injections) {
            planned += std::string(planned.empty() ? "" : ", ") + fake::cuda_name(injection.entry) + " #" +
                       std::to_string(injection.nth) + (injection.sticky ? " (sticky)" : "");
        }
        CAPTURE(planned);

        // 3. The same workload with the failures.
        const Outcome outcome = run_schedule(seed, injections, nullptr, live, violations, fired);
        CHECK_MESSAGE(outcome.unexpected.empty(), outcome.unexpected);
        CHECK_MESSAGE(violations.empty(), (violations.empty() ? std::string() : violations.front()));
        // Note: memory that may still be in use after a failed host wait is leaked on purpose, never reused
        // (Note [Free after a failed record], PinnedAllocation::release): one block, one page-locked buffer
        // and one managed allocation per failed wait.
        std::size_t failed_waits = 0;
        for (const auto& f : fired) {
            failed_waits +=
                f.entry == fake::Entry::ctx_synchronize || f.entry == fake::Entry::stream_synchronize;
        }
        CHECK(outcome.stats_after.live_allocations <= failed_waits);
        if (failed_waits == 0) CHECK(outcome.stats_after.allocated_bytes == 0);
        fired_total += static_cast<int>(fired.size());

        // Every failure surfaces: thrown by the call that met it, or deferred by a destructor (only the
        // first deferred error is kept, so with several failures at least one must show).
        const auto surfaced = [&](const fake::FaultInjector::Fired& f) {
            const std::string name = fake::cuda_name(f.entry);
            for (const std::string& e : outcome.errors) {
                if (contains(e, name)) return 1;
            }
            return contains(outcome.deferred, name) ? 2 : 0;
        };
        if (injections.front().sticky) {
            if (!fired.empty()) {
                CHECK(outcome.lost);
                bool lost_reported = contains(outcome.deferred, "is lost");
                for (const std::string& e : outcome.errors)
                    lost_reported = lost_reported || contains(e, "is lost");
                CHECK(lost_reported);
            }
            continue;  // a lost device's resources go with the process: no leak accounting
        }
        int shown = 0;
        for (const auto& f : fired) {
            const int how = surfaced(f);
            if (how == 1) ++surfaced_as_exception;
            if (how == 2) ++surfaced_as_deferred;
            if (how != 0) ++shown;
            if (injections.size() == 1) {
                INFO("errors: " << outcome.errors.size() << ", deferred: " << outcome.deferred);
                CHECK_MESSAGE(how != 0, fake::cuda_name(f.entry) << " failed without a trace");
            }
        }
        if (!fired.empty()) CHECK(shown > 0);
        CHECK_FALSE(outcome.lost);

        // No leak: what remains is at most what failed destroy calls refused to free.
        fake::LiveCounts refused;
        refused.host_allocations = failed_waits;
        refused.device_allocations = failed_waits;  // managed memory is not the allocator's to free
        for (const auto& f : fired) {
            if (!is_destroy(f.entry)) continue;
            refused.modules += f.entry == fake::Entry::module_unload ? 1 : 0;
            refused.host_allocations += f.entry == fake::Entry::mem_free_host ? 1 : 0;
            refused.events += f.entry == fake::Entry::event_destroy ? 1 : 0;
            refused.streams += f.entry == fake::Entry::stream_destroy ? 1 : 0;
            refused.graphs += f.entry == fake::Entry::graph_destroy ||
                                      f.entry == fake::Entry::graph_exec_destroy ||
                                      f.entry == fake::Entry::stream_end_capture
                                  ? 1
                                  : 0;
            refused.device_allocations += f.entry == fake::Entry::mem_free ? 1 : 0;
        }
        // A chunk whose unmap or release failed twice in a row stays (Note [A failed unmap or release is
        // tried again]); a chunk left mapped keeps its address range.
        const auto failed_twice = [&](const fake::FaultInjector::Fired& first) {
            return std::any_of(fired.begin(), fired.end(), [&](const fake::FaultInjector::Fired& f) {
                return f.entry == first.entry && f.call == first.call + 1;
            });
        };
        for (const auto& f : fired) {
            if (f.entry != fake::Entry::mem_unmap && f.entry != fake::Entry::mem_release) continue;
            if (!failed_twice(f)) continue;
            refused.physical_allocations += 1;
            refused.address_ranges += f.entry == fake::Entry::mem_unmap ? 1 : 0;
        }
        INFO("left: " << fake::to_string(live));
        CHECK(live.modules <= refused.modules);
        CHECK(live.host_allocations <= refused.host_allocations);
        CHECK(live.events <= refused.events);
        CHECK(live.streams <= refused.streams);
        CHECK(live.graphs <= refused.graphs);
        CHECK(live.device_allocations <= refused.device_allocations);
        CHECK(live.pool_chunks == 0);
        CHECK(live.address_ranges <= refused.address_ranges);  // expandable segments give everything back
        CHECK(live.physical_allocations <= refused.physical_allocations);
        CHECK(live.retained_primary_contexts == 0);
    }
    MESSAGE(schedules << " schedules (" << sticky_runs << " with a sticky error): " << fired_total
                      << " failures injected; " << surfaced_as_exception << " surfaced as exceptions, "
                      << surfaced_as_deferred << " through rethrow_deferred_error");
    // The schedules reached both ways a failure shows (else the test proves little).
    if (schedules >= 100) {
        CHECK(surfaced_as_exception > 0);
        CHECK(surfaced_as_deferred > 0);
    }
}

// A randomized stress of the caching allocator (issue 4, 7b), over fixed segments and over expandable ones
// (issue 30): three host threads share four streams and allocate, fill, copy across streams, verify and
// free at random. Zero corruptions allowed.
//
// Streams are leased: a thread takes one or two free streams for a batch of operations, frees every slice
// it made in the batch, and gives them back (a stream is used by one thread at a time; slices move between
// the streams of one lease). Blocks cached under a stream are thus reused by every thread in turn.
//
// Every slice holds one 32-bit pattern in every element. A copy to another stream is sometimes queued
// behind a short spin and its source freed at once, and a slice of the same size is then allocated and
// filled on the source's stream: were the source's block reused before the copy ran, the copy would see
// the new pattern. Verification reads a sample of slices back (whole for small ones, three windows for
// large ones) and checks every element read.
//
// CUDARC_ALLOC_STRESS_OPERATIONS (default 100000) sets the number of allocator operations (allocations +
// frees); a smaller number keeps runs under compute-sanitizer short. A run that makes no progress for
// CUDARC_ALLOC_STRESS_STALL_S seconds (default 60) prints what each thread is doing, and does so again for
// every further such period, so a hang says where it is.
#include <doctest/doctest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "alloc_gpu_support.hpp"
#include "launch_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

constexpr int kThreads = 3;
constexpr int kStreams = 4;
constexpr std::size_t kMaxLive = 24;        // live slices per thread
constexpr int kBatch = 400;                 // steps per lease
constexpr std::size_t kWholeCheck = 16384;  // slices up to this many elements are verified whole
constexpr std::size_t kWindow = 1024;       // else three windows of this many elements

// A positive number from the environment variable `name`, or `fallback`.
std::uint64_t positive_from_environment(const char* name, std::uint64_t fallback) {
    if (const char* text = std::getenv(name)) {
        const long long value = std::atoll(text);
        if (value > 0) return static_cast<std::uint64_t>(value);
    }
    return fallback;
}

std::uint64_t stall_seconds() {
    return positive_from_environment("CUDARC_ALLOC_STRESS_STALL_S", 60);
}

std::uint64_t operations_wanted() {
    return positive_from_environment("CUDARC_ALLOC_STRESS_OPERATIONS", 100000);
}

// Element counts for 512 B .. 4 MiB, mostly small: 70% up to 64 KiB, 25% up to 1 MiB, 5% up to 4 MiB.
std::size_t random_count(std::mt19937_64& rng) {
    const auto pick = [&](std::size_t lo_bytes, std::size_t hi_bytes) {
        std::uniform_int_distribution<std::size_t> dist(lo_bytes / 4, hi_bytes / 4);
        return dist(rng);
    };
    const auto roll = rng() % 100;
    if (roll < 70) return pick(512, 64 * 1024);
    if (roll < 95) return pick(64 * 1024, 1024 * 1024);
    return pick(1024 * 1024, 4 * 1024 * 1024);
}

class StreamLeases {
  public:
    explicit StreamLeases(std::vector<Stream>& streams) : streams_(streams), busy_(streams.size(), false) {}

    // Waits until a stream is free, then takes up to `wanted` free streams, picked at random.
    std::vector<Stream*> lease(std::size_t wanted, std::mt19937_64& rng) {
        std::unique_lock lock(mutex_);
        std::vector<std::size_t> free;
        changed_.wait(lock, [&] {
            free.clear();
            for (std::size_t i = 0; i < busy_.size(); ++i) {
                if (!busy_[i]) free.push_back(i);
            }
            return !free.empty();
        });
        std::shuffle(free.begin(), free.end(), rng);
        std::vector<Stream*> leased;
        for (std::size_t i = 0; i < free.size() && leased.size() < wanted; ++i) {
            busy_[free[i]] = true;
            leased.push_back(&streams_[free[i]]);
        }
        return leased;
    }

    void give_back(const std::vector<Stream*>& leased) {
        {
            std::lock_guard lock(mutex_);
            for (Stream* stream : leased) busy_[static_cast<std::size_t>(stream - streams_.data())] = false;
        }
        changed_.notify_all();
    }

  private:
    std::vector<Stream>& streams_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<bool> busy_;
};

// Gives a lease back however the batch ends (an exception must not starve the other threads).
class LeaseGuard {
  public:
    LeaseGuard(StreamLeases& leases, std::vector<Stream*> leased)
        : leases_(leases), leased_(std::move(leased)) {}
    LeaseGuard(const LeaseGuard&) = delete;
    LeaseGuard& operator=(const LeaseGuard&) = delete;
    ~LeaseGuard() { leases_.give_back(leased_); }
    [[nodiscard]] const std::vector<Stream*>& streams() const noexcept { return leased_; }

  private:
    StreamLeases& leases_;
    std::vector<Stream*> leased_;
};

struct Kernels {
    explicit Kernels(const Device& device)
        : fill(bench_module(device).kernel<BenchFill::signature>("bench_fill")),
          copy(bench_module(device).kernel<BenchCopy::signature>("bench_copy")),
          spin(bench_module(device).kernel<BenchSpin::signature>("bench_spin")) {}
    BenchFill fill;
    BenchCopy copy;
    BenchSpin spin;
};

// What every thread shares: the device, the kernels and the tallies.
struct Shared {
    Shared(const Device& d, std::uint64_t operations_wanted)
        : device(d),
          kernels(d),
          shape{static_cast<unsigned>(d.multiprocessor_count()),
                static_cast<unsigned>(d.attribute(sys::attr::kMaxThreadsPerMultiprocessor))},
          cycles_per_us(std::max<long long>(1, spin_cycles(d, 0.001))),
          operations_per_thread((operations_wanted + kThreads - 1) / kThreads),
          progress_every(std::max<std::uint64_t>(1, operations_wanted / 10)) {}

    // Every tenth of the operations, how long it took so far: a run stopped at a time limit (a sanitizer's
    // is much slower) still tells its rate.
    void count_operation() {
        const std::uint64_t done = operations_done.fetch_add(1, std::memory_order_relaxed) + 1;
        if (done % progress_every != 0) return;
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "stress: %llu operations after %.1f s\n", static_cast<unsigned long long>(done),
                     seconds);
    }

    [[nodiscard]] long stream_index(const Stream& stream) const noexcept { return &stream - streams; }

    const Device& device;
    Kernels kernels;
    DeviceShape shape;
    long long cycles_per_us;
    std::uint64_t operations_per_thread;  // allocations and frees
    std::uint64_t progress_every;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    std::atomic<std::uint64_t> operations_done{0};
    // What each worker is doing now (a string literal), for the stall report.
    std::array<std::atomic<const char*>, kThreads> doing{};
    const Stream* streams = nullptr;  // the first of the shared streams (for messages)
    std::atomic<std::uint32_t> next_id{1};
    std::atomic<std::uint64_t> allocations{0};
    std::atomic<std::uint64_t> frees{0};
    std::atomic<std::uint64_t> fills{0};
    std::atomic<std::uint64_t> cross_stream_copies{0};
    // Sources freed while their copy was held back, their size reallocated and refilled at once.
    std::atomic<std::uint64_t> reuse_races{0};
    std::atomic<std::uint64_t> verified_slices{0};
    std::atomic<std::uint64_t> verified_elements{0};
    std::atomic<std::uint64_t> corrupt_elements{0};
    std::mutex failures_mutex;
    std::vector<std::string> failures;

    void fail(const std::string& what) {
        std::lock_guard lock(failures_mutex);
        if (failures.size() < 10) failures.push_back(what);
    }
};

struct Tracked {
    DeviceSlice<float> slice;
    std::uint32_t pattern = 0;  // the bits of every element
    Stream* stream = nullptr;   // the stream of its last use
    std::string origin;         // how the pattern got there (for messages)
};

class Worker {
  public:
    Worker(Shared& shared, StreamLeases& leases, int index, std::uint64_t seed)
        : shared_(shared), leases_(leases), index_(index), rng_(seed) {}

    void run() {
        while (operations_ < shared_.operations_per_thread) {
            doing("waiting for a lease of streams");
            LeaseGuard lease(leases_, leases_.lease(1 + rng_() % 2, rng_));
            std::vector<Tracked> live;  // destroyed before the lease is given back
            for (int step = 0; step < kBatch && operations_ < shared_.operations_per_thread; ++step) {
                this->step(lease.streams(), live);
            }
            for (Tracked& t : live) verify(t, *pick(lease.streams()));
            while (!live.empty()) release(live, live.size() - 1);
        }
        doing("done");
    }

  private:
    void doing(const char* what) noexcept {
        shared_.doing[static_cast<std::size_t>(index_)].store(what, std::memory_order_relaxed);
    }

    void step(const std::vector<Stream*>& streams, std::vector<Tracked>& live) {
        const auto roll = rng_() % 100;
        if (live.size() >= kMaxLive || (roll < 30 && !live.empty())) {
            release(live, rng_() % live.size());
        } else if (roll < 42 && !live.empty() && streams.size() == 2) {
            copy_to_other_stream(streams, live);
        } else if (roll < 47 && !live.empty()) {
            Tracked& t = live[rng_() % live.size()];
            t.stream = pick(streams);
            fill(t, *t.stream);  // a new pattern, written on any leased stream
        } else if (roll < 52 && !live.empty()) {
            verify(live[rng_() % live.size()], *pick(streams));
        } else {
            Stream* stream = pick(streams);
            live.push_back(allocate(random_count(rng_), *stream));
            fill(live.back(), *stream);
        }
    }

    Stream* pick(const std::vector<Stream*>& streams) { return streams[rng_() % streams.size()]; }

    Tracked allocate(std::size_t count, Stream& stream) {
        doing("allocating a slice");
        Tracked t{DeviceSlice<float>::uninitialized(stream, count), 0, &stream, {}};
        ++operations_;
        ++shared_.allocations;
        shared_.count_operation();
        return t;
    }

    void release(std::vector<Tracked>& live, std::size_t index) {
        doing("freeing a slice");
        if (index + 1 != live.size()) std::swap(live[index], live.back());
        live.pop_back();
        ++operations_;
        ++shared_.frees;
        shared_.count_operation();
    }

    // A fresh pattern: a bench_fill of a float in [1, 2) whose mantissa is a unique id (three in four), or
    // a memset of a random nonzero byte.
    void fill(Tracked& t, Stream& stream) {
        if (rng_() % 4 != 0) {
            const std::uint32_t id = shared_.next_id.fetch_add(1) & 0x7fffffu;
            t.pattern = 0x3f800000u | id;
            const unsigned long long n = t.slice.size();
            doing("filling a slice with bench_fill");
            launch(stream, LaunchConfig::for_elements(n, shared_.shape, 256), shared_.kernels.fill, t.slice,
                   std::bit_cast<float>(t.pattern), n);
            t.origin = fmt::format("bench_fill on stream {}", shared_.stream_index(stream));
        } else {
            const auto byte = static_cast<unsigned char>(1 + rng_() % 255);
            t.pattern = 0x01010101u * byte;
            doing("filling a slice with a memset");
            memset(stream, t.slice.view(), byte);
            t.origin = fmt::format("memset on stream {}", shared_.stream_index(stream));
        }
        ++shared_.fills;
    }

    // Copies a live slice into a new one on the lease's other stream, sometimes behind a short spin, and
    // then sometimes frees the source at once and reallocates and refills its size on the stream the
    // source was last used on.
    void copy_to_other_stream(const std::vector<Stream*>& streams, std::vector<Tracked>& live) {
        const std::size_t index = rng_() % live.size();
        Stream* from = live[index].stream;
        Stream* to = streams[0] == from ? streams[1] : streams[0];
        const bool held_back = rng_() % 3 == 0;
        if (held_back) {
            const long long us = 20 + static_cast<long long>(rng_() % 180);
            doing("holding a stream back with bench_spin");
            launch(*to, LaunchConfig{1, 1}, shared_.kernels.spin, us * shared_.cycles_per_us, nullptr);
        }
        const std::size_t count = live[index].slice.size();
        Tracked copied = allocate(count, *to);
        copied.pattern = live[index].pattern;
        const bool by_kernel = rng_() % 2 != 0;
        copied.origin = fmt::format(
            "{} on stream {}{} from {:#x} (last used on stream {}), whose pattern came from: {}",
            by_kernel ? "bench_copy" : "a copy", shared_.stream_index(*to), held_back ? " behind a spin" : "",
            live[index].slice.device_ptr(), shared_.stream_index(*from), live[index].origin.substr(0, 300));
        if (!by_kernel) {
            doing("copying a slice to another stream");
            copy(*to, copied.slice.view(), live[index].slice.view());
        } else {
            const unsigned long long n = count;
            doing("copying a slice to another stream with bench_copy");
            launch(*to, LaunchConfig::for_elements(n, shared_.shape, 256), shared_.kernels.copy, copied.slice,
                   live[index].slice, n);
        }
        ++shared_.cross_stream_copies;
        live.push_back(std::move(copied));
        if (held_back && rng_() % 2 == 0) {
            release(live, index);  // the copy is still queued behind the spin
            live.push_back(allocate(count, *from));
            fill(live.back(), *from);
            ++shared_.reuse_races;
        }
    }

    // Reads `t` back on `stream` (whole, or three windows of a large slice) and checks every element.
    void verify(Tracked& t, Stream& stream) {
        const std::size_t n = t.slice.size();
        std::vector<std::size_t> offsets;
        std::size_t length = n;
        if (n <= kWholeCheck) {
            offsets = {0};
        } else {
            length = kWindow;
            offsets = {0, rng_() % (n - kWindow + 1), n - kWindow};
        }
        std::vector<float> host(length);
        for (std::size_t offset : offsets) {
            std::fill(host.begin(), host.end(), poison_float());
            doing("reading a slice back to the host");
            copy(stream, std::span<float>(host), t.slice.view(offset, length));
            std::size_t bad = 0;
            std::size_t first_bad = 0;
            for (std::size_t i = 0; i < length; ++i) {
                if (std::bit_cast<std::uint32_t>(host[i]) != t.pattern) {
                    if (bad == 0) first_bad = i;
                    ++bad;
                }
            }
            shared_.verified_elements += length;
            if (bad != 0) {
                shared_.corrupt_elements += bad;
                shared_.fail(
                    fmt::format("thread {}: {} of {} elements at offset {} of a slice of {} differ from "
                                "pattern {:#010x}; element {} is {:#010x}",
                                index_, bad, length, offset, n, t.pattern, offset + first_bad,
                                std::bit_cast<std::uint32_t>(host[first_bad])) +
                    fmt::format(" (slice at {:#x}, read on stream {}; pattern from {})", t.slice.device_ptr(),
                                shared_.stream_index(stream), t.origin));
            }
        }
        t.stream = &stream;
        ++shared_.verified_slices;
    }

    Shared& shared_;
    StreamLeases& leases_;
    int index_;
    std::mt19937_64 rng_;
    std::uint64_t operations_ = 0;  // allocations and frees by this thread
};

// Prints what each worker is doing when no operation completes for a stall period (see the top).
class StallWatch {
  public:
    explicit StallWatch(Shared& shared) : shared_(shared), thread_([this] { watch(); }) {}
    StallWatch(const StallWatch&) = delete;
    StallWatch& operator=(const StallWatch&) = delete;
    ~StallWatch() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        stopped_.notify_all();
        thread_.join();
    }

  private:
    void watch() {
        const auto period = std::chrono::seconds(stall_seconds());
        std::uint64_t last = shared_.operations_done.load(std::memory_order_relaxed);
        std::unique_lock lock(mutex_);
        while (!stopped_.wait_for(lock, period, [this] { return stopping_; })) {
            const std::uint64_t now = shared_.operations_done.load(std::memory_order_relaxed);
            if (now != last) {
                last = now;
                continue;
            }
            std::fprintf(stderr, "stress: no operation completed for %llu s (%llu done)\n",
                         static_cast<unsigned long long>(period.count()),
                         static_cast<unsigned long long>(now));
            for (std::size_t i = 0; i < shared_.doing.size(); ++i) {
                const char* what = shared_.doing[i].load(std::memory_order_relaxed);
                std::fprintf(stderr, "stress:   thread %zu: %s\n", i, what != nullptr ? what : "not started");
            }
        }
    }

    Shared& shared_;
    std::mutex mutex_;
    std::condition_variable stopped_;
    bool stopping_ = false;
    std::thread thread_;
};

// The stress on device 0's source (the caching allocator, or expandable segments); the checks that follow
// hold for both.
void stress(Device& device) {
    const std::uint64_t wanted = operations_wanted();
    Shared shared(device, wanted);

    std::vector<Stream> streams;
    for (int i = 0; i < kStreams; ++i) streams.push_back(device.create_stream());
    shared.streams = streams.data();
    StreamLeases leases(streams);
    const AllocatorStats before = device.allocator_stats();
    const Counters counters_before = device.counters();

    std::vector<std::uint64_t> seeds;
    for (int i = 0; i < kThreads; ++i) seeds.push_back(rng()());
    const auto start = std::chrono::steady_clock::now();
    {
        const StallWatch watch(shared);  // stops once the workers have
        std::vector<std::thread> threads;
        for (int i = 0; i < kThreads; ++i) {
            threads.emplace_back([&, i] {
                try {
                    Worker(shared, leases, i, seeds[static_cast<std::size_t>(i)]).run();
                } catch (const std::exception& e) {
                    shared.fail(fmt::format("thread {} threw: {}", i, e.what()));
                } catch (...) {
                    shared.fail(fmt::format("thread {} threw a non-standard exception", i));
                }
            });
        }
        for (auto& thread : threads) thread.join();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    device.synchronize();
    (void)DeviceSlice<std::uint8_t>::uninitialized(streams[0], 512);  // an allocation polls the pending frees
    const AllocatorStats after = device.allocator_stats();
    const Counters delta = device.counters() - counters_before;
    // Every request is a hit or a miss (a miss: a new segment, or chunks mapped).
    const std::uint64_t requests =
        (after.cache_hits + after.cache_misses) - (before.cache_hits + before.cache_misses);
    MESSAGE(fmt::format(
        "{} allocations, {} frees, {} fills, {} cross-stream copies ({} raced by a "
        "reallocation), {} slices / {} elements verified in {:.2f} s; {} {} from the "
        "driver, {} cache hits, peak reserved {} MiB ({}); seeds {}",
        shared.allocations.load(), shared.frees.load(), shared.fills.load(),
        shared.cross_stream_copies.load(), shared.reuse_races.load(), shared.verified_slices.load(),
        shared.verified_elements.load(), seconds, after.driver_allocations - before.driver_allocations,
        device.memory_source() == MemorySource::expandable ? "chunks" : "segments",
        after.cache_hits - before.cache_hits, after.peak_reserved_bytes >> 20,
        to_string(device.memory_source()), fmt::join(seeds, ",")));
    for (const auto& failure : shared.failures) MESSAGE(failure);

    CHECK(shared.failures.empty());
    CHECK(shared.corrupt_elements.load() == 0);
    CHECK(shared.allocations.load() + shared.frees.load() >= wanted);
    CHECK(shared.allocations.load() == shared.frees.load());
    CHECK(shared.verified_slices.load() > 0);
    CHECK(shared.reuse_races.load() > 0);
    // Every request was counted once, nearly all from the cache; nothing is left allocated or held back.
    CHECK(requests == shared.allocations.load() + 1);
    CHECK(after.cache_hits - before.cache_hits >= requests * 9 / 10);
    CHECK(delta.driver_allocations == after.driver_allocations - before.driver_allocations);
    CHECK(after.live_allocations == before.live_allocations);
    CHECK(after.allocated_bytes == before.allocated_bytes);
    CHECK(after.active_bytes == after.allocated_bytes);
    CHECK(after.out_of_memory_errors == before.out_of_memory_errors);
    CHECK(check_snapshot_agrees(device) == 0);
}

}  // namespace

TEST_CASE("alloc.stress_threads_and_streams_without_corruption") {
    auto device = open_device_with(MemorySource::caching_allocator);
    if (device) stress(*device);
}

TEST_CASE("alloc.stress_threads_and_streams_without_corruption_expandable") {
    auto device = open_device_with(MemorySource::expandable);
    if (device) stress(*device);
}

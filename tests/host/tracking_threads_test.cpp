// A thread per stream (issue 27, item 7): 8 host threads, each with its own stream, work on random sub-views
// of shared buffers at once, with no lock of their own; every so often all meet at a barrier and one of them
// reads or writes every buffer whole. The hazard state takes the concurrency (a short lock on its slow path),
// and every conflicting pair comes out ordered (tests/host/tracking_model.hpp). Run under ThreadSanitizer by
// `tools/dev test`, which makes it a data-race check of the tracking state as well.
#include <doctest/doctest.h>

#include <barrier>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cudarc/cudarc.hpp"
#include "fake_driver/fake_driver.hpp"
#include "fake_driver/fault_injector.hpp"
#include "tracking_model.hpp"

using namespace cudarc;
namespace model = cudarc::test::model;

namespace {
constexpr const char* kPtx =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry rw(.param .u64 a, .param .u64 b) { ret; }\n"
    ".visible .entry raw(.param .u64 p) { ret; }\n";
constexpr std::size_t kThreads = 8;
constexpr std::size_t kBuffers = 4;
constexpr std::size_t kUnitsPerThread = 8;  // each thread's own region of every buffer
constexpr std::size_t kInts = model::kUnit / sizeof(int);
}  // namespace

TEST_CASE("tracking.a_thread_per_stream_on_sub_views_of_shared_buffers") {
    fake::FakeDriver driver;
    model::HappensBefore hb(driver.api());
    fake::DriverOverride installed(hb.table());
    model::AccessModel accesses;
    std::mutex model_mutex;
    std::string problem;
    {
        auto device = Device::open(0);
        auto module = Module::from_ptx(device, kPtx);
        const auto rw = module.kernel<void(int*, const int*)>("rw");
        const auto untracked = module.kernel<void(int*)>("raw");
        std::vector<DeviceSlice<int>> buffers;
        for (std::size_t b = 0; b < kBuffers; ++b)
            buffers.push_back(DeviceSlice<int>::zeros(device.default_stream(), kThreads * kUnitsPerThread * kInts));
        std::vector<std::unique_ptr<Stream>> streams;
        for (std::size_t t = 0; t < kThreads; ++t) streams.push_back(std::make_unique<Stream>(device.create_stream()));

        const auto note = [&](Stream& s, const std::vector<model::Access>& list) {
            std::lock_guard lock(model_mutex);
            const std::string conflict = accesses.access(hb.last_work(s.native()), list);
            if (!conflict.empty() && problem.empty()) problem = conflict;
        };
        constexpr int kPhases = 12;
        constexpr int kOperations = 60;
        std::barrier meet(static_cast<std::ptrdiff_t>(kThreads));
        const auto worker = [&](std::size_t t) {
            Stream& s = *streams[t];
            std::mt19937 rng(static_cast<unsigned>(1234 + t));
            const auto region = [&](std::size_t b) {
                const std::size_t first = rng() % kUnitsPerThread;
                const std::size_t count = 1 + rng() % (kUnitsPerThread - first);
                return buffers[b].view((t * kUnitsPerThread + first) * kInts, count * kInts);
            };
            for (int phase = 0; phase < kPhases; ++phase) {
                for (int op = 0; op < kOperations; ++op) {
                    const std::size_t a = rng() % kBuffers;
                    const std::size_t b = rng() % kBuffers;
                    switch (rng() % 3) {
                        case 0: {
                            const auto v = region(a);
                            memset(s, v, static_cast<unsigned char>(t));
                            note(s, {{v.device_ptr(), v.bytes(), true}});
                            break;
                        }
                        case 1: {
                            const auto w = region(a);
                            const auto r = region(b);
                            if (a == b) break;  // one buffer: the two regions may overlap
                            launch(s, LaunchConfig{1, 1}, rw, w, DeviceView<const int>(r));
                            note(s, {{r.device_ptr(), r.bytes(), false}, {w.device_ptr(), w.bytes(), true}});
                            break;
                        }
                        default: {
                            const auto w = region(a);
                            const auto r = region(b);
                            if (a == b) break;
                            IndirectAccess access(s);
                            access.add(w);
                            access.add(DeviceView<const int>(r));
                            access.order();
                            launch(s, LaunchConfig{1, 1}, untracked, nullptr);
                            access.done();
                            note(s, {{r.device_ptr(), r.bytes(), false}, {w.device_ptr(), w.bytes(), true}});
                            break;
                        }
                    }
                }
                meet.arrive_and_wait();
                // One thread uses every buffer whole: it must follow every thread's work of the phase.
                if (t == static_cast<std::size_t>(phase) % kThreads) {
                    for (auto& buffer : buffers) {
                        if (phase % 2 == 0) {
                            memset(s, buffer.view(), 0);
                            note(s, {{buffer.device_ptr(), buffer.bytes(), true}});
                        } else {
                            launch(s, LaunchConfig{1, 1}, rw, buffers.front().view(0, kInts),
                                   std::as_const(buffer).view());
                            note(s, {{buffer.device_ptr(), buffer.bytes(), false},
                                     {buffers.front().device_ptr(), model::kUnit, true}});
                        }
                    }
                }
                meet.arrive_and_wait();
            }
        };
        std::vector<std::thread> threads;
        for (std::size_t t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
        for (auto& thread : threads) thread.join();
        device.synchronize();
        MESSAGE(kThreads, " threads, ", accesses.checks(), " ordering checks");
    }
    CHECK_MESSAGE(problem.empty(), problem);
    CHECK(driver.violations().empty());
}

namespace {
// A copy on one chosen stream stops inside the driver until the test lets it go: the window between an
// operation's check of the fast path and its completion, where other threads may act.
struct PausedCopy {
    std::mutex mutex;
    std::condition_variable changed;
    sys::Stream stream = nullptr;  // the copy to pause is the next one on this stream
    bool inside = false;
    bool go = false;
    sys::Result (*inner)(DevicePtr, DevicePtr, std::size_t, sys::Stream) = nullptr;
};
PausedCopy* paused_copy = nullptr;

sys::Result pausing_copy(DevicePtr dst, DevicePtr src, std::size_t bytes, sys::Stream stream) {
    PausedCopy& p = *paused_copy;
    {
        std::unique_lock lock(p.mutex);
        if (stream == p.stream) {
            p.stream = nullptr;
            p.inside = true;
            p.changed.notify_all();
            p.changed.wait(lock, [&] { return p.go; });
        }
    }
    return p.inner(dst, src, bytes, stream);
}
}  // namespace

// Note [Owner's last access]: a read by the buffer's owner may be under way on one thread while two other
// streams read the whole buffer on another (reads need not be ordered among themselves), and the second of
// those builds the range table. The owner's read is not stamped yet, so the table must not take the stamp
// for the owner's last access: a later writer would not wait for that read.
TEST_CASE("tracking.an_owners_read_under_way_while_other_streams_read_the_whole_buffer_is_waited_for") {
    fake::FakeDriver driver;
    sys::DriverApi api = driver.api();
    PausedCopy pause;
    pause.inner = api.memcpy_dtod_async;
    api.memcpy_dtod_async = pausing_copy;
    paused_copy = &pause;
    fake::DriverOverride installed(api);
    {
        constexpr std::size_t kCount = 1024;
        auto device = Device::open(0);
        auto owner = device.create_stream();
        std::vector<int> written(kCount);
        for (std::size_t i = 0; i < kCount; ++i) written[i] = static_cast<int>(i) + 1;
        auto buffer = DeviceSlice<int>::from_host(owner, written);
        auto owners_copy = DeviceSlice<int>::zeros(owner, kCount);
        // Streams that have seen the owner's write (forked after it), so that nothing they do waits for it.
        auto reader1 = owner.fork();
        auto reader2 = owner.fork();
        auto writer = owner.fork();
        auto copy1 = DeviceSlice<int>::zeros(reader1, kCount);
        auto copy2 = DeviceSlice<int>::zeros(reader2, kCount);
        driver.hold(owner.native());  // the owner's read stays queued until the end

        pause.stream = owner.native();
        std::thread owner_thread([&] { copy(owner, owners_copy.view(), std::as_const(buffer).view()); });
        {
            std::unique_lock lock(pause.mutex);
            pause.changed.wait(lock, [&] { return pause.inside; });
        }
        copy(reader1, copy1.view(), std::as_const(buffer).view());  // the one foreign reader
        copy(reader2, copy2.view(), std::as_const(buffer).view());  // a second one: the range table
        {
            std::lock_guard lock(pause.mutex);
            pause.go = true;
        }
        pause.changed.notify_all();
        owner_thread.join();

        memset(writer, buffer.view(), 0);  // must wait for the owner's read, still queued
        driver.release(owner.native());
        device.synchronize();
        std::vector<int> seen(kCount);
        copy(owner, std::span<int>(seen), std::as_const(owners_copy).view());
        CHECK(seen == written);
        copy(owner, std::span<int>(seen), std::as_const(copy1).view());
        CHECK(seen == written);
    }
    paused_copy = nullptr;
}

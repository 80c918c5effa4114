// Issue 28, item 4: a fault at every driver entry. A standard workload (launch, copies, fork and join,
// capture and replay, an optimizer step, a DLPack round trip, borrowed memory and NCCL on one rank) runs
// once on the fake driver to count its calls of every entry point; then, for every entry it calls and every
// call index of it, the workload runs again with that one call failing. Each run must end
//  - without a crash, and with nothing but cudarc::Error thrown by any call;
//  - with an error that names the entry (thrown by the call that met it, or deferred by a destructor and
//    rethrown by Device::rethrow_deferred_error);
//  - with the device usable: the same device runs a short probe (allocation, copies, a launch, fork and
//    join) correctly once the fault is gone; and without a leak: the allocator's live counts back to zero,
//    and once the device is closed the fake holds nothing, every event back to its pool and destroyed with
//    it (but what a failed destroy leaves, which the driver refused to free, or memory kept out of reach
//    after a failed host wait: Note [Free after a failed record]);
//  - with no misuse seen by the fake (work on freed memory, page-locked memory freed under a copy).
// A sticky fault (the context is lost there) must surface as DeviceLost without a crash.
//
// The schedule fails every entry the workload calls at every call index, three ways: CUDA_ERROR_UNKNOWN, a
// sticky CUDA_ERROR_ILLEGAL_ADDRESS, and CUDA_ERROR_OUT_OF_MEMORY for the entries that allocate; on both
// memory sources (the caching allocator and the driver's stream-ordered pool). It is cheap (about 2,000
// runs in well under a second on the fake), so CI runs all of it. CUDARC_FAULT_SWEEP=pairs adds every pair
// of plain failures in one run (about 250,000 runs); CUDARC_FAULT_ENTRY=cuName limits a sweep to one entry
// and CUDARC_FAULT_CALL=N to one of its calls (to replay a failure).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/device_state.hpp"
#include "cudarc/dlpack.hpp"
#include "cudarc/nccl.hpp"
#include "cudarc/optim/optimizer.hpp"
#include "fake_driver/fake_nccl.hpp"
#include "reliability_support.hpp"
#include "rtc/shipped_modules.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::FakeGpu;

namespace {

constexpr const char* kPtx =
    ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry touch(.param .u64 p, .param .u64 n) { "
    "ret; }\n";
constexpr sys::Result kInjected = 999;  // CUDA_ERROR_UNKNOWN: no code path treats it specially
constexpr std::size_t kCount = 1024;

// The fake driver, its fault injector and the fake NCCL, installed for one run.
struct Bench : FakeGpu {
    Bench() { driver.define_kernel("touch", {8, 8}, &touch); }
    // touch(p, n): p[i] += 1 for i < n.
    static sys::Result touch(const fake::KernelCall& call) {
        const auto ptr = call.argument<DevicePtr>(0);
        const auto n = call.argument<unsigned long long>(1);
        const auto bytes = call.memory(ptr, n * sizeof(int));
        if (bytes.empty()) return fake::kErrorIllegalAddress;
        auto* values = reinterpret_cast<int*>(bytes.data());
        for (unsigned long long i = 0; i < n; ++i) ++values[i];
        return sys::kSuccess;
    }

    fake::FakeNccl nccl{driver.api()};  // its own CUDA work goes to the fake directly: not counted
    fake::NcclOverride nccl_installed{nccl.api()};
};

// What one run saw.
struct Outcome {
    std::vector<std::string> errors;  // the cudarc::Errors thrown by the workload's calls
    std::string deferred;             // Device::rethrow_deferred_error's message, if any
    std::vector<std::string> unexpected;
    std::string probe;    // why the probe after the workload failed (empty: it passed)
    bool opened = false;  // Device::open succeeded
    bool lost = false;
    AllocatorStats stats;
    fake::LiveCounts live;
    std::vector<std::string> violations;
    std::vector<fake::FaultInjector::Fired> fired;
    std::size_t communicators = 0;
    std::array<std::uint64_t, fake::kEntryCount> calls{};
};

// How the workload runs: with or without its optimizer step (which needs NVRTC), on which memory source.
struct Setup {
    bool optimizer = true;
    MemorySource source = MemorySource::caching_allocator;
};

class Workload {
  public:
    Workload(Bench& bench, Outcome& outcome, const Setup& setup)
        : bench_(bench), outcome_(outcome), setup_(setup) {}

    // The workload proper, then the probe (unless `probe` is false). Every step catches its own errors, so
    // the steps after a failure still run.
    void run(bool probe) {
        DeviceOptions options;
        options.memory_source = setup_.source;
        attempt([&] { device_.emplace(Device::open(0, options)); });
        if (!device_) {
            end_faults();
            return;
        }
        outcome_.opened = true;
        Device& device = *device_;
        attempt([&] { launch_and_copies(device); });
        attempt([&] { fork_and_join(device); });
        attempt([&] { capture_and_replay(device); });
        if (setup_.optimizer) attempt([&] { optimizer_step(device); });
        attempt([&] { dlpack_round_trip(device); });
        attempt([&] { borrowed_memory(device); });
        attempt([&] { nccl_one_rank(device); });
        attempt([&] { device.synchronize(); });
        attempt([&] { device.empty_cache(); });  // cached memory back to the driver
        release_raw();
        end_faults();
        try {
            device.rethrow_deferred_error();
        } catch (const Error& e) {
            outcome_.deferred = e.what();
        }
        outcome_.lost = device.lost();
        if (probe && !outcome_.lost) run_probe(device);
        try {
            device.synchronize();
            outcome_.stats = device.allocator_stats();
        } catch (const Error& e) {
            if (!outcome_.lost) outcome_.unexpected.push_back(std::string("after the probe: ") + e.what());
        }
        module_.reset();
        detail::forget_shipped_modules(*detail::Internals::device_state(device));
        device_.reset();
    }

  private:
    // From here on: the test's own checks and the device's teardown, without faults (a failure while the
    // device closes has nobody to report it to: ~DeviceState defers it to a state that is going away).
    void end_faults() {
        outcome_.fired = bench_.faults.fired();
        outcome_.calls = bench_.faults.call_counts();
        bench_.faults.clear();
    }
    template <typename Body>
    void attempt(Body&& body) {
        try {
            body();
        } catch (const Error& e) {
            outcome_.errors.emplace_back(e.what());
        } catch (const std::exception& e) {
            outcome_.unexpected.emplace_back(e.what());
        }
    }
    const Module& module(Device& device) {
        if (!module_) module_.emplace(Module::from_ptx(device, kPtx));
        return *module_;
    }
    void touch(Stream& stream, Device& device, DeviceView<int> view) {
        auto kernel = module(device).kernel<void(int*, unsigned long long)>("touch");
        launch(stream, LaunchConfig{1, 32}, kernel, view, static_cast<unsigned long long>(view.size()));
    }

    void launch_and_copies(Device& device) {
        Stream& stream = device.default_stream();
        std::vector<int> host(kCount, 5);
        auto a = DeviceSlice<int>::from_host(stream, host);
        auto b = DeviceSlice<int>::zeros(stream, kCount);
        touch(stream, device, a.view());
        copy(stream, b.view(), a.view());
        memset(stream, b.view(0, 16), 0);
        const std::vector<int> back = b.to_vector(stream);
        if (back[16] != 6) throw std::runtime_error("launch_and_copies: wrong data");
        PinnedBuffer<int> pinned(device, kCount);
        pinned.copy_from_device_async(stream, a.view());
        pinned.synchronize();
        pinned.copy_to_device_async(stream, b.view());
        Event start(device, EventTiming::enabled);
        Event end(device, EventTiming::enabled);
        start.record(stream);
        touch(stream, device, b.view());
        end.record(stream);
        end.synchronize();
        static_cast<void>(Event::elapsed_ms(start, end));
    }

    void fork_and_join(Device& device) {
        Stream& stream = device.default_stream();
        auto shared = DeviceSlice<int>::zeros(stream, kCount);
        {
            Stream child = stream.fork();
            auto own = DeviceSlice<int>::zeros(child, kCount);
            touch(child, device, shared.view(0, kCount / 2));  // waits for the parent's zeros
            Stream grandchild = child.fork();
            touch(grandchild, device, shared.view(kCount / 2, kCount / 2));
            copy(grandchild, own.view(), shared.view());  // waits for the child's half
            child.join(grandchild);
            Stream other = device.create_stream();
            copy(other, shared.view(), own.view());  // waits for the grandchild's copy
            Event done(device);
            done.record(other);
            static_cast<void>(done.query());
        }  // the children join their parents
        const std::vector<int> back = shared.to_vector(stream);
        if (back[0] != 1 || back[kCount - 1] != 1) throw std::runtime_error("fork_and_join: wrong data");
    }

    void capture_and_replay(Device& device) {
        Stream& stream = device.default_stream();
        auto target = DeviceSlice<int>::zeros(stream, kCount);
        auto other = DeviceSlice<int>::zeros(stream, kCount);
        const auto body = [&](Stream& captured) {
            memset(captured, target.view(), 0);
            Stream child = captured.fork();
            touch(child, device, other.view());
            touch(captured, device, target.view());
        };
        Graph graph = capture(stream, body);
        graph.launch(stream);
        graph.launch(stream);
        static_cast<void>(graph.update(stream, body));
        graph.launch(stream);
        const std::vector<int> back = target.to_vector(stream);
        if (back[0] != 1) throw std::runtime_error("capture_and_replay: wrong data");
        auto managed = DeviceSlice<int>::managed(stream, kCount);
        prefetch(stream, managed.view());
        copy(stream, managed.view(), target.view());
    }

    void optimizer_step(Device& device) {
        namespace optim = cudarc::optim;
        Stream& stream = device.default_stream();
        const std::vector<float> ones(kCount, 1.0F);
        auto param = DeviceSlice<float>::from_host(stream, ones);
        auto grad = DeviceSlice<float>::zeros(stream, kCount);
        optim::Optimizer optimizer(stream, optim::OptimizerOptions{});
        const std::vector<optim::ParamTensor> tensors{optim::ParamTensor(param, grad)};
        const optim::GroupId group =
            optimizer.add_group(stream, optim::default_options(optim::UpdateRule::adamw), tensors);
        {
            Stream producer = stream.fork();  // the gradients come from another stream
            copy(producer, grad.view(), std::span<const float>(ones));
            optimizer.step(stream, group, tensors);
        }
        optimizer.step(stream, group, tensors);
    }

    void dlpack_round_trip(Device& device) {
        Stream& stream = device.default_stream();
        std::vector<int> host(kCount, 3);
        auto exported = DeviceSlice<int>::from_host(stream, host);
        dlpack::DLManagedTensorVersioned* tensor = to_dlpack(std::move(exported), stream);
        // Note: from_dlpack owns the tensor from the call on, whether it throws or not.
        BorrowedSlice<int> imported = from_dlpack<int>(device, tensor, stream);
        Stream child = stream.fork();
        touch(child, device, imported.view());
        std::vector<int> back(kCount);
        copy(stream, std::span<int>(back), imported.view());
        if (back[0] != 4) throw std::runtime_error("dlpack_round_trip: wrong data");
    }

    void borrowed_memory(Device& device) {
        // Memory and a stream of "another library", made with the fake itself (uncounted).
        const sys::DriverApi& raw = bench_.driver.api();
        {
            const auto scope = detail::Internals::device_state(device)->bind();
            if (raw.mem_alloc(&raw_memory_, kCount * sizeof(int)) != sys::kSuccess ||
                raw.stream_create_with_priority(&raw_stream_, sys::kStreamNonBlocking, 0) != sys::kSuccess)
                throw std::runtime_error("borrowed_memory: the fake refused the other library's resources");
        }
        Stream& stream = device.default_stream();
        Stream foreign = Stream::wrap(device, raw_stream_);
        {
            BorrowedSlice<int> borrowed(device, raw_memory_, kCount, foreign);
            auto source = DeviceSlice<int>::zeros(stream, kCount);
            copy(stream, borrowed.view(), source.view());  // waits for the owner's stream first
            touch(foreign, device, borrowed.view());
            std::vector<int> back(kCount);
            copy(stream, std::span<int>(back), borrowed.view());
            if (back[0] != 1) throw std::runtime_error("borrowed_memory: wrong data");
        }  // the owner's stream waits for cudarc's last use
        auto cached = DeviceSlice<int>::zeros(foreign, kCount);  // a block cached under the foreign stream
        touch(foreign, device, cached.view());
        cached = DeviceSlice<int>();
        // The wrapper goes: the allocator hands the foreign stream's blocks to the default stream.
    }

    void nccl_one_rank(Device& device) {
        Stream& stream = device.default_stream();
        auto comm = nccl::Communicator::init_rank(device, nccl::UniqueId::create(), 0, 1);
        const std::vector<float> host(kCount, 2.0F);
        auto x = DeviceSlice<float>::from_host(stream, host);
        auto y = DeviceSlice<float>::zeros(stream, kCount);
        comm.all_reduce(stream, x);
        {
            Stream child = stream.fork();
            comm.broadcast(child, x, y, 0);  // reads x after the parent's all_reduce
        }
        {
            nccl::Group group;
            comm.all_reduce(stream, y);
            comm.all_reduce(stream, x);
        }
        const std::vector<float> back = y.to_vector(stream);
        if (back[0] != 2.0F) throw std::runtime_error("nccl_one_rank: wrong data");
    }

    // The other library frees its memory and stream once cudarc is done with them.
    void release_raw() {
        const sys::DriverApi& raw = bench_.driver.api();
        if (raw_memory_ == 0 && raw_stream_ == nullptr) return;
        static_cast<void>(raw.ctx_set_current(bench_.driver.primary_context(0)));
        if (raw_stream_ != nullptr) {
            static_cast<void>(raw.stream_synchronize(raw_stream_));
            static_cast<void>(raw.stream_destroy(raw_stream_));
        }
        if (raw_memory_ != 0) static_cast<void>(raw.mem_free(raw_memory_));
        raw_memory_ = 0;
        raw_stream_ = nullptr;
    }

    // What a user would do next on the same device: it must work and give the right data.
    void run_probe(Device& device) {
        try {
            Stream& stream = device.default_stream();
            std::vector<int> host(kCount, 41);
            auto a = DeviceSlice<int>::from_host(stream, host);
            {
                Stream child = stream.fork();
                auto b = DeviceSlice<int>::zeros(child, kCount);
                copy(child, b.view(), a.view());
                touch(child, device, b.view());
                copy(child, a.view(), b.view());
            }
            const std::vector<int> back = a.to_vector(stream);
            if (back[0] != 42 || back[kCount - 1] != 42) outcome_.probe = "the probe read wrong data";
            device.rethrow_deferred_error();
        } catch (const std::exception& e) {
            outcome_.probe = e.what();
        }
    }

    Bench& bench_;
    Outcome& outcome_;
    Setup setup_;
    std::optional<Device> device_;
    std::optional<Module> module_;
    DevicePtr raw_memory_ = 0;
    sys::Stream raw_stream_ = nullptr;
};

struct Fault {
    fake::Entry entry = fake::Entry::init;
    std::uint64_t call = 0;  // 1-based, counted from the workload's start
    sys::Result result = kInjected;
    bool sticky = false;
};

std::string describe(const Fault& fault) {
    return std::string(fake::cuda_name(fault.entry)) + " #" + std::to_string(fault.call) +
           (fault.sticky ? " (sticky)" : "") +
           (fault.result != kInjected && !fault.sticky ? " (" + std::to_string(fault.result) + ")" : "");
}

Outcome run_once(const std::vector<Fault>& faults, const Setup& setup, bool probe = true) {
    Outcome outcome;
    {
        Bench bench;
        for (const Fault& fault : faults) {
            if (fault.sticky) {
                bench.faults.fail_sticky(fault.entry, fault.call, fault.result);
            } else {
                bench.faults.fail_nth(fault.entry, fault.call, fault.result);
            }
        }
        Workload(bench, outcome, setup).run(probe);
        outcome.communicators = bench.nccl.live_communicators();
        outcome.live = bench.driver.live();
        outcome.violations = bench.driver.violations();
    }
    return outcome;
}

// Whether the optimizer step can run: it compiles its kernels with NVRTC.
bool nvrtc_present() {
    try {
        static_cast<void>(compiler_version(Backend::cuda));
        return true;
    } catch (const Error&) {
        return false;
    }
}

bool allocates(fake::Entry entry) {
    return entry == fake::Entry::mem_alloc || entry == fake::Entry::mem_alloc_managed ||
           entry == fake::Entry::mem_host_alloc || entry == fake::Entry::mem_alloc_async;
}

// Entries whose failure the library answers with a documented fallback, not an error: describing an
// error (the message then carries the bare result number), telling page-locked from pageable host memory
// (an unknown pointer is treated as page-locked: only a host wait more), a kernel's parameter layout
// (without it, argument sizes go unchecked), a foreign stream's priority (0 when the driver cannot say;
// it only sets the priority of streams forked from it) and updating an executable graph in place (whatever
// the reason it refuses, Graph::update instantiates the new graph instead).
bool falls_back(fake::Entry entry) {
    return entry == fake::Entry::get_error_name || entry == fake::Entry::get_error_string ||
           entry == fake::Entry::pointer_get_attributes || entry == fake::Entry::func_get_param_info ||
           entry == fake::Entry::stream_get_priority || entry == fake::Entry::graph_exec_update;
}

// What a failed destroy call leaves behind (the driver refused to free it), and what is kept out of reach
// after a failed host wait (Note [Free after a failed record]).
fake::LiveCounts allowed_leftovers(const Fault& fault) {
    fake::LiveCounts left;
    switch (fault.entry) {
        case fake::Entry::module_unload:
            left.modules = 1;
            break;
        case fake::Entry::mem_free_host:
            left.host_allocations = 1;
            break;
        case fake::Entry::event_destroy:
            left.events = 1;
            break;
        case fake::Entry::stream_destroy:
            left.streams = 1;
            break;
        case fake::Entry::graph_destroy:
        case fake::Entry::graph_exec_destroy:
        case fake::Entry::stream_end_capture:  // a capture the driver refused to end keeps its graph
            left.graphs = 1;
            break;
        case fake::Entry::mem_free:
            left.device_allocations = 1;
            break;
        case fake::Entry::mem_free_async:
            left.pool_chunks = 1;
            break;
        case fake::Entry::ctx_synchronize:
        case fake::Entry::stream_synchronize:
        case fake::Entry::event_synchronize:
            // A failed host wait as the fallback of a failed record: the memory stays out of reach.
            left.device_allocations = 1;
            left.host_allocations = 1;
            left.pool_chunks = 1;
            break;
        default:
            break;
    }
    return left;
}

// Checks one faulty run; returns false when it failed (each problem is reported).
// Checks one faulty run (one fault; or several, none sticky); returns false when it failed (each problem
// is reported).
bool check(const std::vector<Fault>& faults, const Outcome& outcome) {
    std::string planned;
    for (const Fault& fault : faults) planned += (planned.empty() ? "" : ", ") + describe(fault);
    INFO("faults: " << planned);
    INFO("errors: " << outcome.errors.size()
                    << (outcome.errors.empty() ? "" : ", first: " + outcome.errors[0])
                    << "; deferred: " << outcome.deferred);
    bool ok = true;
    const auto expect = [&](bool condition, const std::string& what) {
        if (!condition) {
            ok = false;
            CHECK_MESSAGE(condition, what);
        }
    };
    expect(outcome.unexpected.empty(),
           "threw something other than cudarc::Error: " +
               (outcome.unexpected.empty() ? std::string() : outcome.unexpected.front()));
    expect(
        outcome.violations.empty(),
        "the fake saw misuse: " + (outcome.violations.empty() ? std::string() : outcome.violations.front()));
    // The first fault always fires (the run is the clean one until then); a later one may not, when the
    // run took another path after the first.
    expect(faults.size() == 1 ? outcome.fired.size() == 1 : !outcome.fired.empty(),
           "the faults fired " + std::to_string(outcome.fired.size()) + " times");
    const Fault& fault = faults.front();
    if (fault.sticky) {
        bool reported = contains(outcome.deferred, "is lost");
        for (const std::string& e : outcome.errors) reported = reported || contains(e, "is lost");
        if (outcome.opened) {
            expect(outcome.lost || falls_back(fault.entry), "a sticky fault did not lose the device");
            expect(reported || !outcome.lost, "the device was lost without a DeviceLost");
        } else {
            // No device to lose: Device::open itself failed, and said so.
            expect(!outcome.errors.empty(), "Device::open failed without an error");
        }
        return ok;  // a lost device's resources go with the process: no leak accounting
    }
    // An error names a fault that fired (with several, only the first error deferred is kept).
    bool named = false;
    bool fallback_only = true;
    for (const fake::FaultInjector::Fired& fired : outcome.fired) {
        const std::string name = fake::cuda_name(fired.entry);
        fallback_only = fallback_only && falls_back(fired.entry);
        named = named || contains(outcome.deferred, name);
        for (const std::string& e : outcome.errors) named = named || contains(e, name);
    }
    if (fault.result == sys::kErrorOutOfMemory) {
        // Out of memory is the allocators' to handle: they free their caches and retry (then nothing is
        // thrown and the workload's data checks hold), else throw OutOfMemory with their figures.
        bool out_of_memory = outcome.errors.empty() && outcome.deferred.empty();
        for (const std::string& e : outcome.errors)
            out_of_memory = out_of_memory || contains(e, "out of memory");
        named = named || out_of_memory;
    }
    expect(named || fallback_only, "no error names the failed call");
    expect(!outcome.lost, "a non-sticky fault lost the device");
    expect(outcome.probe.empty(), "the device is not usable afterwards: " + outcome.probe);
    fake::LiveCounts left;
    for (const fake::FaultInjector::Fired& fired : outcome.fired) {
        const fake::LiveCounts one = allowed_leftovers(Fault{fired.entry, fired.call, fired.result, false});
        left.device_allocations += one.device_allocations;
        left.pool_chunks += one.pool_chunks;
        left.host_allocations += one.host_allocations;
        left.streams += one.streams;
        left.events += one.events;
        left.modules += one.modules;
        left.graphs += one.graphs;
    }
    expect(
        outcome.stats.live_allocations <= left.device_allocations,
        "the allocator still counts " + std::to_string(outcome.stats.live_allocations) + " live allocations");
    INFO("left: " << fake::to_string(outcome.live));
    expect(outcome.live.modules <= left.modules && outcome.live.host_allocations <= left.host_allocations &&
               outcome.live.events <= left.events && outcome.live.streams <= left.streams &&
               outcome.live.graphs <= left.graphs &&
               outcome.live.device_allocations <= left.device_allocations &&
               outcome.live.pool_chunks <= left.pool_chunks && outcome.live.retained_primary_contexts == 0,
           "a leak once the device is closed");
    expect(outcome.communicators == 0, "a communicator was neither destroyed nor aborted");
    return ok;
}

std::string env_or(const char* name, const char* fallback) {
    const char* value = std::getenv(name);
    return value != nullptr ? value : fallback;
}

std::string source_name(MemorySource source) {
    return source == MemorySource::caching_allocator ? "caching allocator" : "stream-ordered pool";
}

constexpr MemorySource kSources[] = {MemorySource::caching_allocator, MemorySource::stream_ordered};

}  // namespace

TEST_CASE("reliability.standard_workload_runs_clean") {
    const bool optimizer = nvrtc_present();
    if (!optimizer) MESSAGE("NVRTC is not available: the workload runs without its optimizer step");
    for (const MemorySource source : kSources) {
        CAPTURE(source_name(source));
        const Outcome outcome = run_once({}, Setup{optimizer, source});
        CHECK(outcome.unexpected.empty());
        for (const std::string& e : outcome.unexpected) MESSAGE(e);
        CHECK(outcome.errors.empty());
        for (const std::string& e : outcome.errors) MESSAGE(e);
        CHECK(outcome.deferred.empty());
        CHECK(outcome.probe.empty());
        CHECK(outcome.violations.empty());
        CHECK(outcome.live == fake::LiveCounts{});
        CHECK(outcome.stats.live_allocations == 0);
        CHECK(outcome.communicators == 0);
        // Every area the workload is meant to cover reached the driver.
        const auto called = [&](fake::Entry entry) {
            return outcome.calls[static_cast<std::size_t>(entry)] > 0;
        };
        CHECK(called(fake::Entry::launch_kernel));
        CHECK(called(fake::Entry::memcpy_dtoh_async));
        CHECK(called(fake::Entry::stream_wait_event));
        CHECK(called(fake::Entry::stream_begin_capture));
        CHECK(called(fake::Entry::graph_launch));
        CHECK(called(fake::Entry::pointer_get_attributes));  // borrowed memory's check
        CHECK(called(fake::Entry::mem_alloc_managed));
        CHECK(called(source == MemorySource::caching_allocator ? fake::Entry::mem_alloc
                                                               : fake::Entry::mem_alloc_async));
        if (optimizer) CHECK(called(fake::Entry::launch_kernel_ex));
    }
}

TEST_CASE("reliability.a_fault_at_every_entry_and_call") {
    const bool optimizer = nvrtc_present();
    if (!optimizer) MESSAGE("NVRTC is not available: the workload runs without its optimizer step");
    const std::string only_entry = env_or("CUDARC_FAULT_ENTRY", "");
    const std::uint64_t only_call = std::strtoull(env_or("CUDARC_FAULT_CALL", "0").c_str(), nullptr, 10);
    const bool pairs = env_or("CUDARC_FAULT_SWEEP", "") == "pairs";
    for (const MemorySource source : kSources) {
        CAPTURE(source_name(source));
        const Setup setup{optimizer, source};
        const auto started = std::chrono::steady_clock::now();
        const Outcome clean = run_once({}, setup, false);
        REQUIRE(clean.errors.empty());
        REQUIRE(clean.unexpected.empty());
        std::string counts;
        std::uint64_t total = 0;
        std::vector<Fault> faults;
        std::size_t entries = 0;
        for (const fake::Entry entry : fake::all_entries()) {
            const std::uint64_t calls = clean.calls[static_cast<std::size_t>(entry)];
            total += calls;
            if (calls == 0) continue;
            counts += std::string(counts.empty() ? "" : ", ") + fake::cuda_name(entry) + " " +
                      std::to_string(calls);
            if (!only_entry.empty() && only_entry != fake::cuda_name(entry)) continue;
            ++entries;
            // Every call index: a plain failure, a sticky one, and out of memory where memory is asked for.
            for (std::uint64_t call = 1; call <= calls; ++call) {
                if (only_call != 0 && call != only_call) continue;
                faults.push_back(Fault{entry, call, kInjected, false});
                faults.push_back(Fault{entry, call, fake::kErrorIllegalAddress, true});
                if (allocates(entry)) faults.push_back(Fault{entry, call, sys::kErrorOutOfMemory, false});
            }
        }
        std::size_t failed = 0;
        std::size_t runs = 0;
        for (const Fault& fault : faults) {
            ++runs;
            if (!check({fault}, run_once({fault}, setup))) ++failed;
        }
        if (pairs) {
            // Two plain failures in one run, every pair of calls (the second may not come once the first
            // changed the run's path).
            std::vector<Fault> plain;
            for (const Fault& fault : faults) {
                if (!fault.sticky && fault.result == kInjected) plain.push_back(fault);
            }
            for (std::size_t i = 0; i < plain.size(); ++i) {
                for (std::size_t j = i + 1; j < plain.size(); ++j) {
                    ++runs;
                    const std::vector<Fault> both{plain[i], plain[j]};
                    if (!check(both, run_once(both, setup))) ++failed;
                }
            }
        }
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        MESSAGE(source_name(source) << ": " << runs << " faulty runs"
                                    << std::string(pairs ? " (pairs too)" : "") << " over " << entries
                                    << " entries and " << total << " calls of the standard workload ("
                                    << counts << "), " << failed << " failed, in " << seconds << " s");
        CHECK(failed == 0);
    }
}

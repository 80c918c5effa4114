// cudarc-bench launch: the typed, hazard-aware launch against raw cuLaunchKernel; NVRTC cold compile against
// the kernel cache (memory, disk); the copy kernel's bandwidth against cuMemcpyDtoD. Every figure is a ratio
// against its baseline measured in the same run, median of rounds after warm-up; host-cost rounds of the
// two sides alternate, so drift (clocks, other processes) hits both alike.
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bench.hpp"
#include "core/device_state.hpp"
#include "cudarc/cudarc.hpp"
#include "cudarc/kernel_cache.hpp"
#include "cudarc/nvrtc.hpp"

namespace cudarc::bench {
namespace {

// Kernels that do nothing but take parameters: what is measured is the host's cost of a launch.
constexpr const char* kArgumentKernels = R"(
extern "C" __global__ void bench_four_buffers(float* a, const float* b, const float* c, float* d) {
    static_cast<void>(a); static_cast<void>(b); static_cast<void>(c); static_cast<void>(d);
}
extern "C" __global__ void bench_two_buffers(float* out, const float* in) {
    static_cast<void>(out); static_cast<void>(in);
}
)";

struct Paired {
    std::vector<double> a;
    std::vector<double> b;
    std::vector<double> ratio;  // b / a, per round
};

// Host wall time per call of `a` and of `b` (microseconds), rounds alternating a, b, a, b ...
template <typename A, typename B, typename After>
Paired time_paired_us(int warmups, int rounds, int iterations, A&& a, B&& b, After&& after_round) {
    Paired out;
    auto time = [&](auto& body) {
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iterations; ++i) body();
        const auto stop = std::chrono::steady_clock::now();
        after_round();
        return std::chrono::duration<double, std::micro>(stop - start).count() / iterations;
    };
    for (int round = 0; round < warmups + rounds; ++round) {
        const double ta = time(a);
        const double tb = time(b);
        if (round >= warmups) {
            out.a.push_back(ta);
            out.b.push_back(tb);
            out.ratio.push_back(tb / ta);
        }
    }
    return out;
}

// Device time per call of `body` (milliseconds), from timing events around `iterations` calls.
template <typename Body>
std::vector<double> time_device_ms(const Device& device, Stream& stream, int warmups, int rounds,
                                   int iterations, Body&& body) {
    Event start(device, EventTiming::enabled);
    Event stop(device, EventTiming::enabled);
    std::vector<double> out;
    for (int round = 0; round < warmups + rounds; ++round) {
        start.record(stream);
        for (int i = 0; i < iterations; ++i) body();
        stop.record(stream);
        stop.synchronize();
        if (round >= warmups) out.push_back(static_cast<double>(Event::elapsed_ms(start, stop)) / iterations);
    }
    return out;
}

void check(const detail::DeviceState& state, sys::Result result, sys::Entry call) {
    state.check(result, call);
}

struct LaunchArgs : CommonArgs {
    int iterations = 500;
    int copy_mib = 1024;
};

int run_launch(const LaunchArgs& args) {
    const int warmups = args.warmups;
    const int rounds = args.rounds;
    const int iterations = args.iterations;
    auto device = Device::open(args.device);
    auto& state = *cudarc::detail::Internals::device_state(device);
    const sys::DriverApi& api = state.api();
    JsonLines json(args, device, "launch");
    const CompilerVersion compiler = compiler_version(device.backend());
    print_header(json.context(), fmt::format("{} {}.{}; median of {} rounds after {} warm-up rounds",
                                             compiler.backend == Backend::hip ? "hiprtc" : "NVRTC",
                                             compiler.major, compiler.minor, rounds, warmups));
    auto report = [&](const std::string& name, double value, const char* unit, const std::string& note) {
        print_row(name, value, unit, note);
        json.write({{"case", name}, {"value", value}, {"unit", unit}});
    };

    auto stream = device.create_stream();
    auto sync = [&] { stream.synchronize(); };
    const Module& bench = Module::shipped(device, "bench.cu");
    const Module arguments = Module::compile(device, Program(kArgumentKernels, "bench_launch_arguments.cu"));

    // 1. Four scalar/pointer arguments: typed launch vs raw cuLaunchKernel, same kernel, same stream.
    {
        const auto kernel =
            bench.kernel<void(float*, const float*, float, unsigned long long)>("bench_empty_args");
        auto scratch = DeviceSlice<float>::zeros(stream, 64);
        float* a = reinterpret_cast<float*>(static_cast<std::uintptr_t>(scratch.device_ptr()));
        const float* b = a + 32;
        float s = 1.5f;
        unsigned long long n = 64;
        void* params[] = {&a, &b, &s, &n};
        const LaunchConfig config{1, 32};
        sys::Function raw_function = kernel.native();
        sys::Stream raw_stream = stream.native();
        const auto before = device.counters();
        const Paired t = time_paired_us(
            warmups, rounds, iterations,
            [&] {
                check(state,
                      api.launch_kernel(raw_function, 1, 1, 1, 32, 1, 1, 0, raw_stream, params, nullptr),
                      sys::Entry::launch_kernel);
            },
            [&] { launch(stream, config, kernel, a, b, s, n); }, sync);
        const auto delta = device.counters() - before;
        report("raw cuLaunchKernel, 4 args", median(t.a), "us", "");
        report("typed launch, 4 scalar/pointer args", median(t.b), "us", "");
        report("typed / raw (4 scalar/pointer args)", median(t.ratio), "x", "target <= 1.05");
        report("  events recorded by the typed launches", static_cast<double>(delta.events_recorded), "",
               "expect 0");
    }

    // 2. Four DeviceSlice arguments on one stream (hazard tracking's single-stream path) vs raw.
    {
        const auto kernel =
            arguments.kernel<void(float*, const float*, const float*, float*)>("bench_four_buffers");
        auto a = DeviceSlice<float>::zeros(stream, 256);
        auto b = DeviceSlice<float>::zeros(stream, 256);
        auto c = DeviceSlice<float>::zeros(stream, 256);
        auto d = DeviceSlice<float>::zeros(stream, 256);
        DevicePtr pa = a.device_ptr(), pb = b.device_ptr(), pc = c.device_ptr(), pd = d.device_ptr();
        void* params[] = {&pa, &pb, &pc, &pd};
        const LaunchConfig config{1, 32};
        const auto before = device.counters();
        const Paired t = time_paired_us(
            warmups, rounds, iterations,
            [&] {
                check(state,
                      api.launch_kernel(kernel.native(), 1, 1, 1, 32, 1, 1, 0, stream.native(), params,
                                        nullptr),
                      sys::Entry::launch_kernel);
            },
            [&] { launch(stream, config, kernel, a, b, c, d); }, sync);
        const auto delta = device.counters() - before;
        report("raw cuLaunchKernel, 4 pointers", median(t.a), "us", "");
        report("typed launch, 4 DeviceSlice args, one stream", median(t.b), "us", "");
        report("typed / raw (4 DeviceSlice args)", median(t.ratio), "x", "target <= 1.10");
        report("  cross-stream waits on one stream", static_cast<double>(delta.cross_stream_waits), "",
               "expect 0");
    }

    // 3. Two streams with hazards: x written on one stream and read on the other, alternately; each launch
    //    needs one event and one wait. Baseline: the same launches with the same record + wait made by hand.
    {
        const auto kernel = arguments.kernel<void(float*, const float*)>("bench_two_buffers");
        auto other = device.create_stream();
        auto x = DeviceSlice<float>::zeros(stream, 256);
        const auto c = DeviceSlice<float>::zeros(stream, 256);
        auto y = DeviceSlice<float>::zeros(other, 256);
        DevicePtr px = x.device_ptr(), pc = c.device_ptr(), py = y.device_ptr();
        void* write_params[] = {&px, &pc};
        void* read_params[] = {&py, &px};
        sys::Event e1 = nullptr;
        sys::Event e2 = nullptr;
        check(state, api.event_create(&e1, sys::kEventDisableTiming), sys::Entry::event_create);
        check(state, api.event_create(&e2, sys::kEventDisableTiming), sys::Entry::event_create);
        const LaunchConfig config{1, 32};
        auto sync_both = [&] {
            stream.synchronize();
            other.synchronize();
        };
        const int pairs = iterations / 2;
        // Warm the hazard state (first reads on the other stream) before counting.
        launch(stream, config, kernel, x, c);
        launch(other, config, kernel, y, x);
        const auto before = device.counters();
        const Paired t = time_paired_us(
            warmups, rounds, pairs,
            [&] {
                check(state,
                      api.launch_kernel(kernel.native(), 1, 1, 1, 32, 1, 1, 0, stream.native(), write_params,
                                        nullptr),
                      sys::Entry::launch_kernel);
                check(state, api.event_record(e1, stream.native()), sys::Entry::event_record);
                check(state, api.stream_wait_event(other.native(), e1, 0), sys::Entry::stream_wait_event);
                check(state,
                      api.launch_kernel(kernel.native(), 1, 1, 1, 32, 1, 1, 0, other.native(), read_params,
                                        nullptr),
                      sys::Entry::launch_kernel);
                check(state, api.event_record(e2, other.native()), sys::Entry::event_record);
                check(state, api.stream_wait_event(stream.native(), e2, 0), sys::Entry::stream_wait_event);
            },
            [&] {
                launch(stream, config, kernel, x, c);  // waits for the last read of x on `other`
                launch(other, config, kernel, y, x);   // waits for this write of x
            },
            sync_both);
        const auto delta = device.counters() - before;
        const double typed_pairs = static_cast<double>(warmups + rounds) * pairs;
        report("raw launch + record + wait, x2 (write/read pair)", median(t.a), "us", "");
        report("typed launches across two streams (write/read pair)", median(t.b), "us", "");
        report("typed / raw (two streams, hazards)", median(t.ratio), "x", "");
        report("  cross-stream waits per typed pair",
               static_cast<double>(delta.cross_stream_waits) / typed_pairs, "", "expect 2");
        report("  events recorded per typed pair", static_cast<double>(delta.events_recorded) / typed_pairs,
               "", "expect 2");
        sync_both();
        api.event_destroy(e1);
        api.event_destroy(e2);
    }

    // 4. NVRTC: a cold compile vs the kernel cache's memory and disk hits (a private cache folder).
    {
        const auto folder = std::filesystem::temp_directory_path() /
                            fmt::format("cudarc-bench-launch-{}", std::random_device{}());
        {
            KernelCache cache(folder);
            const Program program = Program::embedded("bench.cu");
            const int compile_rounds = std::max(3, rounds / 3);
            std::vector<double> cold, memory, disk, disk_and_load;
            for (int round = 0; round < compile_rounds + 1; ++round) {
                CompileOptions compile_options;
                compile_options.arch = device.arch();
                compile_options.backend = device.backend();
                // A define no kernel reads makes a new key, so each round compiles for real.
                compile_options.defines = {{"CUDARC_BENCH_ROUND", std::to_string(round)}};
                auto ms_since = [](auto start) {
                    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                        .count();
                };
                auto start = std::chrono::steady_clock::now();
                const CachedProgram compiled = cache.compile(program, compile_options);
                const double cold_ms = ms_since(start);
                start = std::chrono::steady_clock::now();
                const CachedProgram from_memory = cache.compile(program, compile_options);
                const double memory_ms = ms_since(start);
                cache.clear_memory();
                start = std::chrono::steady_clock::now();
                const CachedProgram from_disk = cache.compile(program, compile_options);
                const double disk_ms = ms_since(start);
                cache.clear_memory();
                start = std::chrono::steady_clock::now();
                const Module loaded = Module::compile(device, program, compile_options, cache);
                const double disk_load_ms = ms_since(start);
                if (compiled.source != CacheSource::compiled || from_memory.source != CacheSource::memory ||
                    from_disk.source != CacheSource::disk) {
                    throw Error(fmt::format("kernel cache: expected compiled/memory/disk, got {}/{}/{} ({})",
                                            to_string(compiled.source), to_string(from_memory.source),
                                            to_string(from_disk.source), from_disk.disk_note));
                }
                if (round == 0) continue;  // warm-up: loads the compiler
                cold.push_back(cold_ms);
                memory.push_back(memory_ms);
                disk.push_back(disk_ms);
                disk_and_load.push_back(disk_load_ms);
            }
            report("NVRTC cold compile of bench.cu", median(cold), "ms", "");
            report("kernel cache, memory hit", median(memory), "ms", "");
            report("kernel cache, disk hit", median(disk), "ms", "target <= 5 ms");
            report("kernel cache, disk hit + module load", median(disk_and_load), "ms", "");
            report("cold compile / disk hit", median(cold) / median(disk), "x", "");
        }
        std::error_code ignored;
        std::filesystem::remove_all(folder, ignored);
    }

    // 5. Bandwidth: the copy kernel vs cuMemcpyDtoDAsync, same buffers (read + write bytes per second).
    {
        const auto mib = static_cast<std::size_t>(args.copy_mib);
        const std::size_t n = mib * 1024 * 1024 / sizeof(float);
        const auto copy = bench.kernel<void(float*, const float*, unsigned long long)>("bench_copy");
        auto src = DeviceSlice<float>::zeros(stream, n);
        auto dst = DeviceSlice<float>::uninitialized(stream, n);
        const LaunchConfig config = LaunchConfig::for_elements(n, device);
        constexpr int kCopies = 10;
        const auto kernel_ms = median(time_device_ms(device, stream, warmups, rounds, kCopies,
                                                     [&] { launch(stream, config, copy, dst, src, n); }));
        const auto memcpy_ms = median(time_device_ms(device, stream, warmups, rounds, kCopies, [&] {
            check(
                state,
                api.memcpy_dtod_async(dst.device_ptr(), src.device_ptr(), n * sizeof(float), stream.native()),
                sys::Entry::memcpy_dtod_async);
        }));
        const double bytes = 2.0 * static_cast<double>(n * sizeof(float));
        const double kernel_tbs = bytes / (kernel_ms * 1e-3) / 1e12;
        const double memcpy_tbs = bytes / (memcpy_ms * 1e-3) / 1e12;
        report(fmt::format("cuMemcpyDtoD, {} MiB", mib), memcpy_tbs, "TB/s", "read + write");
        report(fmt::format("bench_copy kernel, {} MiB (grid {} x 256)", mib, config.grid.x), kernel_tbs,
               "TB/s", "read + write");
        report("copy kernel / cuMemcpyDtoD", kernel_tbs / memcpy_tbs, "x", "target >= 0.9");
    }
    return 0;
}

const Subcommand<LaunchArgs> registration{
    "launch", "typed launch vs raw cuLaunchKernel; NVRTC cold vs cached; copy kernel vs memcpy", run_launch,
    [](OptionSet& options, LaunchArgs& args) {
        options.add("--iterations", args.iterations, "launches per timed round", Check::positive)
            .add("--copy-mib", args.copy_mib, "MiB copied by the bandwidth case", Check::positive);
    }};

}  // namespace
}  // namespace cudarc::bench

// cudarc-bench pipeline: N batches, each uploaded from page-locked memory, computed and downloaded back, on
// K = 1, 2, 4 streams in turn (issue 29). The kernel's work is sized so that its time is about one batch's
// upload time, so K = 1 runs upload, compute and download one after the other and K >= 3 can overlap all
// three. The batches are chunks of one pinned input and one pinned output buffer, copied through
// cudarc::copy on PinnedViews (tracked per byte range: the chunks are disjoint, so no stream waits for
// another). The baseline, in the same run, is the same pipeline written by hand on the raw driver: the same
// copies and launches on raw streams, an event recorded after each batch's download. Each round starts
// from an idle device, all streams waiting for one start event; its time is device time, from the start
// event to the last stream's end event (median over rounds). The round's one host sync is the final device
// synchronize; rows report how many the library made in all.
//
//     cudarc-bench pipeline --streams 1,2,4 --batches 16 --elements 2097152 --output r.jsonl
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench.hpp"
#include "core/device_state.hpp"
#include "core/trace.hpp"
#include "cudarc/cudarc.hpp"

namespace cudarc::bench {
namespace {

constexpr const char* kSource = R"(
extern "C" __global__ void iterate(float* y, const float* x, float a, float b, int iterations,
                                   unsigned long long n) {
    const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
    for (unsigned long long i = 1ull * blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        for (int k = 0; k < iterations; ++k) v = fmaf(v, a, b);
        y[i] = v;
    }
})";

using IterateKernel = Kernel<void(float*, const float*, float, float, int, unsigned long long)>;

struct PipelineArgs : CommonArgs {
    PipelineArgs() {
        warmups = 2;
        rounds = 9;
    }
    std::vector<int> streams{1, 2, 4};
    int batches = 16;
    int elements = 1 << 21;  // floats per batch: 8 MiB each way
    int iterations = 0;      // kernel iterations per element; 0: sized so that compute ~ one upload
};

struct Setup {
    Device& device;
    const IterateKernel& kernel;
    std::size_t batches;
    std::size_t n;
    int iterations;
    PinnedBuffer<float>& in;
    PinnedBuffer<float>& out;
};

struct Timing {
    double device_ms = 0;
    double host_syncs = 0;  // per round, the final one included
    double waits = 0;       // cross-stream waits per round
    double host_us = 0;     // host time to enqueue a round (median)
};

// Device milliseconds from `start` to the latest of `ends`.
double span_ms(const Event& start, const std::vector<Event>& ends) {
    double ms = 0;
    for (const Event& e : ends) ms = std::max(ms, static_cast<double>(Event::elapsed_ms(start, e)));
    return ms;
}

// `trace`: with CUDARC_TRACE=waits on (Note [Tracing waits]), its lines sent to /dev/null.
Timing run_cudarc(const Setup& s, std::size_t k_streams, int warmups, int rounds, bool trace = false) {
    std::vector<Stream> streams;
    std::vector<DeviceSlice<float>> x;
    std::vector<DeviceSlice<float>> y;
    for (std::size_t k = 0; k < k_streams; ++k) {
        streams.push_back(s.device.create_stream());
        x.push_back(DeviceSlice<float>::uninitialized(streams[k], s.n));
        y.push_back(DeviceSlice<float>::uninitialized(streams[k], s.n));
    }
    const LaunchConfig config = LaunchConfig::for_elements(s.n, s.device);
    Event start(s.device, EventTiming::enabled);
    std::vector<Event> ends;
    for (std::size_t k = 0; k < k_streams; ++k) ends.emplace_back(s.device, EventTiming::enabled);
    Stream& origin = s.device.default_stream();
    s.device.synchronize();
    std::vector<double> ms;
    std::vector<double> host;
    Timing t;
    std::FILE* sink = trace ? std::fopen("/dev/null", "w") : nullptr;
    if (trace) detail::set_trace_waits(true, sink);
    for (int round = 0; round < warmups + rounds; ++round) {
        const Counters before = s.device.counters();
        start.record(origin);
        for (Stream& st : streams) st.wait(start);
        const auto t0 = std::chrono::steady_clock::now();
        for (std::size_t b = 0; b < s.batches; ++b) {
            const std::size_t k = b % k_streams;
            copy(streams[k], x[k].view(), std::as_const(s.in).view(b * s.n, s.n));
            launch(streams[k], config, s.kernel, y[k], x[k], 0.999f, 0.001f, s.iterations,
                   static_cast<unsigned long long>(s.n));
            copy(streams[k], s.out.view(b * s.n, s.n), std::as_const(y[k]).view());
        }
        const auto t1 = std::chrono::steady_clock::now();
        for (std::size_t k = 0; k < k_streams; ++k) ends[k].record(streams[k]);
        s.device.synchronize();  // the round's one host sync
        const Counters used = s.device.counters() - before;
        if (round < warmups) continue;
        ms.push_back(span_ms(start, ends));
        host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        t.host_syncs += static_cast<double>(used.host_synchronizations());
        t.waits += static_cast<double>(used.cross_stream_waits);
    }
    if (trace) {
        detail::set_trace_waits(false);
        std::fclose(sink);
    }
    t.device_ms = median(ms);
    t.host_us = median(host);
    t.host_syncs /= rounds;
    t.waits /= rounds;
    return t;
}

// The same pipeline by hand: raw streams, raw copies and launches, one event recorded after each batch.
Timing run_raw(const Setup& s, std::size_t k_streams, int warmups, int rounds) {
    auto& state = *detail::Internals::device_state(s.device);
    const sys::DriverApi& api = state.api();
    const auto scope = state.bind();
    std::vector<sys::Stream> streams(k_streams);
    std::vector<DevicePtr> x(k_streams);
    std::vector<DevicePtr> y(k_streams);
    const std::size_t bytes = s.n * sizeof(float);
    for (std::size_t k = 0; k < k_streams; ++k) {
        state.check(api.stream_create_with_priority(&streams[k], sys::kStreamNonBlocking, 0),
                    sys::Entry::stream_create_with_priority);
        state.check(api.mem_alloc(&x[k], bytes), sys::Entry::mem_alloc);
        state.check(api.mem_alloc(&y[k], bytes), sys::Entry::mem_alloc);
    }
    std::vector<sys::Event> done(s.batches);
    for (sys::Event& e : done)
        state.check(api.event_create(&e, sys::kEventDisableTiming), sys::Entry::event_create);
    Event start(s.device, EventTiming::enabled);
    std::vector<Event> ends;
    for (std::size_t k = 0; k < k_streams; ++k) ends.emplace_back(s.device, EventTiming::enabled);
    const LaunchConfig config = LaunchConfig::for_elements(s.n, s.device);
    Stream& origin = s.device.default_stream();
    float a = 0.999f;
    float b_coefficient = 0.001f;
    int iterations = s.iterations;
    auto n = static_cast<unsigned long long>(s.n);
    std::vector<double> ms;
    std::vector<double> host;
    for (int round = 0; round < warmups + rounds; ++round) {
        start.record(origin);
        for (sys::Stream st : streams) api.stream_wait_event(st, start.native(), 0);
        const auto t0 = std::chrono::steady_clock::now();
        for (std::size_t b = 0; b < s.batches; ++b) {
            const std::size_t k = b % k_streams;
            api.memcpy_htod_async(x[k], s.in.data() + b * s.n, bytes, streams[k]);
            void* params[] = {&y[k], &x[k], &a, &b_coefficient, &iterations, &n};
            api.launch_kernel(s.kernel.native(), config.grid.x, config.grid.y, config.grid.z, config.block.x,
                              config.block.y, config.block.z, 0, streams[k], params, nullptr);
            api.memcpy_dtoh_async(s.out.data() + b * s.n, y[k], bytes, streams[k]);
            api.event_record(done[b], streams[k]);
        }
        const auto t1 = std::chrono::steady_clock::now();
        for (std::size_t k = 0; k < k_streams; ++k) api.event_record(ends[k].native(), streams[k]);
        state.check(api.ctx_synchronize(), sys::Entry::ctx_synchronize);
        if (round >= warmups) {
            ms.push_back(span_ms(start, ends));
            host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
    }
    for (sys::Event e : done) api.event_destroy(e);
    for (std::size_t k = 0; k < k_streams; ++k) {
        api.mem_free(x[k]);
        api.mem_free(y[k]);
        api.stream_destroy(streams[k]);
    }
    Timing t;
    t.device_ms = median(ms);
    t.host_us = median(host);
    t.host_syncs = 1;
    return t;
}

// Device milliseconds of one upload of a batch and of one kernel at `iterations`.
std::pair<double, double> probe(const Setup& s, int iterations) {
    Stream stream = s.device.create_stream();
    auto x = DeviceSlice<float>::uninitialized(stream, s.n);
    auto y = DeviceSlice<float>::uninitialized(stream, s.n);
    Event e0(s.device, EventTiming::enabled);
    Event e1(s.device, EventTiming::enabled);
    Event e2(s.device, EventTiming::enabled);
    std::vector<double> copy_ms;
    std::vector<double> kernel_ms;
    for (int i = 0; i < 5; ++i) {
        e0.record(stream);
        copy(stream, x.view(), std::as_const(s.in).view(0, s.n));
        e1.record(stream);
        launch(stream, LaunchConfig::for_elements(s.n, s.device), s.kernel, y, x, 0.999f, 0.001f, iterations,
               static_cast<unsigned long long>(s.n));
        e2.record(stream);
        stream.synchronize();
        copy_ms.push_back(Event::elapsed_ms(e0, e1));
        kernel_ms.push_back(Event::elapsed_ms(e1, e2));
    }
    return {median(copy_ms), median(kernel_ms)};
}

int run_pipeline(const PipelineArgs& args) {
    auto device = Device::open(args.device);
    JsonLines json(args, device, "pipeline");
    const auto module = Module::compile(device, Program(kSource, "pipeline.cu"));
    const IterateKernel kernel =
        module.kernel<void(float*, const float*, float, float, int, unsigned long long)>("iterate");
    const auto batches = static_cast<std::size_t>(args.batches);
    const auto n = static_cast<std::size_t>(args.elements);
    PinnedBuffer<float> in(device, batches * n);
    PinnedBuffer<float> out(device, batches * n);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 1000) * 1e-3f;
    Setup setup{device, kernel, batches, n, args.iterations, in, out};
    if (setup.iterations == 0) {
        const auto [copy_ms, kernel_ms] = probe(setup, 256);
        setup.iterations = std::max(1, static_cast<int>(256.0 * copy_ms / std::max(kernel_ms, 1e-6)));
    }
    const auto [copy_ms, kernel_ms] = probe(setup, setup.iterations);
    print_header(
        json.context(),
        fmt::format("{} batches of {} MiB each way; upload {:.3f} ms, kernel {:.3f} ms ({} iterations); "
                    "device time, median of {} rounds after {} warm-up rounds",
                    batches, n * sizeof(float) >> 20, copy_ms, kernel_ms, setup.iterations, args.rounds,
                    args.warmups));
    double one_stream_ms = 0;
    for (const int k : args.streams) {
        const Timing c = run_cudarc(setup, static_cast<std::size_t>(k), args.warmups, args.rounds);
        const Timing r = run_raw(setup, static_cast<std::size_t>(k), args.warmups, args.rounds);
        if (one_stream_ms == 0) one_stream_ms = c.device_ms;
        const double vs_one = one_stream_ms / c.device_ms;
        const double vs_raw = r.device_ms / c.device_ms;
        print_row(
            fmt::format("{} stream(s)", k), c.device_ms, "ms",
            fmt::format("{:.2f}x one stream, {:.3f}x raw ({:.3f} ms); {:.1f} host syncs, {:.1f} waits a "
                        "round",
                        vs_one, vs_raw, r.device_ms, c.host_syncs, c.waits));
        json.write({{"streams", k},
                    {"batches", args.batches},
                    {"batch_bytes", n * sizeof(float)},
                    {"iterations", setup.iterations},
                    {"upload_ms", copy_ms},
                    {"kernel_ms", kernel_ms},
                    {"device_ms", c.device_ms},
                    {"raw_ms", r.device_ms},
                    {"vs_one_stream", vs_one},
                    {"vs_raw", vs_raw},
                    {"host_syncs", c.host_syncs},
                    {"cross_stream_waits", c.waits},
                    {"host_us", c.host_us},
                    {"raw_host_us", r.host_us}});
        // Note [Tracing waits]: the trace's cost off (one branch a wait site) and on (lines to /dev/null),
        // as host time to enqueue a round, against the raw enqueue.
        const Timing traced = run_cudarc(setup, static_cast<std::size_t>(k), args.warmups, args.rounds, true);
        print_row(fmt::format("{} stream(s), enqueue host time, trace off", k), c.host_us, "us",
                  fmt::format("{:.3f}x raw ({:.1f} us); trace on: {:.1f} us", c.host_us / r.host_us,
                              r.host_us, traced.host_us));
        json.write({{"streams", k},
                    {"mode", "trace"},
                    {"host_us_trace_off", c.host_us},
                    {"host_us_trace_on", traced.host_us},
                    {"raw_host_us", r.host_us},
                    {"trace_off_vs_raw", c.host_us / r.host_us}});
    }
    return 0;
}

const Subcommand<PipelineArgs> registration{
    "pipeline",
    "upload, kernel, download of batches on 1, 2, 4 streams from pinned memory, vs a raw pipeline",
    run_pipeline, [](OptionSet& options, PipelineArgs& args) {
        options.add_list("--streams", args.streams, "stream counts (the first is the vs_one_stream base)",
                         Check::positive);
        options.add("--batches", args.batches, "batches per round", Check::positive);
        options.add("--elements", args.elements, "floats per batch", Check::positive);
        options.add("--iterations", args.iterations,
                    "kernel iterations per element (0: sized so that compute takes about one upload)",
                    Check::non_negative);
    }};

}  // namespace
}  // namespace cudarc::bench

// cudarc-bench graph: captured graphs against the same work enqueued eagerly, ratios from one run (issue 13).
//
//   1. chain     k small kernels (y = a x + y on 4096 floats), k = 1, 10, 100: one replay of the captured
//                chain against k typed launches; host time per kernel (the cost of enqueueing) and device
//                time per kernel (timing events around many chains: launch gaps included).
//   2. fork/join a region that forks 4 streams, runs 8 small kernels on each (own buffers) and joins them:
//                a replay against the same region done eagerly; host and device time per region.
//   3. optimizer AdamW (fp32 state, fp32 parameters) at the 32- and 1024-tensor inventories (sizes cycle
//                4096, 8192, 16384, 32768): a replay of a capturable optimizer's captured step (each replay
//                a new step) against the eager step of an ordinary optimizer; host and device time per step.
//
//     cudarc-bench graph --warmups 3 --rounds 15 --iterations 50 --inventories 32,1024 --output r.jsonl
//
// Rounds of the two sides alternate (eager, graph, eager, graph ...), so drift hits both alike.
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench.hpp"
#include "cudarc/cudarc.hpp"
#include "cudarc/optim/optimizer.hpp"

namespace cudarc::bench {
namespace {

using Saxpy = Kernel<void(float*, const float*, float, unsigned long long)>;
using Report = std::function<void(const std::string&, double, const char*, const std::string&)>;

struct Timings {
    std::vector<double> eager_host_us, graph_host_us;      // per call of the body
    std::vector<double> eager_device_ms, graph_device_ms;  // per call of the body
};

// Host time (enqueue only) and device time (timing events on `stream`) per call, `iterations` calls per
// round, rounds alternating eager and graph.
Timings time_both(const Device& device, Stream& stream, int warmups, int rounds, int iterations,
                  const std::function<void()>& eager, const std::function<void()>& graph) {
    Timings out;
    Event start(device, EventTiming::enabled);
    Event stop(device, EventTiming::enabled);
    auto time = [&](const std::function<void()>& body, std::vector<double>& host, std::vector<double>& dev,
                    bool keep) {
        start.record(stream);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iterations; ++i) body();
        const auto t1 = std::chrono::steady_clock::now();
        stop.record(stream);
        stop.synchronize();
        if (!keep) return;
        host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / iterations);
        dev.push_back(static_cast<double>(Event::elapsed_ms(start, stop)) / iterations);
    };
    for (int round = 0; round < warmups + rounds; ++round) {
        const bool keep = round >= warmups;
        time(eager, out.eager_host_us, out.eager_device_ms, keep);
        time(graph, out.graph_host_us, out.graph_device_ms, keep);
    }
    return out;
}

void report_pair(const Report& report, const std::string& what, const Timings& t, double per) {
    const double eh = median(t.eager_host_us) / per;
    const double gh = median(t.graph_host_us) / per;
    const double ed = median(t.eager_device_ms) * 1000.0 / per;
    const double gd = median(t.graph_device_ms) * 1000.0 / per;
    report(what + ": eager, host", eh, "us", "");
    report(what + ": replay, host", gh, "us", "");
    report(what + ": replay / eager, host", gh / eh, "x", "");
    report(what + ": eager, device", ed, "us", "");
    report(what + ": replay, device", gd, "us", "");
    report(what + ": replay / eager, device", gd / ed, "x", "");
}

void bench_chains(Device& device, Stream& stream, int warmups, int rounds, int iterations,
                  const Report& report) {
    const Saxpy saxpy = Module::shipped(device, "bench.cu").kernel<Saxpy::signature>("bench_saxpy");
    constexpr std::size_t n = 4096;
    auto x = DeviceSlice<float>::zeros(stream, n);
    auto y = DeviceSlice<float>::zeros(stream, n);
    const LaunchConfig config{Dim3(static_cast<unsigned>(n / 256)), Dim3(256)};
    for (const int k : {1, 10, 100}) {
        auto chain = [&](Stream& s) {
            for (int i = 0; i < k; ++i)
                launch(s, config, saxpy, y.view(), x.view(), 0.5f, static_cast<unsigned long long>(n));
        };
        Graph graph = capture(stream, chain);
        const Timings t = time_both(
            device, stream, warmups, rounds, iterations, [&] { chain(stream); },
            [&] { graph.launch(stream); });
        report_pair(report, fmt::format("chain of {:>3} kernels, per kernel", k), t, k);
    }
}

void bench_fork_join(Device& device, Stream& parent, int warmups, int rounds, int iterations,
                     const Report& report) {
    const Saxpy saxpy = Module::shipped(device, "bench.cu").kernel<Saxpy::signature>("bench_saxpy");
    constexpr std::size_t kStreams = 4;
    constexpr int kKernels = 8;
    constexpr std::size_t n = 4096;
    auto x = DeviceSlice<float>::zeros(parent, n);
    std::vector<DeviceSlice<float>> ys;
    for (std::size_t i = 0; i < kStreams; ++i) ys.push_back(DeviceSlice<float>::zeros(parent, n));
    const LaunchConfig config{Dim3(static_cast<unsigned>(n / 256)), Dim3(256)};
    auto region = [&](Stream& s) {
        std::vector<Stream> children;
        for (std::size_t c = 0; c < kStreams; ++c) children.push_back(s.fork());
        for (std::size_t c = 0; c < kStreams; ++c) {
            for (int i = 0; i < kKernels; ++i) {
                launch(children[c], config, saxpy, ys[c].view(), x.view(), 0.5f,
                       static_cast<unsigned long long>(n));
            }
        }
    };  // the children join here
    Graph graph = capture(parent, region);
    const Timings t = time_both(
        device, parent, warmups, rounds, iterations, [&] { region(parent); }, [&] { graph.launch(parent); });
    report_pair(report, "4-stream fork/join, 8 kernels each, per region", t, 1.0);
}

// The eager step of an ordinary optimizer (what a step costs without graphs) against a replay of a
// capturable optimizer's step (each replay a new step: its count and hyper-parameters live on the device).
// Each side steps its own copy of the tensors.
void bench_optimizer(Device& device, Stream& stream, int warmups, int rounds, int iterations,
                     const std::vector<int>& inventories, const Report& report) {
    constexpr std::size_t kSizes[] = {4096, 8192, 16384, 32768};
    for (const int inventory : inventories) {
        const auto count = static_cast<std::size_t>(inventory);
        struct Side {
            std::vector<DeviceSlice<float>> params, grads;
            std::vector<optim::ParamTensor> tensors;
        };
        auto make_side = [&] {
            Side side;
            for (std::size_t i = 0; i < count; ++i) {
                const std::size_t n = kSizes[i % 4];
                side.params.push_back(DeviceSlice<float>::zeros(stream, n));
                side.grads.push_back(DeviceSlice<float>::zeros(stream, n));
            }
            for (std::size_t i = 0; i < count; ++i) side.tensors.emplace_back(side.params[i], side.grads[i]);
            return side;
        };
        Side eager_side = make_side();
        Side graph_side = make_side();
        const auto options = optim::default_options(optim::UpdateRule::adamw);
        optim::Optimizer eager(stream,
                               {.rule = optim::UpdateRule::adamw, .precision = optim::StatePrecision::fp32});
        optim::Optimizer capturable(
            stream,
            {.rule = optim::UpdateRule::adamw, .precision = optim::StatePrecision::fp32, .capturable = true});
        const auto eager_group = eager.add_group(stream, options, eager_side.tensors);
        const auto graph_group = capturable.add_group(stream, options, graph_side.tensors);
        // Tables uploaded and kernels compiled outside the capture (a step inside it may not upload).
        eager.step(stream, eager_group, eager_side.tensors);
        capturable.step(stream, graph_group, graph_side.tensors);
        const std::string what = fmt::format("AdamW fp32, {} tensors, per step", count);
        Graph graph =
            capture(stream, [&](Stream& s) { capturable.step(s, graph_group, graph_side.tensors); });
        const Timings t = time_both(
            device, stream, warmups, rounds, iterations,
            [&] { eager.step(stream, eager_group, eager_side.tensors); }, [&] { graph.launch(stream); });
        report_pair(report, what, t, 1.0);
    }
}

struct GraphArgs : CommonArgs {
    int iterations = 50;
    std::vector<int> inventories{32, 1024};
};

int run_graph(const GraphArgs& args) {
    auto device = Device::open(args.device);
    JsonLines json(args, device, "graph");
    print_header(json.context(),
                 fmt::format("{} calls per round, median of {} rounds after {} warm-up rounds",
                             args.iterations, args.rounds, args.warmups));
    const Report report = [&](const std::string& name, double value, const char* unit,
                              const std::string& note) {
        print_row(name, value, unit, note);
        json.write({{"case", name}, {"value", value}, {"unit", unit}});
    };
    auto stream = device.create_stream();
    bench_chains(device, stream, args.warmups, args.rounds, args.iterations, report);
    bench_fork_join(device, stream, args.warmups, args.rounds, args.iterations, report);
    bench_optimizer(device, stream, args.warmups, args.rounds, args.iterations, args.inventories, report);
    device.rethrow_deferred_error();
    return 0;
}

const Subcommand<GraphArgs> registration{
    "graph", "captured graphs vs the same work eagerly (kernel chains, fork/join, optimizer step)", run_graph,
    [](OptionSet& options, GraphArgs& args) {
        options.add("--iterations", args.iterations, "calls of each body per round", Check::positive)
            .add_list("--inventories", args.inventories, "tensor counts of the optimizer cases",
                      Check::positive);
    }};

}  // namespace
}  // namespace cudarc::bench

// cudarc-bench tracking: what hazard tracking costs a step whose gradients come from its own stream or from
// another one (issue 27, Note [Stream timelines]). An AdamW multi-tensor step over 1, 32 or 1024 tensors of
// 4096 floats, 32-bit or 8-bit state; each iteration the gradients are written (a memset each) on the step's
// stream or on a feed stream, then the step runs eagerly (Optimizer::step) or as a replay of a capturable
// optimizer's captured step. Per cell: the host time of the step call alone (median over iterations, each
// from an idle device), and the events and cross-stream waits the step call made; the feed's own waits are
// reported apart. The baseline row ("mode": "raw") is what the other-stream cell cannot do without: one
// cuEventRecord and one cuStreamWaitEvent, plus as many raw cuLaunchKernel calls as the step launches.
//
//     cudarc-bench tracking --tensors 1,32,1024 --iterations 30 --output r.jsonl
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench.hpp"
#include "core/device_state.hpp"
#include "cudarc/cudarc.hpp"
#include "cudarc/optim/optimizer.hpp"

namespace cudarc::bench {
namespace {

constexpr std::size_t kElements = 4096;

struct TrackingArgs : CommonArgs {
    TrackingArgs() {
        warmups = 5;
        rounds = 30;  // iterations per cell
    }
    std::vector<int> tensors{1, 32, 1024};
};

struct Cell {
    double host_us = 0;
    double events = 0;  // per step call
    double waits = 0;
    double feed_waits = 0;  // per iteration, the gradients' writes
    double launches = 0;
};

Cell run_cell(Device& device, int tensors, bool other_stream, bool replay, optim::StatePrecision precision,
              int warmups, int rounds) {
    Stream stream = device.create_stream();
    Stream feed_stream = device.create_stream();
    Stream& feed = other_stream ? feed_stream : stream;
    std::vector<DeviceSlice<float>> params;
    std::vector<DeviceSlice<float>> grads;
    std::vector<optim::ParamTensor> list;
    params.reserve(static_cast<std::size_t>(tensors));
    grads.reserve(static_cast<std::size_t>(tensors));
    for (int i = 0; i < tensors; ++i) {
        params.push_back(DeviceSlice<float>::zeros(stream, kElements));
        grads.push_back(DeviceSlice<float>::zeros(feed, kElements));
        list.emplace_back(params.back(), grads.back());
    }
    const optim::OptimizerOptions options{optim::UpdateRule::adamw, precision, optim::StatePlacement::device,
                                          16384, replay};
    optim::Optimizer optimizer(stream, options);
    const optim::GroupId group =
        optimizer.add_group(stream, optim::default_options(optim::UpdateRule::adamw), list);
    std::optional<Graph> graph;
    if (replay) {
        stream.synchronize();
        graph.emplace(capture(stream, [&](Stream& s) { optimizer.step(s, group, list); }));
    }
    const auto step = [&] {
        if (replay) {
            graph->launch(stream);
        } else {
            optimizer.step(stream, group, list);
        }
    };
    std::vector<double> host;
    Cell cell;
    for (int i = 0; i < warmups + rounds; ++i) {
        const Counters fed = device.counters();
        for (auto& g : grads) memset(feed, g.view(), 0x3c);
        const Counters before = device.counters();
        const auto t0 = std::chrono::steady_clock::now();
        step();
        const auto t1 = std::chrono::steady_clock::now();
        const Counters after = device.counters();
        stream.synchronize();
        feed.synchronize();
        if (i < warmups) continue;
        host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        cell.events += static_cast<double>((after - before).events_recorded);
        cell.waits += static_cast<double>((after - before).cross_stream_waits);
        cell.feed_waits += static_cast<double>((before - fed).cross_stream_waits);
        cell.launches += static_cast<double>((after - before).kernel_launches);
    }
    const auto n = static_cast<double>(rounds);
    cell.host_us = median(host);
    cell.events /= n;
    cell.waits /= n;
    cell.feed_waits /= n;
    cell.launches /= n;
    return cell;
}

// One record + one wait + `launches` raw launches of an empty kernel, host microseconds (median).
double raw_baseline_us(Device& device, int launches, int warmups, int rounds) {
    auto& state = *detail::Internals::device_state(device);
    const sys::DriverApi& api = state.api();
    Stream a = device.create_stream();
    Stream b = device.create_stream();
    const auto empty = Module::shipped(device, "bench.cu").kernel<void()>("bench_empty");
    sys::Event event = nullptr;
    state.check(api.event_create(&event, sys::kEventDisableTiming), sys::Entry::event_create);
    std::vector<double> host;
    for (int i = 0; i < warmups + rounds; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        api.event_record(event, a.native());
        api.stream_wait_event(b.native(), event, 0);
        for (int k = 0; k < launches; ++k)
            api.launch_kernel(empty.native(), 1, 1, 1, 32, 1, 1, 0, b.native(), nullptr, nullptr);
        const auto t1 = std::chrono::steady_clock::now();
        b.synchronize();
        if (i >= warmups) host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    api.event_destroy(event);
    return median(host);
}

int run_tracking(const TrackingArgs& args) {
    auto device = Device::open(args.device);
    JsonLines json(args, device, "tracking");
    print_header(json.context(),
                 fmt::format("median of {} steps after {} warm-up steps, each from an idle device",
                             args.rounds, args.warmups));
    for (const int tensors : args.tensors) {
        for (const auto precision : {optim::StatePrecision::fp32, optim::StatePrecision::blockwise8}) {
            const int bits = precision == optim::StatePrecision::fp32 ? 32 : 8;
            double launches = 0;
            for (const bool replay : {false, true}) {
                Cell same{};
                for (const bool other : {false, true}) {
                    const Cell c =
                        run_cell(device, tensors, other, replay, precision, args.warmups, args.rounds);
                    if (!other) same = c;
                    if (!replay) launches = c.launches;
                    const std::string name = fmt::format("{} tensors, {}-bit, grads on {}, {}", tensors, bits,
                                                         other ? "another stream" : "the step's stream",
                                                         replay ? "replay" : "eager");
                    std::string note = fmt::format("{:.1f} events, {:.1f} waits per step; feed {:.1f} waits",
                                                   c.events, c.waits, c.feed_waits);
                    if (other)
                        note += fmt::format("; {:.2f}x the same-stream cell", c.host_us / same.host_us);
                    print_row(name, c.host_us, "us", note);
                    nlohmann::ordered_json row{{"tensors", tensors},
                                               {"grads", other ? "other-stream" : "same-stream"},
                                               {"mode", replay ? "replay" : "eager"},
                                               {"state_bits", bits},
                                               {"host_us", c.host_us},
                                               {"events_per_step", c.events},
                                               {"waits_per_step", c.waits},
                                               {"feed_waits_per_step", c.feed_waits}};
                    if (other) row["vs_same_stream"] = c.host_us / same.host_us;
                    json.write(row);
                }
            }
            const double raw =
                raw_baseline_us(device, static_cast<int>(launches + 0.5), args.warmups, args.rounds);
            print_row(fmt::format("{} tensors, {}-bit: raw record + wait + {:.0f} launches", tensors, bits,
                                  launches),
                      raw, "us", "the baseline");
            json.write({{"tensors", tensors},
                        {"mode", "raw"},
                        {"state_bits", bits},
                        {"host_us", raw},
                        {"launches", launches}});
        }
    }
    return 0;
}

const Subcommand<TrackingArgs> registration{
    "tracking", "hazard tracking's host cost: steps fed by their own stream or another, eager and replayed",
    run_tracking, [](OptionSet& options, TrackingArgs& args) {
        options.add_list("--tensors", args.tensors, "tensor counts (4096 floats each)", Check::positive);
    }};

}  // namespace
}  // namespace cudarc::bench

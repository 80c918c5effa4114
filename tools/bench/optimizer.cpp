// cudarc-bench optimizer: the stream-aware optimizer step against the legacy pattern it replaces (every
// update on the legacy NULL stream, then a device synchronize per parameter), plus multi-tensor and
// graph-replayed steps, all in one run, and a device-to-device copy as the bandwidth yardstick.
//
//     cudarc-bench optimizer --inventories 32,256,1024 --dtypes fp16,bf16,fp32 --bits 8,32
//                            --warmups 10 --rounds 7 --output results.jsonl
//
// Cells: for each inventory N, dtype and state width, N tensors whose sizes cycle 4096, 8192, 16384,
// 32768 elements; then 1024 tensors of 256K elements and one tensor of 256M elements (--cells
// small,mid,huge picks them; combinations needing more than --max-gb of device memory are skipped).
//
// Variants, each on its own copy of identical parameters and state (gradients shared, read only):
//   legacy   per tensor on the legacy stream, cuCtxSynchronize after each (optim::detail::legacy_step)
//   current  per tensor on the caller's stream (Optimizer::step(stream, group, index, tensor))
//   multi    one multi-tensor step of the group (one launch per pass)
//   graph    a captured multi-tensor step, replayed
// Legacy and current rounds alternate A B A B for the first half of the rounds and B A B A for the
// second; multi and graph likewise. Every step is timed as step number 1 (the step count is reset before
// each), so a graph captured once replays exactly what the other variants run, and after timing every
// variant's parameters and state are compared bitwise with the current variant's.
//
// Bytes per step (optim/traffic.hpp), per element: parameter read + write (2 x element size), gradient read
// (element size), each fp32 state array read + write (8), each 8-bit state array code read + write (2) plus
// its float absmax per 256 elements both ways. AdamW: fp32 params 28, bf16/fp16 params 22; with 8-bit
// state 16.06 and 10.06. The same for every variant (the chunk tables and code maps are not counted).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "core/device_state.hpp"
#include "cudarc/cudarc.hpp"
#include "optim/group_layout.hpp"
#include "optim/legacy_step.hpp"
#include "optim/reference.hpp"
#include "optim/traffic.hpp"

namespace cudarc::bench {
namespace {

using optim::ElementType;
using optim::StatePrecision;

constexpr std::int64_t kSmallSizes[] = {4096, 8192, 16384, 32768};

struct Stats {
    double median = 0.0;
    double p10 = 0.0;
    double p90 = 0.0;
};
Stats stats_of(const std::vector<double>& values) {
    return {bench::median(values), percentile(values, 0.10), percentile(values, 0.90)};
}

enum class Variant { legacy = 0, current = 1, multi = 2, graph = 3 };
constexpr const char* kVariantNames[] = {"legacy", "current", "multi", "graph"};

struct Timing {
    std::vector<double> device_ms;  // per step
    std::vector<double> wall_ms;    // per step, end to end (until the work completed)
    std::vector<double> syncs;      // host synchronizations per step
};

struct CellSpec {
    std::string inventory;  // "32", "1024x256K", "1x256M"
    bool small = false;     // counts toward the legacy/current target
    std::vector<std::int64_t> sizes;
    ElementType type = ElementType::f32;
    StatePrecision precision = StatePrecision::fp32;
    int iterations = 1;  // steps per timed round
    int rounds = 7;
};

struct CellResult {
    CellSpec spec;
    bool skipped = false;
    std::string why;
    std::array<Stats, 4> device{};
    std::array<Stats, 4> wall{};
    std::array<double, 4> syncs{};
    std::uint64_t bytes_per_step = 0;
    std::int64_t elements = 0;
    double legacy_over_current_device = 0.0;
    double legacy_over_current_wall = 0.0;
    std::size_t mismatches = 0;
};

// Fills `out` with values in [-scale, scale] in T's format, from a seeded splitmix64 (several threads).
template <typename T>
void fill_random(std::vector<T>& out, std::uint64_t seed, double scale) {
    // Threads only pay off for large tensors (the 256K and 256M cells).
    const unsigned threads = out.size() < (std::size_t{1} << 17)
                                 ? 1u
                                 : std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    const std::size_t per = (out.size() + threads - 1) / threads;
    std::vector<std::thread> workers;
    for (unsigned w = 0; w < threads; ++w) {
        workers.emplace_back([&, w] {
            std::uint64_t state = seed ^ (0x9e3779b97f4a7c15ull * (w + 1));
            const std::size_t begin = w * per;
            const std::size_t end = std::min(out.size(), begin + per);
            for (std::size_t i = begin; i < end; ++i) {
                std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
                z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
                z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
                z ^= z >> 31;
                const double u = static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0;
                const double value = u * scale;
                if constexpr (std::is_same_v<T, float>) {
                    out[i] = static_cast<float>(value);
                } else if constexpr (std::is_same_v<T, optim::half_bits>) {
                    out[i] = optim::half_bits{optim::reference::to_half_bits(value)};
                } else {
                    out[i] = optim::bf16_bits{optim::reference::to_bf16_bits(value)};
                }
            }
        });
    }
    for (auto& worker : workers) worker.join();
}

// Device memory a cell needs: shared gradients, and parameters plus state for each of the four variants.
std::uint64_t cell_bytes(const CellSpec& spec, int state_arrays) {
    const std::uint64_t e = optim::element_size(spec.type);
    std::uint64_t total = 0;
    for (const std::int64_t n : spec.sizes) {
        const auto un = static_cast<std::uint64_t>(n);
        const std::uint64_t state =
            spec.precision == StatePrecision::fp32
                ? 4 * un * static_cast<std::uint64_t>(state_arrays)
                : (un + 4 * ((un + 255) / 256)) * static_cast<std::uint64_t>(state_arrays);
        total += e * un + 4 * (e * un + state + 4 * (un / 1024 + 1));
    }
    return total;
}

template <typename T>
struct VariantRun {
    std::vector<DeviceSlice<T>> params;
    std::vector<optim::ParamTensor> tensors;
    std::unique_ptr<optim::Optimizer> optimizer;
    optim::GroupId group{};
    std::optional<Graph> graph;
};

class OptimizerBench {
  public:
    OptimizerBench(Device& device, Stream& stream, optim::UpdateRule rule, int warmups)
        : device_(device), stream_(stream), rule_(rule), warmups_(warmups) {}

    template <typename T>
    CellResult run(const CellSpec& spec);

  private:
    template <typename T>
    void step(VariantRun<T>& run, Variant variant);
    template <typename T>
    void time_round(VariantRun<T>& run, Variant variant, int iterations, Timing& timing, bool keep);

    Device& device_;
    Stream& stream_;
    optim::UpdateRule rule_;
    int warmups_;
};

template <typename T>
void OptimizerBench::step(VariantRun<T>& run, Variant variant) {
    run.optimizer->set_step_count(run.group, 0);  // every step is step 1 (see the header comment)
    switch (variant) {
        case Variant::legacy:
            for (std::size_t i = 0; i < run.tensors.size(); ++i) {
                optim::detail::legacy_step(*run.optimizer, run.group, i, run.tensors[i]);
            }
            break;
        case Variant::current:
            for (std::size_t i = 0; i < run.tensors.size(); ++i) {
                run.optimizer->step(stream_, run.group, i, run.tensors[i]);
            }
            break;
        case Variant::multi:
            run.optimizer->step(stream_, run.group, run.tensors);
            break;
        case Variant::graph:
            run.graph->launch(stream_);
            break;
    }
}

template <typename T>
void OptimizerBench::time_round(VariantRun<T>& run, Variant variant, int iterations, Timing& timing,
                                bool keep) {
    auto& state = *device_.state();
    const sys::DriverApi& api = state.api();
    // Note: the legacy stream does not wait for cudarc's non-blocking streams: start from an idle device.
    stream_.synchronize();
    Event start(device_, EventTiming::enabled);
    Event stop(device_, EventTiming::enabled);
    auto record = [&](Event& event) {
        if (variant == Variant::legacy) {
            const auto scope = state.bind();
            state.check(api.event_record(event.native(), sys::legacy_stream()), "cuEventRecord");
        } else {
            event.record(stream_);
        }
    };
    const Counters before = device_.counters();
    const auto wall_start = std::chrono::steady_clock::now();
    record(start);
    for (int i = 0; i < iterations; ++i) step(run, variant);
    record(stop);
    const Counters during = device_.counters() - before;
    stop.synchronize();
    const auto wall_stop = std::chrono::steady_clock::now();
    if (!keep) return;
    timing.device_ms.push_back(static_cast<double>(Event::elapsed_ms(start, stop)) / iterations);
    timing.wall_ms.push_back(std::chrono::duration<double, std::milli>(wall_stop - wall_start).count() /
                             iterations);
    timing.syncs.push_back(static_cast<double>(during.host_synchronizations()) / iterations);
}

template <typename T>
CellResult OptimizerBench::run(const CellSpec& spec) {
    CellResult result;
    result.spec = spec;
    const optim::GroupOptions options = optim::default_options(rule_);
    const int state_arrays = optim::detail::state_arrays(rule_, options.momentum);
    for (const std::int64_t n : spec.sizes) {
        result.elements += n;
        result.bytes_per_step +=
            optim::detail::step_traffic(spec.type, spec.precision, state_arrays, n, false).total();
    }

    // Fresh random data: parameters in [-1, 1], gradients in [-0.1, 0.1].
    std::vector<DeviceSlice<T>> grads;
    std::vector<DeviceSlice<T>> initial;
    const auto seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    {
        std::vector<T> host;
        for (std::size_t i = 0; i < spec.sizes.size(); ++i) {
            host.resize(static_cast<std::size_t>(spec.sizes[i]));
            fill_random(host, seed + 2 * i, 0.1);
            grads.push_back(DeviceSlice<T>::from_host(stream_, host));
            fill_random(host, seed + 2 * i + 1, 1.0);
            initial.push_back(DeviceSlice<T>::from_host(stream_, host));
        }
    }

    std::array<VariantRun<T>, 4> runs;
    const optim::OptimizerOptions optimizer_options{rule_, spec.precision, optim::StatePlacement::device,
                                                    16384};
    for (auto& run : runs) {
        // Note: reserved, so the ParamTensors (which point at the slices' buffers) stay valid.
        run.params.reserve(spec.sizes.size());
        for (std::size_t i = 0; i < spec.sizes.size(); ++i) {
            run.params.push_back(DeviceSlice<T>::uninitialized(stream_, initial[i].size()));
            copy(stream_, run.params.back().view(), initial[i].view());
            run.tensors.emplace_back(run.params.back(), grads[i]);
        }
        run.optimizer = std::make_unique<optim::Optimizer>(stream_, optimizer_options);
        run.group = run.optimizer->add_group(stream_, options, run.tensors);
    }
    initial.clear();
    auto& graph_run = runs[static_cast<std::size_t>(Variant::graph)];
    stream_.synchronize();
    graph_run.optimizer->set_step_count(graph_run.group, 0);
    graph_run.graph.emplace(capture(
        stream_, [&](Stream& s) { graph_run.optimizer->step(s, graph_run.group, graph_run.tensors); }));

    // Rounds: A B A B ... then B A B A ... (legacy/current), and the same for multi/graph.
    std::array<Timing, 4> timings;
    const int total = warmups_ + spec.rounds;
    auto pair_rounds = [&](Variant a, Variant b) {
        for (int round = 0; round < total; ++round) {
            const bool keep = round >= warmups_;
            const bool a_first = round < warmups_ + spec.rounds / 2 || round < warmups_;
            const Variant first = a_first ? a : b;
            const Variant second = a_first ? b : a;
            time_round(runs[static_cast<std::size_t>(first)], first, spec.iterations,
                       timings[static_cast<std::size_t>(first)], keep);
            time_round(runs[static_cast<std::size_t>(second)], second, spec.iterations,
                       timings[static_cast<std::size_t>(second)], keep);
        }
    };
    pair_rounds(Variant::legacy, Variant::current);
    pair_rounds(Variant::multi, Variant::graph);
    stream_.synchronize();

    for (std::size_t v = 0; v < 4; ++v) {
        result.device[v] = stats_of(timings[v].device_ms);
        result.wall[v] = stats_of(timings[v].wall_ms);
        result.syncs[v] = bench::median(timings[v].syncs);
    }
    result.legacy_over_current_device = result.device[0].median / result.device[1].median;
    result.legacy_over_current_wall = result.wall[0].median / result.wall[1].median;

    // Every variant ran the same steps from the same start: parameters and state must agree bitwise.
    auto same = [](const auto& x, const auto& y) {
        return x.size() == y.size() &&
               (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0);
    };
    auto& baseline = runs[static_cast<std::size_t>(Variant::current)];
    for (std::size_t i = 0; i < spec.sizes.size(); ++i) {
        const auto params = baseline.params[i].to_vector(stream_);
        const optim::TensorState state = baseline.optimizer->read_state(stream_, baseline.group, i);
        for (std::size_t v = 0; v < 4; ++v) {
            if (v == static_cast<std::size_t>(Variant::current)) continue;
            auto& other = runs[v];
            const optim::TensorState other_state = other.optimizer->read_state(stream_, other.group, i);
            if (!same(params, other.params[i].to_vector(stream_)) ||
                !same(state.state1, other_state.state1) || !same(state.state2, other_state.state2) ||
                !same(state.codes1, other_state.codes1) || !same(state.codes2, other_state.codes2) ||
                !same(state.absmax1, other_state.absmax1) || !same(state.absmax2, other_state.absmax2)) {
                ++result.mismatches;
            }
        }
    }
    return result;
}

// Device-to-device copy bandwidth (bytes read + written per second), median of rounds.
double measure_copy_tbs(Device& device, Stream& stream, int warmups, int rounds) {
    const std::size_t floats = std::size_t{1} << 28;  // 1 GiB each way
    auto src = DeviceSlice<float>::zeros(stream, floats);
    auto dst = DeviceSlice<float>::zeros(stream, floats);
    Event start(device, EventTiming::enabled);
    Event stop(device, EventTiming::enabled);
    std::vector<double> tbs;
    for (int round = 0; round < warmups + rounds; ++round) {
        start.record(stream);
        copy(stream, dst.view(), src.view());
        stop.record(stream);
        stop.synchronize();
        const double seconds = static_cast<double>(Event::elapsed_ms(start, stop)) * 1e-3;
        if (round >= warmups) tbs.push_back(2.0 * static_cast<double>(src.bytes()) / seconds * 1e-12);
    }
    return bench::median(tbs);
}

std::string stats_json(const Stats& s) {
    return fmt::format("{{\"median\": {:.6f}, \"p10\": {:.6f}, \"p90\": {:.6f}}}", s.median, s.p10, s.p90);
}

double geomean(const std::vector<double>& values) {
    if (values.empty()) return 0.0;
    double log_sum = 0.0;
    for (const double v : values) log_sum += std::log(v);
    return std::exp(log_sum / static_cast<double>(values.size()));
}

int run_optimizer(const Options& options) {
    const int warmups = options.get_int("warmups", 10);
    const int rounds = options.get_int("rounds", 7);
    const double max_gb = static_cast<double>(options.get_int("max-gb", 60));
    const std::string rule_name = options.get("rule", "adamw");
    optim::UpdateRule rule = optim::UpdateRule::adamw;
    bool known_rule = false;
    for (int r = 0; r <= static_cast<int>(optim::UpdateRule::adagrad); ++r) {
        if (optim::to_string(static_cast<optim::UpdateRule>(r)) == rule_name) {
            rule = static_cast<optim::UpdateRule>(r);
            known_rule = true;
        }
    }
    if (!known_rule) throw Error(fmt::format("--rule: unknown update rule '{}'", rule_name));
    std::vector<int> inventories;
    for (const auto& item : options.get_list("inventories", "32,256,1024")) {
        const int n = std::atoi(item.c_str());
        if (n <= 0) throw Error(fmt::format("--inventories: '{}' is not a positive tensor count", item));
        inventories.push_back(n);
    }
    std::vector<ElementType> types;
    for (const auto& item : options.get_list("dtypes", "fp16,bf16,fp32")) {
        if (item == "fp32") {
            types.push_back(ElementType::f32);
        } else if (item == "fp16") {
            types.push_back(ElementType::f16);
        } else if (item == "bf16") {
            types.push_back(ElementType::bf16);
        } else {
            throw Error(fmt::format("--dtypes: unknown type '{}' (fp16, bf16, fp32)", item));
        }
    }
    std::vector<StatePrecision> precisions;
    for (const auto& item : options.get_list("bits", "8,32")) {
        if (item == "8") {
            precisions.push_back(StatePrecision::blockwise8);
        } else if (item == "32") {
            precisions.push_back(StatePrecision::fp32);
        } else {
            throw Error(fmt::format("--bits: unknown state width '{}' (8, 32)", item));
        }
    }
    const auto cell_kinds = options.get_list("cells", "small,mid,huge");
    auto wants = [&](const char* kind) {
        return std::find(cell_kinds.begin(), cell_kinds.end(), kind) != cell_kinds.end();
    };

    auto device = Device::open(options.get_int("device", 0));
    JsonLines json(options);
    auto stream = device.create_stream();
    const double copy_tbs = measure_copy_tbs(device, stream, 2, 5);
    fmt::print(
        "cudarc-bench optimizer on {} ({}), driver {}: {} steps, median of {} rounds after {} warm-ups\n",
        device.name(), device.arch(), Device::driver_version(), optim::to_string(rule), rounds, warmups);
    fmt::print("device-to-device copy {:.2f} TB/s (read + write). Times: device events per step, ms.\n",
               copy_tbs);
    fmt::print("{:<10} {:<4} {:<3} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6} {:>5} {:>6} {:>6} {:>4}\n", "cell",
               "type", "st", "legacy", "current", "multi", "graph", "L/C", "L/C w", "syn/s", "floor", "%copy",
               "bits");

    std::vector<CellSpec> specs;
    for (const ElementType type : types) {
        for (const StatePrecision precision : precisions) {
            if (wants("small")) {
                for (const int n : inventories) {
                    CellSpec s;
                    s.inventory = std::to_string(n);
                    s.small = true;
                    for (int i = 0; i < n; ++i) s.sizes.push_back(kSmallSizes[i % 4]);
                    s.type = type;
                    s.precision = precision;
                    s.iterations = 5;
                    s.rounds = rounds;
                    specs.push_back(s);
                }
            }
        }
    }
    for (const ElementType type : types) {
        for (const StatePrecision precision : precisions) {
            if (wants("mid")) {
                CellSpec s;
                s.inventory = "1024x256K";
                s.sizes.assign(1024, std::int64_t{1} << 18);
                s.type = type;
                s.precision = precision;
                s.iterations = 2;
                s.rounds = rounds;
                specs.push_back(s);
            }
        }
    }
    for (const ElementType type : types) {
        for (const StatePrecision precision : precisions) {
            if (wants("huge")) {
                CellSpec s;
                s.inventory = "1x256M";
                s.sizes.assign(1, std::int64_t{1} << 28);
                s.type = type;
                s.precision = precision;
                s.iterations = 1;
                s.rounds = std::min(rounds, 5);  // 256M elements: fewer rounds keep the run short
                specs.push_back(s);
            }
        }
    }

    OptimizerBench bench(device, stream, rule, warmups);
    std::vector<double> small_ratios;
    std::vector<std::string> targets;
    std::size_t total_mismatches = 0;
    const int state_arrays = optim::detail::state_arrays(rule, optim::default_options(rule).momentum);
    for (const CellSpec& spec : specs) {
        const std::string type_name(optim::to_string(spec.type));
        const char* bits = spec.precision == StatePrecision::blockwise8 ? "8" : "32";
        const double need_gb = static_cast<double>(cell_bytes(spec, state_arrays)) * 1e-9;
        const double free_gb = static_cast<double>(device.memory_info().free) * 1e-9;
        if (need_gb > max_gb || need_gb > 0.9 * free_gb) {
            fmt::print("{:<10} {:<4} {:<3} skipped: needs {:.1f} GB (limit {:.0f} GB, free {:.1f} GB)\n",
                       spec.inventory, type_name, bits, need_gb, max_gb, free_gb);
            continue;
        }
        CellResult r;
        switch (spec.type) {
            case ElementType::f32:
                r = bench.run<float>(spec);
                break;
            case ElementType::f16:
                r = bench.run<optim::half_bits>(spec);
                break;
            case ElementType::bf16:
                r = bench.run<optim::bf16_bits>(spec);
                break;
        }
        device.empty_cache();  // the next cell may need the memory (1x256M cells are large)
        total_mismatches += r.mismatches;
        const double bytes = static_cast<double>(r.bytes_per_step);
        const double floor_ms = bytes / (copy_tbs * 1e12) * 1e3;  // the bytes at copy bandwidth
        const double multi_floor = r.device[2].median / floor_ms;
        const double current_fraction = floor_ms / r.device[1].median;
        const double best_fraction = floor_ms / std::min(r.device[1].median, r.device[2].median);
        fmt::print(
            "{:<10} {:<4} {:<3} {:>9.4f} {:>9.4f} {:>9.4f} {:>9.4f} {:>6.2f} {:>6.2f} {:>5.0f} {:>6.2f} "
            "{:>5.0f}% {:>4}\n",
            spec.inventory, type_name, bits, r.device[0].median, r.device[1].median, r.device[2].median,
            r.device[3].median, r.legacy_over_current_device, r.legacy_over_current_wall, r.syncs[0],
            multi_floor, 100.0 * best_fraction, r.mismatches == 0 ? "ok" : "DIFF");
        if (spec.small) small_ratios.push_back(r.legacy_over_current_device);
        if (spec.inventory == "1024x256K") {
            targets.push_back(fmt::format(
                "multi-tensor {} {}-bit at 1024x256K: {:.2f}x the bytes/copy floor (target <= 1.25)",
                type_name, bits, multi_floor));
        }
        if (spec.inventory == "1x256M" && spec.type == ElementType::f32 &&
            spec.precision == StatePrecision::fp32) {
            targets.push_back(fmt::format("one 256M fp32 {} step: {:.1f}% of copy bandwidth (target >= 90%)",
                                          optim::to_string(rule), 100.0 * current_fraction));
        }
        for (std::size_t v = 0; v < 4; ++v) {
            const double seconds = r.device[v].median * 1e-3;
            json.write({{"bench", quoted("optimizer")},
                        {"rule", quoted(std::string(optim::to_string(rule)))},
                        {"inventory", quoted(spec.inventory)},
                        {"tensors", std::to_string(spec.sizes.size())},
                        {"elements", std::to_string(r.elements)},
                        {"dtype", quoted(type_name)},
                        {"state_bits", bits},
                        {"variant", quoted(kVariantNames[v])},
                        {"steps_per_round", std::to_string(spec.iterations)},
                        {"rounds", std::to_string(spec.rounds)},
                        {"device_ms", stats_json(r.device[v])},
                        {"wall_ms", stats_json(r.wall[v])},
                        {"host_syncs_per_step", fmt::format("{:.3f}", r.syncs[v])},
                        {"bytes_per_step", std::to_string(r.bytes_per_step)},
                        {"bytes_per_element", fmt::format("{:.4f}", bytes / static_cast<double>(r.elements))},
                        {"bandwidth_tbs", fmt::format("{:.4f}", bytes / seconds * 1e-12)},
                        {"copy_tbs", fmt::format("{:.4f}", copy_tbs)},
                        {"fraction_of_copy", fmt::format("{:.4f}", floor_ms / r.device[v].median)},
                        {"floor_ratio", fmt::format("{:.4f}", r.device[v].median / floor_ms)},
                        {"legacy_over_current_device", fmt::format("{:.4f}", r.legacy_over_current_device)},
                        {"legacy_over_current_wall", fmt::format("{:.4f}", r.legacy_over_current_wall)},
                        {"bitwise_equal", r.mismatches == 0 ? "true" : "false"},
                        {"device", quoted(device.name())}});
        }
    }
    fmt::print(
        "columns: L/C = legacy / current (device, then wall); syn/s = host syncs per legacy step (current, "
        "multi,\n"
        "graph: 0); floor = multi time / (bytes / copy bandwidth); %copy = best of current and multi; bits = "
        "all\n"
        "variants' parameters and state bitwise equal\n");
    if (!small_ratios.empty()) {
        targets.insert(
            targets.begin(),
            fmt::format("legacy/current geomean over {} small-inventory cells: {:.2f}x (target >= 1.5x)",
                        small_ratios.size(), geomean(small_ratios)));
    }
    for (const auto& t : targets) fmt::print("  {}\n", t);
    json.write({{"bench", quoted("optimizer")},
                {"summary", "true"},
                {"copy_tbs", fmt::format("{:.4f}", copy_tbs)},
                {"legacy_over_current_geomean_small", fmt::format("{:.4f}", geomean(small_ratios))},
                {"bitwise_mismatches", std::to_string(total_mismatches)},
                {"device", quoted(device.name())}});
    if (total_mismatches != 0) {
        fmt::print(stderr, "cudarc-bench optimizer: {} tensor(s) differ between variants\n",
                   total_mismatches);
        return 1;
    }
    return 0;
}

const Registration registration{
    "optimizer", "optimizer steps: legacy pattern vs caller's stream, multi-tensor, graph replay",
    run_optimizer};

}  // namespace
}  // namespace cudarc::bench

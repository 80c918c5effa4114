// cudarc-bench optimizer: the stream-aware optimizer step against the legacy pattern it replaces (every
// update on the legacy NULL stream, then a device synchronize per parameter), plus multi-tensor and
// graph-replayed steps, all in one run, and a device-to-device copy as the bandwidth yardstick.
//
//     cudarc-bench optimizer --inventories 32,256,1024 --dtypes fp16,bf16,fp32 --bits 8,32
//                            --warmups 10 --rounds 7 --output results.jsonl --rule adamw
//
// --rule: adam, adamw (the default), sgd, lion, rmsprop, adagrad, ademamix, lamb or lars, with its
// default_options (LAMB and LARS: 32-bit state only; their 8-bit cells are left out, and --bits 8 alone is
// an error).
//
// Cells: for each inventory N, dtype and state width, N tensors whose sizes cycle 4096, 8192, 16384,
// 32768 elements; then 1024 tensors of 256K elements and one tensor of 256M elements (--cells
// small,mid,huge picks them; combinations needing more than --max-gb of device memory are skipped).
//
// Variants, each on its own copy of identical parameters and state (gradients shared, read only):
//   legacy   per tensor on the legacy stream, cuCtxSynchronize after each (testing::LegacyStepper)
//   current  per tensor on the caller's stream (Optimizer::step(stream, group, index, tensor))
//   multi    one multi-tensor step of the group (one launch per pass)
//   graph    a capturable optimizer's multi-tensor step, captured once and replayed (each replay a new step)
// Legacy and current rounds alternate A B A B for the first half of the rounds and B A B A for the
// second; multi and graph likewise. Every variant takes the same number of steps from the same start (the
// replays advance the capturable optimizer's step count on the device as the direct steps advance the
// others'), so after timing every variant's parameters and state are compared bitwise with the current
// variant's.
//
// Bytes per step (cudarc_testing/optim/traffic.hpp), per element: parameter read + write (2 x element size),
// gradient read (element size), each fp32 state array read + write (8), each 8-bit state array code read +
// write (2) plus its float absmax per 256 elements both ways. AdamW: fp32 params 28, bf16/fp16 params 22;
// with 8-bit state 16.06 and 10.06. The same for every variant (the chunk tables and code maps are not
// counted).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
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
#include "cudarc/cudarc.hpp"
#include "cudarc/fmt.hpp"
#include "cudarc_testing/optim/legacy_step.hpp"
#include "cudarc_testing/optim/reference.hpp"
#include "cudarc_testing/optim/traffic.hpp"

namespace cudarc::bench {
namespace {

using optim::ElementType;
using optim::StatePrecision;

constexpr std::int64_t kSmallSizes[] = {4096, 8192, 16384, 32768};
// How long a gated round's gate holds its stream at most, in clock cycles (about 2 s on an H200).
constexpr long long kGateMaxCycles = 4'000'000'000;

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
    std::vector<double>
        enqueue_ms;  // per step, host time to enqueue it (from the first step to the stop event)
};

struct CellSpec {
    std::string inventory;  // "32", "1024x256K", "1x256M"
    bool small = false;     // counts toward the legacy/current target
    std::vector<std::int64_t> sizes;
    ElementType type = ElementType::fp32;
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
    std::array<Stats, 4> enqueue{};
    std::array<double, 4> syncs{};
    // Multi and graph again, each round's steps enqueued behind a gate (see time_round): device time only.
    std::array<Stats, 2> gated{};
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
        : device_(device),
          stream_(stream),
          legacy_(device),
          rule_(rule),
          warmups_(warmups),
          gate_kernel_(Module::shipped(device, "bench.cu")
                           .kernel<void(const unsigned*, long long, unsigned*)>("bench_gate")),
          gate_(device, 2) {}

    template <typename T>
    CellResult run(const CellSpec& spec);

  private:
    template <typename T>
    void step(VariantRun<T>& run, Variant variant);
    template <typename T>
    void time_round(VariantRun<T>& run, Variant variant, int iterations, Timing& timing, bool keep,
                    bool gated = false);

    Device& device_;
    Stream& stream_;
    testing::LegacyStepper legacy_;
    optim::UpdateRule rule_;
    int warmups_;
    Kernel<void(const unsigned*, long long, unsigned*)> gate_kernel_;
    PinnedBuffer<unsigned> gate_;  // [0]: open (written by the host), [1]: timed out (written by the gate)
};

template <typename T>
void OptimizerBench::step(VariantRun<T>& run, Variant variant) {
    switch (variant) {
        case Variant::legacy:
            for (std::size_t i = 0; i < run.tensors.size(); ++i) {
                legacy_.step(*run.optimizer, run.group, i, run.tensors[i]);
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
                                bool keep, bool gated) {
    // Note: every round starts from an idle device, so the legacy rounds wait for nothing of the others.
    stream_.synchronize();
    Event start(device_, EventTiming::enabled);
    Event stop(device_, EventTiming::enabled);
    auto record = [&](Event& event) {
        event.record(variant == Variant::legacy ? legacy_.stream() : stream_);
    };
    // From an idle device the start event completes at once, so the interval to the stop event also holds
    // the host's time to enqueue the first step: when that exceeds the device's time, the interval measures
    // the host. A gated round holds the stream in a kernel until every step is enqueued (only for variants
    // with a few launches and no host synchronization per step: the gate would hold those up).
    if (gated) {
        gate_[0] = 0;
        gate_[1] = 0;
        launch(stream_, LaunchConfig{1, 1}, gate_kernel_, gate_.data(), kGateMaxCycles, gate_.data() + 1);
    }
    const Counters before = device_.counters();
    const auto wall_start = std::chrono::steady_clock::now();
    record(start);
    for (int i = 0; i < iterations; ++i) step(run, variant);
    record(stop);
    const auto enqueued = std::chrono::steady_clock::now();
    if (gated) {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        *static_cast<volatile unsigned*>(&gate_[0]) = 1;
    }
    const Counters during = device_.counters() - before;
    stop.synchronize();
    const auto wall_stop = std::chrono::steady_clock::now();
    if (gated && *static_cast<volatile unsigned*>(&gate_[1]) != 0)
        throw Error(
            "cudarc-bench optimizer: the gate opened on its timeout, not from the host (enqueuing took "
            "over a second, or the step waited on the host for the gated stream)");
    if (!keep) return;
    timing.device_ms.push_back(static_cast<double>(Event::elapsed_ms(start, stop)) / iterations);
    timing.wall_ms.push_back(std::chrono::duration<double, std::milli>(wall_stop - wall_start).count() /
                             iterations);
    timing.enqueue_ms.push_back(std::chrono::duration<double, std::milli>(enqueued - wall_start).count() /
                                iterations);
    timing.syncs.push_back(static_cast<double>(during.host_synchronizations()) / iterations);
}

template <typename T>
CellResult OptimizerBench::run(const CellSpec& spec) {
    CellResult result;
    result.spec = spec;
    const optim::GroupOptions options = optim::default_options(rule_);
    const testing::StepShape shape = testing::step_shape(rule_, options);
    for (const std::int64_t n : spec.sizes) {
        result.elements += n;
        result.bytes_per_step += testing::step_traffic(spec.type, spec.precision, shape, n).total();
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
    for (std::size_t v = 0; v < runs.size(); ++v) {
        auto& run = runs[v];
        const optim::OptimizerOptions optimizer_options{rule_, spec.precision, optim::StatePlacement::device,
                                                        16384, v == static_cast<std::size_t>(Variant::graph)};
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
    graph_run.graph.emplace(capture(
        stream_, [&](Stream& s) { graph_run.optimizer->step(s, graph_run.group, graph_run.tensors); }));

    // Rounds: A B A B ... then B A B A ... (legacy/current), and the same for multi/graph.
    std::array<Timing, 4> timings;
    std::array<Timing, 2> gated_timings;  // multi, graph
    const int total = warmups_ + spec.rounds;
    auto pair_rounds = [&](Variant a, Variant b, bool also_gated) {
        for (int round = 0; round < total; ++round) {
            const bool keep = round >= warmups_;
            const bool a_first = round < warmups_ + spec.rounds / 2 || round < warmups_;
            const Variant first = a_first ? a : b;
            const Variant second = a_first ? b : a;
            time_round(runs[static_cast<std::size_t>(first)], first, spec.iterations,
                       timings[static_cast<std::size_t>(first)], keep);
            time_round(runs[static_cast<std::size_t>(second)], second, spec.iterations,
                       timings[static_cast<std::size_t>(second)], keep);
            if (!also_gated) continue;
            for (const Variant v : {first, second}) {
                const auto index = static_cast<std::size_t>(v);
                time_round(runs[index], v, spec.iterations, gated_timings[index - 2], keep, true);
            }
        }
    };
    pair_rounds(Variant::legacy, Variant::current, false);
    pair_rounds(Variant::multi, Variant::graph, true);
    // The gated rounds stepped multi and graph once more per round: legacy and current catch up, untimed, so
    // that every variant has taken the same steps for the comparison below.
    for (int i = 0; i < total * spec.iterations; ++i) {
        step(runs[static_cast<std::size_t>(Variant::legacy)], Variant::legacy);
        step(runs[static_cast<std::size_t>(Variant::current)], Variant::current);
    }
    stream_.synchronize();

    for (std::size_t v = 0; v < 4; ++v) {
        result.device[v] = stats_of(timings[v].device_ms);
        result.wall[v] = stats_of(timings[v].wall_ms);
        result.enqueue[v] = stats_of(timings[v].enqueue_ms);
        result.syncs[v] = bench::median(timings[v].syncs);
    }
    for (std::size_t v = 0; v < 2; ++v) result.gated[v] = stats_of(gated_timings[v].device_ms);
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

nlohmann::ordered_json stats_json(const Stats& s) {
    return {{"median", s.median}, {"p10", s.p10}, {"p90", s.p90}};
}

double geomean(const std::vector<double>& values) {
    if (values.empty()) return 0.0;
    double log_sum = 0.0;
    for (const double v : values) log_sum += std::log(v);
    return std::exp(log_sum / static_cast<double>(values.size()));
}

struct OptimizerArgs : CommonArgs {
    OptimizerArgs() {
        warmups = 10;
        rounds = 7;
    }
    int max_gb = 60;
    std::string rule = "adamw";
    std::vector<int> inventories = {32, 256, 1024};
    std::vector<std::string> dtypes = {"fp16", "bf16", "fp32"};
    std::vector<std::string> bits = {"8", "32"};
    std::vector<std::string> cells = {"small", "mid", "huge"};
};

std::vector<std::string> rule_names() {
    std::vector<std::string> names;
    for (int r = 0; r <= static_cast<int>(optim::kLastUpdateRule); ++r)
        names.emplace_back(optim::to_string(static_cast<optim::UpdateRule>(r)));
    return names;
}

int run_optimizer(const OptimizerArgs& args) {
    // The values were checked when the command line was parsed (see the registration below).
    const int warmups = args.warmups;
    const int rounds = args.rounds;
    const double max_gb = static_cast<double>(args.max_gb);
    optim::UpdateRule rule = optim::UpdateRule::adamw;
    for (int r = 0; r <= static_cast<int>(optim::kLastUpdateRule); ++r) {
        if (optim::to_string(static_cast<optim::UpdateRule>(r)) == args.rule)
            rule = static_cast<optim::UpdateRule>(r);
    }
    const std::vector<int>& inventories = args.inventories;
    std::vector<ElementType> types;
    for (const auto& item : args.dtypes) {
        types.push_back(item == "fp32"   ? ElementType::fp32
                        : item == "fp16" ? ElementType::fp16
                                         : ElementType::bf16);
    }
    std::vector<StatePrecision> precisions;
    for (const auto& item : args.bits)
        precisions.push_back(item == "8" ? StatePrecision::blockwise8 : StatePrecision::fp32);
    // (LAMB and LARS keep 32-bit state only.)
    std::erase_if(precisions, [&](StatePrecision p) { return !optim::supports(rule, p); });
    if (precisions.empty())
        throw Error(fmt::format("--rule {} keeps 32-bit state only: --bits 8 leaves no cells to run", rule));
    const auto& cell_kinds = args.cells;
    auto wants = [&](const char* kind) {
        return std::find(cell_kinds.begin(), cell_kinds.end(), kind) != cell_kinds.end();
    };

    auto device = Device::open(args.device);
    JsonLines json(args, device, "optimizer");
    auto stream = device.create_stream();
    const double copy_tbs = measure_copy_tbs(device, stream, 2, 5);
    print_header(json.context(),
                 fmt::format("{} steps, median of {} rounds after {} warm-ups", rule, rounds, warmups));
    fmt::print("device-to-device copy {:.2f} TB/s (read + write). Times: device events per step, ms.\n",
               copy_tbs);
    fmt::print(
        "{:<10} {:<4} {:<3} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6} {:>6} {:>5} {:>6} {:>7} {:>6} {:>4}\n",
        "cell", "type", "st", "legacy", "current", "multi", "graph", "multi g", "enq us", "L/C", "L/C w",
        "syn/s", "floor", "floor g", "%copy", "bits");

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
    const int state_arrays = testing::step_shape(rule, optim::default_options(rule)).state_arrays;
    // A cell's cost for the progress line, in estimated seconds: its steps (four variants, warm-ups and
    // rounds) at copy bandwidth over its bytes, plus a per-tensor launch-and-sync cost, plus the host fill.
    auto estimated_cost = [&](const CellSpec& spec) {
        const double bytes = static_cast<double>(cell_bytes(spec, state_arrays));
        const double steps = static_cast<double>((warmups + spec.rounds) * spec.iterations);
        const double step_s =
            bytes / 4.0 * 2.0 / (copy_tbs * 1e12) + 30e-6 * static_cast<double>(spec.sizes.size());
        return 4.0 * steps * step_s + bytes * 2e-9;
    };
    double total_cost = 0.0;
    for (const CellSpec& spec : specs) total_cost += estimated_cost(spec);
    Progress progress(specs.size(), total_cost);
    for (const CellSpec& spec : specs) {
        const std::string type_name(optim::to_string(spec.type));
        const char* bits = spec.precision == StatePrecision::blockwise8 ? "8" : "32";
        progress.next(fmt::format("{} {} {}-bit", spec.inventory, type_name, bits), estimated_cost(spec));
        const double need_gb = static_cast<double>(cell_bytes(spec, state_arrays)) * 1e-9;
        const double free_gb = static_cast<double>(device.memory_info().free) * 1e-9;
        if (need_gb > max_gb || need_gb > 0.9 * free_gb) {
            progress.clear();
            fmt::print("{:<10} {:<4} {:<3} skipped: needs {:.1f} GB (limit {:.0f} GB, free {:.1f} GB)\n",
                       spec.inventory, type_name, bits, need_gb, max_gb, free_gb);
            continue;
        }
        CellResult r;
        switch (spec.type) {
            case ElementType::fp32:
                r = bench.run<float>(spec);
                break;
            case ElementType::fp16:
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
        const double gated_floor = r.gated[0].median / floor_ms;  // the kernels' time alone
        const double current_fraction = floor_ms / r.device[1].median;
        const double best_fraction = floor_ms / std::min(r.device[1].median, r.device[2].median);
        progress.clear();
        fmt::print(
            "{:<10} {:<4} {:<3} {:>9.4f} {:>9.4f} {:>9.4f} {:>9.4f} {:>9.4f} {:>7.1f} {:>6.2f} {:>6.2f} "
            "{:>5.0f} "
            "{:>6.2f} {:>7.2f} {:>5.0f}% {:>4}\n",
            spec.inventory, type_name, bits, r.device[0].median, r.device[1].median, r.device[2].median,
            r.device[3].median, r.gated[0].median, 1e3 * r.enqueue[2].median, r.legacy_over_current_device,
            r.legacy_over_current_wall, r.syncs[0], multi_floor, gated_floor, 100.0 * best_fraction,
            r.mismatches == 0 ? "ok" : "DIFF");
        if (spec.small) small_ratios.push_back(r.legacy_over_current_device);
        if (spec.inventory == "1024x256K") {
            targets.push_back(fmt::format(
                "multi-tensor {} {}-bit at 1024x256K: {:.2f}x the bytes/copy floor, {:.2f}x behind a gate "
                "(target <= {}); host enqueue {:.1f} us/step",
                type_name, bits, multi_floor, gated_floor,
                spec.precision == StatePrecision::blockwise8 ? "1.15" : "1.07", 1e3 * r.enqueue[2].median));
        }
        if (spec.small && spec.sizes.size() == 1024 && spec.precision == StatePrecision::blockwise8) {
            targets.push_back(
                fmt::format("multi-tensor {} 8-bit, 1024 small tensors: {:.2f}x the bytes/copy floor, "
                            "{:.2f}x behind a gate "
                            "(target <= 1.3); host enqueue {:.1f} us/step",
                            type_name, multi_floor, gated_floor, 1e3 * r.enqueue[2].median));
        }
        if (spec.inventory == "1x256M" && spec.type == ElementType::fp32 &&
            spec.precision == StatePrecision::fp32) {
            targets.push_back(fmt::format("one 256M fp32 {} step: {:.1f}% of copy bandwidth (target >= 90%)",
                                          optim::to_string(rule), 100.0 * current_fraction));
        }
        for (std::size_t v = 0; v < 4; ++v) {
            const double seconds = r.device[v].median * 1e-3;
            json.write({{"rule", optim::to_string(rule)},
                        {"inventory", spec.inventory},
                        {"tensors", spec.sizes.size()},
                        {"elements", r.elements},
                        {"dtype", type_name},
                        {"state_bits", spec.precision == StatePrecision::blockwise8 ? 8 : 32},
                        {"variant", kVariantNames[v]},
                        {"steps_per_round", spec.iterations},
                        {"rounds", spec.rounds},
                        {"device_ms", stats_json(r.device[v])},
                        {"wall_ms", stats_json(r.wall[v])},
                        {"enqueue_ms", stats_json(r.enqueue[v])},
                        {"gated_device_ms", v >= 2 ? stats_json(r.gated[v - 2]) : nlohmann::ordered_json()},
                        {"gated_floor_ratio", v >= 2 ? r.gated[v - 2].median / floor_ms : 0.0},
                        {"host_syncs_per_step", r.syncs[v]},
                        {"bytes_per_step", r.bytes_per_step},
                        {"bytes_per_element", bytes / static_cast<double>(r.elements)},
                        {"bandwidth_tbs", bytes / seconds * 1e-12},
                        {"copy_tbs", copy_tbs},
                        {"fraction_of_copy", floor_ms / r.device[v].median},
                        {"floor_ratio", r.device[v].median / floor_ms},
                        {"legacy_over_current_device", r.legacy_over_current_device},
                        {"legacy_over_current_wall", r.legacy_over_current_wall},
                        {"bitwise_equal", r.mismatches == 0}});
        }
    }
    fmt::print(
        "columns: L/C = legacy / current (device, then wall); syn/s = host syncs per legacy step (current, "
        "multi,\n"
        "graph: 0); multi g = multi with its steps enqueued behind a gate (device time only); enq us = host "
        "time\n"
        "to enqueue one multi step; floor = multi time / (bytes / copy bandwidth), floor g the same of multi "
        "g; "
        "%copy =\n"
        "best of current and multi; bits = all variants' parameters and state bitwise equal\n");
    if (!small_ratios.empty()) {
        targets.insert(
            targets.begin(),
            fmt::format("legacy/current geomean over {} small-inventory cells: {:.2f}x (target >= 1.5x)",
                        small_ratios.size(), geomean(small_ratios)));
    }
    for (const auto& t : targets) fmt::print("  {}\n", t);
    progress.done();
    json.write({{"summary", true},
                {"copy_tbs", copy_tbs},
                {"legacy_over_current_geomean_small", geomean(small_ratios)},
                {"bitwise_mismatches", total_mismatches}});
    if (total_mismatches != 0) {
        fmt::print(stderr, "cudarc-bench optimizer: {} tensor(s) differ between variants\n",
                   total_mismatches);
        return 1;
    }
    return 0;
}

const Subcommand<OptimizerArgs> registration{
    "optimizer", "optimizer steps: legacy pattern vs caller's stream, multi-tensor, graph replay",
    run_optimizer, [](OptionSet& options, OptimizerArgs& args) {
        options.add("--max-gb", args.max_gb, "skip cells that need more device memory (GB)", Check::positive)
            .add("--rule", args.rule, "update rule", rule_names())
            .add_list("--inventories", args.inventories, "tensor counts of the small cells", Check::positive)
            .add_list("--dtypes", args.dtypes, "parameter types", {"fp16", "bf16", "fp32"})
            .add_list("--bits", args.bits, "state widths", {"8", "32"})
            .add_list("--cells", args.cells,
                      "which cells: small (the inventories), mid (1024x256K), huge (1x256M)",
                      {"small", "mid", "huge"});
    }};

}  // namespace
}  // namespace cudarc::bench

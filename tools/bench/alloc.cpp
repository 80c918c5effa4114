// cudarc-bench alloc: alloc+free pairs at 512 B, 64 KiB, 1 MiB and 64 MiB (DeviceSlice, the caching
// allocator alone, each memory source through the interface DeviceSlice uses, the driver's stream-ordered
// pool and cuMemAlloc/cuMemFree); then a training-like and a variable-shape replay (testing/cudarc_testing/
// alloc/replays.hpp) on each source, whose peak reserved / peak allocated shows what caching and
// fragmentation cost. Every source runs every case in the same run. Host time per pair, median of rounds
// after warm-up; the rounds of the variants alternate, so drift (clocks, other processes) hits them alike.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alloc/caching_source.hpp"
#include "bench.hpp"
#include "core/device_state.hpp"
#include "core/stream_ordered_source.hpp"
#include "cudarc/cudarc.hpp"
#include "cudarc_testing/alloc/replays.hpp"

namespace cudarc::bench {
namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;

// One way of allocating and freeing, timed in rounds of `iterations` pairs.
struct Variant {
    std::string name;
    int iterations = 0;
    std::function<void(int)> pairs;  // makes n alloc + free pairs (the loop inside: no call per pair)
    std::function<void()> after_round;
    std::vector<double> us;  // per pair, one entry per timed round
};

template <typename Pair>
Variant make_variant(std::string name, int iterations, Pair pair, std::function<void()> after_round = {}) {
    return Variant{std::move(name),
                   iterations,
                   [pair](int n) {
                       for (int i = 0; i < n; ++i) pair();
                   },
                   std::move(after_round),
                   {}};
}

// Rounds alternate between the variants: v0, v1, v2, v0, v1, v2 ...
void time_interleaved(std::vector<Variant>& variants, int warmups, int rounds) {
    for (int round = 0; round < warmups + rounds; ++round) {
        for (Variant& v : variants) {
            const auto start = std::chrono::steady_clock::now();
            v.pairs(v.iterations);
            const auto stop = std::chrono::steady_clock::now();
            if (v.after_round) v.after_round();
            if (round >= warmups) {
                v.us.push_back(std::chrono::duration<double, std::micro>(stop - start).count() /
                               v.iterations);
            }
        }
    }
}

std::string size_name(std::size_t bytes) {
    if (bytes >= kMiB) return fmt::format("{} MiB", bytes / kMiB);
    if (bytes >= kKiB) return fmt::format("{} KiB", bytes / kKiB);
    return fmt::format("{} B", bytes);
}

// The device's default memory pool, its release threshold raised so freed memory stays in the pool (the
// configuration cudarc's stream-ordered memory source uses). Null when the device has no pools.
sys::MemoryPool default_pool_keeping_memory(const detail::DeviceState& state) {
    const sys::DriverApi& api = state.api();
    int supported = 0;
    if (api.mem_alloc_async == nullptr || api.device_get_default_mem_pool == nullptr ||
        api.device_get_attribute(&supported, sys::attr::kMemoryPoolsSupported, state.device()) !=
            sys::kSuccess ||
        supported == 0) {
        return nullptr;
    }
    sys::MemoryPool pool = nullptr;
    state.check(api.device_get_default_mem_pool(&pool, state.device()),
                sys::Entry::device_get_default_mem_pool);
    std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
    state.check(api.mem_pool_set_attribute(pool, sys::kMemPoolAttrReleaseThreshold, &threshold),
                sys::Entry::mem_pool_set_attribute);
    return pool;
}

std::uint64_t device_stats_driver(const Device& device) {
    return device.allocator_stats().driver_allocations;
}

// The memory sources compared in one run, each made afresh on the device beside the device's own source:
// the bench drives them through detail::MemorySource, as DeviceSlice does.
struct Source {
    MemorySource kind;
    std::unique_ptr<detail::MemorySource> source;
};

std::unique_ptr<detail::MemorySource> make_source(detail::DeviceState& state, MemorySource kind) {
    switch (kind) {
        case MemorySource::caching_allocator:
            return detail::make_caching_source(state, {});
        case MemorySource::expandable:
            return detail::make_expandable_source(state, {});
        case MemorySource::stream_ordered:
            return detail::make_stream_ordered_source(state);
    }
    throw Error("cudarc-bench alloc: unknown memory source");
}

// One replay of a trace on one source, from an empty cache: the figures at the end (peaks included), and the
// host time per step.
struct ReplayResult {
    AllocatorStats stats;
    std::uint64_t driver_after_warmup = 0;  // driver allocations after the first two steps
    double ms_per_step = 0.0;
};

ReplayResult replay(detail::MemorySource& source, detail::StreamState& stream,
                    const testing::AllocationTrace& trace) {
    std::vector<detail::MemoryBlock> blocks(trace.slots);
    std::vector<std::size_t> sizes(trace.slots, 0);
    ReplayResult result;
    int step = 0;
    std::uint64_t driver_before = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const testing::TraceOp& op : trace.ops) {
        switch (op.kind) {
            case testing::TraceOp::Kind::allocate:
                blocks[op.id] = source.allocate(op.bytes, stream);
                sizes[op.id] = op.bytes;
                break;
            case testing::TraceOp::Kind::free:
                source.deallocate(blocks[op.id], sizes[op.id], stream, {});
                sizes[op.id] = 0;
                break;
            case testing::TraceOp::Kind::step:
                if (++step == 3) driver_before = source.stats().driver_allocations;
                break;
        }
    }
    const auto stop = std::chrono::steady_clock::now();
    result.stats = source.stats();
    result.driver_after_warmup = step > 2 ? result.stats.driver_allocations - driver_before : 0;
    result.ms_per_step = std::chrono::duration<double, std::milli>(stop - start).count() / std::max(step, 1);
    for (std::uint32_t id = 0; id < trace.slots; ++id) {
        if (sizes[id] != 0) source.deallocate(blocks[id], sizes[id], stream, {});
    }
    return result;
}

struct AllocArgs : CommonArgs {
    int steps = 20;
    int decode_steps = 400;
    int seed = 1;
    int layers = testing::ModelShape{}.layers;
    int hidden = static_cast<int>(testing::ModelShape{}.hidden);
    std::vector<std::string> sources = {"caching_allocator", "expandable", "stream_ordered"};
    std::string snapshots;  // a folder for the variable-shape replay's snapshots, one per source
};

int run_alloc(const AllocArgs& args) {
    const int warmups = args.warmups;
    const int rounds = args.rounds;
    const auto seed = static_cast<std::uint64_t>(args.seed);
    auto device = Device::open(args.device);
    detail::DeviceState& state = *cudarc::detail::Internals::device_state(device);
    const sys::DriverApi& api = state.api();
    JsonLines json(args, device, "alloc");
    print_header(json.context(),
                 fmt::format("median of {} rounds after {} warm-up rounds; DeviceSlice from the "
                             "device's {} source",
                             rounds, warmups, to_string(device.memory_source())));

    auto stream = device.create_stream();
    detail::StreamState& stream_state = detail::Internals::stream_state(stream);
    const auto key = stream_state.key();
    const sys::MemoryPool pool = default_pool_keeping_memory(state);
    auto sync = [&] { stream.synchronize(); };
    auto report = [&](const std::string& name, std::size_t bytes, double value, const char* unit,
                      const std::string& note) {
        print_row(name, value, unit, note);
        json.write({{"case", name}, {"size_bytes", bytes}, {"value", value}, {"unit", unit}});
    };
    // A row of one memory source: "source", "case" and "reserved_over_allocated" (issue 30), with more.
    auto report_source = [&](MemorySource kind, const std::string& name, std::size_t bytes, double value,
                             const char* unit, double reserved_over_allocated, const std::string& note,
                             nlohmann::ordered_json more = nlohmann::ordered_json::object()) {
        print_row(fmt::format("{}: {}", name, to_string(kind)), value, unit, note);
        nlohmann::ordered_json row = {
            {"case", name},        {"source", std::string(to_string(kind))},
            {"size_bytes", bytes}, {"value", value},
            {"unit", unit},        {"reserved_over_allocated", reserved_over_allocated}};
        for (auto& [field, item] : more.items()) row[field] = item;
        json.write(std::move(row));
    };

    // The sources compared, in the order asked for.
    std::vector<Source> sources;
    for (const std::string& name : args.sources) {
        for (const MemorySource kind :
             {MemorySource::caching_allocator, MemorySource::expandable, MemorySource::stream_ordered}) {
            if (name != to_string(kind)) continue;
            try {
                sources.push_back({kind, make_source(state, kind)});
            } catch (const Error& e) {
                fmt::print("  ({} not measured: {})\n", name, e.what());
            }
        }
    }
    const auto source_of = [&](MemorySource kind) -> detail::MemorySource* {
        for (Source& s : sources) {
            if (s.kind == kind) return s.source.get();
        }
        return nullptr;
    };
    const auto reserved_over_allocated = [](const AllocatorStats& s) {
        return s.peak_allocated_bytes == 0
                   ? std::numeric_limits<double>::quiet_NaN()
                   : static_cast<double>(s.peak_reserved_bytes) / static_cast<double>(s.peak_allocated_bytes);
    };
    const auto reset = [&](detail::MemorySource& source) {
        stream.synchronize();
        source.empty_cache();
        source.reset_peak();
    };

    // 1. Alloc + free pairs: the device's DeviceSlice, the caching allocator alone, each source through the
    // interface DeviceSlice uses, and the raw driver calls.
    fmt::print("\nalloc + free pair, host time (us)\n");
    for (const std::size_t bytes : {std::size_t{512}, 64 * kKiB, 1 * kMiB, 64 * kMiB}) {
        const std::string size = size_name(bytes);
        // Warm every cache, so that the timed rounds measure reuse; then count driver calls during them.
        { auto warm = DeviceSlice<std::uint8_t>::uninitialized(stream, bytes); }
        for (Source& s : sources) {
            reset(*s.source);
            s.source->deallocate(s.source->allocate(bytes, stream_state), bytes, stream_state, {});
        }
        const std::uint64_t device_before = device_stats_driver(device);
        std::vector<AllocatorStats> stats_before;
        for (Source& s : sources) stats_before.push_back(s.source->stats());

        std::vector<Variant> variants;
        variants.push_back(make_variant(
            "DeviceSlice<u8>::uninitialized + destroy", 20000,
            [&] { auto slice = DeviceSlice<std::uint8_t>::uninitialized(stream, bytes); }, sync));
        auto* caching = dynamic_cast<alloc::CachingSource*>(source_of(MemorySource::caching_allocator));
        if (caching != nullptr) {
            alloc::CachingAllocator& allocator = caching->allocator();
            variants.push_back(make_variant(
                "CachingAllocator::allocate + free", 20000,
                [&allocator, bytes, key] { allocator.free(allocator.allocate(bytes, key)); }, sync));
        }
        const std::size_t first_source = variants.size();
        for (Source& s : sources) {
            detail::MemorySource* source = s.source.get();
            variants.push_back(make_variant(
                fmt::format("{} allocate + deallocate", to_string(s.kind)),
                s.kind == MemorySource::stream_ordered ? 5000 : 20000,
                [source, bytes, &stream_state] {
                    source->deallocate(source->allocate(bytes, stream_state), bytes, stream_state, {});
                },
                sync));
        }
        if (pool != nullptr) {
            variants.push_back(make_variant(
                "cuMemAllocAsync + cuMemFreeAsync", 5000,
                [&] {
                    DevicePtr p = 0;
                    state.check(api.mem_alloc_async(&p, bytes, stream.native()), sys::Entry::mem_alloc_async);
                    state.check(api.mem_free_async(p, stream.native()), sys::Entry::mem_free_async);
                },
                sync));
        }
        const std::size_t async_variant = pool != nullptr ? variants.size() - 1 : 0;
        // Note: cuMemAlloc/cuMemFree take tens of microseconds to milliseconds; fewer calls per round.
        variants.push_back(make_variant("cuMemAlloc + cuMemFree", bytes >= 64 * kMiB ? 10 : 50, [&] {
            DevicePtr p = 0;
            state.check(api.mem_alloc(&p, bytes), sys::Entry::mem_alloc);
            state.check(api.mem_free(p), sys::Entry::mem_free);
        }));
        time_interleaved(variants, warmups, rounds);

        const double slice = median(variants[0].us);
        for (std::size_t i = 0; i < variants.size(); ++i) {
            const Variant& v = variants[i];
            if (i >= first_source && i < first_source + sources.size()) {
                const Source& s = sources[i - first_source];
                const AllocatorStats stats = s.source->stats();
                report_source(
                    s.kind, fmt::format("alloc+free {}", size), bytes, median(v.us), "us",
                    reserved_over_allocated(stats), fmt::format("p90 {:.3f}", percentile(v.us, 0.9)),
                    {{"driver_allocations_in_rounds",
                      s.kind == MemorySource::stream_ordered
                          ? nlohmann::ordered_json(nullptr)
                          : nlohmann::ordered_json(stats.driver_allocations -
                                                   stats_before[i - first_source].driver_allocations)}});
                continue;
            }
            std::string note;
            if (i < first_source) note = fmt::format("p90 {:.3f}; target <= 0.15 us", percentile(v.us, 0.9));
            report(fmt::format("{} {}", v.name, size), bytes, median(v.us), "us", note);
        }
        if (pool != nullptr) {
            const double async = median(variants[async_variant].us);
            report(fmt::format("stream-ordered pool / DeviceSlice {}", size), bytes, async / slice, "x",
                   "target >= 4x");
            if (caching != nullptr) {
                report(fmt::format("stream-ordered pool / CachingAllocator {}", size), bytes,
                       async / median(variants[1].us), "x", "");
            }
        }
        // Issue 30's target: expandable within 1.1x of the caching source, both through the same interface.
        const auto source_median = [&](MemorySource kind) -> std::optional<double> {
            for (std::size_t j = 0; j < sources.size(); ++j) {
                if (sources[j].kind == kind) return median(variants[first_source + j].us);
            }
            return std::nullopt;
        };
        if (const auto e = source_median(MemorySource::expandable),
            c = source_median(MemorySource::caching_allocator);
            e && c) {
            report(fmt::format("expandable / caching_allocator alloc+free {}", size), bytes, *e / *c, "x",
                   "target <= 1.1");
        }
        report(fmt::format("cuMemAlloc+Free / DeviceSlice {}", size), bytes,
               median(variants.back().us) / slice, "x", "");
        // The caches' own count (the stream-ordered source counts every allocation as the driver's).
        std::uint64_t cache_driver_calls = device.memory_source() == MemorySource::stream_ordered
                                               ? 0
                                               : device_stats_driver(device) - device_before;
        for (std::size_t j = 0; j < sources.size(); ++j) {
            if (sources[j].kind == MemorySource::stream_ordered) continue;
            cache_driver_calls +=
                sources[j].source->stats().driver_allocations - stats_before[j].driver_allocations;
        }
        report(fmt::format("driver allocations by the caches in timed rounds {}", size), bytes,
               static_cast<double>(cache_driver_calls), "", "expect 0");
    }
    if (pool == nullptr)
        fmt::print("  (no stream-ordered pool on this device: cuMemAllocAsync not measured)\n");

    // 2. The replays, each from an empty cache on every source in turn.
    testing::ModelShape shape;
    shape.layers = args.layers;
    shape.hidden = static_cast<std::size_t>(args.hidden);
    struct Case {
        std::string name;
        testing::AllocationTrace trace;
        const char* target;  // for the expandable source
    };
    const Case cases[] = {
        {"training-like replay", testing::training_trace(shape, args.steps, seed),
         "target <= 1.05 (expandable)"},
        {"variable-shape replay", testing::decode_trace(shape, args.decode_steps, seed),
         "target <= 1.10 (expandable)"},
    };
    for (const Case& c : cases) {
        fmt::print("\n{}: {} layers, hidden {}, {} steps, seed {}; {} requests, peak requested {:.0f} MiB\n",
                   c.name, shape.layers, shape.hidden, c.trace.steps, seed, c.trace.allocations,
                   static_cast<double>(c.trace.peak_requested) / static_cast<double>(kMiB));
        for (Source& s : sources) {
            reset(*s.source);
            const AllocatorStats before = s.source->stats();
            const ReplayResult r = replay(*s.source, stream_state, c.trace);
            stream.synchronize();
            s.source->empty_cache();  // each source replays with the device to itself
            const bool counts_segments = s.kind != MemorySource::stream_ordered;
            const double ratio = reserved_over_allocated(r.stats);
            report_source(
                s.kind, c.name, 0, ratio, "x", ratio, c.target,
                {{"peak_allocated_bytes", r.stats.peak_allocated_bytes},
                 {"peak_reserved_bytes", r.stats.peak_reserved_bytes},
                 {"peak_requested_bytes", c.trace.peak_requested},
                 {"reserved_over_requested", static_cast<double>(r.stats.peak_reserved_bytes) /
                                                 static_cast<double>(c.trace.peak_requested)},
                 {"requests", c.trace.allocations},
                 {"steps", c.trace.steps},
                 {"driver_allocations", counts_segments ? nlohmann::ordered_json(r.stats.driver_allocations -
                                                                                 before.driver_allocations)
                                                        : nlohmann::ordered_json(nullptr)},
                 {"driver_allocations_after_step_2", counts_segments
                                                         ? nlohmann::ordered_json(r.driver_after_warmup)
                                                         : nlohmann::ordered_json(nullptr)},
                 {"ms_per_step", r.ms_per_step}});
            const std::string driver =
                counts_segments ? fmt::format("{} {} from the driver ({} after step 2)",
                                              r.stats.driver_allocations - before.driver_allocations,
                                              s.kind == MemorySource::expandable ? "chunks" : "segments",
                                              r.driver_after_warmup)
                                : std::string("the driver's pool counts no segments");
            fmt::print(
                "    peak allocated {:.0f} MiB, peak reserved {:.0f} MiB, {}; {:.3f} ms per step (allocation "
                "only)\n",
                static_cast<double>(r.stats.peak_allocated_bytes) / static_cast<double>(kMiB),
                static_cast<double>(r.stats.peak_reserved_bytes) / static_cast<double>(kMiB), driver,
                r.ms_per_step);
        }
    }

    // 3. Snapshots of the variable-shape replay, for tools/plot-memory: a run of its own with recording on
    // (recording costs time, which the runs above did not pay).
    if (!args.snapshots.empty()) {
        std::filesystem::create_directories(args.snapshots);
        const testing::AllocationTrace& trace = cases[1].trace;
        for (Source& s : sources) {
            reset(*s.source);
            s.source->record_history(4 * trace.ops.size() + 1024);
            std::vector<detail::MemoryBlock> blocks(trace.slots);
            std::vector<std::size_t> sizes(trace.slots, 0);
            for (const testing::TraceOp& op : trace.ops) {
                if (op.kind == testing::TraceOp::Kind::allocate) {
                    blocks[op.id] = s.source->allocate(op.bytes, stream_state);
                    sizes[op.id] = op.bytes;
                } else if (op.kind == testing::TraceOp::Kind::free) {
                    s.source->deallocate(blocks[op.id], sizes[op.id], stream_state, {});
                    sizes[op.id] = 0;
                }
            }
            const std::string path =
                (std::filesystem::path(args.snapshots) / fmt::format("variable-{}.json", to_string(s.kind)))
                    .string();
            std::ofstream out(path);
            out << to_json(s.source->snapshot());
            if (!out) throw Error(fmt::format("cudarc-bench alloc: cannot write {}", path));
            fmt::print("  snapshot of the variable-shape replay on {}: {}\n", to_string(s.kind), path);
            s.source->record_history(0);
            for (std::uint32_t id = 0; id < trace.slots; ++id) {
                if (sizes[id] != 0) s.source->deallocate(blocks[id], sizes[id], stream_state, {});
            }
            stream.synchronize();
            s.source->empty_cache();
        }
    }
    stream.synchronize();
    for (Source& s : sources) s.source->empty_cache();
    sources.clear();
    device.empty_cache();
    return 0;
}

const Subcommand<AllocArgs> registration{
    "alloc",
    "alloc+free and the training-like and variable-shape replays' peak reserved / peak allocated, on the "
    "caching, "
    "expandable and stream-ordered sources",
    run_alloc, [](OptionSet& options, AllocArgs& args) {
        options.add("--steps", args.steps, "training steps replayed", Check::positive)
            .add("--decode-steps", args.decode_steps, "decode steps of the variable-shape replay",
                 Check::positive)
            .add("--seed", args.seed, "the replays' random seed", Check::non_negative)
            .add("--layers", args.layers, "the replayed model's layers", Check::positive)
            .add("--hidden", args.hidden, "the replayed model's hidden size", Check::positive)
            .add_list("--sources", args.sources, "the memory sources compared",
                      {"caching_allocator", "expandable", "stream_ordered"})
            .add("--snapshots", args.snapshots,
                 "a folder for the variable-shape replay's allocator snapshots (JSON, one per source; "
                 "tools/plot-memory draws them)");
    }};

}  // namespace
}  // namespace cudarc::bench

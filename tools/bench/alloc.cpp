// cudarc-bench alloc: the caching allocator's alloc+free pair against the driver's stream-ordered pool
// (cuMemAllocAsync/cuMemFreeAsync, release threshold raised) and cuMemAlloc/cuMemFree at 512 B, 64 KiB,
// 1 MiB and 64 MiB; then a training-like replay whose peak reserved / peak allocated shows what caching
// and fragmentation cost. Host time per pair, median of rounds after warm-up; the rounds of the variants
// alternate, so drift (clocks, other processes) hits them alike.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "alloc/caching_source.hpp"
#include "bench.hpp"
#include "core/device_state.hpp"
#include "cudarc/cudarc.hpp"

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

// A training-like sequence of allocations: long-lived weights, gradients and optimizer state; per step,
// activations of a size that changes with the batch's sequence length, saved in the forward pass and freed
// in reverse order in the backward pass, with short-lived temporaries throughout. Only allocation is
// replayed (no kernels): what is measured is how much memory the allocator holds for what is in use.
struct ReplayShape {
    int layers = 12;
    std::size_t hidden = 1024;
    std::size_t heads = 16;
    std::size_t batch = 8;
    std::size_t vocabulary = 8192;
};

struct ReplayResult {
    AllocatorStats stats;                   // at the end, before anything is freed
    std::uint64_t allocations = 0;          // requests made
    std::uint64_t driver_after_warmup = 0;  // segments taken after the first two steps
    double ms_per_step = 0.0;
};

ReplayResult replay(const Device& device, Stream& stream, const ReplayShape& shape, int steps,
                    std::uint64_t seed) {
    using Slice = DeviceSlice<std::uint8_t>;
    std::mt19937_64 rng(seed);
    ReplayResult result;
    auto allocate = [&](std::size_t bytes) {
        ++result.allocations;
        return Slice::uninitialized(stream, bytes);
    };
    auto temporary = [&](std::size_t bytes) { (void)allocate(bytes); };  // allocated and freed at once

    const std::size_t h = shape.hidden;
    constexpr std::size_t kHalf = 2;   // bf16 parameters and activations
    constexpr std::size_t kFloat = 4;  // fp32 optimizer state and statistics
    // Per layer: fused qkv, output projection, MLP up and down, two layer norms (weight and bias), biases.
    const std::vector<std::size_t> layer_weights = {
        3 * h * h * kHalf, h * h * kHalf, 4 * h * h * kHalf, 4 * h * h * kHalf, h * kHalf,
        h * kHalf,         h * kHalf,     h * kHalf,         3 * h * kHalf,     4 * h * kHalf};
    std::vector<std::size_t> weight_sizes = {shape.vocabulary * h * kHalf};  // embedding (tied output)
    for (int l = 0; l < shape.layers; ++l)
        weight_sizes.insert(weight_sizes.end(), layer_weights.begin(), layer_weights.end());

    std::vector<Slice> weights;
    for (std::size_t bytes : weight_sizes) weights.push_back(allocate(bytes));
    std::vector<Slice> grads;            // made in the first backward pass, kept (like .grad)
    std::vector<Slice> optimizer_state;  // made at the first optimizer step: two fp32 moments per weight

    const std::size_t sequence_lengths[] = {512, 640, 768, 896, 1024};
    std::uniform_int_distribution<std::size_t> workspace(64 * kKiB, 8 * kMiB);
    std::uniform_int_distribution<std::size_t> small(512, 64 * kKiB);
    std::uint64_t driver_before = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < steps; ++step) {
        if (step == 2) driver_before = device.allocator_stats().driver_allocations;
        const std::size_t tokens = shape.batch * sequence_lengths[rng() % std::size(sequence_lengths)];
        std::vector<Slice> saved;                       // activations kept for the backward pass, in order
        saved.push_back(allocate(tokens * h * kHalf));  // embedding output
        for (int l = 0; l < shape.layers; ++l) {
            saved.push_back(allocate(tokens * h * kHalf));             // layer norm 1 output
            saved.push_back(allocate(tokens * 3 * h * kHalf));         // qkv
            temporary(tokens * h * kFloat);                            // attention accumulator
            temporary(workspace(rng));                                 // library workspace
            saved.push_back(allocate(tokens * shape.heads * kFloat));  // softmax statistics
            saved.push_back(allocate(tokens * h * kHalf));             // attention output
            saved.push_back(allocate(tokens * h * kHalf));             // layer norm 2 output
            saved.push_back(allocate(tokens * 4 * h * kHalf));         // MLP up
            saved.push_back(allocate(tokens * 4 * h * kHalf));         // activation function
            temporary(small(rng));                                     // a reduction's partials
        }
        {
            // Logits and the loss: large, short-lived.
            Slice logits = allocate(tokens * shape.vocabulary * kHalf);
            temporary(tokens * kFloat);
            Slice logits_grad = allocate(tokens * shape.vocabulary * kHalf);
        }
        // Backward: per layer (last first) gradient temporaries, then that layer's activations are freed in
        // reverse order of their allocation.
        Slice upstream = allocate(tokens * h * kHalf);
        const std::size_t per_layer = 7;
        for (int l = shape.layers - 1; l >= 0; --l) {
            Slice d_mlp = allocate(tokens * 4 * h * kHalf);
            temporary(workspace(rng));
            Slice d_attention = allocate(tokens * 3 * h * kHalf);
            temporary(small(rng));
            d_mlp = Slice{};
            d_attention = Slice{};
            for (std::size_t i = 0; i < per_layer; ++i) saved.pop_back();
            Slice next = allocate(tokens * h * kHalf);
            upstream = std::move(next);
        }
        upstream = Slice{};
        saved.pop_back();  // the embedding output
        if (grads.empty()) {
            for (std::size_t bytes : weight_sizes) grads.push_back(allocate(bytes));
        }
        // Optimizer step: the state appears at the first step; a small temporary per tensor (a norm).
        if (optimizer_state.empty()) {
            for (std::size_t bytes : weight_sizes) {
                optimizer_state.push_back(allocate(bytes / kHalf * kFloat));
                optimizer_state.push_back(allocate(bytes / kHalf * kFloat));
            }
        }
        for (std::size_t i = 0; i < weight_sizes.size(); ++i) temporary(512);
    }
    const auto stop = std::chrono::steady_clock::now();
    result.stats = device.allocator_stats();
    result.driver_after_warmup = steps > 2 ? result.stats.driver_allocations - driver_before : 0;
    result.ms_per_step = std::chrono::duration<double, std::milli>(stop - start).count() / std::max(steps, 1);
    return result;
}

struct AllocArgs : CommonArgs {
    int steps = 20;
    int seed = 1;
    int layers = ReplayShape{}.layers;
    int hidden = static_cast<int>(ReplayShape{}.hidden);
};

int run_alloc(const AllocArgs& args) {
    const int warmups = args.warmups;
    const int rounds = args.rounds;
    const int steps = args.steps;
    const auto seed = static_cast<std::uint64_t>(args.seed);
    auto device = Device::open(args.device);
    if (device.memory_source() != MemorySource::caching_allocator) {
        throw Error("cudarc-bench alloc: the device does not use the caching allocator");
    }
    detail::DeviceState& state = *cudarc::detail::Internals::device_state(device);
    const sys::DriverApi& api = state.api();
    auto* caching = dynamic_cast<alloc::CachingSource*>(&state.memory());
    if (caching == nullptr)
        throw Error("cudarc-bench alloc: the device's memory source is not the caching allocator");
    alloc::CachingAllocator& allocator = caching->allocator();
    JsonLines json(args, device, "alloc");
    print_header(json.context(), fmt::format("median of {} rounds after {} warm-up rounds", rounds, warmups));

    auto stream = device.create_stream();
    const auto key = reinterpret_cast<alloc::StreamKey>(stream.native());
    const sys::MemoryPool pool = default_pool_keeping_memory(state);
    auto sync = [&] { stream.synchronize(); };
    auto report = [&](const std::string& name, std::size_t bytes, double value, const char* unit,
                      const std::string& note) {
        print_row(name, value, unit, note);
        json.write({{"case", name}, {"size_bytes", bytes}, {"value", value}, {"unit", unit}});
    };

    // 1. Alloc + free pairs.
    fmt::print("\nalloc + free pair, host time (us)\n");
    for (const std::size_t bytes : {std::size_t{512}, 64 * kKiB, 1 * kMiB, 64 * kMiB}) {
        const std::string size = size_name(bytes);
        // Warm the cache, so that the timed rounds measure reuse; then count driver calls during them.
        { auto warm = DeviceSlice<std::uint8_t>::uninitialized(stream, bytes); }
        const std::uint64_t driver_before = device.counters().driver_allocations;

        std::vector<Variant> variants;
        variants.push_back(make_variant(
            "DeviceSlice<u8>::uninitialized + destroy", 20000,
            [&] { auto slice = DeviceSlice<std::uint8_t>::uninitialized(stream, bytes); }, sync));
        variants.push_back(make_variant(
            "CachingAllocator::allocate + free", 20000,
            [&] { allocator.free(allocator.allocate(bytes, key)); }, sync));
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
        // Note: cuMemAlloc/cuMemFree take tens of microseconds to milliseconds; fewer calls per round.
        variants.push_back(make_variant("cuMemAlloc + cuMemFree", bytes >= 64 * kMiB ? 10 : 50, [&] {
            DevicePtr p = 0;
            state.check(api.mem_alloc(&p, bytes), sys::Entry::mem_alloc);
            state.check(api.mem_free(p), sys::Entry::mem_free);
        }));
        time_interleaved(variants, warmups, rounds);
        const std::uint64_t cached_driver_calls = device.counters().driver_allocations - driver_before;

        const double slice = median(variants[0].us);
        const double raw = median(variants[1].us);
        for (const Variant& v : variants) {
            std::string note;
            if (&v == &variants[0] || &v == &variants[1]) {
                note = fmt::format("p90 {:.3f}; target <= 0.15 us", percentile(v.us, 0.9));
            }
            report(fmt::format("{} {}", v.name, size), bytes, median(v.us), "us", note);
        }
        if (pool != nullptr) {
            const double async = median(variants[2].us);
            report(fmt::format("stream-ordered pool / DeviceSlice {}", size), bytes, async / slice, "x",
                   "target >= 4x");
            report(fmt::format("stream-ordered pool / CachingAllocator {}", size), bytes, async / raw, "x",
                   "");
        }
        report(fmt::format("cuMemAlloc+Free / DeviceSlice {}", size), bytes,
               median(variants.back().us) / slice, "x", "");
        report(fmt::format("driver allocations by the cache in timed rounds {}", size), bytes,
               static_cast<double>(cached_driver_calls), "", "expect 0");
    }
    if (pool == nullptr)
        fmt::print("  (no stream-ordered pool on this device: cuMemAllocAsync not measured)\n");

    // 2. Training-like replay, from an empty cache.
    ReplayShape shape;
    shape.layers = args.layers;
    shape.hidden = static_cast<std::size_t>(args.hidden);
    stream.synchronize();
    device.empty_cache();
    device.reset_peak_memory();
    const AllocatorStats before = device.allocator_stats();
    const ReplayResult r = replay(device, stream, shape, steps, seed);
    const double peak_allocated = static_cast<double>(r.stats.peak_allocated_bytes - before.allocated_bytes);
    const double peak_reserved = static_cast<double>(r.stats.peak_reserved_bytes - before.reserved_bytes);
    const std::uint64_t requests =
        r.stats.cache_hits + r.stats.driver_allocations - (before.cache_hits + before.driver_allocations);
    fmt::print("\ntraining-like replay: {} layers, hidden {}, {} steps, seed {}\n", shape.layers,
               shape.hidden, steps, seed);
    report("replay: peak reserved / peak allocated", 0, peak_reserved / peak_allocated, "x", "target <= 1.3");
    report("replay: peak allocated", 0, peak_allocated / static_cast<double>(kMiB), "MiB", "");
    report("replay: peak reserved", 0, peak_reserved / static_cast<double>(kMiB), "MiB", "");
    report("replay: requests", 0, static_cast<double>(requests), "", "");
    report("replay: segments from the driver", 0,
           static_cast<double>(r.stats.driver_allocations - before.driver_allocations), "", "");
    report("replay: segments from the driver after step 2", 0, static_cast<double>(r.driver_after_warmup), "",
           "only sizes larger than any before need one");
    report("replay: host time per step", 0, r.ms_per_step, "ms", "allocation only, no kernels");
    stream.synchronize();
    device.empty_cache();
    return 0;
}

const Subcommand<AllocArgs> registration{
    "alloc",
    "caching allocator alloc+free vs cuMemAllocAsync and cuMemAlloc; training-like replay's reserved / peak "
    "allocated",
    run_alloc, [](OptionSet& options, AllocArgs& args) {
        options.add("--steps", args.steps, "training steps replayed", Check::positive)
            .add("--seed", args.seed, "the replay's random seed", Check::non_negative)
            .add("--layers", args.layers, "the replayed model's layers", Check::positive)
            .add("--hidden", args.hidden, "the replayed model's hidden size", Check::positive);
    }};

}  // namespace
}  // namespace cudarc::bench

// The optimizer front end's host-side logic (no GPU): argument checks and their messages, group layout
// and chunk tables, and the byte accounting the benchmark divides by.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cudarc/error.hpp"
#include "cudarc/optim/optimizer.hpp"
#include "cudarc_testing/optim/traffic.hpp"
#include "optim/group_layout.hpp"
#include "optim/optimizer_state.hpp"
#include "optim/validation.hpp"

namespace {

namespace optim = cudarc::optim;
namespace detail = cudarc::optim::detail;
using optim::ElementType;
using optim::GroupOptions;
using optim::StatePrecision;
using optim::UpdateRule;

constexpr UpdateRule kRules[] = {UpdateRule::adam,     UpdateRule::adamw,   UpdateRule::sgd,
                                 UpdateRule::lion,     UpdateRule::rmsprop, UpdateRule::adagrad,
                                 UpdateRule::ademamix, UpdateRule::lamb,    UpdateRule::lars};

std::mt19937_64& rng() {
    static std::mt19937_64 engine{std::random_device{}()};
    return engine;
}

// The message of the cudarc::Error `body` throws, or "" when it does not throw.
template <typename Body>
std::string error_of(Body&& body) {
    try {
        body();
    } catch (const cudarc::Error& e) {
        return e.what();
    }
    return "";
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// Views without a buffer behind them: enough for code that only looks at sizes and addresses.
struct FakeTensor {
    template <typename T>
    cudarc::DeviceView<T> view(cudarc::DevicePtr address, std::size_t count) {
        return cudarc::detail::Internals::make_view<T>(nullptr, address, count, 0);
    }
};

}  // namespace

TEST_CASE("optim.frontend_element_types") {
    static_assert(optim::element_type_of<float> == ElementType::fp32);
    static_assert(optim::element_type_of<optim::half_bits> == ElementType::fp16);
    static_assert(optim::element_type_of<optim::bf16_bits> == ElementType::bf16);
    static_assert(!optim::ParamElement<double> && !optim::ParamElement<std::uint16_t>);
    CHECK(optim::element_size(ElementType::fp32) == 4);
    CHECK(optim::element_size(ElementType::fp16) == 2);
    CHECK(optim::element_size(ElementType::bf16) == 2);
    CHECK(optim::to_string(ElementType::bf16) == "bf16");
    CHECK(optim::to_string(UpdateRule::adamw) == "adamw");
    CHECK(optim::to_string(StatePrecision::blockwise8) == "8bit");
}

TEST_CASE("optim.frontend_param_tensor_checks_sizes") {
    FakeTensor fake;
    const std::size_t n = 1 + rng()() % 1000;
    const optim::ParamTensor ok(fake.view<float>(0x10000, n), fake.view<const float>(0x20000, n));
    CHECK(ok.numel() == n);
    CHECK(ok.element_type() == ElementType::fp32);
    CHECK(ok.param_ptr() == 0x10000);
    CHECK(ok.grad_ptr() == 0x20000);
    CHECK(ok.param_bytes().size() == n * sizeof(float));
    CHECK(ok.grad_bytes().device_ptr() == 0x20000);
    CHECK(ok.device_ordinal() == -1);  // a buffer that belongs to no device
    const optim::ParamTensor bf(fake.view<optim::bf16_bits>(0x10000, n),
                                fake.view<optim::bf16_bits>(0x20000, n));
    CHECK(bf.element_type() == ElementType::bf16);

    const std::string message = error_of([&] {
        const optim::ParamTensor bad(fake.view<optim::half_bits>(0x10000, n),
                                     fake.view<const optim::half_bits>(0x20000, n + 1));
        static_cast<void>(bad);
    });
    CHECK(contains(message, std::to_string(n) + " elements"));
    CHECK(contains(message, "gradient has " + std::to_string(n + 1)));
}

TEST_CASE("optim.frontend_rejects_bad_hyper_parameters") {
    struct Case {
        const char* field;
        void (*spoil)(GroupOptions&);
        UpdateRule rule;
    };
    const Case cases[] = {
        {"lr", [](GroupOptions& o) { o.lr = -1e-3; }, UpdateRule::adamw},
        {"beta1", [](GroupOptions& o) { o.beta1 = 1.0; }, UpdateRule::adam},
        {"beta2", [](GroupOptions& o) { o.beta2 = -0.5; }, UpdateRule::lion},
        {"eps", [](GroupOptions& o) { o.eps = -1.0; }, UpdateRule::rmsprop},
        {"weight_decay", [](GroupOptions& o) { o.weight_decay = -0.1; }, UpdateRule::sgd},
        {"momentum", [](GroupOptions& o) { o.nesterov = true; }, UpdateRule::sgd},
        {"alpha", [](GroupOptions& o) { o.alpha = 1.5; }, UpdateRule::rmsprop},
        {"lr_decay", [](GroupOptions& o) { o.lr_decay = -1.0; }, UpdateRule::adagrad},
        {"max_unorm", [](GroupOptions& o) { o.max_unorm = -1.0; }, UpdateRule::adam},
        {"lr", [](GroupOptions& o) { o.lr = 1e300; }, UpdateRule::adam},
    };
    for (const Case& c : cases) {
        CAPTURE(c.field);
        GroupOptions options = optim::default_options(c.rule);
        CHECK(error_of([&] { detail::validate_group_options("here", c.rule, options); }).empty());
        c.spoil(options);
        const std::string message =
            error_of([&] { detail::validate_group_options("here", c.rule, options); });
        CHECK(contains(message, "here: "));
        CHECK(contains(message, c.field));
    }
    // A grad scale that is not positive, and a step number the kernels cannot hold.
    const GroupOptions adam = optim::default_options(UpdateRule::adam);
    CHECK(contains(
        error_of([&] { static_cast<void>(detail::kernel_params("s", UpdateRule::adam, adam, 0.0, 1)); }),
        "grad_scale"));
    CHECK(contains(error_of([&] {
                       static_cast<void>(
                           detail::kernel_params("s", UpdateRule::adam, adam, 1.0, std::int64_t{1} << 40));
                   }),
                   "step"));
    // Fields a rule does not use are not checked against it.
    GroupOptions sgd = optim::default_options(UpdateRule::sgd);
    sgd.beta1 = 7.0;
    CHECK(error_of([&] { detail::validate_group_options("here", UpdateRule::sgd, sgd); }).empty());
}

TEST_CASE("optim.frontend_rejects_bad_optimizer_options") {
    optim::OptimizerOptions options;
    CHECK(error_of([&] { detail::validate_optimizer_options(options); }).empty());
    options.max_chunk_elements = 0;
    CHECK(contains(error_of([&] { detail::validate_optimizer_options(options); }), "max_chunk_elements"));
    options = {};
    options.rule = static_cast<UpdateRule>(17);
    CHECK(contains(error_of([&] { detail::validate_optimizer_options(options); }), "update rule 17"));
    // LAMB and LARS keep 32-bit state only.
    for (const UpdateRule rule : {UpdateRule::lamb, UpdateRule::lars}) {
        options = {};
        options.rule = rule;
        CHECK(error_of([&] { detail::validate_optimizer_options(options); }).empty());
        options.precision = StatePrecision::blockwise8;
        CHECK(contains(error_of([&] { detail::validate_optimizer_options(options); }), "32-bit state only"));
        CHECK_FALSE(optim::supports(rule, StatePrecision::blockwise8));
    }
    CHECK(optim::supports(UpdateRule::ademamix, StatePrecision::blockwise8));
    CHECK(optim::to_string(UpdateRule::ademamix) == "ademamix");
    CHECK(optim::to_string(UpdateRule::lars) == "lars");
}

TEST_CASE("optim.frontend_default_options_follow_torch") {
    for (const UpdateRule rule : kRules) {
        CAPTURE(optim::to_string(rule));
        const GroupOptions o = optim::default_options(rule);
        CHECK(error_of([&] { detail::validate_group_options("defaults", rule, o); }).empty());
        CHECK(o.max_unorm == 0.0);
    }
    CHECK(optim::default_options(UpdateRule::adamw).weight_decay == doctest::Approx(1e-2));
    CHECK(optim::default_options(UpdateRule::adam).weight_decay == 0.0);
    CHECK(optim::default_options(UpdateRule::lion).lr == doctest::Approx(1e-4));
    CHECK(optim::default_options(UpdateRule::adagrad).eps == doctest::Approx(1e-10));
    // bitsandbytes' defaults for its remaining optimizers (AdEMAMix, LAMB, LARS).
    const GroupOptions ademamix = optim::default_options(UpdateRule::ademamix);
    CHECK(ademamix.lr == doctest::Approx(1e-3));
    CHECK(ademamix.beta1 == doctest::Approx(0.9));
    CHECK(ademamix.beta2 == doctest::Approx(0.999));
    CHECK(ademamix.beta3 == doctest::Approx(0.9999));
    CHECK(ademamix.alpha == doctest::Approx(5.0));
    CHECK(ademamix.weight_decay == doctest::Approx(1e-2));
    CHECK(ademamix.t_alpha == 0);
    CHECK(ademamix.t_beta3 == 0);
    const GroupOptions lamb = optim::default_options(UpdateRule::lamb);
    CHECK(lamb.lr == doctest::Approx(1e-3));
    CHECK(lamb.eps == doctest::Approx(1e-8));
    CHECK(lamb.weight_decay == 0.0);
    const GroupOptions lars = optim::default_options(UpdateRule::lars);
    CHECK(lars.lr == doctest::Approx(1e-2));
    CHECK(lars.momentum == doctest::Approx(0.9));
    CHECK(lars.trust_coefficient == doctest::Approx(0.02));
}

TEST_CASE("optim.frontend_state_arrays_per_rule") {
    CHECK(detail::state_arrays(UpdateRule::adam, 0.0) == 2);
    CHECK(detail::state_arrays(UpdateRule::adamw, 0.0) == 2);
    CHECK(detail::state_arrays(UpdateRule::sgd, 0.0) == 0);
    CHECK(detail::state_arrays(UpdateRule::sgd, 0.9) == 1);
    CHECK(detail::state_arrays(UpdateRule::lion, 0.0) == 1);
    CHECK(detail::state_arrays(UpdateRule::rmsprop, 0.0) == 1);
    CHECK(detail::state_arrays(UpdateRule::adagrad, 0.0) == 1);
    CHECK(detail::state_arrays(UpdateRule::ademamix, 0.0) == 2);
    CHECK(detail::state_arrays(UpdateRule::lamb, 0.0) == 2);
    CHECK(detail::state_arrays(UpdateRule::lars, 0.0) == 1);
    const detail::StateShape ademamix = detail::state_shape(UpdateRule::ademamix, 0.0);
    CHECK(ademamix.arrays == 2);
    CHECK(ademamix.third);
    CHECK(ademamix.norms == 1);
    CHECK(detail::state_shape(UpdateRule::lamb, 0.0).norms == 2);
    CHECK_FALSE(detail::state_shape(UpdateRule::adam, 0.0).third);
}

TEST_CASE("optim.frontend_group_layout") {
    const ElementType kTypes[] = {ElementType::fp32, ElementType::fp16, ElementType::bf16};
    // Every state shape: 0 to 2 arrays, AdEMAMix's third state in state1's region, two sums per tile.
    const detail::StateShape shapes[] = {{0, false, 1}, {1, false, 1}, {2, false, 1},
                                         {2, true, 1},  {2, false, 2}, {1, false, 2}};
    for (const StatePrecision precision : {StatePrecision::fp32, StatePrecision::blockwise8}) {
        for (const detail::StateShape& shape : shapes) {
            const int states = shape.arrays;
            CAPTURE(static_cast<int>(precision));
            CAPTURE(states);
            CAPTURE(shape.third);
            CAPTURE(shape.norms);
            const std::size_t count = 1 + rng()() % 40;
            std::vector<ElementType> types;
            std::vector<std::int64_t> numels;
            for (std::size_t i = 0; i < count; ++i) {
                types.push_back(kTypes[rng()() % 3]);
                // Mostly odd sizes, some empty, some spanning several chunks.
                numels.push_back(rng()() % 7 == 0 ? 0 : static_cast<std::int64_t>(rng()() % 70000));
            }
            const std::int64_t max_chunk = 1000 + static_cast<std::int64_t>(rng()() % 20000);
            const detail::GroupLayout layout = detail::plan_group(precision, shape, types, numels, max_chunk);
            REQUIRE(layout.tensors.size() == count);

            // Regions: aligned, inside the arena, disjoint, each tensor's within its [begin, end).
            struct Region {
                std::size_t begin, end;
            };
            std::vector<Region> regions{
                {layout.flag_offset, layout.flag_offset + 4},
                {layout.counter_offset, layout.counter_offset + 4},
                {layout.counter_offset + cudarc_optim::kChunkCounterOffset,
                 layout.counter_offset + cudarc_optim::kChunkCounterOffset + 8},
                {layout.step_offset, layout.step_offset + sizeof(cudarc::optim::abi::StepState)}};
            CHECK(layout.step_offset % alignof(cudarc::optim::abi::StepState) == 0);
            const bool eight = precision == StatePrecision::blockwise8;
            for (std::size_t i = 0; i < count; ++i) {
                const detail::TensorLayout& t = layout.tensors[i];
                CHECK(t.type == types[i]);
                CHECK(t.numel == numels[i]);
                const auto n = static_cast<std::size_t>(numels[i]);
                const std::size_t blocks = (n + 255) / 256;
                const std::size_t tile = eight ? 2048 : 1024;
                auto region = [&](std::size_t offset, std::size_t bytes, bool expected) {
                    CHECK((offset != detail::kNoRegion) == expected);
                    if (offset == detail::kNoRegion) return;
                    CHECK(offset % 256 == 0);
                    CHECK(offset >= t.begin);
                    CHECK(offset + bytes <= t.end);
                    regions.push_back({offset, offset + bytes});
                };
                // The third state: inside state1's and absmax1's regions, as far in as the kernels look.
                const std::size_t third_at = (n + 255) / 256 * 256;
                const std::size_t third_absmax_at = (blocks + 63) / 64 * 64;
                const bool third = shape.third;
                region(t.state1, (third ? third_at + n : n) * (eight ? 1 : 4), states >= 1);
                region(t.state2, n * (eight ? 1 : 4), states >= 2);
                region(t.absmax1, (third ? third_absmax_at + blocks : blocks) * 4, eight && states >= 1);
                region(t.absmax2, blocks * 4, eight && states >= 2);
                region(t.unorm, shape.norms * (1 + (n + tile - 1) / tile) * 4, true);
                CHECK((t.state3 != detail::kNoRegion) == third);
                if (third) {
                    CHECK(t.state3 == t.state1 + third_at * (eight ? 1 : 4));
                    CHECK(t.state3 % 256 == 0);
                    CHECK((t.absmax3 != detail::kNoRegion) == eight);
                    if (eight) CHECK(t.absmax3 == t.absmax1 + third_absmax_at * 4);
                }
                CHECK(t.end <= layout.arena_bytes);
            }
            std::sort(regions.begin(), regions.end(),
                      [](const Region& a, const Region& b) { return a.begin < b.begin; });
            for (std::size_t k = 1; k < regions.size(); ++k) CHECK(regions[k - 1].end <= regions[k].begin);

            // Buckets: one per element type present, together holding every tensor once, in order.
            std::vector<int> seen(count, 0);
            for (std::size_t b = 0; b < layout.buckets.size(); ++b) {
                const detail::BucketLayout& bucket = layout.buckets[b];
                for (std::size_t slot = 0; slot < bucket.tensors.size(); ++slot) {
                    const std::size_t i = bucket.tensors[slot];
                    CHECK(layout.tensors[i].type == bucket.type);
                    CHECK(layout.tensors[i].bucket == b);
                    CHECK(layout.tensors[i].slot == slot);
                    ++seen[i];
                    if (slot > 0) CHECK(bucket.tensors[slot - 1] < i);
                }
                for (std::size_t other = 0; other < b; ++other)
                    CHECK(layout.buckets[other].type != bucket.type);
                CHECK(bucket.descs_offset % 256 == 0);
                CHECK(bucket.chunks_offset % 256 == 0);
                CHECK(bucket.chunks_offset >= bucket.descs_offset + bucket.tensors.size() * 64);
                CHECK(bucket.chunks_offset + bucket.chunks.size() * 16 <= layout.table_bytes);

                // Chunks cover each tensor of the bucket exactly once, tile-aligned, at most max_chunk long.
                const std::int64_t tile = eight ? 2048 : 1024;
                std::vector<std::int64_t> covered(bucket.tensors.size(), 0);
                for (const auto& chunk : bucket.chunks) {
                    REQUIRE(chunk.tensor >= 0);
                    REQUIRE(static_cast<std::size_t>(chunk.tensor) < bucket.tensors.size());
                    CHECK(chunk.offset % tile == 0);
                    CHECK(chunk.count > 0);
                    CHECK(chunk.count <= std::max(tile, max_chunk));
                    CHECK(chunk.offset == covered[static_cast<std::size_t>(chunk.tensor)]);
                    covered[static_cast<std::size_t>(chunk.tensor)] += chunk.count;
                }
                for (std::size_t slot = 0; slot < bucket.tensors.size(); ++slot) {
                    CHECK(covered[slot] == layout.tensors[bucket.tensors[slot]].numel);
                }
            }
            for (const int s : seen) CHECK(s == 1);
        }
    }
}

TEST_CASE("optim.frontend_group_layout_rejects_bad_groups") {
    const std::vector<ElementType> one{ElementType::fp32};
    const std::vector<std::int64_t> sizes{10, 20};
    CHECK(contains(
        error_of([&] { static_cast<void>(detail::plan_group(StatePrecision::fp32, 2, {}, {}, 1024)); }),
        "at least one tensor"));
    CHECK(contains(
        error_of([&] { static_cast<void>(detail::plan_group(StatePrecision::fp32, 2, one, sizes, 1024)); }),
        "1 element types for 2 tensors"));
    const std::vector<std::int64_t> negative{-5};
    CHECK(contains(error_of([&] {
                       static_cast<void>(detail::plan_group(StatePrecision::fp32, 2, one, negative, 1024));
                   }),
                   "negative size"));
}

TEST_CASE("optim.frontend_descriptors") {
    const std::vector<ElementType> types{ElementType::fp16, ElementType::fp32, ElementType::fp16};
    const std::vector<std::int64_t> numels{1000, 3000, 70000};
    const detail::GroupLayout layout =
        detail::plan_group(StatePrecision::blockwise8, 1, types, numels, 16384);
    const cudarc::DevicePtr base = 0x7f0000000000ull;
    std::vector<detail::TensorAddresses> addresses;
    for (std::size_t i = 0; i < types.size(); ++i)
        addresses.push_back({0x1000000ull * (i + 1), 0x2000000ull * (i + 1)});
    REQUIRE(layout.buckets.size() == 2);
    CHECK(layout.buckets[0].type == ElementType::fp16);
    const auto descs = detail::bucket_descriptors(layout, 0, base, addresses);
    REQUIRE(descs.size() == 2);
    const auto address = [](const void* pointer) {
        return static_cast<cudarc::DevicePtr>(reinterpret_cast<std::uintptr_t>(pointer));
    };
    CHECK(address(descs[1].param) == addresses[2].param);
    CHECK(address(descs[1].grad) == addresses[2].grad);
    CHECK(descs[1].numel == 70000);
    CHECK(address(descs[1].state1) == base + layout.tensors[2].state1);
    CHECK(address(descs[1].absmax1) == base + layout.tensors[2].absmax1);
    CHECK(address(descs[1].unorm) == base + layout.tensors[2].unorm);
    CHECK(address(descs[1].state2) == 0);  // one state array: the rest stays null
    CHECK(address(descs[1].absmax2) == 0);
}

TEST_CASE("optim.frontend_buckets_that_hand_out_chunks_get_short_chunks") {
    // Note [Dynamic chunks]: 8-bit state with fp32 parameters (no third state) cuts chunks of at most
    // kDynamicChunkTiles tiles; everything else keeps max_chunk_elements.
    const std::vector<ElementType> types{ElementType::fp32, ElementType::fp16, ElementType::bf16};
    const std::vector<std::int64_t> numels{32768, 32768, 32768};
    const auto chunk_counts = [&](StatePrecision precision, detail::StateShape shape,
                                  std::int64_t max_chunk) {
        const detail::GroupLayout layout = detail::plan_group(precision, shape, types, numels, max_chunk);
        std::vector<std::size_t> counts;
        for (const auto& bucket : layout.buckets) counts.push_back(bucket.chunks.size());
        return counts;
    };
    const std::int64_t short_chunk = std::int64_t{cudarc_optim::kDynamicChunkTiles} * cudarc_optim::kTile8;
    REQUIRE(short_chunk == 4096);
    using Counts = std::vector<std::size_t>;
    CHECK(chunk_counts(StatePrecision::blockwise8, detail::StateShape{2}, 16384) == Counts{8, 2, 2});
    CHECK(chunk_counts(StatePrecision::blockwise8, detail::StateShape{2, true}, 16384) == Counts{2, 2, 2});
    CHECK(chunk_counts(StatePrecision::fp32, detail::StateShape{2}, 16384) == Counts{2, 2, 2});
    // A smaller max_chunk_elements still bounds them.
    CHECK(chunk_counts(StatePrecision::blockwise8, detail::StateShape{2}, 2048) == Counts{16, 16, 16});
    CHECK(cudarc::optim::abi::chunk_elements(StatePrecision::blockwise8, ElementType::fp32, false, 0) == 0);
}

TEST_CASE("optim.frontend_checks_step_tensors") {
    const std::vector<ElementType> types{ElementType::fp32, ElementType::bf16};
    const std::vector<std::int64_t> numels{100, 200};
    const detail::GroupLayout layout = detail::plan_group(StatePrecision::fp32, 2, types, numels, 16384);
    FakeTensor fake;
    const optim::ParamTensor a(fake.view<float>(0x1000, 100), fake.view<const float>(0x2000, 100));
    const optim::ParamTensor b(fake.view<optim::bf16_bits>(0x3000, 200),
                               fake.view<const optim::bf16_bits>(0x4000, 200));
    const optim::ParamTensor b_short(fake.view<optim::bf16_bits>(0x3000, 199),
                                     fake.view<const optim::bf16_bits>(0x4000, 199));
    const optim::ParamTensor b_half(fake.view<optim::half_bits>(0x3000, 200),
                                    fake.view<const optim::half_bits>(0x4000, 200));

    const std::vector<optim::ParamTensor> good{a, b};
    CHECK(error_of([&] { detail::check_tensors("step", layout, good); }).empty());
    const std::vector<optim::ParamTensor> too_few{a};
    CHECK(contains(error_of([&] { detail::check_tensors("step", layout, too_few); }),
                   "step: 1 tensors given, the group was registered with 2"));
    const std::vector<optim::ParamTensor> wrong_size{a, b_short};
    CHECK(contains(error_of([&] { detail::check_tensors("step", layout, wrong_size); }),
                   "tensor 1 has 199 elements but was registered with 200"));
    const std::vector<optim::ParamTensor> wrong_type{a, b_half};
    CHECK(contains(error_of([&] { detail::check_tensors("step", layout, wrong_type); }),
                   "tensor 1 holds fp16 elements but was registered as bf16"));
    CHECK(contains(error_of([&] { detail::check_tensor("step", layout, 2, a); }),
                   "tensor index 2 is out of range"));
}

TEST_CASE("optim.frontend_step_traffic") {
    using cudarc::testing::step_traffic;
    // The design document's figure: fp32 AdamW moves 28 bytes per parameter.
    CHECK(step_traffic(ElementType::fp32, StatePrecision::fp32, 2, 1, false).total() == 28);
    CHECK(step_traffic(ElementType::bf16, StatePrecision::fp32, 2, 1, false).total() == 22);
    CHECK(step_traffic(ElementType::fp32, StatePrecision::fp32, 0, 1, false).total() == 12);
    for (int round = 0; round < 200; ++round) {
        const ElementType type = static_cast<ElementType>(rng()() % 3);
        const StatePrecision precision = rng()() % 2 == 0 ? StatePrecision::fp32 : StatePrecision::blockwise8;
        const int arrays = static_cast<int>(rng()() % 3);
        const std::int64_t n = static_cast<std::int64_t>(rng()() % 5000000);
        const bool clip = rng()() % 2 == 0;
        // Counted element by element and block by block, the long way.
        std::uint64_t update = 0;
        std::uint64_t norm = 0;
        const std::uint64_t e = type == ElementType::fp32 ? 4 : 2;
        const std::uint64_t s = precision == StatePrecision::fp32 ? 4 : 1;
        update += static_cast<std::uint64_t>(n) * (e /*param in*/ + e /*param out*/ + e /*grad*/);
        update += static_cast<std::uint64_t>(n) * s * 2 * static_cast<std::uint64_t>(arrays);
        const std::uint64_t blocks = static_cast<std::uint64_t>((n + 255) / 256);
        if (precision == StatePrecision::blockwise8)
            update += blocks * 4 * 2 * static_cast<std::uint64_t>(arrays);
        if (clip) {
            const std::int64_t tile = precision == StatePrecision::fp32 ? 1024 : 2048;
            norm += static_cast<std::uint64_t>(n) * (2 * e + s * static_cast<std::uint64_t>(arrays));
            if (precision == StatePrecision::blockwise8)
                norm += blocks * 4 * static_cast<std::uint64_t>(arrays);
            norm += static_cast<std::uint64_t>((n + tile - 1) / tile) * 4;
        }
        const cudarc::testing::StepTraffic t = step_traffic(type, precision, arrays, n, clip);
        CHECK(t.update_pass == update);
        CHECK(t.norm_pass == norm);
        CHECK(t.total() == update + norm);
    }
    CHECK(contains(error_of([] {
                       static_cast<void>(step_traffic(ElementType::fp32, StatePrecision::fp32, 4, 1, false));
                   }),
                   "4 state arrays"));
    // The new rules' shapes: AdEMAMix moves three state arrays; LAMB's first pass reads its state and
    // writes two sums per tile; LARS' reads the parameters and gradients only.
    using cudarc::testing::step_shape;
    const auto ademamix = step_shape(UpdateRule::ademamix, optim::default_options(UpdateRule::ademamix));
    CHECK(ademamix.state_arrays == 3);
    CHECK_FALSE(ademamix.norm_pass);
    CHECK(step_traffic(ElementType::fp32, StatePrecision::fp32, ademamix, 1).total() == 12 + 3 * 8);
    const auto lamb = step_shape(UpdateRule::lamb, optim::default_options(UpdateRule::lamb));
    CHECK(lamb.norm_pass);
    CHECK(lamb.norms == 2);
    CHECK(step_traffic(ElementType::fp32, StatePrecision::fp32, lamb, 1024).norm_pass ==
          1024 * (8 + 2 * 4) + 2 * 4);
    const auto lars = step_shape(UpdateRule::lars, optim::default_options(UpdateRule::lars));
    CHECK(lars.state_arrays == 1);
    CHECK(step_traffic(ElementType::bf16, StatePrecision::fp32, lars, 2048).norm_pass ==
          2048 * 4 + 2 * 2 * 4);
    CHECK(contains(error_of([] {
                       static_cast<void>(step_traffic(ElementType::fp32, StatePrecision::fp32, 1, -1, false));
                   }),
                   "negative"));
}

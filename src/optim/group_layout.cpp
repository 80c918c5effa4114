#include "optim/group_layout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "cudarc/error.hpp"

namespace cudarc::optim::detail {
namespace {

constexpr std::size_t kMaxSize = std::numeric_limits<std::size_t>::max();

[[noreturn]] void throw_overflow(std::size_t tensor, std::int64_t numel) {
    throw Error(
        fmt::format("cudarc::optim: tensor {} ({} elements) needs more optimizer state than fits in "
                    "{} bytes: the size overflows",
                    tensor, numel, kMaxSize));
}

// `count` elements of `element` bytes, checked: the state of tensor `tensor`.
std::size_t state_bytes(std::size_t tensor, std::int64_t numel, std::size_t count, std::size_t element) {
    if (count > kMaxSize / element) throw_overflow(tensor, numel);
    return count * element;
}

constexpr std::size_t ceil_div(std::size_t value, std::size_t divisor) noexcept {
    return value / divisor + (value % divisor != 0 ? 1 : 0);
}
// Note: fits for every value below 2^63 (an int64 element count) and a multiple below 2^32.
constexpr std::size_t round_up(std::size_t value, std::size_t multiple) noexcept {
    return ceil_div(value, multiple) * multiple;
}

// The alignments of the third state and of its absmax values (cudarc_optim::state3_offset and
// absmax3_offset, computed here without their wrap-around near INT64_MAX).
constexpr std::size_t kState3Alignment = 256;
constexpr std::size_t kAbsmax3Alignment = 64;
static_assert(round_up(1000, kState3Alignment) == cudarc_optim::state3_offset(1000) &&
                  round_up(ceil_div(1000, 256), kAbsmax3Alignment) == cudarc_optim::absmax3_offset(1000) &&
                  round_up(ceil_div(70000, 256), kAbsmax3Alignment) == cudarc_optim::absmax3_offset(70000),
              "the layout's third-state offsets follow the kernels'");

// Reserves `bytes` at the arena's end and returns its offset. Note: an empty tensor's regions still
// take one aligned slot each, so no two regions ever share an address.
std::size_t reserve(std::size_t& end, std::size_t bytes, std::size_t tensor, std::int64_t numel) {
    const std::size_t offset = end;
    const std::size_t size = std::max<std::size_t>(bytes, 1);
    if (size > kMaxSize - end - kRegionAlignment) throw_overflow(tensor, numel);
    end = (end + size + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
    return offset;
}

}  // namespace

int state_arrays(UpdateRule rule, double momentum) noexcept {
    switch (rule) {
        case UpdateRule::adam:
        case UpdateRule::adamw:
        case UpdateRule::ademamix:
        case UpdateRule::lamb:
            return 2;
        case UpdateRule::sgd:
            return momentum != 0.0 ? 1 : 0;
        case UpdateRule::lion:
        case UpdateRule::rmsprop:
        case UpdateRule::adagrad:
        case UpdateRule::lars:
            return 1;
    }
    return 0;
}

StateShape state_shape(UpdateRule rule, double momentum) noexcept {
    return StateShape{state_arrays(rule, momentum), rule == UpdateRule::ademamix, abi::norm_count(rule)};
}

GroupLayout plan_group(StatePrecision precision, int state_count, std::span<const ElementType> types,
                       std::span<const std::int64_t> numels, std::int64_t max_chunk_elements) {
    return plan_group(precision, StateShape{state_count}, types, numels, max_chunk_elements);
}

GroupLayout plan_group(StatePrecision precision, StateShape shape, std::span<const ElementType> types,
                       std::span<const std::int64_t> numels, std::int64_t max_chunk_elements) {
    const int state_count = shape.arrays;
    if (types.size() != numels.size()) {
        throw Error(
            fmt::format("cudarc::optim: {} element types for {} tensors", types.size(), numels.size()));
    }
    if (numels.empty()) throw Error("cudarc::optim: a parameter group needs at least one tensor");
    for (std::size_t i = 0; i < numels.size(); ++i) {
        if (numels[i] < 0)
            throw Error(fmt::format("cudarc::optim: tensor {} has a negative size ({})", i, numels[i]));
    }
    const std::size_t state_element = precision == StatePrecision::blockwise8 ? 1 : 4;

    GroupLayout layout;
    std::size_t end = 0;
    layout.flag_offset = 0;
    layout.counter_offset = 16;
    layout.step_offset = 64;
    static_assert(64 + sizeof(abi::StepState) <= kRegionAlignment && alignof(abi::StepState) <= 64,
                  "the group's header holds the flag, the counter and the step state");
    static_assert(16 + cudarc_optim::kChunkCounterOffset + sizeof(std::uint64_t) <= 64 &&
                      (16 + cudarc_optim::kChunkCounterOffset) % alignof(std::uint64_t) == 0,
                  "the chunk counter (Note [Dynamic chunks]) lies between blocks_done and the step state");
    end = kRegionAlignment;
    layout.tensors.resize(numels.size());
    for (std::size_t i = 0; i < numels.size(); ++i) {
        TensorLayout& t = layout.tensors[i];
        t.type = types[i];
        t.numel = numels[i];
        const auto n = static_cast<std::size_t>(numels[i]);
        const std::int64_t numel = numels[i];
        t.begin = end;
        // With a third state, state1's region holds it too, state3_offset(n) elements on. Note: sizes are
        // computed in size_t without numel + k (which wraps near INT64_MAX) and checked before use.
        const bool third = shape.third && state_count >= 1;
        const std::size_t third_at = round_up(n, kState3Alignment);  // cudarc_optim::state3_offset
        if (state_count >= 1) {
            if (third && n > kMaxSize - third_at) throw_overflow(i, numel);
            t.state1 = reserve(end, state_bytes(i, numel, third ? third_at + n : n, state_element), i, numel);
            if (third) t.state3 = t.state1 + third_at * state_element;
        }
        if (state_count >= 2) t.state2 = reserve(end, state_bytes(i, numel, n, state_element), i, numel);
        if (precision == StatePrecision::blockwise8) {
            const std::size_t blocks = ceil_div(n, static_cast<std::size_t>(abi::kQuantBlock));
            // cudarc_optim::absmax3_offset; blocks < 2^56, so nothing here wraps.
            const std::size_t third_absmax_at = round_up(blocks, kAbsmax3Alignment);
            if (state_count >= 1) {
                t.absmax1 = reserve(
                    end, state_bytes(i, numel, third ? third_absmax_at + blocks : blocks, sizeof(float)), i,
                    numel);
                if (third) t.absmax3 = t.absmax1 + third_absmax_at * sizeof(float);
            }
            if (state_count >= 2)
                t.absmax2 = reserve(end, state_bytes(i, numel, blocks, sizeof(float)), i, numel);
        }
        // abi::unorm_workspace_floats: `norms` sums, then `norms` partial sums per tile (norms <= 2, and
        // fewer than 2^63 tiles, so the product fits).
        const std::size_t tiles = ceil_div(n, static_cast<std::size_t>(abi::tile_elements(precision)));
        const std::size_t unorm_floats = static_cast<std::size_t>(shape.norms) * (1 + tiles);
        t.unorm = reserve(end, state_bytes(i, numel, unorm_floats, sizeof(float)), i, numel);
        t.end = end;
    }
    layout.arena_bytes = end;

    // One bucket per element type present, in the order types first appear.
    for (std::size_t i = 0; i < layout.tensors.size(); ++i) {
        TensorLayout& t = layout.tensors[i];
        std::size_t b = 0;
        while (b < layout.buckets.size() && layout.buckets[b].type != t.type) ++b;
        if (b == layout.buckets.size()) layout.buckets.push_back(BucketLayout{t.type, {}, {}, 0, 0});
        t.bucket = b;
        t.slot = layout.buckets[b].tensors.size();
        layout.buckets[b].tensors.push_back(i);
    }
    std::size_t table_end = 0;
    for (BucketLayout& bucket : layout.buckets) {
        std::vector<std::int64_t> sizes;
        sizes.reserve(bucket.tensors.size());
        for (const std::size_t i : bucket.tensors) sizes.push_back(layout.tensors[i].numel);
        bucket.chunks = abi::make_chunks(
            sizes, precision, abi::chunk_elements(precision, bucket.type, shape.third, max_chunk_elements));
        // Note: make_chunks bounds the chunk count by an int, so these products cannot overflow.
        bucket.descs_offset = reserve(table_end, bucket.tensors.size() * sizeof(abi::TensorDesc), 0, 0);
        bucket.chunks_offset =
            reserve(table_end, std::max<std::size_t>(1, bucket.chunks.size()) * sizeof(abi::Chunk), 0, 0);
    }
    layout.table_bytes = table_end;
    return layout;
}

abi::TensorDesc describe(const GroupLayout& layout, std::size_t index, DevicePtr arena_base,
                         TensorAddresses addresses) noexcept {
    const TensorLayout& t = layout.tensors[index];
    auto at = [](DevicePtr address) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)); };
    auto region = [&](std::size_t offset) { return offset == kNoRegion ? nullptr : at(arena_base + offset); };
    abi::TensorDesc desc{};
    desc.param = at(addresses.param);
    desc.grad = at(addresses.grad);
    desc.state1 = region(t.state1);
    desc.state2 = region(t.state2);
    desc.absmax1 = static_cast<float*>(region(t.absmax1));
    desc.absmax2 = static_cast<float*>(region(t.absmax2));
    desc.unorm = static_cast<float*>(region(t.unorm));
    desc.numel = t.numel;
    return desc;
}

std::vector<abi::TensorDesc> bucket_descriptors(const GroupLayout& layout, std::size_t bucket,
                                                DevicePtr arena_base,
                                                std::span<const TensorAddresses> addresses) {
    const BucketLayout& b = layout.buckets.at(bucket);
    std::vector<abi::TensorDesc> descs;
    descs.reserve(b.tensors.size());
    for (const std::size_t i : b.tensors) descs.push_back(describe(layout, i, arena_base, addresses[i]));
    return descs;
}

}  // namespace cudarc::optim::detail

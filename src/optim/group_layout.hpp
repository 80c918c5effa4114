// How one parameter group is laid out: its state arena (byte offsets per tensor) and its multi-tensor
// tables (one bucket per element type: a TensorDesc array and a chunk table). Host-only arithmetic, so
// CI tests it without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "cudarc/detail/native_handles.hpp"
#include "cudarc/optim/element_type.hpp"
#include "cudarc/optim/options.hpp"
#include "optim/kernel_abi.hpp"

namespace cudarc::optim::detail {

inline constexpr std::size_t kNoRegion = std::numeric_limits<std::size_t>::max();
// Every region starts at a multiple of this (the kernels' vector paths need 16; the allocator gives 256).
inline constexpr std::size_t kRegionAlignment = 256;

// Byte offsets of one tensor's state in its group's arena (kNoRegion: the rule does not keep it).
struct TensorLayout {
    ElementType type = ElementType::fp32;
    std::int64_t numel = 0;
    std::size_t state1 = kNoRegion;   // float[numel] or std::uint8_t[numel]
    std::size_t state2 = kNoRegion;   // same (Adam, AdamW)
    std::size_t absmax1 = kNoRegion;  // 8-bit: float[absmax_count(numel)]
    std::size_t absmax2 = kNoRegion;
    // AdEMAMix's slow EMA (state 3) and its absmax values: inside state1's and absmax1's regions, at
    // cudarc_optim::state3_offset(numel) elements and absmax3_offset(numel) floats (the kernels find
    // them there).
    std::size_t state3 = kNoRegion;
    std::size_t absmax3 = kNoRegion;
    // float[unorm_workspace_floats(numel, precision, norms)]: always, so max_unorm can be turned on
    std::size_t unorm = kNoRegion;
    std::size_t begin = 0;  // [begin, end): every region of this tensor (for prefetching)
    std::size_t end = 0;
    std::size_t bucket = 0;  // the bucket of its element type
    std::size_t slot = 0;    // its position in that bucket's TensorDesc array
};

// The tensors of one element type: one multi-tensor launch per pass covers them all.
struct BucketLayout {
    ElementType type = ElementType::fp32;
    std::vector<std::size_t> tensors;  // indices in the group, in registration order
    std::vector<abi::Chunk> chunks;    // Chunk::tensor is a slot of this bucket
    std::size_t descs_offset = 0;      // byte offsets in the group's table buffer
    std::size_t chunks_offset = 0;
};

struct GroupLayout {
    std::vector<TensorLayout> tensors;
    std::vector<BucketLayout> buckets;
    std::size_t flag_offset = 0;  // int: set to 1 by a step that met a non-finite gradient
    // unsigned: the max_unorm pass's blocks_done (0 between launches); the 64-bit word
    // cudarc_optim::kChunkCounterOffset bytes on is the update pass's chunk counter (Note [Dynamic chunks]).
    std::size_t counter_offset = 0;
    std::size_t step_offset = 0;  // abi::StepState: a capturable group's step (Note [Capturable steps])
    std::size_t arena_bytes = 0;
    std::size_t table_bytes = 0;
};

// The state arrays `rule` keeps per element: 0, 1 or 2 (SGD keeps its momentum buffer only with momentum;
// AdEMAMix's third, its slow EMA, lives in state1's region).
[[nodiscard]] int state_arrays(UpdateRule rule, double momentum) noexcept;

// How a rule's state is laid out per tensor: its state arrays (regions state1 and state2), whether
// state1's region holds AdEMAMix's slow EMA too (`third`), and the sums per tile of its first pass.
struct StateShape {
    int arrays = 0;
    bool third = false;
    int norms = 1;
};
[[nodiscard]] StateShape state_shape(UpdateRule rule, double momentum) noexcept;

// Plans a group. `types` and `numels` are per tensor (same length, at least one; numels >= 0). Throws
// cudarc::Error for mismatched spans, an empty group or a negative size. (An int is StateShape{arrays}.)
[[nodiscard]] GroupLayout plan_group(StatePrecision precision, StateShape shape,
                                     std::span<const ElementType> types, std::span<const std::int64_t> numels,
                                     std::int64_t max_chunk_elements);
[[nodiscard]] GroupLayout plan_group(StatePrecision precision, int state_count,
                                     std::span<const ElementType> types, std::span<const std::int64_t> numels,
                                     std::int64_t max_chunk_elements);

// Device addresses of one tensor's parameter and gradient.
struct TensorAddresses {
    DevicePtr param = 0;
    DevicePtr grad = 0;
    friend bool operator==(const TensorAddresses&, const TensorAddresses&) = default;
};

// The kernel's descriptor of tensor `index`, for an arena at `arena_base`.
[[nodiscard]] abi::TensorDesc describe(const GroupLayout& layout, std::size_t index, DevicePtr arena_base,
                                       TensorAddresses addresses) noexcept;

// A bucket's descriptor array (in slot order) and chunk table, as bytes laid out like the table buffer
// between descs_offset and the end of the chunks.
[[nodiscard]] std::vector<abi::TensorDesc> bucket_descriptors(const GroupLayout& layout, std::size_t bucket,
                                                              DevicePtr arena_base,
                                                              std::span<const TensorAddresses> addresses);

}  // namespace cudarc::optim::detail

// The optimizer kernels' ABI, host side: how to name, parameterize and launch the kernel templates of
// kernels/optim.cu. The terms are the public ones (UpdateRule, ElementType, StatePrecision, GroupOptions)
// and the structs are the kernels' own (kernels/optim_common.cuh, which compiles for the host too).
//
// Kernel names. Templates instantiated through name expressions (kernel_name() spells them):
//     cudarc_optim::tensor_step<RULE, ELEMENT, PRECISION, NORM_PASS>   layout tensor: one tensor
//     cudarc_optim::multi_step<RULE, ELEMENT, PRECISION, NORM_PASS>    layout multi_tensor: chunk tables
//     cudarc_optim::multi_step_capturable<RULE, ELEMENT, PRECISION, NORM_PASS>
//                                     layout multi_tensor_capturable: chunk tables, parameters in device
//                                     memory
//     cudarc_optim::store_step<RULE>  writes a capturable group's OptimStepState (store_step_name())
// with RULE, ELEMENT and PRECISION the public enums' values, NORM_PASS false for the update pass and true
// for the max_unorm pass; e.g. "cudarc_optim::multi_step<1, 2, 1, false>" is AdamW's bf16 8-bit update.
// A module compiled with the expressions of one (rule, element type, precision) (kernel_names()) holds
// just those.
//
// Parameter lists (the same for both passes of a layout):
//     tensor: (OptimTensor tensor, OptimParams params, const QuantMapImage* qmap1,
//              const QuantMapImage* qmap2, int* nonfinite_flag, unsigned* blocks_done)
//     multi:  (const OptimTensor* tensors, const OptimChunk* chunks, int num_chunks, int num_tensors,
//              OptimParams params, const QuantMapImage* qmap1, const QuantMapImage* qmap2,
//              int* nonfinite_flag, unsigned* blocks_done)
//     multi capturable: (const OptimTensor* tensors, const OptimChunk* chunks, int num_chunks,
//              int num_tensors, OptimStepState* step, int advance, const QuantMapImage* qmap1,
//              const QuantMapImage* qmap2, int* nonfinite_flag, unsigned* blocks_done)
//     store_step: (OptimStepState* state, OptimParams params, StepSchedule schedule, long long count);
//              one thread
// The capturable layout reads the step's parameters from `step` (make_step_state's values, written by
// store_step); `advance` is nonzero in the step's last launch only, which moves the step on (Note
// [Capturable steps] in kernels/optim_device.cuh). Every launch of one step shares `step`.
// qmap1/qmap2: the code maps for state1/state2 as make_map_image() lays them out (kQuantMapImageBytes
// each, in device memory, 16-byte aligned); state_map(rule, 1 or 2) says which map. 8-bit only: fp32
// kernels ignore them, and a map for a state the rule lacks may be null. nonfinite_flag: may be null;
// set to 1 (a plain store) when an element's scaled gradient is NaN or infinite. blocks_done: for the
// unorm pass only; a device counter that is 0 before the launch and that the launch leaves at 0. One
// counter must not serve two launches that may run at the same time.
//
// Launch shape: blockDim = (256, 1, 1), except the 8-bit update pass on sm_90 and later:
// update_block_threads() (256 threads that compute and a producer warp that copies tiles), with
// dynamic_shared_bytes() of dynamic shared memory (its tile buffers). Given 256 threads or less shared
// memory, those kernels load directly. Other launches take no dynamic shared memory.
//     tensor layout: any gridDim.x >= 1 (grid-stride over tiles); recommended_grid() picks the fastest.
//     multi layout: any gridDim.x >= 1 (block b processes chunks b, b + gridDim.x, ...);
//     recommended_multi_grid() picks it.
//
// One step: with params.max_unorm == 0, launch the update pass alone. With max_unorm > 0, launch the
// unorm pass, then the update pass, on the same stream with the same arguments: pass 1 only reads
// parameters, gradients and state, and writes each tensor's squared update norm to its unorm[0];
// pass 2 scales the update by min(1, max_unorm / norm). Nothing is read back on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cudarc/launch_config.hpp"
#include "cudarc/optim/element_type.hpp"
#include "cudarc/optim/options.hpp"
#include "optim/quantization.hpp"
// Note: the kernels' own structs and rules, compiled for the host, so host and device cannot disagree.
#include "../../kernels/optim_common.cuh"

namespace cudarc::optim::abi {

// The per-step parameter block (built by make_kernel_params only), a tensor's descriptor and a chunk of a
// multi-tensor launch: the kernels' structs, passed by value or as device arrays.
using KernelParams = cudarc_optim::OptimParams;
using TensorDesc = cudarc_optim::OptimTensor;
using Chunk = cudarc_optim::OptimChunk;
using MapImage = cudarc_optim::QuantMapImage;
// A capturable group's step in device memory, and the options its derived values come from.
using StepState = cudarc_optim::OptimStepState;
using StepSchedule = cudarc_optim::StepSchedule;

enum class KernelLayout : int { tensor = 0, multi_tensor = 1, multi_tensor_capturable = 2 };
enum class KernelPass : int { update = 0, update_norm = 1 };

inline constexpr unsigned kBlockThreads = cudarc_optim::kThreads;
inline constexpr std::int64_t kQuantBlock = cudarc_optim::kQuantBlock;  // elements per absmax

// Elements one block handles at a time (4 or 8 per thread). Chunks start at multiples of it.
[[nodiscard]] constexpr std::int64_t tile_elements(StatePrecision precision) noexcept {
    return precision == StatePrecision::blockwise8 ? cudarc_optim::kTile8 : cudarc_optim::kTileFp32;
}

// The embedded source file holding the kernel templates.
inline constexpr std::string_view kKernelSource = "optim.cu";
// The name expression of one kernel (also how Module::kernel finds it).
[[nodiscard]] std::string kernel_name(UpdateRule rule, ElementType type, StatePrecision precision,
                                      KernelLayout layout, KernelPass pass);
// The name expression of store_step for `rule`.
[[nodiscard]] std::string store_step_name(UpdateRule rule);
// The name expressions an optimizer of (rule, precision) compiles for element type `type`: the tensor and
// multi layouts, both passes (4), or for a capturable optimizer the capturable layout's two passes and
// store_step (3).
[[nodiscard]] std::vector<std::string> kernel_names(UpdateRule rule, ElementType type,
                                                    StatePrecision precision, bool capturable = false);

// Validates `options` for `rule` with the given grad scale and 1-based step number (throws cudarc::Error
// naming the bad field) and derives the kernel's fields in double: inv_grad_scale, decay and the complements
// 1 - beta (Note [Complements]) here, the step's own (step_size, bias_correction2_sqrt, AdEMAMix's alpha,
// beta3 and 1 - beta3) by cudarc_optim::derive_step, as a capturable step does on the device (Note
// [Per-step values] in kernels/optim_common.cuh).
[[nodiscard]] KernelParams make_kernel_params(UpdateRule rule, const GroupOptions& options, double grad_scale,
                                              std::int64_t step);

// What store_step writes for a capturable group: the parameters of make_kernel_params (its checks
// included; the step-derived fields are the device's to fill) and the options they derive from.
struct StepSettings {
    KernelParams params;
    StepSchedule schedule;
};
[[nodiscard]] StepSettings make_step_settings(UpdateRule rule, const GroupOptions& options,
                                              double grad_scale);
// The options `rule`'s step values derive from (the logarithms only for AdEMAMix's beta3 warm-up).
[[nodiscard]] StepSchedule step_schedule(UpdateRule rule, const GroupOptions& options) noexcept;

// The code map for state 1, 2 or 3: signed for first moments and momentum (AdEMAMix's slow EMA, state 3,
// included), unsigned for second moments (state 2, RMSprop's square average, Adagrad's sum of squares),
// which are never negative.
[[nodiscard]] MapSign state_map(UpdateRule rule, int state) noexcept;

// The sums per tile and tensor of a rule's first pass (max_unorm's, or the trust ratio's): 1 (the squared
// update norm) or, for LAMB and LARS, 2 (and the squared parameter norm).
[[nodiscard]] constexpr int norm_count(UpdateRule rule) noexcept {
    return cudarc_optim::norm_count(static_cast<int>(rule));
}
// Whether every step of `rule` launches the first pass (LAMB and LARS: their trust ratios), whatever
// max_unorm is.
[[nodiscard]] constexpr bool always_two_passes(UpdateRule rule) noexcept {
    return cudarc_optim::uses_trust_ratio(static_cast<int>(rule));
}

[[nodiscard]] constexpr std::int64_t absmax_count(std::int64_t numel) noexcept {
    return (numel + kQuantBlock - 1) / kQuantBlock;
}
[[nodiscard]] constexpr std::int64_t tile_count(std::int64_t numel, StatePrecision precision) noexcept {
    return (numel + tile_elements(precision) - 1) / tile_elements(precision);
}
// Floats in one tensor's first-pass workspace: the `norms` sums, then `norms` partial sums per tile.
[[nodiscard]] constexpr std::int64_t unorm_workspace_floats(std::int64_t numel, StatePrecision precision,
                                                            int norms = 1) noexcept {
    return norms * (1 + tile_count(numel, precision));
}

// Dynamic shared memory for the update pass of (rule, precision, type) on a device of compute capability
// `major` (CUDA; 0 for HIP): the 8-bit kernels' tile buffers on sm_90 and later (three states' for
// AdEMAMix, two otherwise), else 0.
[[nodiscard]] std::size_t dynamic_shared_bytes(UpdateRule rule, StatePrecision precision, ElementType type,
                                               int major) noexcept;
// Threads per block of the update pass: kBlockThreads plus the producer warp of the 8-bit kernels'
// tile copies on sm_90 and later.
[[nodiscard]] unsigned update_block_threads(StatePrecision precision, int major) noexcept;

// How the update and unorm passes are ordered after the kernel ahead of them in their stream: on sm_90
// and later (CUDA) they may start early (StreamSerialization::programmatic), since they wait for the
// kernels ahead before touching anything those may write (Note [Early launch], optim_device.cuh).
// store_step does not wait: it is launched fully ordered.
[[nodiscard]] StreamSerialization pass_serialization(int major) noexcept;

// Grid for the tensor layout (the kernels accept any grid). fp32 state: one block per tile, which
// measured fastest on an H200 (fp32 AdamW at 256M parameters moved 4.25 TB/s, the copy rate, against
// 3.9-4.0 TB/s with a grid-stride grid of 4-64 blocks per multiprocessor). 8-bit state: at most one
// wave of resident blocks (resident_per_multiprocessor, from the occupancy calculator, times the
// multiprocessors), since each block first stages 40 KB of code maps into shared memory.
[[nodiscard]] unsigned recommended_grid(std::int64_t numel, StatePrecision precision, int multiprocessors,
                                        int resident_per_multiprocessor);

// Grid for the multi-tensor layout: one block per chunk for fp32 state; for 8-bit state at most one
// wave of resident blocks, each looping over chunks (see recommended_grid).
[[nodiscard]] unsigned recommended_multi_grid(std::size_t chunks, StatePrecision precision,
                                              int multiprocessors, int resident_per_multiprocessor);

// Cuts tensors of the given sizes into chunks of at most max_chunk_elements (rounded down to whole
// tiles, at least one tile), each starting at a multiple of tile_elements(precision). Throws
// cudarc::Error for a negative size or more tensors than an int can index. The default measured
// best on an H200 (1024 x 256K fp32 AdamW: 1.05x the bytes/bandwidth floor; 64K chunks: 1.08x).
[[nodiscard]] std::vector<Chunk> make_chunks(std::span<const std::int64_t> numels, StatePrecision precision,
                                             std::int64_t max_chunk_elements = 16384);

// The chunk size make_chunks gets for a bucket: max_chunk_elements, but at most kDynamicChunkTiles tiles
// where the update launch hands out its chunks (8-bit state, fp32 parameters, no third state: Note
// [Dynamic chunks], optim_common.cuh). An invalid max_chunk_elements (<= 0) is passed through, for
// make_chunks to refuse.
[[nodiscard]] std::int64_t chunk_elements(StatePrecision precision, ElementType type, bool third_state,
                                          std::int64_t max_chunk_elements) noexcept;

}  // namespace cudarc::optim::abi

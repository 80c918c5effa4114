// The optimizer kernels' ABI, host side: what kernels/optim_32bit.cu and kernels/optim_8bit.cu expect.
//
// Kernel names. Every kernel is extern "C"; kernel_name() spells the symbol:
//     cudarc_optim_<algorithm>_<dtype>_<state>_<layout>_<pass>
//     algorithm: adam adamw sgd lion rmsprop adagrad    dtype: f32 f16 bf16    state: 32bit 8bit
//     layout: tensor (one tensor) | multi (chunk table)  pass: update | unorm
// e.g. "cudarc_optim_adamw_bf16_8bit_multi_update", in kernel_source(StateFormat::blockwise8).
// compile_defines() selects just one (algorithm, dtype) when compiling (4 kernels instead of 72).
//
// Parameter lists (the same for both passes of a layout):
//     tensor: (TensorDesc tensor, KernelParams params, const void* qmap1, const void* qmap2,
//              int* nonfinite_flag, unsigned* blocks_done)
//     multi:  (const TensorDesc* tensors, const Chunk* chunks, int num_chunks, int num_tensors,
//              KernelParams params, const void* qmap1, const void* qmap2, int* nonfinite_flag,
//              unsigned* blocks_done)
// qmap1/qmap2: the code maps for state1/state2 as make_map_image() lays them out (kQuantMapImageBytes
// each, in device memory, 16-byte aligned); state_map(algorithm, 1 or 2) says which map. 8-bit only:
// 32-bit kernels ignore them, and a map for a state the algorithm lacks may be null. nonfinite_flag: may be
// null; set to 1 (a plain store) when an element's scaled gradient is NaN or infinite. blocks_done: for the
// unorm pass only; a device counter that is 0 before the launch and that the launch leaves at 0. One counter
// must not serve two launches that may run at the same time.
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
#include <utility>
#include <vector>

#include "optim/quantization.hpp"

namespace cudarc::optim {

enum class Algorithm : int { adam = 0, adamw = 1, sgd = 2, lion = 3, rmsprop = 4, adagrad = 5 };
// Parameter and gradient element type (both the same).
enum class DType : int { f32 = 0, f16 = 1, bf16 = 2 };
// Optimizer state: fp32, or 8-bit codes with one float absmax per block of 256 elements.
enum class StateFormat : int { fp32 = 0, blockwise8 = 1 };
enum class KernelLayout : int { tensor = 0, multi_tensor = 1 };
enum class KernelPass : int { update = 0, update_norm = 1 };

[[nodiscard]] std::string_view to_string(Algorithm algorithm) noexcept;
[[nodiscard]] std::string_view to_string(DType dtype) noexcept;
[[nodiscard]] std::size_t element_bytes(DType dtype) noexcept;

// The hyper-parameters of one step, as a user gives them (torch.optim's names and meanings).
// Fields an algorithm does not use are ignored. docs/optimizers.md has every formula.
struct HyperParams {
    double lr = 1e-3;
    double beta1 = 0.9;         // Adam, AdamW, Lion
    double beta2 = 0.999;       // Adam, AdamW, Lion
    double eps = 1e-8;          // Adam, AdamW, RMSprop, Adagrad
    double weight_decay = 0.0;  // L2 for Adam/SGD/RMSprop/Adagrad; decoupled for AdamW and Lion
    double momentum = 0.0;      // SGD
    double dampening = 0.0;     // SGD
    bool nesterov = false;      // SGD (needs momentum > 0 and dampening == 0, as in torch)
    double alpha = 0.99;        // RMSprop
    double lr_decay = 0.0;      // Adagrad
    // Gradients arrive multiplied by grad_scale (loss scaling); the kernels use grad * (1 / grad_scale).
    double grad_scale = 1.0;
    // > 0: each tensor's update is scaled by min(1, max_unorm / ||update||_2). 0: off.
    double max_unorm = 0.0;
    // 1-based number of this step (torch's state['step'] after its increment).
    std::int64_t step = 1;
};

// torch.optim's defaults for `algorithm` (Lion: the paper's lr 1e-4, betas 0.9/0.99).
[[nodiscard]] HyperParams default_hyper_params(Algorithm algorithm);

}  // namespace cudarc::optim

namespace cudarc::optim::abi {

// Mirror of cudarc_optim::OptimParams (kernels/optim_common.cuh). Built by make_kernel_params only.
struct KernelParams {
    float lr;
    float beta1;
    float beta2;
    float eps;
    float weight_decay;
    float momentum;
    float dampening;
    float alpha;
    float lr_decay;
    float grad_scale;
    float max_unorm;
    std::int32_t step;
    std::int32_t nesterov;
    float inv_grad_scale;
    float step_size;
    float bias_correction2_sqrt;
    float decay;
};
static_assert(sizeof(KernelParams) == 68 && alignof(KernelParams) == 4);
static_assert(offsetof(KernelParams, max_unorm) == 40 && offsetof(KernelParams, step) == 44);
static_assert(offsetof(KernelParams, inv_grad_scale) == 52 && offsetof(KernelParams, decay) == 64);

// Mirror of cudarc_optim::OptimTensor. Device addresses; unused pointers are 0.
struct TensorDesc {
    std::uint64_t param = 0;    // T[numel]
    std::uint64_t grad = 0;     // T[numel]
    std::uint64_t state1 = 0;   // float[numel] or std::uint8_t[numel] codes; see state_count()
    std::uint64_t state2 = 0;   // same, Adam/AdamW only
    std::uint64_t absmax1 = 0;  // 8-bit: float[absmax_count(numel)]
    std::uint64_t absmax2 = 0;  // 8-bit: float[absmax_count(numel)]
    std::uint64_t unorm =
        0;  // max_unorm > 0: float[unorm_workspace_floats(numel, format)]; if 0, not clipped
    std::int64_t numel = 0;
};
static_assert(sizeof(TensorDesc) == 64 && alignof(TensorDesc) == 8);
static_assert(offsetof(TensorDesc, grad) == 8 && offsetof(TensorDesc, absmax1) == 32 &&
              offsetof(TensorDesc, unorm) == 48 && offsetof(TensorDesc, numel) == 56);

// Mirror of cudarc_optim::OptimChunk: elements [offset, offset + count) of tensors[tensor].
struct Chunk {
    std::int32_t tensor = 0;
    std::int32_t count = 0;
    std::int64_t offset = 0;
};
static_assert(sizeof(Chunk) == 16 && alignof(Chunk) == 8 && offsetof(Chunk, offset) == 8);

inline constexpr unsigned kBlockThreads = 256;
inline constexpr std::int64_t kQuantBlock = 256;  // elements per absmax

// Elements one block handles at a time (4 or 8 per thread). Chunks start at multiples of it.
[[nodiscard]] constexpr std::int64_t tile_elements(StateFormat format) noexcept {
    return format == StateFormat::blockwise8 ? 2048 : 1024;
}

// The embedded source file holding the kernels for `format`.
[[nodiscard]] std::string_view kernel_source(StateFormat format) noexcept;
// The extern "C" symbol of one kernel.
[[nodiscard]] std::string kernel_name(Algorithm algorithm, DType dtype, StateFormat format,
                                      KernelLayout layout, KernelPass pass);
// Preprocessor defines (name, value) that keep only (algorithm, dtype)'s 4 kernels in the module:
// CUDARC_OPTIM_ALGORITHM = int(algorithm), CUDARC_OPTIM_DTYPE = int(dtype).
[[nodiscard]] std::vector<std::pair<std::string, std::string>> compile_defines(Algorithm algorithm,
                                                                               DType dtype);

// Validates `hyper` (throws cudarc::Error naming the bad field) and derives the kernel's fields in
// double: inv_grad_scale, step_size, bias_correction2_sqrt, decay.
[[nodiscard]] KernelParams make_kernel_params(Algorithm algorithm, const HyperParams& hyper);

// How many state arrays `algorithm` keeps: 2 (Adam, AdamW), 1, or 0 (SGD without momentum).
[[nodiscard]] int state_count(Algorithm algorithm, const HyperParams& hyper) noexcept;
// The code map for state 1 or 2: signed for first moments and momentum, unsigned for second moments
// (Adam's state2, RMSprop's square average, Adagrad's sum of squares), which are never negative.
[[nodiscard]] MapSign state_map(Algorithm algorithm, int state) noexcept;

[[nodiscard]] constexpr std::int64_t absmax_count(std::int64_t numel) noexcept {
    return (numel + kQuantBlock - 1) / kQuantBlock;
}
[[nodiscard]] constexpr std::int64_t tile_count(std::int64_t numel, StateFormat format) noexcept {
    return (numel + tile_elements(format) - 1) / tile_elements(format);
}
// Floats in one tensor's max_unorm workspace: the squared norm, then one partial sum per tile.
[[nodiscard]] constexpr std::int64_t unorm_workspace_floats(std::int64_t numel, StateFormat format) noexcept {
    return 1 + tile_count(numel, format);
}

// Dynamic shared memory for the update pass of (format, dtype) on a device of compute capability
// `major` (CUDA; 0 for HIP): the 8-bit kernels' tile buffers on sm_90 and later, else 0.
[[nodiscard]] std::size_t dynamic_shared_bytes(StateFormat format, DType dtype, int major) noexcept;
// Threads per block of the update pass: kBlockThreads plus the producer warp of the 8-bit kernels'
// tile copies on sm_90 and later.
[[nodiscard]] unsigned update_block_threads(StateFormat format, int major) noexcept;

// Grid for the tensor layout (the kernels accept any grid). fp32 state: one block per tile, which
// measured fastest on an H200 (fp32 AdamW at 256M parameters moved 4.25 TB/s, the copy rate, against
// 3.9-4.0 TB/s with a grid-stride grid of 4-64 blocks per multiprocessor). 8-bit state: at most one
// wave of resident blocks (resident_per_multiprocessor, from the occupancy calculator, times the
// multiprocessors), since each block first stages 40 KB of code maps into shared memory.
[[nodiscard]] unsigned recommended_grid(std::int64_t numel, StateFormat format, int multiprocessors,
                                        int resident_per_multiprocessor);

// Grid for the multi-tensor layout: one block per chunk for fp32 state; for 8-bit state at most one
// wave of resident blocks, each looping over chunks (see recommended_grid).
[[nodiscard]] unsigned recommended_multi_grid(std::size_t chunks, StateFormat format, int multiprocessors,
                                              int resident_per_multiprocessor);

// Cuts tensors of the given sizes into chunks of at most max_chunk_elements (rounded down to whole
// tiles, at least one tile), each starting at a multiple of tile_elements(format). Throws
// cudarc::Error for a negative size or more tensors than an int can index. The default measured
// best on an H200 (1024 x 256K fp32 AdamW: 1.05x the bytes/bandwidth floor; 64K chunks: 1.08x).
[[nodiscard]] std::vector<Chunk> make_chunks(std::span<const std::int64_t> numels, StateFormat format,
                                             std::int64_t max_chunk_elements = 16384);

}  // namespace cudarc::optim::abi

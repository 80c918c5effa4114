// Optimizer kernels, part 1: the kernel ABI structs and every piece of per-element arithmetic.
//
// This header compiles three ways: under NVRTC, under hiprtc, and as plain C++20 on the host. The host
// build is how CI (which has no GPU) tests the kernels' own arithmetic: half/bfloat16 conversion,
// nearest-code quantization and the per-element optimizer updates run bit for bit as on the device,
// because every rounding step is spelled out (see cudarc_optim::fp below).
//
// Note: no toolkit header is included (NVRTC and hiprtc see no cuda_fp16.h or <cuda/std/...>); the
// host build includes <bit>, <cmath> and <cstdint> only. The kernel names (name expressions) and how to
// launch them live in src/optim/kernel_abi.hpp; docs/optimizers.md has the formulas.
#pragma once

#if defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__) || defined(__CUDACC__) || defined(__HIPCC__)
#define CUDARC_OPTIM_DEVICE_COMPILER 1
#define CUDARC_OPTIM_FN __device__ __forceinline__
#else
#define CUDARC_OPTIM_DEVICE_COMPILER 0
#define CUDARC_OPTIM_FN inline
#include <bit>
#include <cmath>
#include <cstdint>
#endif

namespace cudarc_optim {

typedef long long i64;
typedef unsigned short u16;
typedef unsigned char u8;

// ---------------------------------------------------------------------------------------------------
// The ABI: passed to the kernels by value (OptimParams, OptimTensor) or through device memory
// (arrays of OptimTensor and OptimChunk for the multi-tensor kernels). The host uses these very structs
// (src/optim/kernel_abi.hpp); no mirror.

// The optimizer's terms, numbered as the public enums cudarc::optim::UpdateRule, ElementType and
// StatePrecision number them (src/optim/kernel_abi.cpp asserts it): the kernel templates take these
// values as arguments (kernels/optim.cu).
enum UpdateRule {
    kAdam = 0,
    kAdamW = 1,
    kSgd = 2,
    kLion = 3,
    kRmsprop = 4,
    kAdagrad = 5,
    kAdemamix = 6,
    kLamb = 7,
    kLars = 8
};
enum ElementType { kFp32 = 0, kFp16 = 1, kBf16 = 2 };
enum StatePrecision { kStateFp32 = 0, kStateBlockwise8 = 1 };

// Hyper-parameters of one step. step, inv_grad_scale, step_size, bias_correction2_sqrt, decay and the
// complements (and AdEMAMix's alpha and beta3) are derived on the host from the others
// (cudarc::optim::abi::make_kernel_params), in double, as torch does in Python; the ones that follow the step
// by derive_step below. Note [Complements]: an EMA's weight of the new value, 1 - beta, is rounded once from
// the caller's double beta, as torch rounds its double 1 - beta to the float tensors' type; 1.0f minus the
// float beta would differ by beta's own rounding (0.999f = 0.99900001: 1 - beta2 off by 1.3e-5 relative).
// Note: rules whose needs are disjoint share fields (accessors below), so the block stays small: it is passed
// by value to every launch, and its size moved the register allocation of the 8-bit multi-tensor kernels
// (docs/optimizers.md, "Kernel ABI").
struct OptimParams {
    float lr;              // learning rate
    float beta1;           // Adam/AdamW/Lion/AdEMAMix/LAMB
    float beta2;           // Adam/AdamW/Lion/AdEMAMix/LAMB
    float eps;             // Adam/AdamW/RMSprop/Adagrad/AdEMAMix/LAMB
    float weight_decay;    // L2 (added to the gradient), decoupled (AdamW/Lion/AdEMAMix), LAMB's, LARS'
    float momentum;        // SGD, LARS
    float dampening;       // SGD; LARS: its trust coefficient (trust_coefficient()); AdEMAMix: 1 - this
                           // step's beta3 (slow_decay_complement())
    float alpha;           // RMSprop smoothing constant; AdEMAMix: this step's weight of the slow EMA
    float lr_decay;        // Adagrad; AdEMAMix: this step's beta3 (slow_decay())
    float grad_scale;      // the stored gradient is grad_scale times the true one (loss scaling)
    float max_unorm;       // > 0: the update's L2 norm per tensor is clipped to this; 0: no clipping
    int step;              // 1-based number of this step (torch's state['step'] after its increment)
    int nesterov;          // SGD: nonzero for Nesterov momentum
    float inv_grad_scale;  // float(1 / grad_scale)
    float step_size;       // Adam/AdamW/AdEMAMix: lr / (1 - beta1^step); LAMB: 1 / (1 - beta1^step);
                           // Adagrad: lr / (1 + (step-1) lr_decay)
    float bias_correction2_sqrt;  // Adam/AdamW/AdEMAMix/LAMB: sqrt(1 - beta2^step)
    float decay;                  // AdamW/Lion/AdEMAMix: 1 - lr * weight_decay
    float beta1_complement;       // 1 - beta1 (Note [Complements]); RMSprop: 1 - alpha
                                  // (smoothing_complement()); SGD: 1 - dampening (dampening_complement())
    float beta2_complement;       // 1 - beta2 (Adam/AdamW/Lion/AdEMAMix/LAMB)
};

// One tensor: its parameter and gradient (same dtype), its state and, for max_unorm, its workspace.
struct OptimTensor {
    void* param;       // T[numel]
    const void* grad;  // T[numel]
    void* state1;      // float[numel] (fp32 state) or u8[numel] codes (8-bit); null when unused
    void* state2;      // same, for Adam/AdamW's second moment
    float* absmax1;    // 8-bit: float[ceil(numel / 256)]
    float* absmax2;    // 8-bit: float[ceil(numel / 256)]
    float* unorm;      // max_unorm > 0: float[1 + tiles]; [0] = the squared update norm
    i64 numel;
};

// One CUDA block's share of a multi-tensor launch: elements [offset, offset + count) of tensor `tensor`.
struct OptimChunk {
    int tensor;
    int count;
    i64 offset;
};

static_assert(sizeof(OptimParams) == 76, "OptimParams layout changed: update docs/optimizers.md");
static_assert(sizeof(OptimTensor) == 64, "OptimTensor layout changed: update docs/optimizers.md");
static_assert(sizeof(OptimChunk) == 16, "OptimChunk layout changed: update docs/optimizers.md");

// The options a step's derived values come from (derive_step), in double as the caller gave them (the
// logarithms taken on the host with std::log, once per change of options).
struct StepSchedule {
    double lr;
    double beta1;
    double beta2;
    double lr_decay;
    double alpha;      // AdEMAMix: the slow EMA's final weight
    double beta3;      // AdEMAMix: the slow EMA's final decay
    double log_beta1;  // AdEMAMix with a beta3 warm-up: ln(beta1), ln(beta3)
    double log_beta3;
    double t_alpha;  // AdEMAMix: warm-up steps of alpha and beta3 (0: none)
    double t_beta3;
};

// A capturable group's step in device memory (Note [Capturable steps], kernels/optim_device.cuh): the
// capturable kernels read `params`, and the last block of a step's last launch to read them advances
// `count` and derives the next step's `params` from `schedule`. The host writes it only through
// store_step (kernels/optim.cu), in stream order.
struct OptimStepState {
    OptimParams params;     // the pending step's: step = count + 1
    unsigned readers;       // blocks of the step's last launch that have read `params` (0 between steps)
    i64 count;              // steps taken (torch's state['step'])
    StepSchedule schedule;  // the options the derived fields of `params` come from
};

static_assert(sizeof(StepSchedule) == 80, "StepSchedule layout changed: update docs/optimizers.md");
static_assert(sizeof(OptimStepState) == 168, "OptimStepState layout changed: update docs/optimizers.md");

// The shared fields of OptimParams, by the names their rules use.
CUDARC_OPTIM_FN float& trust_coefficient(OptimParams& p) {
    return p.dampening;
}
CUDARC_OPTIM_FN float trust_coefficient(const OptimParams& p) {
    return p.dampening;
}
CUDARC_OPTIM_FN float& slow_decay(OptimParams& p) {
    return p.lr_decay;
}
CUDARC_OPTIM_FN float slow_decay(const OptimParams& p) {
    return p.lr_decay;
}
// AdEMAMix: 1 - this step's beta3 (derive_step), in SGD's dampening (SGD's kernels read only its complement).
CUDARC_OPTIM_FN float& slow_decay_complement(OptimParams& p) {
    return p.dampening;
}
CUDARC_OPTIM_FN float slow_decay_complement(const OptimParams& p) {
    return p.dampening;
}
// RMSprop's 1 - alpha and SGD's 1 - dampening, in the complement of beta1 (which neither uses).
CUDARC_OPTIM_FN float& smoothing_complement(OptimParams& p) {
    return p.beta1_complement;
}
CUDARC_OPTIM_FN float smoothing_complement(const OptimParams& p) {
    return p.beta1_complement;
}
CUDARC_OPTIM_FN float& dampening_complement(OptimParams& p) {
    return p.beta1_complement;
}
CUDARC_OPTIM_FN float dampening_complement(const OptimParams& p) {
    return p.beta1_complement;
}

// --- The state a rule keeps ---
// state1: first moment / momentum / square average / sum of squares; AdEMAMix: its fast EMA m1 and, at
// element state3_offset(numel) of the same array, its slow EMA m2 (with 8-bit state, m2's absmax values
// start at absmax3_offset(numel) of absmax1). state2: the second moment (Adam, AdamW, AdEMAMix, LAMB).
// The offsets keep m2 as aligned as m1 (256 elements and 64 absmax values), for vector loads and copies.
constexpr CUDARC_OPTIM_FN i64 state3_offset(i64 numel) {
    return (numel + 255) / 256 * 256;
}
constexpr CUDARC_OPTIM_FN i64 absmax3_offset(i64 numel) {
    return ((numel + 255) / 256 + 63) / 64 * 64;
}
// Note: not constexpr (unlike the new predicates below): a constexpr uses_state2 let the front end fold
// its tests earlier and changed the 8-bit kernels' code order.
CUDARC_OPTIM_FN bool uses_state2(int rule) {
    return rule == kAdam || rule == kAdamW || rule == kAdemamix || rule == kLamb;
}
constexpr CUDARC_OPTIM_FN bool uses_state3(int rule) {
    return rule == kAdemamix;
}
// LAMB and LARS scale each tensor's update by a trust ratio of two norms, which their first pass computes
// (docs/optimizers.md, "Trust ratios").
constexpr CUDARC_OPTIM_FN bool uses_trust_ratio(int rule) {
    return rule == kLamb || rule == kLars;
}
// Sums per tile (and per tensor) of the first pass: the squared update norm, and with a trust ratio
// the squared parameter norm too.
constexpr CUDARC_OPTIM_FN int norm_count(int rule) {
    return uses_trust_ratio(rule) ? 2 : 1;
}

// Work decomposition (also in kernel_abi.hpp): a block of kThreads threads handles one tile at a time.
// fp32 state: 4 elements per thread; 8-bit state: 8, so 32 threads cover one quantization block.
enum : int { kThreads = 256, kQuantBlock = 256, kTileFp32 = kThreads * 4, kTile8 = kThreads * 8 };

// 8-bit state on sm_90 and later: the tensor memory accelerator copies the block's coming tiles into
// tile_stages() buffers in dynamic shared memory (optim_device.cuh, "Tiles through shared memory"). A
// buffer holds one tile's parameters, gradients, both states' codes and both states' 8 absmax values.
// The update launch provides tile_pipeline_bytes() of dynamic shared memory (kernel_abi.hpp:
// dynamic_shared_bytes); with less, the kernels load directly. Note: on an H200 (1024 x 256K AdamW)
// three buffers beat two with fp32 parameters (1.18 against 1.25 ms) and were within run-to-run
// noise of two with bf16 (1.02-1.04 against 1.01 ms). 16-bit parameters take four: their tiles are
// smaller, so three left fewer bytes in flight per multiprocessor than fp32's (four still fit two blocks
// per multiprocessor; fp32 parameters' would not).
enum : int { kMaxTileStages = 4 };
constexpr CUDARC_OPTIM_FN int tile_stages(int element_bytes) {
    return element_bytes == 2 ? 4 : 3;
}
// The update launch of those kernels also brings a producer warp that issues the copies: blockDim.x =
// kThreads + kProducerThreads (kernel_abi.hpp: update_block_threads); with kThreads alone they load
// directly.
enum : int { kProducerThreads = 32 };
// (AdEMAMix's buffers hold a third state: `states` 3.)
constexpr CUDARC_OPTIM_FN int tile_buffer_bytes(int element_bytes, int states = 2) {
    return kTile8 * (2 * element_bytes + states) + states * (kTile8 / kQuantBlock) * 4;
}
constexpr CUDARC_OPTIM_FN int tile_pipeline_bytes(int element_bytes, int states = 2) {
    return tile_stages(element_bytes) * tile_buffer_bytes(element_bytes, states);
}
// The states a rule's tile buffers hold.
constexpr CUDARC_OPTIM_FN int tile_states(int rule) {
    return uses_state3(rule) ? 3 : 2;
}

// Note [Dynamic chunks]: a multi-tensor 8-bit update with fp32 parameters (and the tile copies) hands
// out its chunks at run time: block b starts with chunk b, then each block's producer takes the next
// chunk from a counter in device memory as it goes, and publishes each run to the computing warps
// through shared memory (optim_device.cuh, "Chunks handed out"). Taken statically (block b: chunks b,
// b + gridDim.x, ...), blocks of equal work ended up to a quarter apart on an H200 (the two blocks of
// an SM do not progress alike), and the launch waited for the slowest. The chunks are short then
// (kDynamicChunkTiles tiles, kernel_abi.hpp: chunk_elements), so the last ones even out. The counter
// is the 64-bit word kChunkCounterOffset bytes past the launch's blocks_done (the group's header,
// group_layout.hpp); the last block to finish resets it to 0, so every launch and graph replay starts
// from 0. With 16-bit parameters the same scheme ran slower on an H200 (1.52x the floor of the
// 1024-tensor small inventory against 1.39x), so those keep static chunks; so does AdEMAMix, whose
// kernels spill with it.
enum : int { kDynamicChunkTiles = 2, kChunkCounterOffset = 16 };
constexpr CUDARC_OPTIM_FN bool hands_out_chunks(int element_bytes, bool third_state) {
    return element_bytes == 4 && !third_state;
}

// ---------------------------------------------------------------------------------------------------
// Float arithmetic with every rounding explicit.
//
// Note: the *_rn intrinsics are never contracted into FMAs nor replaced by approximations, whatever
// the compile options (--fmad, --use_fast_math). So the per-tensor and multi-tensor kernels, and the
// host build of this header, round identically: that is what makes their results bitwise equal.
namespace fp {
#if CUDARC_OPTIM_DEVICE_COMPILER
CUDARC_OPTIM_FN float add(float a, float b) {
    return __fadd_rn(a, b);
}
CUDARC_OPTIM_FN float sub(float a, float b) {
    return __fsub_rn(a, b);
}
CUDARC_OPTIM_FN float mul(float a, float b) {
    return __fmul_rn(a, b);
}
CUDARC_OPTIM_FN float div(float a, float b) {
    return __fdiv_rn(a, b);
}
CUDARC_OPTIM_FN float sqrt(float a) {
    return __fsqrt_rn(a);
}
CUDARC_OPTIM_FN float fma(float a, float b, float c) {
    return __fmaf_rn(a, b, c);
}
CUDARC_OPTIM_FN unsigned bits(float a) {
    return __float_as_uint(a);
}
CUDARC_OPTIM_FN float from_bits(unsigned b) {
    return __uint_as_float(b);
}
// max and min where a NaN operand, quiet or signaling, yields the other operand: one FMNMX
// instruction on NVIDIA. (C's fmaxf may return a quieted NaN for a signaling one, and does on x86
// and AMD, hence the spelled-out form elsewhere.)
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
CUDARC_OPTIM_FN float fmax(float a, float b) {
    return fmaxf(a, b);
}
CUDARC_OPTIM_FN float fmin(float a, float b) {
    return fminf(a, b);
}
#else
CUDARC_OPTIM_FN float fmax(float a, float b) {
    return a != a ? b : (b != b ? a : (a > b ? a : b));
}
CUDARC_OPTIM_FN float fmin(float a, float b) {
    return a != a ? b : (b != b ? a : (a < b ? a : b));
}
#endif
// The 8-bit kernels' square root and reciprocal: the hardware's approximations on NVIDIA (relative
// error about 2^-23, one instruction each, where __fsqrt_rn and __fdiv_rn take about ten plus a
// branch); HIP keeps the rounded operations. See docs/optimizers.md, "8-bit arithmetic".
// sqrt_normal(a) is sqrt(max(a, FLT_MIN)): NaN and values below the smallest normal float count as
// that float, so the result is >= 2^-63 and its reciprocal is finite; the flush-to-zero forms of
// the instructions then need no scaling for subnormals.
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
CUDARC_OPTIM_FN float sqrt_normal(float a) {
    float r;
    asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(fmaxf(a, 1.17549435e-38f)));
    return r;
}
CUDARC_OPTIM_FN float rcp_approx(float a) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
}
#else
CUDARC_OPTIM_FN float sqrt_normal(float a) {
    return __fsqrt_rn(fmax(a, 1.17549435e-38f));
}
CUDARC_OPTIM_FN float rcp_approx(float a) {
    return __fdiv_rn(1.0f, a);
}
#endif
#else
// Note: the project builds with -std=c++20 (no GNU extensions), under which GCC does not contract
// a * b + c, so each operator below rounds once, as the device intrinsics do.
inline float add(float a, float b) {
    return a + b;
}
inline float sub(float a, float b) {
    return a - b;
}
inline float mul(float a, float b) {
    return a * b;
}
inline float div(float a, float b) {
    return a / b;
}
inline float sqrt(float a) {
    return std::sqrt(a);
}
inline float fma(float a, float b, float c) {
    return std::fma(a, b, c);
}
inline unsigned bits(float a) {
    return std::bit_cast<unsigned>(a);
}
inline float from_bits(unsigned b) {
    return std::bit_cast<float>(b);
}
inline float fmax(float a, float b) {
    return a != a ? b : (b != b ? a : (a > b ? a : b));
}
inline float fmin(float a, float b) {
    return a != a ? b : (b != b ? a : (a < b ? a : b));
}
// The host has no approximate instructions: the rounded operations stand in for them.
inline float sqrt_normal(float a) {
    return std::sqrt(fmax(a, 1.17549435e-38f));
}
inline float rcp_approx(float a) {
    return 1.0f / a;
}
#endif
#if CUDARC_OPTIM_DEVICE_COMPILER
// (fabsf becomes a free operand modifier of the instruction that uses it.)
CUDARC_OPTIM_FN float abs(float a) {
    return fabsf(a);
}
#else
CUDARC_OPTIM_FN float abs(float a) {
    return from_bits(bits(a) & 0x7fffffffu);
}
#endif
CUDARC_OPTIM_FN float max(float a, float b) {
    return a > b ? a : b;
}
// By bits, so that fast-math options cannot fold the test away.
CUDARC_OPTIM_FN bool is_finite(float a) {
    return (bits(a) & 0x7f800000u) != 0x7f800000u;
}
}  // namespace fp

// ---------------------------------------------------------------------------------------------------
// IEEE binary16 and bfloat16 <-> float, by bit manipulation. Widening is exact; narrowing rounds to
// nearest, ties to even; overflow gives infinity; NaN stays NaN (quieted, sign and top payload kept).

CUDARC_OPTIM_FN float half_to_float(u16 h) {
    const unsigned sign = (static_cast<unsigned>(h) & 0x8000u) << 16;
    const unsigned exponent = (static_cast<unsigned>(h) >> 10) & 0x1fu;
    const unsigned mantissa = static_cast<unsigned>(h) & 0x3ffu;
    if (exponent == 0x1fu) return fp::from_bits(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
    if (exponent != 0) return fp::from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    // Zero or subnormal: mantissa * 2^-24, both factors exact in float, so the product is too.
    const float magnitude = fp::mul(static_cast<float>(mantissa), 5.9604644775390625e-8f);
    return fp::from_bits(sign | fp::bits(magnitude));
}

CUDARC_OPTIM_FN u16 float_to_half(float f) {
    const unsigned x = fp::bits(f);
    const unsigned sign = (x >> 16) & 0x8000u;
    const unsigned ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return static_cast<u16>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // NaN
    if (ax >= 0x477ff000u) return static_cast<u16>(sign | 0x7c00u);  // >= 65520 rounds to infinity
    if (ax >= 0x38800000u) {
        // Normal half: rebias the exponent (127 -> 15) and round away the low 13 mantissa bits;
        // a carry out of the mantissa correctly bumps the exponent.
        const unsigned rounded = ax + 0xfffu + ((ax >> 13) & 1u);
        return static_cast<u16>(sign | ((rounded - (112u << 23)) >> 13));
    }
    if (ax <= 0x33000000u) return static_cast<u16>(sign);  // <= 2^-25 rounds to zero (the tie too)
    // Subnormal half: the result is round(|f| * 2^24) in units of 2^-24.
    const unsigned exponent = ax >> 23;  // 102..112
    const unsigned mantissa = (ax & 0x7fffffu) | 0x800000u;
    const unsigned shift = 126u - exponent;  // 14..24
    unsigned q = mantissa >> shift;
    const unsigned rest = mantissa & ((1u << shift) - 1u);
    const unsigned halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (q & 1u) != 0)) ++q;
    return static_cast<u16>(sign | q);
}

CUDARC_OPTIM_FN float bf16_to_float(u16 b) {
    return fp::from_bits(static_cast<unsigned>(b) << 16);
}

CUDARC_OPTIM_FN u16 float_to_bf16(float f) {
    const unsigned x = fp::bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<u16>((x >> 16) | 0x40u);  // quiet NaN
    return static_cast<u16>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// The parameter/gradient element types: Fp32, Fp16 (IEEE binary16) and Bf16, stored as float or u16.
// On NVIDIA devices the conversions are single cvt instructions (bf16 from sm_80 on), which round
// exactly as the functions above; they differ only in the payload of a NaN. store_pair packs two
// values into one word (first value in the low half).
#if (defined(__CUDACC_RTC__) || defined(__CUDACC__)) && defined(__CUDA_ARCH__)
#define CUDARC_OPTIM_PTX_CONVERSIONS 1
#else
#define CUDARC_OPTIM_PTX_CONVERSIONS 0
#endif
struct Fp32 {
    typedef float Storage;
    static CUDARC_OPTIM_FN float load(float x) { return x; }
    static CUDARC_OPTIM_FN float store(float x) { return x; }
};
struct Fp16 {
    typedef u16 Storage;
    static CUDARC_OPTIM_FN float load(u16 x) {
#if CUDARC_OPTIM_PTX_CONVERSIONS
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
        return f;
#else
        return half_to_float(x);
#endif
    }
    // The value in the low (high = false) or high half of a word holding two.
    static CUDARC_OPTIM_FN float load_half(unsigned word, bool high) {
#if CUDARC_OPTIM_PTX_CONVERSIONS
        float f;
        if (high) {
            asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.f32.f16 %0, hi;\n\t}"
                : "=f"(f)
                : "r"(word));
        } else {
            asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.f32.f16 %0, lo;\n\t}"
                : "=f"(f)
                : "r"(word));
        }
        return f;
#else
        return half_to_float(static_cast<u16>(high ? word >> 16 : word));
#endif
    }
    static CUDARC_OPTIM_FN u16 store(float x) {
#if CUDARC_OPTIM_PTX_CONVERSIONS
        u16 h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
        return h;
#else
        return float_to_half(x);
#endif
    }
    static CUDARC_OPTIM_FN unsigned store_pair(float first, float second) {
#if CUDARC_OPTIM_PTX_CONVERSIONS && __CUDA_ARCH__ >= 800
        unsigned packed;
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(second), "f"(first));
        return packed;
#else
        return store(first) | (static_cast<unsigned>(store(second)) << 16);
#endif
    }
};
struct Bf16 {
    typedef u16 Storage;
    static CUDARC_OPTIM_FN float load(u16 x) { return bf16_to_float(x); }
    // The value in the low (high = false) or high half of a word holding two.
    static CUDARC_OPTIM_FN float load_half(unsigned word, bool high) {
        return fp::from_bits(high ? (word & 0xffff0000u) : (word << 16));
    }
    static CUDARC_OPTIM_FN u16 store(float x) {
#if CUDARC_OPTIM_PTX_CONVERSIONS && __CUDA_ARCH__ >= 800
        u16 b;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(x));
        return b;
#else
        return float_to_bf16(x);
#endif
    }
    static CUDARC_OPTIM_FN unsigned store_pair(float first, float second) {
#if CUDARC_OPTIM_PTX_CONVERSIONS && __CUDA_ARCH__ >= 800
        unsigned packed;
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(second), "f"(first));
        return packed;
#else
        return store(first) | (static_cast<unsigned>(store(second)) << 16);
#endif
    }
};

// ---------------------------------------------------------------------------------------------------
// 8-bit blockwise quantization against a sorted 256-entry code map (signed or unsigned dynamic map).
//
// The nearest code is defined by a search: find `lo`, the last code <= x (0 if x is below every code),
// then take lo + 1 instead if it is strictly nearer (ties go to the lower code). Because the maps
// hold 0, a negative x never lands on a positive code.

// The reference search: a branch-free binary search over the 256 codes.
CUDARC_OPTIM_FN int last_code_at_or_below(const float* map, float x) {
    int lo = 0;
    for (int step = 128; step > 0; step >>= 1) {
        if (map[lo + step] <= x) lo += step;
    }
    return lo;
}

CUDARC_OPTIM_FN u8 nearest_code(const float* map, float x) {
    int lo = last_code_at_or_below(map, x);
    if (lo < 255 && fp::sub(map[lo + 1], x) < fp::sub(x, map[lo])) ++lo;
    return static_cast<u8>(lo);
}

// What the kernels' qmap1/qmap2 point to: a sorted map of 256 distinct codes and a table that finds
// the nearest code with one shared-memory load, one addition and no loop or branch.
//
// The nearest code only grows with x. The search clamps x into [-map_limit(), map_limit()] (a NaN
// becomes -map_limit(), whose code, 0, is the binary search's code of NaN) and turns it into a
// search word: the encoding of its magnitude (magnitudes below 2^-24 count as 2^-24), inverted when
// x is negative, so that the word grows with x within each sign. The word's top 16 bits (sign,
// exponent and 7 fraction bits) pick a bucket and its low 16 bits are the key. A bucket's code steps
// at most once: from `low`, the code of the bucket's lowest x, to low + 1 at key `step` (or never,
// step = 0x10000). Its table entry is
//     (low << 24) + 0x1000000 - step - (top 16 bits of the bucket's words << 16)      (mod 2^32)
// so that word + entry = (low << 24) + 0x1000000 + key - step, whose top byte is low + (key >= step):
// the code. A bucket (1/128 of a binade) is narrower than the distance between any two steps of the
// dynamic maps; build_map_image checks that, and the rest, for the map it is given.
// Note: the binary search (8 dependent loads), then a bucket table plus a short walk, then a table
// plus a threshold array, then this table with a compare and a select, were in turn the 8-bit
// kernels' bottleneck.
enum : int { kMapBucketBase = 103 << 7, kMapBuckets = 25 << 7 };
enum : unsigned { kMapNoStep = 0x10000u };
struct QuantMapImage {
    float code[256];
    // [0, kMapBuckets): x >= +0, magnitude growing; then as many for x <= -0, magnitude falling.
    unsigned bucket[2 * kMapBuckets];
};
static_assert(sizeof(QuantMapImage) == 26624,
              "QuantMapImage layout changed: update src/optim/quantization.hpp");

// The clamp: the largest float below 2 (so every clamped magnitude has a bucket) and the smallest
// magnitude with a bucket of its own.
CUDARC_OPTIM_FN float map_limit() {
    return fp::from_bits(0x3fffffffu);
}
CUDARC_OPTIM_FN float map_smallest() {
    return fp::from_bits(static_cast<unsigned>(kMapBucketBase) << 16);  // 2^-24
}

// The search word of a value within the clamp (NaN excluded).
CUDARC_OPTIM_FN unsigned search_word(float clamped) {
    const unsigned magnitude = fp::bits(fp::fmax(fp::abs(clamped), map_smallest()));
    return magnitude ^ (0u - (fp::bits(clamped) >> 31));
}
// The code of a search word, in the top byte of the result (the low bytes are left over). The word's
// entry is bucket[((word >> 16) & 0x7fff) - kMapBucketBase]: the top bits with the sign bit (set in
// every negative word) dropped, less the base. Note: its byte offset is written so that the base's
// subtraction folds into the load's address (a shift, a mask and the load instead of four instructions).
CUDARC_OPTIM_FN unsigned coded_word(const unsigned* buckets, unsigned word) {
    const int offset = static_cast<int>((word >> 14) & 0x1fffcu) - 4 * kMapBucketBase;
    return word +
           *reinterpret_cast<const unsigned*>(reinterpret_cast<const unsigned char*>(buckets) + offset);
}
// The same for a word of x >= +0, which has no sign bit to drop (one instruction fewer).
CUDARC_OPTIM_FN unsigned coded_word_nonnegative(const unsigned* buckets, unsigned word) {
    return word + buckets[static_cast<int>(word >> 16) - kMapBucketBase];
}
// The table entry of a bucket whose words have top bits `prefix`.
CUDARC_OPTIM_FN unsigned bucket_entry(unsigned low, unsigned step, unsigned prefix) {
    return (low << 24) + 0x1000000u - step - (prefix << 16);
}

// The code search over an image's bucket words (either sign) for x known to be finite with
// |x| <= map_limit(), the code in the top byte.
CUDARC_OPTIM_FN unsigned coded_word_within(const unsigned* buckets, float x) {
    return coded_word(buckets, search_word(x));
}
// The same for a map with no negative codes and code[0] == 0 (every x <= 0 gets code 0): the
// positive buckets alone, no sign. build_map_image says whether a map allows it.
CUDARC_OPTIM_FN unsigned coded_word_within_nonnegative(const unsigned* buckets, float x) {
    return coded_word_nonnegative(buckets, fp::bits(fp::fmax(x, map_smallest())));
}
// The same two for any x, NaN included, through the clamp.
CUDARC_OPTIM_FN unsigned coded_word_of(const unsigned* buckets, float x) {
    return coded_word_within(buckets, fp::fmin(fp::fmax(x, -map_limit()), map_limit()));
}
CUDARC_OPTIM_FN unsigned coded_word_of_nonnegative(const unsigned* buckets, float x) {
    // (NaN and x <= 0 become 2^-24, whose code is 0.)
    return coded_word_nonnegative(buckets, fp::bits(fp::fmin(fp::fmax(x, map_smallest()), map_limit())));
}

CUDARC_OPTIM_FN u8 nearest_code(const QuantMapImage& image, float x) {
    return static_cast<u8>(coded_word_of(image.bucket, x) >> 24);
}
CUDARC_OPTIM_FN u8 nearest_code_nonnegative(const QuantMapImage& image, float x) {
    return static_cast<u8>(coded_word_of_nonnegative(image.bucket, x) >> 24);
}

// Floats in the order of their values (-0 just below +0), as unsigned keys, and back.
CUDARC_OPTIM_FN unsigned float_order_key(float x) {
    const unsigned b = fp::bits(x);
    return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}
CUDARC_OPTIM_FN float float_from_order_key(unsigned key) {
    return fp::from_bits((key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key);
}

// The smallest float whose code is above k (k < 255), by bisection over order keys.
CUDARC_OPTIM_FN float first_float_above_code(const float* map, int k) {
    unsigned lo = float_order_key(fp::from_bits(0xff800000u));  // -infinity: code 0 <= k
    unsigned hi = float_order_key(fp::from_bits(0x7f800000u));  // +infinity: code 255 > k
    while (hi - lo > 1u) {
        const unsigned mid = lo + (hi - lo) / 2u;
        if (nearest_code(map, float_from_order_key(mid)) > k) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    return float_from_order_key(hi);
}

// The table entry for the clamped values [lowest, highest] (one bucket, whose search words have top
// bits `prefix`), or false when the code steps more than once there, or steps between two values of
// the same key.
CUDARC_OPTIM_FN bool bucket_entry_of(const float* map, float lowest, float highest, unsigned prefix,
                                     unsigned& entry) {
    const int low = nearest_code(map, lowest);
    const int high = nearest_code(map, highest);
    if (high == low) {
        entry = bucket_entry(static_cast<unsigned>(low), kMapNoStep, prefix);
        return true;
    }
    if (high != low + 1) return false;
    const float step = first_float_above_code(map, low);
    const float before = float_from_order_key(float_order_key(step) - 1u);
    const unsigned step_key = search_word(step) & 0xffffu;
    if (!((search_word(before) & 0xffffu) < step_key)) return false;
    entry = bucket_entry(static_cast<unsigned>(low), step_key, prefix);
    return true;
}

// Fills `image` from a sorted map (on the host, once per map). Returns false when the map does not
// fit the search: codes that are not distinct and increasing, beyond the clamp, or two steps in one
// bucket. Sets `nonnegative_search` when coded_word_of_nonnegative serves the map too.
CUDARC_OPTIM_FN bool build_map_image(const float* map, QuantMapImage& image, bool& nonnegative_search) {
    for (int i = 0; i < 255; ++i) {
        if (!(map[i] < map[i + 1])) return false;
    }
    const float limit = map_limit();
    if (nearest_code(map, limit) != 255 || nearest_code(map, -limit) != 0) return false;
    for (int i = 0; i < 256; ++i) image.code[i] = map[i];
    for (int b = 0; b < kMapBuckets; ++b) {
        // Magnitudes [low_magnitude, high_magnitude]; the first bucket also holds everything below.
        const unsigned prefix = static_cast<unsigned>(b + kMapBucketBase);
        const float low_magnitude = b == 0 ? 0.0f : fp::from_bits(prefix << 16);
        const float high_magnitude = b == kMapBuckets - 1 ? limit : fp::from_bits((prefix << 16) | 0xffffu);
        if (!bucket_entry_of(map, low_magnitude, high_magnitude, prefix, image.bucket[b])) return false;
        if (!bucket_entry_of(map, -high_magnitude, -low_magnitude, 0xffffu - prefix,
                             image.bucket[2 * kMapBuckets - 1 - b]))
            return false;
    }
    nonnegative_search = map[0] == 0.0f;
    return true;
}

// 1 / absmax, or 0 for an all-zero block (every value then quantizes to the code of 0).
// (On NVIDIA the correctly rounded reciprocal, the same value as the division, in fewer instructions.)
CUDARC_OPTIM_FN float inverse_absmax(float absmax) {
#if (defined(__CUDACC_RTC__) || defined(__CUDACC__)) && defined(__CUDA_ARCH__)
    const float inverse = __frcp_rn(absmax);
#else
    const float inverse = fp::div(1.0f, absmax);
#endif
    return absmax > 0.0f ? inverse : 0.0f;
}

// Note [Reciprocal of an absmax]: quantizing a block multiplies its values by 1 / absmax, which must be
// the correctly rounded reciprocal (the value the host's division and the reference give). __frcp_rn is
// that, but it tests the exponent and branches to a slow path, twice per tile in the 8-bit kernels, which
// are bound by instruction issue: the branches split their quantization code, and leaving them out made
// the multi-tensor step 4-6% faster on an H200. The slow path serves only inputs or results beyond the
// normal range. For absmax in [2^-126, 2^126] the approximate reciprocal with one fma correction (the
// fast path of __frcp_rn) is the correctly rounded reciprocal; the GPU test
// optim.absmax_reciprocal_without_a_branch_is_correctly_rounded compares the two for every such float.
// The kernels take it when every absmax of the block is 0 or in that range, and inverse_absmax otherwise.
CUDARC_OPTIM_FN bool absmax_in_reciprocal_range(float absmax) {
    const unsigned b = fp::bits(absmax);  // (+0, a positive peak, infinity or NaN)
    return b == 0u || b - 0x00800000u <= 0x7e800000u - 0x00800000u;
}
// inverse_absmax for absmax_in_reciprocal_range(absmax), without a branch.
CUDARC_OPTIM_FN float inverse_absmax_in_range(float absmax) {
#if (defined(__CUDACC_RTC__) || defined(__CUDACC__)) && defined(__CUDA_ARCH__)
    const float approximate = fp::rcp_approx(absmax);
    const float inverse = fp::fma(approximate, fp::fma(-absmax, approximate, 1.0f), approximate);
#else
    const float inverse = fp::div(1.0f, absmax);
#endif
    return absmax > 0.0f ? inverse : 0.0f;
}

CUDARC_OPTIM_FN float dequantize(const float* map, u8 code, float absmax) {
    return fp::mul(map[code], absmax);
}

// ---------------------------------------------------------------------------------------------------
// The values a step derives from its number, in double with every operation correctly rounded.
//
// Note [Per-step values]: step_size and bias_correction2_sqrt depend on the step number. The host derives
// them for an ordinary step (abi::make_kernel_params) and the device for a capturable one (whose number
// lives in device memory), both with derive_step below: the same sequence of correctly rounded double
// operations (no pow, no contraction: the intrinsics on the device, plain operators on the host, which
// the project builds without contraction), then one rounding to float. So a capturable step and an
// ordinary one give bitwise the same floats, and the same parameters and state. beta^step is taken by
// binary powering (at most 2 x 63 multiplications); the relative error of 1 - beta^step is then about
// 2^-53 / (1 - beta) at worst (1e-13 for beta = 0.999), far below the float rounding that follows.
namespace fp64 {
#if CUDARC_OPTIM_DEVICE_COMPILER
CUDARC_OPTIM_FN double add(double a, double b) {
    return __dadd_rn(a, b);
}
CUDARC_OPTIM_FN double sub(double a, double b) {
    return __dsub_rn(a, b);
}
CUDARC_OPTIM_FN double mul(double a, double b) {
    return __dmul_rn(a, b);
}
CUDARC_OPTIM_FN double div(double a, double b) {
    return __ddiv_rn(a, b);
}
CUDARC_OPTIM_FN double sqrt(double a) {
    return __dsqrt_rn(a);
}
CUDARC_OPTIM_FN float to_float(double a) {
    return __double2float_rn(a);
}
CUDARC_OPTIM_FN double floor(double a) {
    return ::floor(a);
}
CUDARC_OPTIM_FN double scale2(double a, int exponent) {
    return ::ldexp(a, exponent);
}
#else
inline double add(double a, double b) {
    return a + b;
}
inline double sub(double a, double b) {
    return a - b;
}
inline double mul(double a, double b) {
    return a * b;
}
inline double div(double a, double b) {
    return a / b;
}
inline double sqrt(double a) {
    return std::sqrt(a);
}
inline float to_float(double a) {
    return static_cast<float>(a);
}
inline double floor(double a) {
    return std::floor(a);
}
inline double scale2(double a, int exponent) {
    return std::ldexp(a, exponent);
}
#endif
// base^exponent (exponent >= 0) by binary powering.
CUDARC_OPTIM_FN double power(double base, i64 exponent) {
    double result = 1.0;
    while (exponent > 0) {
        if ((exponent & 1) != 0) result = mul(result, base);
        exponent >>= 1;
        if (exponent > 0) base = mul(base, base);
    }
    return result;
}
// e^x for x <= 0 from correctly rounded operations only (floor and the scaling by 2^k are exact): x =
// k ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, Cody and Waite's reduction), e^r by its Taylor series to
// r^13 / 13! (the rest is below 2^-58), times 2^k. Within a few units of 2^-53 of e^x, and the same bits
// on host and device. Below -708 (where e^x is subnormal) it gives 0.
CUDARC_OPTIM_FN double exp_nonpositive(double x) {
    if (!(x > -708.0)) return 0.0;
    const double ln2_high = 6.93147180369123816490e-01;  // 32 significant bits: k * ln2_high is exact
    const double ln2_low = 1.90821492927058770002e-10;
    const double k = floor(add(mul(x, 1.44269504088896338700e+00), 0.5));
    const double r = sub(sub(x, mul(k, ln2_high)), mul(k, ln2_low));
    double series = 1.0;
    for (int n = 13; n >= 1; --n) series = add(1.0, div(mul(series, r), static_cast<double>(n)));
    return scale2(series, static_cast<int>(k));
}
}  // namespace fp64

// Fills the fields of `p` that depend on the step number (step, step_size, bias_correction2_sqrt, and
// AdEMAMix's alpha, beta3 and 1 - beta3) for 1-based step `step` of `rule`; the other fields are left as
// they are.
CUDARC_OPTIM_FN void derive_step(int rule, const StepSchedule& s, i64 step, OptimParams& p) {
    p.step = step < 0x7fffffff ? static_cast<int>(step) : 0x7fffffff;
    p.step_size = fp64::to_float(s.lr);
    p.bias_correction2_sqrt = 1.0f;
    const double t = static_cast<double>(step);
    if (rule == kAdam || rule == kAdamW || rule == kAdemamix || rule == kLamb) {
        // LAMB's lr multiplies the trust ratio's update instead (docs/optimizers.md).
        const double numerator = rule == kLamb ? 1.0 : s.lr;
        p.step_size = fp64::to_float(fp64::div(numerator, fp64::sub(1.0, fp64::power(s.beta1, step))));
        p.bias_correction2_sqrt = fp64::to_float(fp64::sqrt(fp64::sub(1.0, fp64::power(s.beta2, step))));
    } else if (rule == kAdagrad) {
        const double decays = fp64::mul(fp64::sub(t, 1.0), s.lr_decay);
        p.step_size = fp64::to_float(fp64::div(s.lr, fp64::add(1.0, decays)));
    }
    if (rule == kAdemamix) {
        // The warm-ups of the AdEMAMix paper (and bitsandbytes): alpha grows linearly to its value over
        // t_alpha steps, min(t alpha / t_alpha, alpha); beta3 from beta1 to its value over t_beta3 steps,
        // linearly in the EMA's half-life: exp(ln b1 ln b3 / ((1 - t / T) ln b3 + (t / T) ln b1)), at most
        // beta3, and beta3 itself from step T on.
        double alpha = s.alpha;
        if (s.t_alpha > 0.0) {
            const double ramp = fp64::div(fp64::mul(t, s.alpha), s.t_alpha);
            alpha = ramp < s.alpha ? ramp : s.alpha;
        }
        double beta3 = s.beta3;
        if (s.t_beta3 > 0.0 && t < s.t_beta3) {
            const double fraction = fp64::div(t, s.t_beta3);
            const double denominator =
                fp64::add(fp64::mul(fp64::sub(1.0, fraction), s.log_beta3), fp64::mul(fraction, s.log_beta1));
            const double scheduled =
                fp64::exp_nonpositive(fp64::div(fp64::mul(s.log_beta1, s.log_beta3), denominator));
            beta3 = scheduled < s.beta3 ? scheduled : s.beta3;
        }
        p.alpha = fp64::to_float(alpha);
        slow_decay(p) = fp64::to_float(beta3);
        slow_decay_complement(p) = fp64::to_float(fp64::sub(1.0, beta3));  // Note [Complements]
    }
}

// ---------------------------------------------------------------------------------------------------
// One element of one step: the formulas of docs/optimizers.md, in float.

CUDARC_OPTIM_FN bool has_decoupled_decay(int rule) {
    return rule == kAdamW || rule == kLion || rule == kAdemamix;
}
// The rules whose weight decay is added to the gradient (L2). LAMB adds it to the Adam direction instead.
CUDARC_OPTIM_FN bool has_l2_decay(int rule) {
    return !has_decoupled_decay(rule) && rule != kLamb;
}

// Updates the element's state (s1, s2, s3) and sets `update`, the amount the parameter moves down:
//     new param = param * decay - scale * update
// (decay = 1 unless AdamW/Lion/AdEMAMix; scale from max_unorm, or LAMB's lr times its trust ratio). s3 is
// AdEMAMix's slow EMA. `factor` is LARS' lr times its trust ratio, which enters its momentum (its
// update is the new momentum, applied with scale 1). Returns false, leaving the state untouched and
// update = 0, when grad / grad_scale is not finite.
template <int A>
CUDARC_OPTIM_FN bool update_element(const OptimParams& hp, float param, float grad, float& s1, float& s2,
                                    float& s3, float& update, float factor = 1.0f) {
    float g = fp::mul(grad, hp.inv_grad_scale);
    if (!fp::is_finite(g)) {
        update = 0.0f;
        return false;
    }
    if (has_l2_decay(A) && hp.weight_decay != 0.0f) g = fp::fma(hp.weight_decay, param, g);
    if (A == kAdam || A == kAdamW || A == kLamb) {
        s1 = fp::fma(hp.beta1, s1, fp::mul(hp.beta1_complement, g));
        s2 = fp::fma(hp.beta2, s2, fp::mul(fp::mul(hp.beta2_complement, g), g));
        const float denom = fp::add(fp::div(fp::sqrt(s2), hp.bias_correction2_sqrt), hp.eps);
        update = fp::mul(hp.step_size, fp::div(s1, denom));
        // LAMB's direction: the bias-corrected Adam ratio plus the weight decay (step_size = 1 / (1 - b1^t)).
        if (A == kLamb) update = fp::fma(hp.weight_decay, param, update);
    } else if (A == kSgd) {
        float direction = g;
        if (hp.momentum != 0.0f) {
            // torch starts the buffer as a copy of the first gradient (no dampening on step 1).
            s1 = hp.step <= 1 ? g : fp::fma(hp.momentum, s1, fp::mul(dampening_complement(hp), g));
            direction = hp.nesterov != 0 ? fp::fma(hp.momentum, s1, g) : s1;
        }
        update = fp::mul(hp.lr, direction);
    } else if (A == kLion) {
        const float c = fp::fma(hp.beta1, s1, fp::mul(hp.beta1_complement, g));
        update = c > 0.0f ? hp.lr : (c < 0.0f ? -hp.lr : 0.0f);
        s1 = fp::fma(hp.beta2, s1, fp::mul(hp.beta2_complement, g));
    } else if (A == kRmsprop) {
        s1 = fp::fma(hp.alpha, s1, fp::mul(fp::mul(smoothing_complement(hp), g), g));
        update = fp::mul(hp.lr, fp::div(g, fp::add(fp::sqrt(s1), hp.eps)));
    } else if (A == kAdagrad) {
        s1 = fp::fma(g, g, s1);
        update = fp::mul(hp.step_size, fp::div(g, fp::add(fp::sqrt(s1), hp.eps)));
    } else if (A == kAdemamix) {
        s1 = fp::fma(hp.beta1, s1, fp::mul(hp.beta1_complement, g));
        s3 = fp::fma(slow_decay(hp), s3, fp::mul(slow_decay_complement(hp), g));
        s2 = fp::fma(hp.beta2, s2, fp::mul(fp::mul(hp.beta2_complement, g), g));
        const float denom = fp::add(fp::div(fp::sqrt(s2), hp.bias_correction2_sqrt), hp.eps);
        const float mixed = fp::fma(hp.step_size, s1, fp::mul(fp::mul(hp.lr, hp.alpha), s3));
        update = fp::div(mixed, denom);
    } else {  // kLars: g is the gradient plus its weight decay
        s1 = fp::fma(hp.momentum, s1, fp::mul(factor, g));
        update = s1;
    }
    return true;
}

// The new parameter value; `scale` is 1 unless max_unorm clips this tensor's update (LAMB: lr times its
// trust ratio; LARS ignores it: its factor is in its update already).
template <int A>
CUDARC_OPTIM_FN float apply_update(const OptimParams& hp, float param, float update, float scale) {
    if (A == kLars) return fp::sub(param, update);
    const float decayed = has_decoupled_decay(A) ? fp::mul(param, hp.decay) : param;
    return fp::sub(decayed, fp::mul(scale, update));
}

// min(1, max_unorm / sqrt(norm_squared)); 1 when clipping is off.
CUDARC_OPTIM_FN float unorm_scale(float max_unorm, float norm_squared) {
    if (!(max_unorm > 0.0f)) return 1.0f;
    const float norm = fp::sqrt(norm_squared);
    return norm > max_unorm ? fp::div(max_unorm, norm) : 1.0f;
}

// A trust-ratio rule's scale of its tensor's update from the first pass's sums (docs/optimizers.md,
// "Trust ratios"), 1 where a norm is 0: LAMB lr ||p|| / ||u|| (u: its direction, weight decay included);
// LARS lr eta ||p|| / (||g|| + wd ||p||) (g: the unscaled gradient).
template <int A>
CUDARC_OPTIM_FN float trust_scale(const OptimParams& hp, float first_squared, float param_squared) {
    const float first = fp::sqrt(first_squared);
    const float param = fp::sqrt(param_squared);
    if (!(first > 0.0f && param > 0.0f)) return hp.lr;
    if (A == kLamb) return fp::mul(hp.lr, fp::div(param, first));
    return fp::mul(hp.lr,
                   fp::div(fp::mul(trust_coefficient(hp), param), fp::fma(hp.weight_decay, param, first)));
}

// --- The 8-bit kernels' element update ---
// The formulas of update_element for a gradient already known to be finite, with the division and
// the square root in a form that costs two approximate instructions (docs/optimizers.md, "8-bit
// arithmetic"); the state arithmetic is update_element's, bit for bit:
//   Adam/AdamW  u = (step_size * bc2) * m * rcp(sqrt(v) + eps * bc2)   (= step_size m / (sqrt(v) / bc2 +
//   eps)) AdEMAMix    u = ((step_size * bc2) * m1 + (lr * alpha * bc2) * m2) * rcp(sqrt(nu) + eps * bc2)
//   RMSprop     u = (lr * g) * rcp(sqrt(v) + eps);   Adagrad  u = (clr * g) * rcp(sqrt(sum) + eps)
// Note: these kernels are bound by instruction issue, where the rounded __fdiv_rn and __fsqrt_rn
// (about ten instructions and a branch each) made up a large share of the work. LAMB and LARS keep
// 32-bit state only.
template <int A>
CUDARC_OPTIM_FN float update_8bit(const OptimParams& hp, float param, float g, float& s1, float& s2,
                                  float& s3) {
    static_assert(!uses_trust_ratio(A), "LAMB and LARS keep 32-bit state");
    if (has_l2_decay(A) && hp.weight_decay != 0.0f) g = fp::fma(hp.weight_decay, param, g);
    if (A == kAdam || A == kAdamW) {
        s1 = fp::fma(hp.beta1, s1, fp::mul(hp.beta1_complement, g));
        s2 = fp::fma(hp.beta2, s2, fp::mul(fp::mul(hp.beta2_complement, g), g));
        const float denom = fp::add(fp::sqrt_normal(s2), fp::mul(hp.eps, hp.bias_correction2_sqrt));
        return fp::mul(fp::mul(fp::mul(hp.step_size, hp.bias_correction2_sqrt), s1), fp::rcp_approx(denom));
    } else if (A == kSgd) {
        float direction = g;
        if (hp.momentum != 0.0f) {
            s1 = hp.step <= 1 ? g : fp::fma(hp.momentum, s1, fp::mul(dampening_complement(hp), g));
            direction = hp.nesterov != 0 ? fp::fma(hp.momentum, s1, g) : s1;
        }
        return fp::mul(hp.lr, direction);
    } else if (A == kLion) {
        const float c = fp::fma(hp.beta1, s1, fp::mul(hp.beta1_complement, g));
        s1 = fp::fma(hp.beta2, s1, fp::mul(hp.beta2_complement, g));
        return c > 0.0f ? hp.lr : (c < 0.0f ? -hp.lr : 0.0f);
    } else if (A == kRmsprop) {
        s1 = fp::fma(hp.alpha, s1, fp::mul(fp::mul(smoothing_complement(hp), g), g));
        return fp::mul(fp::mul(hp.lr, g), fp::rcp_approx(fp::add(fp::sqrt_normal(s1), hp.eps)));
    } else if (A == kAdagrad) {
        s1 = fp::fma(g, g, s1);
        return fp::mul(fp::mul(hp.step_size, g), fp::rcp_approx(fp::add(fp::sqrt_normal(s1), hp.eps)));
    } else {  // kAdemamix
        s1 = fp::fma(hp.beta1, s1, fp::mul(hp.beta1_complement, g));
        s3 = fp::fma(slow_decay(hp), s3, fp::mul(slow_decay_complement(hp), g));
        s2 = fp::fma(hp.beta2, s2, fp::mul(fp::mul(hp.beta2_complement, g), g));
        const float bc2 = hp.bias_correction2_sqrt;
        const float denom = fp::add(fp::sqrt_normal(s2), fp::mul(hp.eps, bc2));
        const float mixed =
            fp::fma(fp::mul(hp.step_size, bc2), s1, fp::mul(fp::mul(fp::mul(hp.lr, hp.alpha), bc2), s3));
        return fp::mul(mixed, fp::rcp_approx(denom));
    }
}

// The 8-bit kernels' new parameter: p * decay - scale * u, with one rounding for the subtraction.
template <int A>
CUDARC_OPTIM_FN float apply_update_8bit(const OptimParams& hp, float param, float update, float scale) {
    const float decayed = has_decoupled_decay(A) ? fp::mul(param, hp.decay) : param;
    return fp::fma(-scale, update, decayed);
}

// Which map a state uses: unsigned (no negative codes) for second moments, signed otherwise. The
// host uploads maps by this rule (abi::state_map) and the 8-bit kernels pick their search by it.
constexpr CUDARC_OPTIM_FN bool uses_unsigned_map(int rule, int state) {
    return state == 2 || rule == kRmsprop || rule == kAdagrad;
}

// Which states a rule keeps (SGD keeps its momentum buffer only when momentum != 0).
CUDARC_OPTIM_FN bool uses_state1(int rule, const OptimParams& hp) {
    return rule != kSgd || hp.momentum != 0.0f;
}

}  // namespace cudarc_optim

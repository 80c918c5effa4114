// Optimizer kernels, part 1: the kernel ABI structs and every piece of per-element arithmetic.
//
// This header compiles three ways: under NVRTC, under hiprtc, and as plain C++20 on the host. The host
// build is how CI (which has no GPU) tests the kernels' own arithmetic: half/bfloat16 conversion,
// nearest-code quantization and the per-element optimizer updates run bit for bit as on the device,
// because every rounding step is spelled out (see cudarc_optim::fp below).
//
// Note: no toolkit header is included (NVRTC and hiprtc see no cuda_fp16.h or <cuda/std/...>); the
// host build includes <bit>, <cmath> and <cstdint> only. The host mirror of the structs, the kernel
// names and how to launch them live in src/optim/kernel_abi.hpp; docs/optimizers.md has the formulas.
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
// (arrays of OptimTensor and OptimChunk for the multi-tensor kernels). Mirrored on the host in
// src/optim/kernel_abi.hpp, which asserts the same sizes and offsets.

enum Algorithm { kAdam = 0, kAdamW = 1, kSgd = 2, kLion = 3, kRmsprop = 4, kAdagrad = 5 };

// Hyper-parameters of one step. The last four fields are derived on the host from the others
// (cudarc::optim::abi::make_kernel_params), in double, as torch does in Python.
struct OptimParams {
    float lr;                     // learning rate
    float beta1;                  // Adam/AdamW/Lion
    float beta2;                  // Adam/AdamW/Lion
    float eps;                    // Adam/AdamW/RMSprop/Adagrad
    float weight_decay;           // L2 (added to the gradient) or decoupled (AdamW, Lion)
    float momentum;               // SGD
    float dampening;              // SGD
    float alpha;                  // RMSprop smoothing constant
    float lr_decay;               // Adagrad
    float grad_scale;             // the stored gradient is grad_scale times the true one (loss scaling)
    float max_unorm;              // > 0: the update's L2 norm per tensor is clipped to this; 0: no clipping
    int step;                     // 1-based number of this step (torch's state['step'] after its increment)
    int nesterov;                 // SGD: nonzero for Nesterov momentum
    float inv_grad_scale;         // float(1 / grad_scale)
    float step_size;              // Adam/AdamW: lr / (1 - beta1^step); Adagrad: lr / (1 + (step-1) lr_decay)
    float bias_correction2_sqrt;  // Adam/AdamW: sqrt(1 - beta2^step)
    float decay;                  // AdamW/Lion: 1 - lr * weight_decay
};

// One tensor: its parameter and gradient (same dtype), its state and, for max_unorm, its workspace.
struct OptimTensor {
    void* param;       // T[numel]
    const void* grad;  // T[numel]
    void* state1;      // float[numel] (32-bit) or u8[numel] codes (8-bit); null when unused
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

static_assert(sizeof(OptimParams) == 68, "OptimParams layout changed: update src/optim/kernel_abi.hpp");
static_assert(sizeof(OptimTensor) == 64, "OptimTensor layout changed: update src/optim/kernel_abi.hpp");
static_assert(sizeof(OptimChunk) == 16, "OptimChunk layout changed: update src/optim/kernel_abi.hpp");

// Work decomposition (also in kernel_abi.hpp): a block of kThreads threads handles one tile at a time.
// 32-bit state: 4 elements per thread; 8-bit state: 8, so 32 threads cover one quantization block.
enum : int { kThreads = 256, kQuantBlock = 256, kTile32 = kThreads * 4, kTile8 = kThreads * 8 };

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
#endif
CUDARC_OPTIM_FN float abs(float a) {
    return from_bits(bits(a) & 0x7fffffffu);
}
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

// The parameter/gradient element types: F32, F16 (IEEE binary16) and BF16, stored as float or u16.
struct F32 {
    typedef float Storage;
    static CUDARC_OPTIM_FN float load(float x) { return x; }
    static CUDARC_OPTIM_FN float store(float x) { return x; }
};
struct F16 {
    typedef u16 Storage;
    static CUDARC_OPTIM_FN float load(u16 x) { return half_to_float(x); }
    static CUDARC_OPTIM_FN u16 store(float x) { return float_to_half(x); }
};
struct BF16 {
    typedef u16 Storage;
    static CUDARC_OPTIM_FN float load(u16 x) { return bf16_to_float(x); }
    static CUDARC_OPTIM_FN u16 store(float x) { return float_to_bf16(x); }
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

// What the kernels' qmap1/qmap2 point to: the codes, plus a table that lets the search start right
// next to its answer. |x| is bucketed by the top 16 bits of its float encoding (exponent and 7
// fraction bits, so a bucket is narrower than any gap between codes of the dynamic maps) over
// [2^-24, 2); smaller and larger values share the first and last bucket. Each entry is a lower bound
// of `lo` for every x of that bucket and sign, so walking up from it finds exactly the `lo` of the
// binary search, for any sorted map; for the dynamic maps the walk takes at most one step.
// Note: 8 dependent shared-memory loads per search made quantization the 8-bit kernels' bottleneck.
enum : int { kMapBucketBase = 103 << 7, kMapBuckets = 25 << 7 };
struct QuantMapImage {
    float code[256];
    u8 first_positive[kMapBuckets];  // for x >= +0
    u8 first_negative[kMapBuckets];  // for x <= -0
};
static_assert(sizeof(QuantMapImage) == 7424, "QuantMapImage layout changed: update src/optim/kernel_abi.hpp");

CUDARC_OPTIM_FN int map_bucket(unsigned magnitude_bits) {
    const int bucket = static_cast<int>(magnitude_bits >> 16) - kMapBucketBase;
    return bucket < 0 ? 0 : (bucket >= kMapBuckets ? kMapBuckets - 1 : bucket);
}

// Fills `image` from a sorted map (done once, on the host).
CUDARC_OPTIM_FN void build_map_image(const float* map, QuantMapImage& image) {
    for (int i = 0; i < 256; ++i) image.code[i] = map[i];
    for (int b = 0; b < kMapBuckets; ++b) {
        // Bucket b holds |x| in [start, end); the first bucket also holds everything below.
        const float start = b == 0 ? 0.0f : fp::from_bits(static_cast<unsigned>(b + kMapBucketBase) << 16);
        const float end = fp::from_bits(static_cast<unsigned>(b + 1 + kMapBucketBase) << 16);
        image.first_positive[b] = static_cast<u8>(last_code_at_or_below(map, start));
        // Every x of the bucket is > -end; the last bucket reaches down to -infinity.
        image.first_negative[b] =
            b == kMapBuckets - 1 ? 0 : static_cast<u8>(last_code_at_or_below(map, -end));
    }
}

// The same code as nearest_code(image.code, x), found from the bucket table.
CUDARC_OPTIM_FN u8 nearest_code(const QuantMapImage& image, float x) {
    if (!(x == x)) return 0;  // NaN: where the binary search ends too
    const unsigned bits = fp::bits(x);
    const int bucket = map_bucket(bits & 0x7fffffffu);
    int lo = (bits >> 31) != 0 ? image.first_negative[bucket] : image.first_positive[bucket];
    float below = image.code[lo];
    float above = lo < 255 ? image.code[lo + 1] : below;
#if CUDARC_OPTIM_DEVICE_COMPILER
#pragma unroll 1
#endif
    while (lo < 255 && above <= x) {
        ++lo;
        below = above;
        above = lo < 255 ? image.code[lo + 1] : below;
    }
    if (lo < 255 && fp::sub(above, x) < fp::sub(x, below)) ++lo;
    return static_cast<u8>(lo);
}

// 1 / absmax, or 0 for an all-zero block (every value then quantizes to the code of 0).
CUDARC_OPTIM_FN float inverse_absmax(float absmax) {
    return absmax > 0.0f ? fp::div(1.0f, absmax) : 0.0f;
}

CUDARC_OPTIM_FN u8 quantize(const QuantMapImage& map, float value, float inv_absmax) {
    return nearest_code(map, fp::mul(value, inv_absmax));
}

CUDARC_OPTIM_FN float dequantize(const float* map, u8 code, float absmax) {
    return fp::mul(map[code], absmax);
}

// ---------------------------------------------------------------------------------------------------
// One element of one step: the formulas of docs/optimizers.md, in float.

CUDARC_OPTIM_FN bool has_decoupled_decay(int algorithm) {
    return algorithm == kAdamW || algorithm == kLion;
}

// Updates the element's state (s1, s2) and sets `update`, the amount the parameter moves down:
//     new param = param * decay - scale * update     (decay = 1 unless AdamW/Lion; scale from max_unorm)
// Returns false, leaving s1, s2 untouched and update = 0, when grad / grad_scale is not finite.
template <int A>
CUDARC_OPTIM_FN bool update_element(const OptimParams& hp, float param, float grad, float& s1, float& s2,
                                    float& update) {
    float g = fp::mul(grad, hp.inv_grad_scale);
    if (!fp::is_finite(g)) {
        update = 0.0f;
        return false;
    }
    if (!has_decoupled_decay(A) && hp.weight_decay != 0.0f) g = fp::fma(hp.weight_decay, param, g);
    if (A == kAdam || A == kAdamW) {
        s1 = fp::fma(hp.beta1, s1, fp::mul(fp::sub(1.0f, hp.beta1), g));
        s2 = fp::fma(hp.beta2, s2, fp::mul(fp::mul(fp::sub(1.0f, hp.beta2), g), g));
        const float denom = fp::add(fp::div(fp::sqrt(s2), hp.bias_correction2_sqrt), hp.eps);
        update = fp::mul(hp.step_size, fp::div(s1, denom));
    } else if (A == kSgd) {
        float direction = g;
        if (hp.momentum != 0.0f) {
            // torch starts the buffer as a copy of the first gradient (no dampening on step 1).
            s1 = hp.step <= 1 ? g : fp::fma(hp.momentum, s1, fp::mul(fp::sub(1.0f, hp.dampening), g));
            direction = hp.nesterov != 0 ? fp::fma(hp.momentum, s1, g) : s1;
        }
        update = fp::mul(hp.lr, direction);
    } else if (A == kLion) {
        const float c = fp::fma(hp.beta1, s1, fp::mul(fp::sub(1.0f, hp.beta1), g));
        update = c > 0.0f ? hp.lr : (c < 0.0f ? -hp.lr : 0.0f);
        s1 = fp::fma(hp.beta2, s1, fp::mul(fp::sub(1.0f, hp.beta2), g));
    } else if (A == kRmsprop) {
        s1 = fp::fma(hp.alpha, s1, fp::mul(fp::mul(fp::sub(1.0f, hp.alpha), g), g));
        update = fp::mul(hp.lr, fp::div(g, fp::add(fp::sqrt(s1), hp.eps)));
    } else {  // kAdagrad
        s1 = fp::fma(g, g, s1);
        update = fp::mul(hp.step_size, fp::div(g, fp::add(fp::sqrt(s1), hp.eps)));
    }
    return true;
}

// The new parameter value; `scale` is 1 unless max_unorm clips this tensor's update.
template <int A>
CUDARC_OPTIM_FN float apply_update(const OptimParams& hp, float param, float update, float scale) {
    const float decayed = has_decoupled_decay(A) ? fp::mul(param, hp.decay) : param;
    return fp::sub(decayed, fp::mul(scale, update));
}

// min(1, max_unorm / sqrt(norm_squared)); 1 when clipping is off.
CUDARC_OPTIM_FN float unorm_scale(float max_unorm, float norm_squared) {
    if (!(max_unorm > 0.0f)) return 1.0f;
    const float norm = fp::sqrt(norm_squared);
    return norm > max_unorm ? fp::div(max_unorm, norm) : 1.0f;
}

// Which states an algorithm keeps (SGD keeps its momentum buffer only when momentum != 0).
CUDARC_OPTIM_FN bool uses_state1(int algorithm, const OptimParams& hp) {
    return algorithm != kSgd || hp.momentum != 0.0f;
}
CUDARC_OPTIM_FN bool uses_state2(int algorithm) {
    return algorithm == kAdam || algorithm == kAdamW;
}

}  // namespace cudarc_optim

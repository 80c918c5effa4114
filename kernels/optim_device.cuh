// Optimizer kernels, part 2: device-only machinery shared by optim_32bit.cu and optim_8bit.cu.
//
// Work is cut into tiles (kTile32 or kTile8 elements, see optim_common.cuh). The per-tensor kernels
// walk a tensor's tiles with a grid-stride loop; in the multi-tensor kernels block b takes chunks b,
// b + gridDim.x, ... (a chunk is a run of whole tiles of one tensor). Both call the same tile
// routine, so every element sees the same arithmetic in either layout, and the max_unorm partial
// sums (one per tile, summed in a fixed order) are identical too: per-tensor and multi-tensor
// results are bitwise equal.
#pragma once

#include "optim_common.cuh"

// sm_90 and later copy 8-bit tiles into shared memory ahead of use ("Tiles through shared memory").
#if (defined(__CUDACC_RTC__) || defined(__CUDACC__)) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CUDARC_OPTIM_TILE_COPIES 1
#else
#define CUDARC_OPTIM_TILE_COPIES 0
#endif

// A butterfly over 32 lanes. Note: __shfl_xor_sync is CUDA's; HIP's __shfl_xor takes a width, and
// 32 keeps the groups the same on AMD's 64-wide wavefronts.
#if defined(__HIPCC_RTC__) || defined(__HIP__)
#define CUDARC_OPTIM_SHFL_XOR(value, mask) __shfl_xor((value), (mask), 32)
#else
#define CUDARC_OPTIM_SHFL_XOR(value, mask) __shfl_xor_sync(0xffffffffu, (value), (mask))
#endif

namespace cudarc_optim {

// Vectors moved as one access (ld/st.global.v4 / .v2 on NVIDIA, dwordx4 / x2 on AMD).
struct alignas(16) Vec4f {
    float x, y, z, w;
};
struct alignas(16) Vec4u {
    unsigned x, y, z, w;
};
struct alignas(8) Vec2u {
    unsigned x, y;
};

// Tells the compiler that the arrays an 8-bit tile touches lie in global memory, so that it emits
// global loads and stores rather than generic ones (which must first find the address's space).
__device__ __forceinline__ void assume_global_arrays(const OptimTensor& t, bool with1, bool with2) {
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
    __builtin_assume(__isGlobal(t.param));
    __builtin_assume(__isGlobal(t.grad));
    if (with1) __builtin_assume(__isGlobal(t.state1) && __isGlobal(t.absmax1));
    if (with2) __builtin_assume(__isGlobal(t.state2) && __isGlobal(t.absmax2));
#endif
}

__device__ __forceinline__ bool aligned_to(const void* pointer, unsigned long long bytes) {
    return (reinterpret_cast<unsigned long long>(pointer) & (bytes - 1ull)) == 0;
}

// --- 4 elements (32-bit state path) ---
__device__ __forceinline__ void load_vec4(const float* p, float (&out)[4]) {
    const Vec4f v = *reinterpret_cast<const Vec4f*>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
}
__device__ __forceinline__ void store_vec4(float* p, const float (&in)[4]) {
    const Vec4f v = {in[0], in[1], in[2], in[3]};
    *reinterpret_cast<Vec4f*>(p) = v;
}
__device__ __forceinline__ void load_vec4(const u16* p, u16 (&out)[4]) {
    const Vec2u v = *reinterpret_cast<const Vec2u*>(p);
    out[0] = static_cast<u16>(v.x), out[1] = static_cast<u16>(v.x >> 16);
    out[2] = static_cast<u16>(v.y), out[3] = static_cast<u16>(v.y >> 16);
}
__device__ __forceinline__ void store_vec4(u16* p, const u16 (&in)[4]) {
    const Vec2u v = {in[0] | (static_cast<unsigned>(in[1]) << 16),
                     in[2] | (static_cast<unsigned>(in[3]) << 16)};
    *reinterpret_cast<Vec2u*>(p) = v;
}

// --- 8 elements (8-bit state path) ---
__device__ __forceinline__ void load_vec8(const float* p, float (&out)[8]) {
    const Vec4f a = reinterpret_cast<const Vec4f*>(p)[0];
    const Vec4f b = reinterpret_cast<const Vec4f*>(p)[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z,
    out[7] = b.w;
}
__device__ __forceinline__ void store_vec8(float* p, const float (&in)[8]) {
    const Vec4f a = {in[0], in[1], in[2], in[3]};
    const Vec4f b = {in[4], in[5], in[6], in[7]};
    reinterpret_cast<Vec4f*>(p)[0] = a;
    reinterpret_cast<Vec4f*>(p)[1] = b;
}
__device__ __forceinline__ void load_vec8(const u16* p, u16 (&out)[8]) {
    const Vec4u v = *reinterpret_cast<const Vec4u*>(p);
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
    for (int k = 0; k < 4; ++k) {
        out[2 * k] = static_cast<u16>(words[k]);
        out[2 * k + 1] = static_cast<u16>(words[k] >> 16);
    }
}
__device__ __forceinline__ void store_vec8(u16* p, const u16 (&in)[8]) {
    unsigned words[4];
    for (int k = 0; k < 4; ++k) words[k] = in[2 * k] | (static_cast<unsigned>(in[2 * k + 1]) << 16);
    const Vec4u v = {words[0], words[1], words[2], words[3]};
    *reinterpret_cast<Vec4u*>(p) = v;
}
// --- Reductions ---

// Max over the 32 lanes of a group (threads 32k .. 32k+31); every lane gets the result.
// (maxNum: a NaN is dropped; for other values any order gives the same bits.)
__device__ __forceinline__ float group_max(float value) {
    for (int mask = 16; mask > 0; mask >>= 1) value = fp::fmax(value, CUDARC_OPTIM_SHFL_XOR(value, mask));
    return value;
}

// Peaks: maxima of magnitudes that are NaN as soon as one magnitude is. peak(acc, x) folds |x| into
// a peak; group_peak is the peak over a group's 32 lanes. Without NaN, a peak is the maxNum of the
// magnitudes. Note: magnitudes order like their encodings, so the group peak is one integer max
// (redux.sync, sm_80 and later; NaN encodings are above infinity's once the sign is clear).
__device__ __forceinline__ float peak(float acc, float x) {
#if (defined(__CUDACC_RTC__) || defined(__CUDACC__)) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(acc), "f"(fp::abs(x)));
    return r;
#else
    return fp::from_bits(fp::bits(acc) > (fp::bits(x) & 0x7fffffffu) ? fp::bits(acc)
                                                                     : (fp::bits(x) & 0x7fffffffu));
#endif
}
__device__ __forceinline__ float group_peak(float value) {
    unsigned bits = fp::bits(value);
#if (defined(__CUDACC_RTC__) || defined(__CUDACC__)) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("redux.sync.max.u32 %0, %0, 0xffffffff;" : "+r"(bits));
#else
    for (int mask = 16; mask > 0; mask >>= 1) {
        const unsigned other = static_cast<unsigned>(CUDARC_OPTIM_SHFL_XOR(static_cast<int>(bits), mask));
        bits = other > bits ? other : bits;
    }
#endif
    return fp::from_bits(bits);
}

// Sum over the block, in an order fixed by thread index alone (so the result is reproducible
// bit for bit); every thread gets it. `scratch` holds kThreads / 32 floats. Note: a butterfly
// leaves the same bits in every lane because float addition is commutative.
__device__ __forceinline__ float block_sum(float value, float* scratch) {
    for (int mask = 16; mask > 0; mask >>= 1) value = fp::add(value, CUDARC_OPTIM_SHFL_XOR(value, mask));
    __syncthreads();  // the previous use of scratch is over
    if ((threadIdx.x & 31u) == 0) scratch[threadIdx.x >> 5] = value;
    __syncthreads();
    float total = scratch[0];
    for (int group = 1; group < kThreads / 32; ++group) total = fp::add(total, scratch[group]);
    return total;
}

// max_unorm, pass 1 epilogue. Each tile's partial sum of squared updates is already in
// tensor.unorm[1 + tile]. The last block of the launch to finish (counted in *blocks_done) adds
// each tensor's partials in a fixed order into tensor.unorm[0], then resets *blocks_done to 0 so
// the counter is ready for the next launch (and for graph replays) with no host involvement.
// Note: a deterministic sum, instead of one atomicAdd per block, keeps the clipped result
// independent of block scheduling, hence equal across layouts and runs.
template <int kTile>
__device__ void finish_update_norms(const OptimTensor* tensors, int num_tensors, unsigned* blocks_done,
                                    float* scratch) {
    __shared__ int is_last;
    __threadfence();  // this block's partials are visible device-wide before it is counted
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(blocks_done, 1u) == gridDim.x - 1u;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    for (int i = 0; i < num_tensors; ++i) {
        float* unorm = tensors[i].unorm;
        if (unorm == 0) continue;
        const i64 tiles = (tensors[i].numel + kTile - 1) / kTile;
        const volatile float* partials = unorm + 1;  // written by other blocks: bypass stale caches
        float sum = 0.0f;
        for (i64 k = threadIdx.x; k < tiles; k += kThreads) sum = fp::add(sum, partials[k]);
        sum = block_sum(sum, scratch);
        if (threadIdx.x == 0) unorm[0] = sum;
    }
    if (threadIdx.x == 0) *blocks_done = 0u;
}

// The clipping factor for this tensor in the update pass (pass 2, or the only pass).
__device__ __forceinline__ float tensor_update_scale(const OptimTensor& t, const OptimParams& hp) {
    if (!(hp.max_unorm > 0.0f) || t.unorm == 0) return 1.0f;
    return unorm_scale(hp.max_unorm, t.unorm[0]);
}

// --- 32-bit state: one tile, 4 consecutive elements per thread ---
//
// kNormPass: read only, return this thread's sum of squared updates (elements in index order).
// Otherwise: write parameters and state; set `saw_nonfinite` if a gradient element was not finite.
template <int A, class D, bool kNormPass>
__device__ __forceinline__ float tile_32bit(const OptimTensor& t, const OptimParams& hp, i64 begin, i64 end,
                                            float scale, bool vector_ok, bool& saw_nonfinite) {
    typedef typename D::Storage S;
    const i64 first = begin + 4 * static_cast<i64>(threadIdx.x);
    if (first >= end) return 0.0f;
    const int count = end - first >= 4 ? 4 : static_cast<int>(end - first);
    const bool with1 = uses_state1(A, hp);
    const bool with2 = uses_state2(A);
    S* param = static_cast<S*>(t.param) + first;
    const S* grad = static_cast<const S*>(t.grad) + first;
    float* state1 = static_cast<float*>(t.state1) + first;
    float* state2 = static_cast<float*>(t.state2) + first;

    S p_raw[4];
    S g_raw[4];
    float s1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float s2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const bool vector = vector_ok && count == 4;
    if (vector) {
        load_vec4(param, p_raw);
        load_vec4(grad, g_raw);
        if (with1) load_vec4(state1, s1);
        if (with2) load_vec4(state2, s2);
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (j >= count) continue;
            p_raw[j] = param[j];
            g_raw[j] = grad[j];
            if (with1) s1[j] = state1[j];
            if (with2) s2[j] = state2[j];
        }
    }
    float norm_squared = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        if (j >= count) continue;
        const float p = D::load(p_raw[j]);
        float update;
        if (update_element<A>(hp, p, D::load(g_raw[j]), s1[j], s2[j], update)) {
            if (kNormPass) {
                norm_squared = fp::fma(update, update, norm_squared);
            } else {
                p_raw[j] = D::store(apply_update<A>(hp, p, update, scale));
            }
        } else {
            saw_nonfinite = true;
        }
    }
    if (kNormPass) return norm_squared;
    if (vector) {
        store_vec4(param, p_raw);
        if (with1) store_vec4(state1, s1);
        if (with2) store_vec4(state2, s2);
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (j >= count) continue;
            param[j] = p_raw[j];
            if (with1) state1[j] = s1[j];
            if (with2) state2[j] = s2[j];
        }
    }
    return 0.0f;
}

// --- 8-bit blockwise state: one tile, 8 consecutive elements per thread, 32 threads per block of 256 ---
//
// Order within one quantization block (docs/optimizers.md): dequantize the state with the block's
// old absmax; update each element (a non-finite gradient keeps its state value and parameter); new
// absmax = max |state| over the block (including kept values); write parameters from the
// unquantized new state; quantize the state with the new absmax; write codes and absmax.
//
// Two ways through the update, with the same arithmetic per element: the fast one for a thread with
// 8 aligned elements whose gradients are all finite (vector loads and stores, no per-element test),
// and the general one for everything else (the end of a tensor, misaligned arrays, non-finite
// gradients). Both give every element the same bits.

// Parameter stores of 8 converted values: one 16-byte (fp16/bf16) or two (fp32) vector stores.
template <class D>
struct ParamStore8 {
    static __device__ __forceinline__ void store(u16* p, const float (&v)[8]) {
        const Vec4u words = {D::store_pair(v[0], v[1]), D::store_pair(v[2], v[3]), D::store_pair(v[4], v[5]),
                             D::store_pair(v[6], v[7])};
        *reinterpret_cast<Vec4u*>(p) = words;
    }
};
template <>
struct ParamStore8<F32> {
    static __device__ __forceinline__ void store(float* p, const float (&v)[8]) { store_vec8(p, v); }
};

__device__ __forceinline__ unsigned code_byte(const Vec2u& codes, int j) {
    return ((j < 4 ? codes.x : codes.y) >> (8 * (j & 3))) & 0xffu;
}

// Four codes (each in the top byte of a word, as coded_word leaves them) packed into one word, first
// code lowest.
__device__ __forceinline__ unsigned pack_codes(unsigned c0, unsigned c1, unsigned c2, unsigned c3) {
    return __byte_perm(__byte_perm(c0, c1, 0x0073u), __byte_perm(c2, c3, 0x0073u), 0x5410u);
}

// A block's share of one tensor: tiles first, first + stride, ... below end, with elements limited
// to [0, limit) (a chunk ends before the tensor may). Empty when first >= end.
struct TileRun {
    OptimTensor t;
    i64 first;
    i64 end;
    i64 stride;
    i64 limit;
};

// Shared memory for one block: reduction scratch and, for 8-bit state, the parts of the two map
// images the search reads (state 2 is always a second moment, with an unsigned map: the positive
// buckets suffice).
template <bool kEightBit>
struct alignas(16) BlockShared {
    float scratch[kThreads / 32];
    float code1[256];
    float code2[256];
    unsigned bucket1[2 * kMapBuckets];
    unsigned bucket2[kMapBuckets];
    // The tile pipeline's barriers (sm_90 and later).
    unsigned long long full[kTileStages];
    unsigned long long empty[kTileStages];
};
template <>
struct alignas(16) BlockShared<false> {
    float scratch[kThreads / 32];
};

// The code of value * inverse, in the top byte. kWithin: the block's state values are all finite
// and `inverse` is too, so |value * inverse| <= 1 + 2^-22 and the search needs no upper clamp.
template <int A, int kState, bool kWithin>
__device__ __forceinline__ unsigned quantize_8bit(const unsigned* buckets, float value, float inverse) {
    const float x = fp::mul(value, inverse);
    if (uses_unsigned_map(A, kState)) {
        return kWithin ? coded_word_within_nonnegative(buckets, x) : coded_word_of_nonnegative(buckets, x);
    }
    return kWithin ? coded_word_within(buckets, x) : coded_word_of(buckets, x);
}

// The 8 codes of one state in one thread's slice, in the top bytes of q.
template <int A, int kState>
__device__ __forceinline__ void quantize_slice(const unsigned* buckets, const float (&values)[8],
                                               float inverse, bool within, unsigned (&q)[8]) {
    if (within) {
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = quantize_8bit<A, kState, true>(buckets, values[j], inverse);
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = quantize_8bit<A, kState, false>(buckets, values[j], inverse);
    }
}

// A quantization block's absmax from its group peak: the peak itself when the block's state values
// are all finite (`finite`, the common case), else the maxNum over the magnitudes (NaN skipped).
__device__ __forceinline__ void block_absmax(const float (&values)[8], float group_peak_value, float& absmax,
                                             bool& finite) {
    finite = fp::is_finite(group_peak_value);
    absmax = group_peak_value;
    if (!finite) {
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) m = fp::fmax(m, fp::abs(values[j]));
        absmax = group_max(m);
    }
}

// One thread's slice of an 8-bit tile as read from memory: 8 parameters and gradients, 8 codes of
// each state, and the quantization block's absmax of each state.
template <class D>
struct Slice8 {
    typename D::Storage param[8];
    typename D::Storage grad[8];
    Vec2u codes1;
    Vec2u codes2;
    float absmax1;
    float absmax2;
};

// Reads a whole, aligned slice with vector loads and returns true; any other slice is left to
// tile_8bit (returns false, reads nothing).
template <int A, class D>
__device__ __forceinline__ bool load_slice8(const OptimTensor& t, const OptimParams& hp, i64 first, int count,
                                            bool vector_ok, Slice8<D>& slice) {
    typedef typename D::Storage S;
    if (!(vector_ok && count == 8)) return false;
    const unsigned long long block = static_cast<unsigned long long>(first) / kQuantBlock;
    load_vec8(static_cast<const S*>(t.param) + first, slice.param);
    load_vec8(static_cast<const S*>(t.grad) + first, slice.grad);
    slice.codes1 = Vec2u{0u, 0u};
    slice.codes2 = Vec2u{0u, 0u};
    slice.absmax1 = 0.0f;
    slice.absmax2 = 0.0f;
    if (uses_state1(A, hp)) {
        slice.codes1 = *reinterpret_cast<const Vec2u*>(static_cast<const u8*>(t.state1) + first);
        slice.absmax1 = t.absmax1[block];
    }
    if (uses_state2(A)) {
        slice.codes2 = *reinterpret_cast<const Vec2u*>(static_cast<const u8*>(t.state2) + first);
        slice.absmax2 = t.absmax2[block];
    }
    return true;
}

// Elements [first, first + count) of one tile (count in [0, 8]); `loaded` holds them when
// `is_loaded` (a whole, aligned slice), else they are read here element by element.
template <int A, class D, bool kNormPass>
__device__ __forceinline__ float tile_8bit(const OptimTensor& t, const OptimParams& hp, i64 first, int count,
                                           const Slice8<D>& loaded, bool is_loaded, float scale,
                                           const BlockShared<true>& maps, bool& saw_nonfinite) {
    typedef typename D::Storage S;
    const bool with1 = uses_state1(A, hp);
    const bool with2 = uses_state2(A);
    const unsigned long long block = static_cast<unsigned long long>(first) / kQuantBlock;
    S* param = static_cast<S*>(t.param) + first;
    u8* codes1 = static_cast<u8*>(t.state1) + first;
    u8* codes2 = static_cast<u8*>(t.state2) + first;

    Slice8<D> slice;
    if (is_loaded) {
        slice = loaded;
    } else {
        const S* grad = static_cast<const S*>(t.grad) + first;
        unsigned words1[2] = {0u, 0u};
        unsigned words2[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            slice.param[j] = 0, slice.grad[j] = 0;
            if (j >= count) continue;
            slice.param[j] = param[j];
            slice.grad[j] = grad[j];
            if (with1) words1[j >> 2] |= static_cast<unsigned>(codes1[j]) << (8 * (j & 3));
            if (with2) words2[j >> 2] |= static_cast<unsigned>(codes2[j]) << (8 * (j & 3));
        }
        slice.codes1 = Vec2u{words1[0], words1[1]};
        slice.codes2 = Vec2u{words2[0], words2[1]};
        slice.absmax1 = (count > 0 && with1) ? t.absmax1[block] : 0.0f;
        slice.absmax2 = (count > 0 && with2) ? t.absmax2[block] : 0.0f;
    }

    // 0 * g is 0 for every finite g and NaN otherwise: one test covers the 8 gradients.
    float g[8];
    float probe = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        g[j] = fp::mul(D::load(slice.grad[j]), hp.inv_grad_scale);
        probe = fp::fma(g[j], 0.0f, probe);
    }
    float s1[8];
    float s2[8];
    float peak1 = 0.0f;
    float peak2 = 0.0f;
    float norm_squared = 0.0f;
    if (is_loaded && probe == 0.0f) {
        // The common case: 8 finite gradients, vector stores.
        float p_new[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            s1[j] = with1 ? dequantize(maps.code1, static_cast<u8>(code_byte(slice.codes1, j)), slice.absmax1)
                          : 0.0f;
            s2[j] = with2 ? dequantize(maps.code2, static_cast<u8>(code_byte(slice.codes2, j)), slice.absmax2)
                          : 0.0f;
            const float p = D::load(slice.param[j]);
            const float update = update_8bit<A>(hp, p, g[j], s1[j], s2[j]);
            if (kNormPass) {
                norm_squared = fp::fma(update, update, norm_squared);
            } else {
                p_new[j] = apply_update_8bit<A>(hp, p, update, scale);
            }
            peak1 = peak(peak1, s1[j]);
            peak2 = peak(peak2, s2[j]);
        }
        if (!kNormPass) ParamStore8<D>::store(param, p_new);
    } else {
        // Element by element: the end of a tensor, misaligned arrays, or a non-finite gradient.
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            s1[j] = 0.0f, s2[j] = 0.0f;
            if (j >= count) continue;
            if (with1)
                s1[j] = dequantize(maps.code1, static_cast<u8>(code_byte(slice.codes1, j)), slice.absmax1);
            if (with2)
                s2[j] = dequantize(maps.code2, static_cast<u8>(code_byte(slice.codes2, j)), slice.absmax2);
            if (fp::is_finite(g[j])) {
                const float p = D::load(slice.param[j]);
                const float update = update_8bit<A>(hp, p, g[j], s1[j], s2[j]);
                if (kNormPass) {
                    norm_squared = fp::fma(update, update, norm_squared);
                } else {
                    param[j] = D::store(apply_update_8bit<A>(hp, p, update, scale));
                }
            } else {
                saw_nonfinite = true;
            }
            peak1 = peak(peak1, s1[j]);
            peak2 = peak(peak2, s2[j]);
        }
    }
    if (kNormPass) return norm_squared;

    // Every lane of the group takes part, also those past the end (they contribute 0).
    float absmax1 = 0.0f;
    float absmax2 = 0.0f;
    bool within1 = false;
    bool within2 = false;
    if (with1) block_absmax(s1, group_peak(peak1), absmax1, within1);
    if (with2) block_absmax(s2, group_peak(peak2), absmax2, within2);
    const float inv1 = inverse_absmax(absmax1);
    const float inv2 = inverse_absmax(absmax2);
    unsigned q1[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
    unsigned q2[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
    if (with1) quantize_slice<A, 1>(maps.bucket1, s1, inv1, within1 && fp::is_finite(inv1), q1);
    if (with2) quantize_slice<A, 2>(maps.bucket2, s2, inv2, within2 && fp::is_finite(inv2), q2);
    if (is_loaded) {
        if (with1) {
            *reinterpret_cast<Vec2u*>(codes1) =
                Vec2u{pack_codes(q1[0], q1[1], q1[2], q1[3]), pack_codes(q1[4], q1[5], q1[6], q1[7])};
        }
        if (with2) {
            *reinterpret_cast<Vec2u*>(codes2) =
                Vec2u{pack_codes(q2[0], q2[1], q2[2], q2[3]), pack_codes(q2[4], q2[5], q2[6], q2[7])};
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if (j >= count) continue;
            if (with1) codes1[j] = static_cast<u8>(q1[j] >> 24);
            if (with2) codes2[j] = static_cast<u8>(q2[j] >> 24);
        }
    }
    if (count > 0 && (threadIdx.x & 31u) == 0) {
        if (with1) t.absmax1[block] = absmax1;
        if (with2) t.absmax2[block] = absmax2;
    }
    return 0.0f;
}

// --- Driving tiles: shared by both layouts ---

// Pointers allow the vector path when every array the tile touches is aligned for it.
template <int A, class D, int kElementsPerThread>
__device__ __forceinline__ bool vector_path_ok(const OptimTensor& t, const OptimParams& hp, int state_bytes) {
    const unsigned long long data_bytes = sizeof(typename D::Storage) * kElementsPerThread;
    const unsigned long long state_vector = static_cast<unsigned long long>(state_bytes) * kElementsPerThread;
    const unsigned long long data_align = data_bytes < 16 ? data_bytes : 16;
    const unsigned long long state_align = state_vector < 16 ? state_vector : 16;
    bool ok = aligned_to(t.param, data_align) && aligned_to(t.grad, data_align);
    if (uses_state1(A, hp)) ok = ok && aligned_to(t.state1, state_align);
    if (uses_state2(A)) ok = ok && aligned_to(t.state2, state_align);
    return ok;
}

// Where a thread's slice of tile `tile` lies: its first element and how many (0 to per_thread)
// fall before `limit`.
template <int kTile, int kPerThread>
__device__ __forceinline__ void slice_place(i64 tile, i64 limit, i64& first, int& count) {
    const i64 begin = tile * kTile;
    const i64 end = begin + kTile < limit ? begin + kTile : limit;
    first = begin + kPerThread * static_cast<i64>(threadIdx.x);
    count = first >= end ? 0 : (end - first >= kPerThread ? kPerThread : static_cast<int>(end - first));
}

// Processes a run's tiles. In the norm pass, writes each tile's partial sum to t.unorm[1 + tile].
template <int A, class D, bool kNormPass>
__device__ __forceinline__ bool run_tiles_32bit(const TileRun& run, const OptimParams& hp, float* scratch) {
    const OptimTensor& t = run.t;
    const bool vector_ok = vector_path_ok<A, D, 4>(t, hp, 4);
    const float scale = kNormPass ? 1.0f : tensor_update_scale(t, hp);
    bool saw_nonfinite = false;
    for (i64 tile = run.first; tile < run.end; tile += run.stride) {
        const i64 begin = tile * kTile32;
        const i64 end = begin + kTile32 < run.limit ? begin + kTile32 : run.limit;
        float partial = tile_32bit<A, D, kNormPass>(t, hp, begin, end, scale, vector_ok, saw_nonfinite);
        if (kNormPass) {
            partial = block_sum(partial, scratch);
            if (threadIdx.x == 0) t.unorm[1 + tile] = partial;
        }
    }
    return saw_nonfinite;
}

// --- Tiles through shared memory (8-bit state, sm_90 and later) ---
//
// Loading its own slices, each warp has one slice in flight and waits for it before each one: too
// few bytes in flight to cover memory latency (on an H200 the warps stalled on loads over half the
// time with memory at half its bandwidth; L2 prefetches and more resident warps did not help). Here
// thread 0 has the tensor memory accelerator copy the tiles `stages` ahead into shared buffers while
// the block computes: an mbarrier per buffer (`full`) says when a tile has landed, every thread then
// reads its part into registers and arrives on the buffer's `empty` barrier, and thread 0 reuses the
// buffer once all have. Tiles the copies cannot serve (a partial tile, arrays not 16-byte aligned)
// are loaded directly; either way the tile routine gets the same values. A run's pipeline starts
// with the run and drains by its end.

// The pipeline's barrier phases: bit s of `full` is the parity of buffer s's next landing (every
// thread); bits of `empty` and `pending` are thread 0's: the parity of buffer s's next release, and
// whether a copy into buffer s awaits its release.
struct TilePipe {
    bool on;  // the launch gave the buffers
    unsigned full;
    unsigned empty;
    unsigned pending;
};

#if CUDARC_OPTIM_TILE_COPIES
extern __shared__ __align__(128) unsigned char cudarc_optim_tile_buffers[];

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void wait_barrier(const unsigned long long* barrier, unsigned parity) {
    unsigned landed;
    do {
        asm volatile(
            "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, "
            "0, p;\n\t}"
            : "=r"(landed)
            : "r"(shared_address(barrier)), "r"(parity)
            : "memory");
    } while (landed == 0);
}
__device__ __forceinline__ void bulk_copy(unsigned char* to, const void* from, unsigned bytes,
                                          unsigned long long* barrier) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            shared_address(to)),
        "l"(__cvta_generic_to_global(from)), "r"(bytes), "r"(shared_address(barrier))
        : "memory");
}
#endif

// Sets up the pipeline when the launch gave its dynamic shared memory (thread 0 initializes the
// barriers; the caller's __syncthreads publishes them).
template <class D>
__device__ __forceinline__ TilePipe start_tile_pipe(BlockShared<true>& shared) {
    TilePipe pipe = {false, 0u, 0u, 0u};
#if CUDARC_OPTIM_TILE_COPIES
    unsigned dynamic_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
    if (dynamic_bytes <
        static_cast<unsigned>(tile_pipeline_bytes(static_cast<int>(sizeof(typename D::Storage)))))
        return pipe;
    pipe.on = true;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kTileStages; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&shared.full[s]))
                         : "memory");
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(&shared.empty[s])),
                         "r"(kThreads)
                         : "memory");
        }
        // The initialized barriers are visible to the copy engine (the async proxy) before any copy.
        asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
    }
#endif
    return pipe;
}

// Whether the copies can serve a tensor (its arrays are 16-byte aligned), and then tile `index` of a
// run (a whole tile).
template <int A>
__device__ __forceinline__ bool copies_fit(const OptimTensor& t, const OptimParams& hp) {
    unsigned long long misaligned =
        reinterpret_cast<unsigned long long>(t.param) | reinterpret_cast<unsigned long long>(t.grad);
    if (uses_state1(A, hp))
        misaligned |=
            reinterpret_cast<unsigned long long>(t.state1) | reinterpret_cast<unsigned long long>(t.absmax1);
    if (uses_state2(A))
        misaligned |=
            reinterpret_cast<unsigned long long>(t.state2) | reinterpret_cast<unsigned long long>(t.absmax2);
    return (misaligned & 15ull) == 0;
}
__device__ __forceinline__ bool tile_copied(const TileRun& run, bool fits, i64 index) {
    const i64 tile = run.first + index * run.stride;
    return fits && tile < run.end && (tile + 1) * kTile8 <= run.limit;
}

// Thread 0: copies tile `index` of the run into buffer `stage`, once the buffer's last tile is taken.
template <int A, class D>
__device__ __forceinline__ void issue_tile(TilePipe& pipe, BlockShared<true>& shared, unsigned stage,
                                           const TileRun& run, i64 index, const OptimParams& hp) {
#if CUDARC_OPTIM_TILE_COPIES
    typedef typename D::Storage S;
    if ((pipe.pending >> stage) & 1u) {
        wait_barrier(&shared.empty[stage], (pipe.empty >> stage) & 1u);
        pipe.empty ^= 1u << stage;
    }
    pipe.pending |= 1u << stage;
    const bool with1 = uses_state1(A, hp);
    const bool with2 = uses_state2(A);
    const i64 tile = run.first + index * run.stride;
    const i64 begin = tile * kTile8;
    const unsigned data = kTile8 * static_cast<unsigned>(sizeof(S));
    const unsigned absmax_bytes = (kTile8 / kQuantBlock) * 4u;
    const unsigned bytes =
        2u * data + (with1 ? kTile8 + absmax_bytes : 0u) + (with2 ? kTile8 + absmax_bytes : 0u);
    unsigned char* buffer = cudarc_optim_tile_buffers +
                            stage * static_cast<unsigned>(tile_buffer_bytes(static_cast<int>(sizeof(S))));
    unsigned long long* full = &shared.full[stage];
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(full)),
                 "r"(bytes)
                 : "memory");
    bulk_copy(buffer, static_cast<const S*>(run.t.param) + begin, data, full);
    bulk_copy(buffer + data, static_cast<const S*>(run.t.grad) + begin, data, full);
    unsigned char* states = buffer + 2u * data;
    unsigned char* absmax = states + 2u * kTile8;
    if (with1) {
        bulk_copy(states, static_cast<const u8*>(run.t.state1) + begin, kTile8, full);
        bulk_copy(absmax, run.t.absmax1 + tile * (kTile8 / kQuantBlock), absmax_bytes, full);
    }
    if (with2) {
        bulk_copy(states + kTile8, static_cast<const u8*>(run.t.state2) + begin, kTile8, full);
        bulk_copy(absmax + absmax_bytes, run.t.absmax2 + tile * (kTile8 / kQuantBlock), absmax_bytes, full);
    }
#endif
}

// Every thread: waits for buffer `stage`, reads its slice of the tile, and releases the buffer.
template <int A, class D>
__device__ __forceinline__ void take_tile(TilePipe& pipe, BlockShared<true>& shared, unsigned stage,
                                          const OptimParams& hp, Slice8<D>& slice) {
#if CUDARC_OPTIM_TILE_COPIES
    typedef typename D::Storage S;
    wait_barrier(&shared.full[stage], (pipe.full >> stage) & 1u);
    pipe.full ^= 1u << stage;
    const unsigned char* buffer =
        cudarc_optim_tile_buffers +
        stage * static_cast<unsigned>(tile_buffer_bytes(static_cast<int>(sizeof(S))));
    const unsigned data = kTile8 * static_cast<unsigned>(sizeof(S));
    const unsigned char* states = buffer + 2u * data;
    const float* absmax = reinterpret_cast<const float*>(states + 2u * kTile8);
    const unsigned warp = threadIdx.x >> 5;
    load_vec8(reinterpret_cast<const S*>(buffer) + 8 * threadIdx.x, slice.param);
    load_vec8(reinterpret_cast<const S*>(buffer + data) + 8 * threadIdx.x, slice.grad);
    slice.codes1 = Vec2u{0u, 0u};
    slice.codes2 = Vec2u{0u, 0u};
    slice.absmax1 = 0.0f;
    slice.absmax2 = 0.0f;
    if (uses_state1(A, hp)) {
        slice.codes1 = reinterpret_cast<const Vec2u*>(states)[threadIdx.x];
        slice.absmax1 = absmax[warp];
    }
    if (uses_state2(A)) {
        slice.codes2 = reinterpret_cast<const Vec2u*>(states + kTile8)[threadIdx.x];
        slice.absmax2 = absmax[kTile8 / kQuantBlock + warp];
    }
    // The reads (generic proxy) are done before thread 0's next copies (async proxy) write here.
    asm volatile("fence.proxy.async.shared::cta;\n\tmbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(
                     shared_address(&shared.empty[stage]))
                 : "memory");
#endif
}

// The same for 8-bit state.
template <int A, class D, bool kNormPass>
__device__ __forceinline__ bool run_tiles_8bit(const TileRun& run, const OptimParams& hp,
                                               BlockShared<true>& maps, TilePipe& pipe) {
    if (run.first >= run.end) return false;
    const OptimTensor& t = run.t;
    assume_global_arrays(t, uses_state1(A, hp), uses_state2(A));
    const bool vector_ok = vector_path_ok<A, D, 8>(t, hp, 1);
    const float scale = kNormPass ? 1.0f : tensor_update_scale(t, hp);
    constexpr int kStages = kTileStages;
    const bool fits = pipe.on && copies_fit<A>(t, hp);
    if (threadIdx.x == 0) {
        for (int k = 0; k < kStages; ++k) {
            if (tile_copied(run, fits, k)) issue_tile<A, D>(pipe, maps, static_cast<unsigned>(k), run, k, hp);
        }
    }
    bool saw_nonfinite = false;
    i64 index = 0;
    for (i64 tile = run.first; tile < run.end; tile += run.stride, ++index) {
        i64 first;
        int count;
        slice_place<kTile8, 8>(tile, run.limit, first, count);
        Slice8<D> current;
        bool current_loaded;
        const unsigned stage = static_cast<unsigned>(index % kStages);
        if (tile_copied(run, fits, index)) {
            take_tile<A, D>(pipe, maps, stage, hp, current);
            current_loaded = true;
            // The buffer goes to the tile kStages ahead.
            if (threadIdx.x == 0 && tile_copied(run, fits, index + kStages)) {
                issue_tile<A, D>(pipe, maps, stage, run, index + kStages, hp);
            }
        } else {
            current_loaded = load_slice8<A, D>(t, hp, first, count, vector_ok, current);
        }
        float partial = tile_8bit<A, D, kNormPass>(t, hp, first, count, current, current_loaded, scale, maps,
                                                   saw_nonfinite);
        if (kNormPass) {
            partial = block_sum(partial, maps.scratch);
            if (threadIdx.x == 0) t.unorm[1 + tile] = partial;
        }
    }
    return saw_nonfinite;
}

// The tile loop of the state format whose shared memory is given.
template <int A, class D, bool kNormPass>
__device__ __forceinline__ bool run_tiles(BlockShared<true>& shared, const TileRun& run,
                                          const OptimParams& hp, TilePipe& pipe) {
    return run_tiles_8bit<A, D, kNormPass>(run, hp, shared, pipe);
}
template <int A, class D, bool kNormPass>
__device__ __forceinline__ bool run_tiles(BlockShared<false>& shared, const TileRun& run,
                                          const OptimParams& hp, TilePipe&) {
    return run_tiles_32bit<A, D, kNormPass>(run, hp, shared.scratch);
}

// The tile pipeline of the 8-bit update pass (off elsewhere).
template <class D, bool kEightBit, bool kNormPass>
__device__ __forceinline__ TilePipe begin_tiles(BlockShared<kEightBit>& shared) {
    TilePipe pipe = {false, 0u, 0u, 0u};
    if constexpr (kEightBit && !kNormPass) pipe = start_tile_pipe<D>(shared);
    return pipe;
}

// Copies `words` 4-byte words (a multiple of 4, both ends 16-byte aligned) into shared memory.
__device__ __forceinline__ void stage_words(void* to, const void* from, int words) {
    const Vec4u* source = static_cast<const Vec4u*>(from);
    Vec4u* target = static_cast<Vec4u*>(to);
    for (int i = static_cast<int>(threadIdx.x); i < words / 4; i += kThreads) target[i] = source[i];
}

// Stages the maps the algorithm uses; every thread of the block must call it.
template <int A>
__device__ __forceinline__ void stage_maps(BlockShared<true>& shared, const OptimParams& hp,
                                           const QuantMapImage* qmap1, const QuantMapImage* qmap2) {
    if (uses_state1(A, hp)) {
        stage_words(shared.code1, qmap1->code, 256);
        stage_words(shared.bucket1, qmap1->bucket, uses_unsigned_map(A, 1) ? kMapBuckets : 2 * kMapBuckets);
    }
    if (uses_state2(A)) {
        stage_words(shared.code2, qmap2->code, 256);
        stage_words(shared.bucket2, qmap2->bucket, kMapBuckets);
    }
    __syncthreads();
}
template <int A>
__device__ __forceinline__ void stage_maps(BlockShared<false>&, const OptimParams&, const QuantMapImage*,
                                           const QuantMapImage*) {}

template <int A, class D, bool kEightBit, bool kNormPass>
__device__ __forceinline__ void tensor_kernel(const OptimTensor& t, const OptimParams& hp,
                                              const QuantMapImage* qmap1, const QuantMapImage* qmap2,
                                              int* nonfinite_flag, unsigned* blocks_done) {
    __shared__ BlockShared<kEightBit> shared;
    if (kNormPass && (t.unorm == 0 || blocks_done == 0)) return;
    TilePipe pipe = begin_tiles<D, kEightBit, kNormPass>(shared);
    stage_maps<A>(shared, hp, qmap1, qmap2);  // (its __syncthreads also publishes the pipeline's barriers)
    const int kTile = kEightBit ? kTile8 : kTile32;
    const TileRun run = {t, blockIdx.x, (t.numel + kTile - 1) / kTile, gridDim.x, t.numel};
    const bool saw_nonfinite = run_tiles<A, D, kNormPass>(shared, run, hp, pipe);
    if (kNormPass) {
        finish_update_norms<kTile>(&t, 1, blocks_done, shared.scratch);
    } else if (saw_nonfinite && nonfinite_flag != 0) {
        *nonfinite_flag = 1;
    }
}

// Chunk c's tiles.
template <int kTile>
__device__ __forceinline__ TileRun chunk_run(const OptimTensor* tensors, const OptimChunk* chunks, int c) {
    const OptimChunk chunk = chunks[c];
    const OptimTensor t = tensors[chunk.tensor];
    const i64 chunk_end = chunk.offset + chunk.count < t.numel ? chunk.offset + chunk.count : t.numel;
    return TileRun{t, chunk.offset / kTile, (chunk_end + kTile - 1) / kTile, 1, chunk_end};
}

// Block b processes chunks b, b + gridDim.x, ... (8-bit launches use one wave of blocks, so each
// stages its maps once).
template <int A, class D, bool kEightBit, bool kNormPass>
__device__ __forceinline__ void multi_tensor_kernel(const OptimTensor* tensors, const OptimChunk* chunks,
                                                    int num_chunks, int num_tensors, const OptimParams& hp,
                                                    const QuantMapImage* qmap1, const QuantMapImage* qmap2,
                                                    int* nonfinite_flag, unsigned* blocks_done) {
    __shared__ BlockShared<kEightBit> shared;
    if (kNormPass && blocks_done == 0) return;
    TilePipe pipe = begin_tiles<D, kEightBit, kNormPass>(shared);
    stage_maps<A>(shared, hp, qmap1, qmap2);  // (its __syncthreads also publishes the pipeline's barriers)
    const int kTile = kEightBit ? kTile8 : kTile32;
    bool saw_nonfinite = false;
    for (int c = static_cast<int>(blockIdx.x); c < num_chunks; c += static_cast<int>(gridDim.x)) {
        const TileRun run = chunk_run<kTile>(tensors, chunks, c);
        if (!kNormPass || run.t.unorm != 0) {
            saw_nonfinite = run_tiles<A, D, kNormPass>(shared, run, hp, pipe) || saw_nonfinite;
        }
    }
    if (kNormPass) {
        finish_update_norms<kTile>(tensors, num_tensors, blocks_done, shared.scratch);
    } else if (saw_nonfinite && nonfinite_flag != 0) {
        *nonfinite_flag = 1;
    }
}

}  // namespace cudarc_optim

// Defines the four kernels of one (algorithm, dtype, state) triple; see kernel_abi.hpp for the names.
// Note: on an H200 the 8-bit kernels ran fastest with their tile copies at 2 blocks of 256 threads per
// SM (up to 128 registers; at 3 blocks and 80 registers the multi-tensor kernels spilled, and holding
// their run in shared memory instead cost more than the third block gained). Without the copies (HIP,
// before sm_90) they keep the 3 blocks that ran fastest before them (at 4 blocks, 64 registers, they
// spill). On HIP the second __launch_bounds__ argument counts waves per SIMD, where 3 asks about the
// same.
#if CUDARC_OPTIM_TILE_COPIES
#define CUDARC_OPTIM_MIN_BLOCKS(EIGHT_BIT) ((EIGHT_BIT) ? 2 : 1)
#else
#define CUDARC_OPTIM_MIN_BLOCKS(EIGHT_BIT) ((EIGHT_BIT) ? 3 : 1)
#endif
#define CUDARC_OPTIM_TENSOR_KERNEL(NAME, ALGO_ENUM, DTYPE_TAG, EIGHT_BIT, NORM_PASS)                         \
    extern "C" __global__ void __launch_bounds__(256, CUDARC_OPTIM_MIN_BLOCKS(EIGHT_BIT))                    \
        NAME(cudarc_optim::OptimTensor tensor, cudarc_optim::OptimParams params,                             \
             const cudarc_optim::QuantMapImage* qmap1, const cudarc_optim::QuantMapImage* qmap2,             \
             int* nonfinite_flag, unsigned* blocks_done) {                                                   \
        cudarc_optim::tensor_kernel<cudarc_optim::ALGO_ENUM, cudarc_optim::DTYPE_TAG, EIGHT_BIT, NORM_PASS>( \
            tensor, params, qmap1, qmap2, nonfinite_flag, blocks_done);                                      \
    }
#define CUDARC_OPTIM_MULTI_KERNEL(NAME, ALGO_ENUM, DTYPE_TAG, EIGHT_BIT, NORM_PASS)                       \
    extern "C" __global__ void __launch_bounds__(256, CUDARC_OPTIM_MIN_BLOCKS(EIGHT_BIT)) NAME(           \
        const cudarc_optim::OptimTensor* tensors, const cudarc_optim::OptimChunk* chunks, int num_chunks, \
        int num_tensors, cudarc_optim::OptimParams params, const cudarc_optim::QuantMapImage* qmap1,      \
        const cudarc_optim::QuantMapImage* qmap2, int* nonfinite_flag, unsigned* blocks_done) {           \
        cudarc_optim::multi_tensor_kernel<cudarc_optim::ALGO_ENUM, cudarc_optim::DTYPE_TAG, EIGHT_BIT,    \
                                          NORM_PASS>(tensors, chunks, num_chunks, num_tensors, params,    \
                                                     qmap1, qmap2, nonfinite_flag, blocks_done);          \
    }
#define CUDARC_OPTIM_DEFINE_KERNELS(ALGORITHM, ALGO_ENUM, DTYPE, DTYPE_TAG, BITS, EIGHT_BIT)           \
    CUDARC_OPTIM_TENSOR_KERNEL(cudarc_optim_##ALGORITHM##_##DTYPE##_##BITS##_tensor_update, ALGO_ENUM, \
                               DTYPE_TAG, EIGHT_BIT, false)                                            \
    CUDARC_OPTIM_TENSOR_KERNEL(cudarc_optim_##ALGORITHM##_##DTYPE##_##BITS##_tensor_unorm, ALGO_ENUM,  \
                               DTYPE_TAG, EIGHT_BIT, true)                                             \
    CUDARC_OPTIM_MULTI_KERNEL(cudarc_optim_##ALGORITHM##_##DTYPE##_##BITS##_multi_update, ALGO_ENUM,   \
                              DTYPE_TAG, EIGHT_BIT, false)                                             \
    CUDARC_OPTIM_MULTI_KERNEL(cudarc_optim_##ALGORITHM##_##DTYPE##_##BITS##_multi_unorm, ALGO_ENUM,    \
                              DTYPE_TAG, EIGHT_BIT, true)

// Compile-time selection. Without these defines a source file holds all 72 of its kernels; with
// -DCUDARC_OPTIM_ALGORITHM=<Algorithm value> and/or -DCUDARC_OPTIM_DTYPE=<0 f32, 1 f16, 2 bf16> it
// holds only the matching ones (4 for one pair), which compiles in a fraction of the time.
#ifdef CUDARC_OPTIM_ALGORITHM
#define CUDARC_OPTIM_WANT_ALGORITHM(value) (CUDARC_OPTIM_ALGORITHM == (value))
#else
#define CUDARC_OPTIM_WANT_ALGORITHM(value) 1
#endif
#ifdef CUDARC_OPTIM_DTYPE
#define CUDARC_OPTIM_WANT_DTYPE(value) (CUDARC_OPTIM_DTYPE == (value))
#else
#define CUDARC_OPTIM_WANT_DTYPE(value) 1
#endif

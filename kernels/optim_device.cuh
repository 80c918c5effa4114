// Optimizer kernels, part 2: the device-only machinery behind the kernel templates of kernels/optim.cu.
//
// Work is cut into tiles (kTileFp32 or kTile8 elements, see optim_common.cuh). The per-tensor kernels
// walk a tensor's tiles with a grid-stride loop; in the multi-tensor kernels block b takes chunks b,
// b + gridDim.x, ... (a chunk is a run of whole tiles of one tensor). Both call the same tile
// routine, so every element sees the same arithmetic in either layout, and the max_unorm partial
// sums (one per tile, summed in a fixed order) are identical too: per-tensor and multi-tensor
// results are bitwise equal.
#pragma once

#include "optim_common.cuh"

// sm_90 and later copy 8-bit tiles into shared memory ahead of use ("Tiles through shared memory"), and
// their passes may start before the kernel ahead of them has finished (Note [Early launch]).
#if (defined(__CUDACC_RTC__) || defined(__CUDACC__)) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CUDARC_OPTIM_TILE_COPIES 1
#define CUDARC_OPTIM_EARLY_LAUNCH 1
#else
#define CUDARC_OPTIM_TILE_COPIES 0
#define CUDARC_OPTIM_EARLY_LAUNCH 0
#endif

// A butterfly over 32 lanes. Note: __shfl_xor_sync is CUDA's; HIP's __shfl_xor takes a width, and
// 32 keeps the groups the same on AMD's 64-wide wavefronts.
#if defined(__HIPCC_RTC__) || defined(__HIP__)
#define CUDARC_OPTIM_SHFL_XOR(value, mask) __shfl_xor((value), (mask), 32)
#else
#define CUDARC_OPTIM_SHFL_XOR(value, mask) __shfl_xor_sync(0xffffffffu, (value), (mask))
#endif

namespace cudarc_optim {

// Note [Early launch]: on sm_90 and later the update and unorm passes are launched with programmatic
// serialization (kernel_abi.hpp: pass_serialization), so a pass may start while the kernel ahead of it
// in the stream is still running: its blocks take the multiprocessors that kernel's finished blocks
// free, and the launch's own latency overlaps that kernel's end. Every pass therefore waits for the
// kernels ahead (wait_for_earlier_kernels) before it touches memory they may write: parameters,
// gradients, state, the group's header (counters, flag, norms) and a capturable step's state. Before the
// wait a block reads only its code maps and its chunk and descriptor tables, which host copies alone
// write, and a copy is never the kernel a launch overlaps. Each pass lets the launch after it start as
// early as it can (let_later_kernels_start, at entry): that launch waits in turn.
__device__ __forceinline__ void let_later_kernels_start() {
#if CUDARC_OPTIM_EARLY_LAUNCH
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_earlier_kernels() {
#if CUDARC_OPTIM_EARLY_LAUNCH
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

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

// --- 4 elements (fp32 state path) ---
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
// With two sums per tile (kNorms 2, the trust-ratio rules), the partials of tile k are unorm[2 + 2k] and
// unorm[3 + 2k], and their sums go to unorm[0] and unorm[1].
template <int kTile, int kNorms>
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
        const volatile float* partials = unorm + kNorms;  // written by other blocks: bypass stale caches
        for (int n = 0; n < kNorms; ++n) {
            float sum = 0.0f;
            for (i64 k = threadIdx.x; k < tiles; k += kThreads) sum = fp::add(sum, partials[kNorms * k + n]);
            sum = block_sum(sum, scratch);
            if (threadIdx.x == 0) unorm[n] = sum;
        }
    }
    if (threadIdx.x == 0) *blocks_done = 0u;
}

// The clipping factor for this tensor in the update pass (pass 2, or the only pass); for the trust-ratio
// rules their scale (trust_scale), from the first pass's sums.
template <int A>
__device__ __forceinline__ float tensor_update_scale(const OptimTensor& t, const OptimParams& hp) {
    if constexpr (uses_trust_ratio(A)) {
        return trust_scale<A>(hp, t.unorm[0], t.unorm[1]);
    } else {
        if (!(hp.max_unorm > 0.0f) || t.unorm == 0) return 1.0f;
        return unorm_scale(hp.max_unorm, t.unorm[0]);
    }
}

// --- fp32 state: one tile, 4 consecutive elements per thread ---
//
// kNormPass: read only, return this thread's sum of squared updates (elements in index order); a
// trust-ratio rule adds its squared parameters to `param_squared` (LARS returns its squared gradients
// instead of updates). Otherwise: write parameters and state; set `saw_nonfinite` if a gradient element
// was not finite.
template <int A, class D, bool kNormPass>
__device__ __forceinline__ float tile_fp32(const OptimTensor& t, const OptimParams& hp, i64 begin, i64 end,
                                           float scale, bool vector_ok, bool& saw_nonfinite,
                                           float& param_squared) {
    typedef typename D::Storage S;
    const i64 first = begin + 4 * static_cast<i64>(threadIdx.x);
    if (first >= end) return 0.0f;
    const int count = end - first >= 4 ? 4 : static_cast<int>(end - first);
    const bool with1 = uses_state1(A, hp);
    const bool with2 = uses_state2(A);
    constexpr bool with3 = uses_state3(A);
    S* param = static_cast<S*>(t.param) + first;
    const S* grad = static_cast<const S*>(t.grad) + first;
    float* state1 = static_cast<float*>(t.state1) + first;
    float* state2 = static_cast<float*>(t.state2) + first;
    float* state3 = with3 ? static_cast<float*>(t.state1) + state3_offset(t.numel) + first : state1;

    S p_raw[4];
    S g_raw[4];
    float s1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float s2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float s3[4];  // (only AdEMAMix's code touches it)
    if constexpr (with3) s3[0] = s3[1] = s3[2] = s3[3] = 0.0f;
    const bool vector = vector_ok && count == 4;
    if (vector) {
        load_vec4(param, p_raw);
        load_vec4(grad, g_raw);
        if (with1) load_vec4(state1, s1);
        if (with2) load_vec4(state2, s2);
        if (with3) load_vec4(state3, s3);
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (j >= count) continue;
            p_raw[j] = param[j];
            g_raw[j] = grad[j];
            if (with1) s1[j] = state1[j];
            if (with2) s2[j] = state2[j];
            if (with3) s3[j] = state3[j];
        }
    }
    float norm_squared = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        if (j >= count) continue;
        const float p = D::load(p_raw[j]);
        if (kNormPass && uses_trust_ratio(A)) param_squared = fp::fma(p, p, param_squared);
        if (kNormPass && A == kLars) {
            // LARS' norms: the unscaled gradient's (its finite elements) and the parameter's.
            const float g = fp::mul(D::load(g_raw[j]), hp.inv_grad_scale);
            if (fp::is_finite(g)) norm_squared = fp::fma(g, g, norm_squared);
            continue;
        }
        float update;
        if (update_element<A>(hp, p, D::load(g_raw[j]), s1[j], s2[j], s3[j], update, scale)) {
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
        if (with3) store_vec4(state3, s3);
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (j >= count) continue;
            param[j] = p_raw[j];
            if (with1) state1[j] = s1[j];
            if (with2) state2[j] = s2[j];
            if (with3) state3[j] = s3[j];
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

// 8 parameters or gradients as read from memory: 16-bit values two to a word (first lowest), or
// floats. Note: kept packed, a value costs one instruction to widen and none to move.
template <class D>
struct Values8 {
    unsigned words[4];
    __device__ __forceinline__ float get(int j) const { return D::load_half(words[j >> 1], (j & 1) != 0); }
    __device__ __forceinline__ void load(const u16* p) {
        const Vec4u v = *reinterpret_cast<const Vec4u*>(p);
        words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
    }
    // Elements [0, count) one by one, the rest 0.
    __device__ __forceinline__ void load_each(const u16* p, int count) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const unsigned low = 2 * k < count ? p[2 * k] : 0u;
            const unsigned high = 2 * k + 1 < count ? p[2 * k + 1] : 0u;
            words[k] = low | (high << 16);
        }
    }
};
template <>
struct Values8<Fp32> {
    float values[8];
    __device__ __forceinline__ float get(int j) const { return values[j]; }
    __device__ __forceinline__ void load(const float* p) { load_vec8(p, values); }
    __device__ __forceinline__ void load_each(const float* p, int count) {
#pragma unroll
        for (int j = 0; j < 8; ++j) values[j] = j < count ? p[j] : 0.0f;
    }
};

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
struct ParamStore8<Fp32> {
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
// to [0, limit) (a chunk ends before the tensor may). Empty when first >= end. Only a run's last
// tile may be partial.
struct TileRun {
    OptimTensor t;
    i64 first;
    i64 end;
    i64 stride;
    i64 limit;
};

// The runs of a block, in order. A multi-tensor launch: run r of block b is chunk b + r * gridDim.x
// (or as handed out, Note [Dynamic chunks]).
struct ChunkRuns {
    static constexpr bool kChunked = true;
    const OptimTensor* tensors;
    const OptimChunk* chunks;
    int num_chunks;
    unsigned long long* counter;  // the chunks handed out so far, and the blocks done (Note [Dynamic chunks])
    template <int kTile>
    __device__ __forceinline__ bool get(int r, TileRun& run) const {
        return get_chunk<kTile>(static_cast<i64>(blockIdx.x) + static_cast<i64>(r) * gridDim.x, run);
    }
    template <int kTile>
    __device__ __forceinline__ bool get_chunk(i64 c, TileRun& run) const {
        if (c >= num_chunks) return false;
        const OptimChunk chunk = chunks[c];
        const OptimTensor t = tensors[chunk.tensor];
        const i64 chunk_end = chunk.offset + chunk.count < t.numel ? chunk.offset + chunk.count : t.numel;
        run = TileRun{t, chunk.offset / kTile, (chunk_end + kTile - 1) / kTile, 1, chunk_end};
        return true;
    }
};
// A per-tensor launch: one run, block b taking tiles b, b + gridDim.x, ...
struct TensorRuns {
    static constexpr bool kChunked = false;
    OptimTensor t;
    template <int kTile>
    __device__ __forceinline__ bool get(int r, TileRun& run) const {
        if (r != 0) return false;
        run = TileRun{t, blockIdx.x, (t.numel + kTile - 1) / kTile, gridDim.x, t.numel};
        return true;
    }
};

// Runs the producer has published and the computing threads have not finished (Note [Dynamic chunks]).
enum : int { kRunSlots = 4 };

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
    unsigned long long full[kMaxTileStages];
    unsigned long long empty[kMaxTileStages];
    // Published runs (chunks handed out): run_full[s] says runs[s] is written, run_empty[s] that it is done.
    unsigned long long run_full[kRunSlots];
    unsigned long long run_empty[kRunSlots];
    TileRun runs[kRunSlots];
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
template <int A, int kState, bool kWithin>
__device__ __forceinline__ void quantize_slice(const unsigned* buckets, const float (&values)[8],
                                               float inverse, unsigned (&q)[8]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) q[j] = quantize_8bit<A, kState, kWithin>(buckets, values[j], inverse);
}

// A quantization block's absmax when a state value is NaN or infinite: the maxNum over the magnitudes
// (NaN skipped). Otherwise it is the group peak.
__device__ __forceinline__ float absmax_of(const float (&values)[8]) {
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) m = fp::fmax(m, fp::abs(values[j]));
    return group_max(m);
}

// Whether two values, each +0 or above or NaN (a peak or a reciprocal), are both finite. Note: their
// encodings order like their values, with infinity's and NaN's on top: one integer max and a test.
__device__ __forceinline__ bool both_finite(float a, float b) {
    const unsigned high = fp::bits(a) > fp::bits(b) ? fp::bits(a) : fp::bits(b);
    return high < 0x7f800000u;
}

// One thread's slice of an 8-bit tile as read from memory: 8 parameters and gradients, 8 codes of
// each state, and the quantization block's absmax of each state.
// (AdEMAMix's slow EMA, state 3, for a slice of its tile.)
template <bool kThird>
struct ThirdStateSlice {};
template <>
struct ThirdStateSlice<true> {
    Vec2u codes3;
    float absmax3;
};
template <class D, bool kThird>
struct Slice8 : ThirdStateSlice<kThird> {
    Values8<D> param;
    Values8<D> grad;
    Vec2u codes1;
    Vec2u codes2;
    float absmax1;
    float absmax2;
};

// Where AdEMAMix's slow EMA (state 3) lives: in state1's array, state3_offset(numel) codes on, its absmax
// values absmax3_offset(numel) on in absmax1's (optim_common.cuh).
__device__ __forceinline__ const u8* codes3_of(const OptimTensor& t) {
    return static_cast<const u8*>(t.state1) + state3_offset(t.numel);
}
__device__ __forceinline__ float* absmax3_of(const OptimTensor& t) {
    return t.absmax1 + absmax3_offset(t.numel);
}

// Reads a whole, aligned slice with vector loads and returns true; any other slice is left to
// load_slice8_each (returns false, reads nothing).
template <int A, class D>
__device__ __forceinline__ bool load_slice8(const OptimTensor& t, const OptimParams& hp, i64 first, int count,
                                            bool vector_ok, Slice8<D, uses_state3(A)>& slice) {
    typedef typename D::Storage S;
    if (!(vector_ok && count == 8)) return false;
    const unsigned long long block = static_cast<unsigned long long>(first) / kQuantBlock;
    slice.param.load(static_cast<const S*>(t.param) + first);
    slice.grad.load(static_cast<const S*>(t.grad) + first);
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
    if constexpr (uses_state3(A)) {
        slice.codes3 = *reinterpret_cast<const Vec2u*>(codes3_of(t) + first);
        slice.absmax3 = absmax3_of(t)[block];
    }
    return true;
}

// Reads elements [first, first + count) of a slice one by one (count in [0, 8]; the rest are 0).
template <int A, class D>
__device__ __forceinline__ void load_slice8_each(const OptimTensor& t, const OptimParams& hp, i64 first,
                                                 int count, Slice8<D, uses_state3(A)>& slice) {
    typedef typename D::Storage S;
    const bool with1 = uses_state1(A, hp);
    const bool with2 = uses_state2(A);
    const unsigned long long block = static_cast<unsigned long long>(first) / kQuantBlock;
    const u8* codes1 = static_cast<const u8*>(t.state1) + first;
    const u8* codes2 = static_cast<const u8*>(t.state2) + first;
    slice.param.load_each(static_cast<const S*>(t.param) + first, count);
    slice.grad.load_each(static_cast<const S*>(t.grad) + first, count);
    unsigned words1[2] = {0u, 0u};
    unsigned words2[2] = {0u, 0u};
    unsigned words3[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        if (j >= count) continue;
        if (with1) words1[j >> 2] |= static_cast<unsigned>(codes1[j]) << (8 * (j & 3));
        if (with2) words2[j >> 2] |= static_cast<unsigned>(codes2[j]) << (8 * (j & 3));
        if constexpr (uses_state3(A)) {
            words3[j >> 2] |= static_cast<unsigned>(codes3_of(t)[first + j]) << (8 * (j & 3));
        }
    }
    slice.codes1 = Vec2u{words1[0], words1[1]};
    slice.codes2 = Vec2u{words2[0], words2[1]};
    slice.absmax1 = (count > 0 && with1) ? t.absmax1[block] : 0.0f;
    slice.absmax2 = (count > 0 && with2) ? t.absmax2[block] : 0.0f;
    if constexpr (uses_state3(A)) {
        slice.codes3 = Vec2u{words3[0], words3[1]};
        slice.absmax3 = count > 0 ? absmax3_of(t)[block] : 0.0f;
    }
}

// What a tile's routine does once its slice's values have all been used: nothing, or release the tile
// buffer they were read from (TileRelease, below).
struct NoRelease {
    __device__ __forceinline__ void operator()() const {}
};

// Elements [first, first + count) of one tile (count in [0, 8]), read into `slice`; `whole` when it
// came from vector loads or the tile copies (8 aligned elements). `release` runs once the slice's
// values have all been used, before the parameters are stored.
template <int A, class D, bool kNormPass, class Release = NoRelease>
__device__ __forceinline__ float tile_8bit(const OptimTensor& t, const OptimParams& hp, i64 first, int count,
                                           const Slice8<D, uses_state3(A)>& slice, bool whole, float scale,
                                           const BlockShared<true>& maps, bool& saw_nonfinite,
                                           const Release& release = {}) {
    typedef typename D::Storage S;
    const bool with1 = uses_state1(A, hp);
    const bool with2 = uses_state2(A);
    constexpr bool with3 = uses_state3(A);  // AdEMAMix's slow EMA, with state 1's (signed) map
    const unsigned long long block = static_cast<unsigned long long>(first) / kQuantBlock;
    S* param = static_cast<S*>(t.param) + first;
    u8* codes1 = static_cast<u8*>(t.state1) + first;
    u8* codes2 = static_cast<u8*>(t.state2) + first;
    u8* codes3 = static_cast<u8*>(t.state1) + (with3 ? state3_offset(t.numel) : 0) + first;

    // 0 * g is 0 for every finite g and NaN otherwise: one test covers the 8 gradients.
    float g[8];
    float probe = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        g[j] = fp::mul(slice.grad.get(j), hp.inv_grad_scale);
        probe = fp::fma(g[j], 0.0f, probe);
    }
    float s1[8];
    float s2[8];
    float s3[8];  // (only AdEMAMix's code touches it)
    float peak1 = 0.0f;
    float peak2 = 0.0f;
    float peak3 = 0.0f;
    float norm_squared = 0.0f;
    if (whole && probe == 0.0f) {
        // The common case: 8 finite gradients, vector stores.
        float p_new[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            s1[j] = with1 ? dequantize(maps.code1, static_cast<u8>(code_byte(slice.codes1, j)), slice.absmax1)
                          : 0.0f;
            s2[j] = with2 ? dequantize(maps.code2, static_cast<u8>(code_byte(slice.codes2, j)), slice.absmax2)
                          : 0.0f;
            if constexpr (with3) {
                s3[j] = dequantize(maps.code1, static_cast<u8>(code_byte(slice.codes3, j)), slice.absmax3);
            }
            const float p = slice.param.get(j);
            const float update = update_8bit<A>(hp, p, g[j], s1[j], s2[j], s3[j]);
            if (kNormPass) {
                norm_squared = fp::fma(update, update, norm_squared);
            } else {
                p_new[j] = apply_update_8bit<A>(hp, p, update, scale);
            }
            peak1 = peak(peak1, s1[j]);
            peak2 = peak(peak2, s2[j]);
            if constexpr (with3) peak3 = peak(peak3, s3[j]);
        }
        release();
        if (!kNormPass) ParamStore8<D>::store(param, p_new);
    } else {
        // Element by element: the end of a tensor, misaligned arrays, or a non-finite gradient.
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            s1[j] = 0.0f, s2[j] = 0.0f;
            if constexpr (with3) s3[j] = 0.0f;
            if (j >= count) continue;
            if (with1)
                s1[j] = dequantize(maps.code1, static_cast<u8>(code_byte(slice.codes1, j)), slice.absmax1);
            if (with2)
                s2[j] = dequantize(maps.code2, static_cast<u8>(code_byte(slice.codes2, j)), slice.absmax2);
            if constexpr (with3) {
                s3[j] = dequantize(maps.code1, static_cast<u8>(code_byte(slice.codes3, j)), slice.absmax3);
            }
            if (fp::is_finite(g[j])) {
                const float p = slice.param.get(j);
                const float update = update_8bit<A>(hp, p, g[j], s1[j], s2[j], s3[j]);
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
            if constexpr (with3) peak3 = peak(peak3, s3[j]);
        }
        release();
    }
    if (kNormPass) return norm_squared;

    // Every lane of the group takes part, also those past the end (they contribute 0).
    float absmax1 = with1 ? group_peak(peak1) : 0.0f;
    float absmax2 = with2 ? group_peak(peak2) : 0.0f;
    float absmax3 = with3 ? group_peak(peak3) : 0.0f;
    unsigned q1[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
    unsigned q2[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
    unsigned q3[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
    // The common case: every peak is 0 or a finite value with a reciprocal in range, so the reciprocals
    // need no branch (Note [Reciprocal of an absmax]) and the search no clamp (|value * inverse| <= 1 +
    // 2^-22). Otherwise the exact reciprocals, NaN-skipping maxima where a peak is not finite, and the
    // clamped search, which gives the same codes wherever the other applies. AdEMAMix keeps the way
    // before this one (see run_tiles_8bit): __frcp_rn, and the clamp only where needed.
    if constexpr (!with3) {
        if (absmax_in_reciprocal_range(absmax1) && absmax_in_reciprocal_range(absmax2)) {
            if (with1) quantize_slice<A, 1, true>(maps.bucket1, s1, inverse_absmax_in_range(absmax1), q1);
            if (with2) quantize_slice<A, 2, true>(maps.bucket2, s2, inverse_absmax_in_range(absmax2), q2);
        } else {
            if (!both_finite(absmax1, absmax2)) {
                if (with1) absmax1 = absmax_of(s1);
                if (with2) absmax2 = absmax_of(s2);
            }
            if (with1) quantize_slice<A, 1, false>(maps.bucket1, s1, inverse_absmax(absmax1), q1);
            if (with2) quantize_slice<A, 2, false>(maps.bucket2, s2, inverse_absmax(absmax2), q2);
        }
    } else {
        bool within = both_finite(absmax1, absmax2) && both_finite(absmax3, 0.0f);
        if (!within) {
            if (with1) absmax1 = absmax_of(s1);
            if (with2) absmax2 = absmax_of(s2);
            absmax3 = absmax_of(s3);
        }
        const float inv1 = inverse_absmax(absmax1);
        const float inv2 = inverse_absmax(absmax2);
        const float inv3 = inverse_absmax(absmax3);
        within = within && both_finite(inv1, inv2) && both_finite(inv3, 0.0f);
        if (within) {
            if (with1) quantize_slice<A, 1, true>(maps.bucket1, s1, inv1, q1);
            if (with2) quantize_slice<A, 2, true>(maps.bucket2, s2, inv2, q2);
            quantize_slice<A, 1, true>(maps.bucket1, s3, inv3, q3);
        } else {
            if (with1) quantize_slice<A, 1, false>(maps.bucket1, s1, inv1, q1);
            if (with2) quantize_slice<A, 2, false>(maps.bucket2, s2, inv2, q2);
            quantize_slice<A, 1, false>(maps.bucket1, s3, inv3, q3);
        }
    }
    if (whole) {
        if (with1) {
            *reinterpret_cast<Vec2u*>(codes1) =
                Vec2u{pack_codes(q1[0], q1[1], q1[2], q1[3]), pack_codes(q1[4], q1[5], q1[6], q1[7])};
        }
        if (with2) {
            *reinterpret_cast<Vec2u*>(codes2) =
                Vec2u{pack_codes(q2[0], q2[1], q2[2], q2[3]), pack_codes(q2[4], q2[5], q2[6], q2[7])};
        }
        if (with3) {
            *reinterpret_cast<Vec2u*>(codes3) =
                Vec2u{pack_codes(q3[0], q3[1], q3[2], q3[3]), pack_codes(q3[4], q3[5], q3[6], q3[7])};
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if (j >= count) continue;
            if (with1) codes1[j] = static_cast<u8>(q1[j] >> 24);
            if (with2) codes2[j] = static_cast<u8>(q2[j] >> 24);
            if (with3) codes3[j] = static_cast<u8>(q3[j] >> 24);
        }
    }
    if (count > 0 && (threadIdx.x & 31u) == 0) {
        if (with1) t.absmax1[block] = absmax1;
        if (with2) t.absmax2[block] = absmax2;
        if (with3) absmax3_of(t)[block] = absmax3;
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

// Processes a run's tiles. In the norm pass, writes each tile's partial sum to t.unorm[1 + tile] (the
// trust-ratio rules' two: t.unorm[2 + 2 tile] and t.unorm[3 + 2 tile]).
template <int A, class D, bool kNormPass>
__device__ __forceinline__ bool run_tiles_fp32(const TileRun& run, const OptimParams& hp, float* scratch) {
    const OptimTensor& t = run.t;
    const bool vector_ok = vector_path_ok<A, D, 4>(t, hp, 4);
    const float scale = kNormPass ? 1.0f : tensor_update_scale<A>(t, hp);
    bool saw_nonfinite = false;
    for (i64 tile = run.first; tile < run.end; tile += run.stride) {
        const i64 begin = tile * kTileFp32;
        const i64 end = begin + kTileFp32 < run.limit ? begin + kTileFp32 : run.limit;
        float param_squared = 0.0f;
        float partial =
            tile_fp32<A, D, kNormPass>(t, hp, begin, end, scale, vector_ok, saw_nonfinite, param_squared);
        if (kNormPass) {
            partial = block_sum(partial, scratch);
            if constexpr (uses_trust_ratio(A)) {
                param_squared = block_sum(param_squared, scratch);
                if (threadIdx.x == 0) {
                    t.unorm[2 + 2 * tile] = partial;
                    t.unorm[3 + 2 * tile] = param_squared;
                }
            } else {
                if (threadIdx.x == 0) t.unorm[1 + tile] = partial;
            }
        }
    }
    return saw_nonfinite;
}

// --- Tiles through shared memory (8-bit state, sm_90 and later) ---
//
// Loading its own slices, each warp has one slice in flight and waits for it before each one: too
// few bytes in flight to cover memory latency (on an H200 the warps stalled on loads over half the
// time with memory at half its bandwidth; L2 prefetches and more resident warps did not help). Here
// a producer warp (the block's ninth, kProducerThreads threads past the kThreads that compute) has
// the tensor memory accelerator copy the block's tiles into tile_stages() shared buffers, while the
// other warps compute: an mbarrier per buffer (`full`) says when a tile has landed; every computing
// thread then reads its part into registers and arrives on the buffer's `empty` barrier, and the
// producer refills the buffer once all have. The producer walks the block's runs in the order the
// block processes them, so the pipeline fills once per launch. Tiles the copies cannot serve (a
// partial tile, arrays not 16-byte aligned) are loaded directly; either way the tile routine gets
// the same values.
// Note: thread 0 issued the copies at first, between its own tiles; its warp, with the most work,
// set the block's pace, and the others spent a sixth to a third of their time waiting for tiles.

// The pipeline's state in registers. Computing threads: the buffer of the next tile to take, and bit
// s of `full`, the parity of buffer s's next landing. The producer: the buffer of the next copy, and
// bits s of `empty` and `pending`: the parity of buffer s's next release, and whether a copy into
// buffer s awaits its release.
struct TilePipe {
    bool on = false;         // the launch gave the buffers and the producer warp
    unsigned barriers = 0u;  // the shared-memory address of full[0] (empty[s] follows full[])
    unsigned take = 0u;
    unsigned full = 0u;
    unsigned put = 0u;
    unsigned empty = 0u;
    unsigned pending = 0u;
    // Published runs (chunks handed out): the shared-memory address of run_full[0] (run_empty[s] follows
    // run_full[]); the next slot to read (computing threads) or write (the producer); bit s: the parity of
    // slot s's next run_full (computing threads) or run_empty (the producer) phase; the producer's bit s:
    // slot s holds a run not yet done.
    unsigned run_barriers = 0u;
    unsigned run_slot = 0u;
    unsigned run_phase = 0u;
    unsigned run_pending = 0u;
};

// The tile buffers of a block whose parameters are D's.
template <class D>
__device__ __forceinline__ constexpr unsigned stages_of() {
    return static_cast<unsigned>(tile_stages(static_cast<int>(sizeof(typename D::Storage))));
}
template <class D>
__device__ __forceinline__ unsigned next_stage(unsigned stage) {
    return stage + 1u == stages_of<D>() ? 0u : stage + 1u;
}

#if CUDARC_OPTIM_TILE_COPIES
extern __shared__ __align__(128) unsigned char cudarc_optim_tile_buffers[];

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ unsigned full_barrier(const TilePipe& pipe, unsigned stage) {
    return pipe.barriers + 8u * stage;
}
__device__ __forceinline__ unsigned empty_barrier(const TilePipe& pipe, unsigned stage) {
    return pipe.barriers + 8u * (static_cast<unsigned>(kMaxTileStages) + stage);
}
// Waits until the barrier's phase of the given parity completes. kSuspended (the producer): try_wait
// with a long suspend-time hint (kProducerSuspend ns), which lets the thread sleep in the barrier
// until then. Note: polling (try_wait's default time limit, or a test and __nanosleep), the producers
// of an H200 issued a seventh of all instructions, about 200 polls per tile (that the hint stops this
// is not yet confirmed by a profile).
constexpr unsigned kProducerSuspend = 1000000u;
template <bool kSuspended>
__device__ __forceinline__ void wait_barrier(unsigned barrier, unsigned parity) {
    unsigned landed;
    do {
        if constexpr (kSuspended) {
            asm volatile(
                "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n\tselp.u32 "
                "%0, 1, 0, p;\n\t}"
                : "=r"(landed)
                : "r"(barrier), "r"(parity), "n"(kProducerSuspend)
                : "memory");
        } else {
            asm volatile(
                "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, "
                "1, 0, p;\n\t}"
                : "=r"(landed)
                : "r"(barrier), "r"(parity)
                : "memory");
        }
    } while (landed == 0);
}
__device__ __forceinline__ void bulk_copy(unsigned char* to, const void* from, unsigned bytes,
                                          unsigned barrier) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            shared_address(to)),
        "l"(__cvta_generic_to_global(from)), "r"(bytes), "r"(barrier)
        : "memory");
}
#endif

// Sets up the pipeline when the launch gave its dynamic shared memory and the producer warp (thread 0
// initializes the barriers; the caller's __syncthreads publishes them).
template <int A, class D>
__device__ __forceinline__ TilePipe start_tile_pipe(BlockShared<true>& shared) {
    TilePipe pipe;
#if CUDARC_OPTIM_TILE_COPIES
    unsigned dynamic_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
    if (dynamic_bytes < static_cast<unsigned>(tile_pipeline_bytes(
                            static_cast<int>(sizeof(typename D::Storage)), tile_states(A))) ||
        blockDim.x != static_cast<unsigned>(kThreads + kProducerThreads))
        return pipe;
    pipe.on = true;
    pipe.barriers = shared_address(&shared.full[0]);
    pipe.run_barriers = shared_address(&shared.run_full[0]);
    if (threadIdx.x == 0) {
        for (unsigned s = 0; s < stages_of<D>(); ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(full_barrier(pipe, s)) : "memory");
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(empty_barrier(pipe, s)),
                         "r"(kThreads)
                         : "memory");
        }
        if (hands_out_chunks(static_cast<int>(sizeof(typename D::Storage)), uses_state3(A))) {
            for (unsigned s = 0; s < static_cast<unsigned>(kRunSlots); ++s) {
                asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(pipe.run_barriers + 8u * s)
                             : "memory");
                asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(
                                 pipe.run_barriers + 8u * (static_cast<unsigned>(kRunSlots) + s)),
                             "r"(kThreads)
                             : "memory");
            }
        }
        // The initialized barriers are visible to the copy engine (the async proxy) before any copy.
        asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
    }
#endif
    return pipe;
}

// Whether the copies can serve a run's tensor: its arrays are 16-byte aligned.
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

// The producer: copies tile `tile` of a run into the next buffer, once that buffer's last tile is taken.
template <int A, class D>
__device__ __forceinline__ void issue_tile(TilePipe& pipe, const TileRun& run, i64 tile,
                                           const OptimParams& hp) {
#if CUDARC_OPTIM_TILE_COPIES
    typedef typename D::Storage S;
    const unsigned stage = pipe.put;
    if ((pipe.pending >> stage) & 1u) {
        wait_barrier<true>(empty_barrier(pipe, stage), (pipe.empty >> stage) & 1u);
        pipe.empty ^= 1u << stage;
    }
    pipe.pending |= 1u << stage;
    pipe.put = next_stage<D>(stage);
    constexpr int kStates = tile_states(A);
    const bool with1 = uses_state1(A, hp);
    const bool with2 = uses_state2(A);
    constexpr bool with3 = uses_state3(A);
    const i64 begin = tile * kTile8;
    const unsigned data = kTile8 * static_cast<unsigned>(sizeof(S));
    const unsigned absmax_bytes = (kTile8 / kQuantBlock) * 4u;
    const unsigned bytes = 2u * data + (with1 ? kTile8 + absmax_bytes : 0u) +
                           (with2 ? kTile8 + absmax_bytes : 0u) + (with3 ? kTile8 + absmax_bytes : 0u);
    unsigned char* buffer = cudarc_optim_tile_buffers + stage * static_cast<unsigned>(tile_buffer_bytes(
                                                                    static_cast<int>(sizeof(S)), kStates));
    const unsigned full = full_barrier(pipe, stage);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(full), "r"(bytes) : "memory");
    bulk_copy(buffer, static_cast<const S*>(run.t.param) + begin, data, full);
    bulk_copy(buffer + data, static_cast<const S*>(run.t.grad) + begin, data, full);
    unsigned char* states = buffer + 2u * data;
    unsigned char* absmax = states + static_cast<unsigned>(kStates) * kTile8;
    if (with1) {
        bulk_copy(states, static_cast<const u8*>(run.t.state1) + begin, kTile8, full);
        bulk_copy(absmax, run.t.absmax1 + tile * (kTile8 / kQuantBlock), absmax_bytes, full);
    }
    if (with2) {
        bulk_copy(states + kTile8, static_cast<const u8*>(run.t.state2) + begin, kTile8, full);
        bulk_copy(absmax + absmax_bytes, run.t.absmax2 + tile * (kTile8 / kQuantBlock), absmax_bytes, full);
    }
    if (with3) {
        bulk_copy(states + 2u * kTile8, codes3_of(run.t) + begin, kTile8, full);
        bulk_copy(absmax + 2u * absmax_bytes, absmax3_of(run.t) + tile * (kTile8 / kQuantBlock), absmax_bytes,
                  full);
    }
#endif
}

// Copies every whole tile of a run (when its arrays fit), in order.
template <int A, class D>
__device__ __forceinline__ void issue_run(TilePipe& pipe, const TileRun& run, const OptimParams& hp) {
    if (!copies_fit<A>(run.t, hp)) return;
    for (i64 tile = run.first; tile < run.end && (tile + 1) * kTile8 <= run.limit; tile += run.stride) {
        issue_tile<A, D>(pipe, run, tile, hp);
    }
}

// The producer (one thread): copies every whole tile of the block's runs whose arrays fit, in the
// order the computing threads take them.
template <int A, class D, class Runs>
__device__ __forceinline__ void produce_tiles(TilePipe& pipe, const Runs& runs, const OptimParams& hp) {
    TileRun run;
    for (int r = 0; runs.template get<kTile8>(r, run); ++r) {
        if (r == 0) wait_for_earlier_kernels();  // the first run from the tables before (Note [Early launch])
        issue_run<A, D>(pipe, run, hp);
    }
}

// --- Chunks handed out (Note [Dynamic chunks]) ---
//
// The producer takes the block's chunks (its first is chunk blockIdx.x, the rest from the counter, each
// asked for one chunk ahead so that the answer is back when it is needed), writes each run into the
// next of kRunSlots slots in shared memory, and then copies its tiles; a run with `stride` 0 ends the
// block's runs. The computing threads wait for a slot's run_full phase, process the run straight from
// the slot, and arrive on its run_empty barrier; the producer reuses a slot once all have.

// The producer: publishes `run`, or with `more` false the end of the runs, in the next slot.
__device__ __forceinline__ void publish_run(TilePipe& pipe, TileRun* slots, const TileRun& run, bool more) {
#if CUDARC_OPTIM_TILE_COPIES
    const unsigned slot = pipe.run_slot;
    if ((pipe.run_pending >> slot) & 1u) {
        wait_barrier<true>(pipe.run_barriers + 8u * (static_cast<unsigned>(kRunSlots) + slot),
                           (pipe.run_phase >> slot) & 1u);
        pipe.run_phase ^= 1u << slot;
    }
    pipe.run_pending |= 1u << slot;
    pipe.run_slot = slot + 1u == static_cast<unsigned>(kRunSlots) ? 0u : slot + 1u;
    TileRun published = run;
    if (!more) published.stride = 0;
    slots[slot] = published;
    // (mbarrier.arrive releases the slot's contents to the threads that wait on the phase.)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(pipe.run_barriers + 8u * slot) : "memory");
#endif
}

// Every computing thread: the slot of the next published run (done_with_run gives it back).
__device__ __forceinline__ unsigned take_run(TilePipe& pipe) {
    const unsigned slot = pipe.run_slot;
#if CUDARC_OPTIM_TILE_COPIES
    wait_barrier<false>(pipe.run_barriers + 8u * slot, (pipe.run_phase >> slot) & 1u);
    pipe.run_phase ^= 1u << slot;
    pipe.run_slot = slot + 1u == static_cast<unsigned>(kRunSlots) ? 0u : slot + 1u;
#endif
    return slot;
}
__device__ __forceinline__ void done_with_run(const TilePipe& pipe, unsigned slot) {
#if CUDARC_OPTIM_TILE_COPIES
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(
                     pipe.run_barriers + 8u * (static_cast<unsigned>(kRunSlots) + slot))
                 : "memory");
#endif
}

// The producer of a launch that hands out its chunks.
template <int A, class D>
__device__ __forceinline__ void produce_handed_out(TilePipe& pipe, const ChunkRuns& runs,
                                                   const OptimParams& hp, TileRun* slots) {
    TileRun run;
    bool more = runs.template get_chunk<kTile8>(blockIdx.x, run);
    wait_for_earlier_kernels();  // after the tables, before the counter (Note [Early launch])
    while (more) {
        // The next chunk is asked for before this one's tiles are copied, so its answer is back in time.
        const unsigned next = static_cast<unsigned>(atomicAdd(runs.counter, 1ull)) + gridDim.x;
        publish_run(pipe, slots, run, true);
        issue_run<A, D>(pipe, run, hp);
        more = next < static_cast<unsigned>(runs.num_chunks) && runs.template get_chunk<kTile8>(next, run);
    }
    publish_run(pipe, slots, run, false);
}

// Releases a taken tile's buffer to the producer.
struct TileRelease {
    unsigned empty_barrier = 0u;
    __device__ __forceinline__ void operator()() const {
#if CUDARC_OPTIM_TILE_COPIES
        // The reads (generic proxy) are done before the producer's next copies (async proxy) write here.
        asm volatile(
            "fence.proxy.async.shared::cta;\n\tmbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(empty_barrier)
            : "memory");
#endif
    }
};

// Every computing thread: waits for the next copied tile and reads its slice of it; the buffer is
// released by the TileRelease returned.
template <int A, class D>
__device__ __forceinline__ TileRelease take_tile(TilePipe& pipe, const OptimParams& hp,
                                                 Slice8<D, uses_state3(A)>& slice) {
    TileRelease release;
#if CUDARC_OPTIM_TILE_COPIES
    typedef typename D::Storage S;
    constexpr int kStates = tile_states(A);
    const unsigned stage = pipe.take;
    wait_barrier<false>(full_barrier(pipe, stage), (pipe.full >> stage) & 1u);
    pipe.full ^= 1u << stage;
    pipe.take = next_stage<D>(stage);
    const unsigned char* buffer =
        cudarc_optim_tile_buffers +
        stage * static_cast<unsigned>(tile_buffer_bytes(static_cast<int>(sizeof(S)), kStates));
    const unsigned data = kTile8 * static_cast<unsigned>(sizeof(S));
    const unsigned char* states = buffer + 2u * data;
    const float* absmax = reinterpret_cast<const float*>(states + static_cast<unsigned>(kStates) * kTile8);
    const unsigned warp = threadIdx.x >> 5;
    slice.param.load(reinterpret_cast<const S*>(buffer) + 8 * threadIdx.x);
    slice.grad.load(reinterpret_cast<const S*>(buffer + data) + 8 * threadIdx.x);
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
    if constexpr (uses_state3(A)) {
        slice.codes3 = reinterpret_cast<const Vec2u*>(states + 2u * kTile8)[threadIdx.x];
        slice.absmax3 = absmax[2 * (kTile8 / kQuantBlock) + warp];
    }
    release.empty_barrier = empty_barrier(pipe, stage);
#endif
    return release;
}

// run_tiles_8bit for AdEMAMix: one loop over all tiles, each copied tile's buffer released right after
// its reads. With run_tiles_8bit's two loops its fp32-parameter kernel spilled 76 bytes (0 with one) and
// took 1.54x the floor against 1.19x on an H200.
template <int A, class D, bool kNormPass>
__device__ __forceinline__ bool run_tiles_8bit_one_loop(const TileRun& run, const OptimParams& hp,
                                                        BlockShared<true>& maps, TilePipe& pipe) {
    const OptimTensor& t = run.t;
    assume_global_arrays(t, uses_state1(A, hp), uses_state2(A));
    const bool vector_ok = vector_path_ok<A, D, 8>(t, hp, 1);
    const float scale = kNormPass ? 1.0f : tensor_update_scale<A>(t, hp);
    const bool fits = pipe.on && copies_fit<A>(t, hp);
    bool saw_nonfinite = false;
    // Tiles by their first elements (kept apart from the tile numbers: less work per tile).
    const i64 step = run.stride * kTile8;
    const i64 end = run.end * kTile8;
    for (i64 begin = run.first * kTile8; begin < end; begin += step) {
        // This thread's elements: [first, first + count).
        const bool whole_tile = begin + kTile8 <= run.limit;
        const i64 first = begin + 8 * static_cast<i64>(threadIdx.x);
        const i64 left = run.limit - first;
        const int count = whole_tile || left >= 8 ? 8 : (left <= 0 ? 0 : static_cast<int>(left));
        Slice8<D, uses_state3(A)> slice;
        bool whole;
        if (fits && whole_tile) {
            take_tile<A, D>(pipe, hp, slice)();
            whole = true;
        } else {
            whole = load_slice8<A, D>(t, hp, first, count, vector_ok, slice);
            if (!whole) load_slice8_each<A, D>(t, hp, first, count, slice);
        }
        float partial =
            tile_8bit<A, D, kNormPass>(t, hp, first, count, slice, whole, scale, maps, saw_nonfinite);
        if (kNormPass) {
            partial = block_sum(partial, maps.scratch);
            if (threadIdx.x == 0) t.unorm[1 + begin / kTile8] = partial;
        }
    }
    return saw_nonfinite;
}

// run_tiles_fp32 for 8-bit state. Whole tiles come first (only a run's last tile may be partial): copied
// ones in a loop of their own, which spends nothing on counts and bounds.
// Note: where a copied tile's buffer is released was measured on an H200 (multi-tensor AdamW, 1024 x
// 256K, behind the benchmark's gate). Right after the reads, the fence waits for them to land: with
// 16-bit parameters that cost least (1.15x the floor, against 1.18x releasing before the parameter
// store and 1.19x after it). With fp32 parameters, whose slice holds twice the registers, releasing
// before the store ran fastest (1.10x, against 1.14x right after the reads); after the store the fence
// also waits for the store.
template <int A, class D, bool kNormPass>
__device__ __forceinline__ bool run_tiles_8bit(const TileRun& run, const OptimParams& hp,
                                               BlockShared<true>& maps, TilePipe& pipe) {
    if constexpr (uses_state3(A)) return run_tiles_8bit_one_loop<A, D, kNormPass>(run, hp, maps, pipe);
    constexpr bool kReleaseAfterUse = sizeof(typename D::Storage) == 4;
    const OptimTensor& t = run.t;
    assume_global_arrays(t, uses_state1(A, hp), uses_state2(A));
    const bool vector_ok = vector_path_ok<A, D, 8>(t, hp, 1);
    const float scale = kNormPass ? 1.0f : tensor_update_scale<A>(t, hp);
    bool saw_nonfinite = false;
    auto finish = [&](float partial, i64 tile) {
        if (kNormPass) {
            partial = block_sum(partial, maps.scratch);
            if (threadIdx.x == 0) t.unorm[1 + tile] = partial;
        }
    };
    i64 tile = run.first;
    if (pipe.on && copies_fit<A>(t, hp)) {
        const i64 whole_end = run.limit / kTile8 < run.end ? run.limit / kTile8 : run.end;
        for (; tile < whole_end; tile += run.stride) {
            Slice8<D, uses_state3(A)> slice;
            const TileRelease release = take_tile<A, D>(pipe, hp, slice);
            const i64 first = tile * kTile8 + 8 * static_cast<i64>(threadIdx.x);
            if constexpr (kReleaseAfterUse) {
                finish(tile_8bit<A, D, kNormPass>(t, hp, first, 8, slice, true, scale, maps, saw_nonfinite,
                                                  release),
                       tile);
            } else {
                release();
                finish(tile_8bit<A, D, kNormPass>(t, hp, first, 8, slice, true, scale, maps, saw_nonfinite),
                       tile);
            }
        }
    }
    for (; tile < run.end; tile += run.stride) {
        // This thread's elements: [first, first + count).
        const i64 first = tile * kTile8 + 8 * static_cast<i64>(threadIdx.x);
        const i64 left = run.limit - first;
        const int count = left >= 8 ? 8 : (left <= 0 ? 0 : static_cast<int>(left));
        Slice8<D, uses_state3(A)> slice;
        const bool whole = load_slice8<A, D>(t, hp, first, count, vector_ok, slice);
        if (!whole) load_slice8_each<A, D>(t, hp, first, count, slice);
        finish(tile_8bit<A, D, kNormPass>(t, hp, first, count, slice, whole, scale, maps, saw_nonfinite),
               tile);
    }
    return saw_nonfinite;
}

// Every computing thread of a launch that hands out its chunks: the runs as published. Thread 0 then
// counts the block done; the last block's thread 0 resets the counter.
template <int A, class D>
__device__ __forceinline__ bool run_handed_out(BlockShared<true>& shared, const ChunkRuns& runs,
                                               const OptimParams& hp, TilePipe& pipe) {
    bool saw_nonfinite = false;
    for (;;) {
        const unsigned slot = take_run(pipe);
        // Read from the slot where needed, which costs fewer registers than a copy.
        const TileRun& run = shared.runs[slot];
        if (run.stride == 0) {
            done_with_run(pipe, slot);
            break;
        }
        saw_nonfinite = run_tiles_8bit<A, D, false>(run, hp, shared, pipe) || saw_nonfinite;
        done_with_run(pipe, slot);
    }
    if (threadIdx.x == 0) {
        // Every producer of the launch asked its last before its block's end run was published.
        const unsigned long long before = atomicAdd(runs.counter, 1ull << 32);
        if ((before >> 32) == gridDim.x - 1u) atomicExch(runs.counter, 0ull);
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
    return run_tiles_fp32<A, D, kNormPass>(run, hp, shared.scratch);
}

// The tile pipeline of the 8-bit update pass (off elsewhere).
template <int A, class D, bool kEightBit, bool kNormPass>
__device__ __forceinline__ TilePipe begin_tiles(BlockShared<kEightBit>& shared) {
    TilePipe pipe;
    if constexpr (kEightBit && !kNormPass) pipe = start_tile_pipe<A, D>(shared);
    return pipe;
}

// kWords 4-byte words (a multiple of 4, 16-byte aligned) on their way into shared memory: each computing
// thread loads its vectors into registers, then stores them.
// Note: copied one vector at a time, load then store, a thread waited on memory once per vector (the
// compiler cannot move a load above a store through generic pointers); a launch of the 1024-tensor small
// inventory spent several microseconds staging its maps.
template <int kWords>
struct StagedWords {
    static constexpr int kVectors = kWords / 4;
    static constexpr int kPerThread = (kVectors + kThreads - 1) / kThreads;
    Vec4u vectors[kPerThread];
    __device__ __forceinline__ void load(const void* from) {
        const Vec4u* source = static_cast<const Vec4u*>(from);
#pragma unroll
        for (int k = 0; k < kPerThread; ++k) {
            const int i = static_cast<int>(threadIdx.x) + k * kThreads;
            if (i < kVectors) vectors[k] = source[i];
        }
    }
    __device__ __forceinline__ void store(void* to) const {
        Vec4u* target = static_cast<Vec4u*>(to);
#pragma unroll
        for (int k = 0; k < kPerThread; ++k) {
            const int i = static_cast<int>(threadIdx.x) + k * kThreads;
            if (i < kVectors) target[i] = vectors[k];
        }
    }
};

// Stages the maps the rule uses (the computing threads copy them, every load before any store); every
// thread of the block must call it.
template <int A>
__device__ __forceinline__ void stage_maps(BlockShared<true>& shared, const OptimParams& hp,
                                           const QuantMapImage* qmap1, const QuantMapImage* qmap2) {
    if (threadIdx.x < kThreads) {
        const bool with1 = uses_state1(A, hp);
        const bool with2 = uses_state2(A);
        StagedWords<256> code1;
        StagedWords<uses_unsigned_map(A, 1) ? kMapBuckets : 2 * kMapBuckets> bucket1;
        StagedWords<256> code2;
        StagedWords<kMapBuckets> bucket2;
        if (with1) code1.load(qmap1->code), bucket1.load(qmap1->bucket);
        if (with2) code2.load(qmap2->code), bucket2.load(qmap2->bucket);
        if (with1) code1.store(shared.code1), bucket1.store(shared.bucket1);
        if (with2) code2.store(shared.code2), bucket2.store(shared.bucket2);
    }
    __syncthreads();
}
template <int A>
__device__ __forceinline__ void stage_maps(BlockShared<false>&, const OptimParams&, const QuantMapImage*,
                                           const QuantMapImage*) {}

// All of a block's runs, in order; returns whether a gradient was not finite. The producer warp, if
// the launch has one, only copies tiles (one thread of it; the rest has nothing to do).
template <int A, class D, bool kEightBit, bool kNormPass, class Runs>
__device__ __forceinline__ bool run_all(BlockShared<kEightBit>& shared, const Runs& runs,
                                        const OptimParams& hp, TilePipe& pipe) {
    constexpr int kTile = kEightBit ? kTile8 : kTileFp32;
    constexpr bool kHandedOut =
        kEightBit && !kNormPass && Runs::kChunked &&
        hands_out_chunks(static_cast<int>(sizeof(typename D::Storage)), uses_state3(A));
    if (threadIdx.x >= kThreads) {
        if (kEightBit && pipe.on && threadIdx.x == kThreads) {
            if constexpr (kHandedOut) {
                produce_handed_out<A, D>(pipe, runs, hp, shared.runs);
            } else {
                produce_tiles<A, D>(pipe, runs, hp);
            }
        }
        return false;
    }
    if constexpr (kHandedOut) {
        if (pipe.on) return run_handed_out<A, D>(shared, runs, hp, pipe);
    }
    bool saw_nonfinite = false;
    TileRun run;
    for (int r = 0; runs.template get<kTile>(r, run); ++r) {
        if (kNormPass && run.t.unorm == 0) continue;
        saw_nonfinite = run_tiles<A, D, kNormPass>(shared, run, hp, pipe) || saw_nonfinite;
    }
    return saw_nonfinite;
}

template <int A, class D, bool kEightBit, bool kNormPass>
__device__ __forceinline__ void tensor_kernel(const OptimTensor& t, const OptimParams& hp,
                                              const QuantMapImage* qmap1, const QuantMapImage* qmap2,
                                              int* nonfinite_flag, unsigned* blocks_done) {
    __shared__ BlockShared<kEightBit> shared;
    let_later_kernels_start();
    if (kNormPass && (t.unorm == 0 || blocks_done == 0)) return;
    TilePipe pipe = begin_tiles<A, D, kEightBit, kNormPass>(shared);
    stage_maps<A>(shared, hp, qmap1, qmap2);  // (its __syncthreads also publishes the pipeline's barriers)
    if (threadIdx.x < kThreads) wait_for_earlier_kernels();  // (the producer waits in produce_tiles)
    const TensorRuns runs = {t};
    const bool saw_nonfinite = run_all<A, D, kEightBit, kNormPass>(shared, runs, hp, pipe);
    if (threadIdx.x >= kThreads) return;
    if (kNormPass) {
        finish_update_norms<kEightBit ? kTile8 : kTileFp32, norm_count(A)>(&t, 1, blocks_done,
                                                                           shared.scratch);
    } else if (saw_nonfinite && nonfinite_flag != 0) {
        *nonfinite_flag = 1;
    }
}

// Block b processes chunks b, b + gridDim.x, ... (8-bit launches use one wave of blocks, so each
// stages its maps once).
template <int A, class D, bool kEightBit, bool kNormPass>
__device__ __forceinline__ void multi_tensor_kernel(const OptimTensor* tensors, const OptimChunk* chunks,
                                                    int num_chunks, int num_tensors, const OptimParams& hp,
                                                    const QuantMapImage* qmap1, const QuantMapImage* qmap2,
                                                    int* nonfinite_flag, unsigned* blocks_done) {
    __shared__ BlockShared<kEightBit> shared;
    let_later_kernels_start();
    if (kNormPass && blocks_done == 0) return;
    TilePipe pipe = begin_tiles<A, D, kEightBit, kNormPass>(shared);
    stage_maps<A>(shared, hp, qmap1, qmap2);  // (its __syncthreads also publishes the pipeline's barriers)
    if (threadIdx.x < kThreads) wait_for_earlier_kernels();  // (the producer waits once it has its first run)
    // (The chunk counter is in the group's header, next to blocks_done: Note [Dynamic chunks].)
    const ChunkRuns runs = {tensors, chunks, num_chunks,
                            reinterpret_cast<unsigned long long*>(
                                reinterpret_cast<unsigned char*>(blocks_done) + kChunkCounterOffset)};
    const bool saw_nonfinite = run_all<A, D, kEightBit, kNormPass>(shared, runs, hp, pipe);
    if (threadIdx.x >= kThreads) return;
    if (kNormPass) {
        finish_update_norms<kEightBit ? kTile8 : kTileFp32, norm_count(A)>(tensors, num_tensors, blocks_done,
                                                                           shared.scratch);
    } else if (saw_nonfinite && nonfinite_flag != 0) {
        *nonfinite_flag = 1;
    }
}

// --- Capturable steps: the step's parameters in device memory ---
//
// Note [Capturable steps]: a step captured into a graph is replayed with the kernel arguments it was
// captured with, so a capturable group keeps its step count and parameters in device memory
// (OptimStepState) and the kernels advance the count: N replays of one captured step are N steps. The
// capturable entries (kernels/optim.cu) read the state's `params` once per block, through shared memory,
// and call the same bodies as the ordinary entries, which take `params` by value. A step is one or more
// launches (per element type, and the max_unorm pass before each update pass); all read the same
// `params`, and the last launch (`advance`) moves the step on: each of its blocks counts itself in
// `readers` after its read, and the block that counts last knows every block has read, so it may write
// the next step's `count` and `params` (derive_step, from the state's schedule; Note [Per-step values]),
// and resets `readers` for the next step. The next step's launches come after this one in stream order.
// A launch with a step state must have every block take its count (no block returns before read_step).

// The next step of `state`, by one thread, once every block of the step's last launch has read `current`.
template <int A>
__device__ __forceinline__ void advance_step(OptimStepState* state, const OptimParams& current) {
    const i64 count = state->count + 1;
    OptimParams next = current;
    derive_step(A, state->schedule, count + 1, next);
    state->params = next;
    state->count = count;
    state->readers = 0u;
}

// Every thread of the block: the step's parameters, read once by thread 0 and shared. With `advance`, the
// last block to read also advances the step.
template <int A>
__device__ __forceinline__ OptimParams read_step(OptimStepState* state, bool advance) {
    __shared__ OptimParams shared_params;
    bool last = false;
    if (threadIdx.x == 0) {
        shared_params = state->params;
        if (advance) {
            __threadfence();  // the read above is complete before this block is counted
            last = atomicAdd(&state->readers, 1u) == gridDim.x - 1u;
        }
    }
    __syncthreads();
    const OptimParams params = shared_params;
    if (last) {
        __threadfence();  // every block's read is complete before the state changes
        advance_step<A>(state, params);
    }
    return params;
}

// The launch bounds of a kernel. Note: on an H200 the 8-bit kernels ran fastest with their tile copies
// at 2 blocks per SM (256 computing threads and the producer warp each: up to 112 registers; at 3 blocks
// and 80 registers the multi-tensor kernels spilled, and holding their run in shared memory instead cost
// more than the third block gained). Without the copies (HIP, before sm_90) they keep 256 threads and the
// 3 blocks that ran fastest before them (at 4 blocks, 64 registers, they spill). On HIP the second
// __launch_bounds__ argument counts waves per SIMD, where 3 asks about the same.
template <bool kEightBit, bool kNormPass>
struct LaunchBounds {
#if CUDARC_OPTIM_TILE_COPIES
    enum : int {
        threads = kEightBit && !kNormPass ? kThreads + kProducerThreads : kThreads,
        min_blocks = kEightBit ? 2 : 1
    };
#else
    enum : int { threads = kThreads, min_blocks = kEightBit ? 3 : 1 };
#endif
};

}  // namespace cudarc_optim

// Helpers for the benchmark kernels: 16-byte vectors and grid-stride indexing.
//
// Note: no toolkit header is included, so NVRTC and hiprtc both compile this as is; threadIdx and
// friends are built into both compilers.
#pragma once

namespace cudarc_bench {

// Four floats moved as one 16-byte access (ld/st.global.v4 on NVIDIA, dwordx4 on AMD).
struct alignas(16) Float4 {
    float x, y, z, w;
};

__device__ inline bool aligned16(const void* pointer) {
    return (reinterpret_cast<unsigned long long>(pointer) & 15ull) == 0;
}

__device__ inline unsigned long long first_index() {
    return static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ inline unsigned long long grid_stride() {
    return static_cast<unsigned long long>(gridDim.x) * blockDim.x;
}

// Grid-stride loop over [0, count) that issues `Unroll` loads before their stores, so each thread
// keeps several 16-byte requests in flight: that, not more threads, is what saturates HBM with a grid
// of a few blocks per SM. load(i) reads (and computes) element i's value, store(i, value) writes it.
template <int Unroll, typename Load, typename Store>
__device__ inline void grid_stride_unrolled(unsigned long long count, Load load, Store store) {
    const unsigned long long stride = grid_stride();
    unsigned long long i = first_index();
    for (; i + (Unroll - 1) * stride < count; i += Unroll * stride) {
        decltype(load(i)) values[Unroll];
#pragma unroll
        for (int u = 0; u < Unroll; ++u) values[u] = load(i + u * stride);
#pragma unroll
        for (int u = 0; u < Unroll; ++u) store(i + u * stride, values[u]);
    }
    for (; i < count; i += stride) store(i, load(i));
}

}  // namespace cudarc_bench

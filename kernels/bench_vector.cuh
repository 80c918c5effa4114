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

}  // namespace cudarc_bench

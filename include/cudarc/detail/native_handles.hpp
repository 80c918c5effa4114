/// @file
/// Opaque native handle types, declared compatibly with the CUDA driver API's own so that a
/// CUstream from another library converts without a cast. cudarc's headers never include cuda.h.
#pragma once

#include <cstdint>

struct CUctx_st;
struct CUstream_st;
struct CUevent_st;
struct CUmod_st;
struct CUfunc_st;
struct CUmemPoolHandle_st;
struct CUgraph_st;
struct CUgraphExec_st;

namespace cudarc {

/// A device address. Same representation as CUdeviceptr (and hipDeviceptr_t's bits).
using DevicePtr = unsigned long long;

/// Native handle types (CUstream, CUevent, ...). On the HIP backend the same opaque pointers
/// carry hipStream_t / hipEvent_t values.
using NativeStream = ::CUstream_st*;
/// A native event handle (CUevent; hipEvent_t on HIP).
using NativeEvent = ::CUevent_st*;
/// A native context handle (CUcontext; hipCtx_t on HIP).
using NativeContext = ::CUctx_st*;

}  // namespace cudarc

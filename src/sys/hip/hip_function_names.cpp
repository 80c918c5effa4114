// Each entry is read off the adapter hip_driver.cpp installs in that DriverApi slot (Note [HIP function
// names]).
#include "sys/hip/hip_function_names.hpp"

#include <array>

namespace cudarc::sys::hip {
namespace {

// In DriverApi's order.
constexpr std::array kFunctionNames = {
    FunctionName{"cuInit", "hipInit"},
    FunctionName{"cuDriverGetVersion", "hipDriverGetVersion"},
    FunctionName{"cuGetErrorName", "hipGetErrorName"},
    FunctionName{"cuGetErrorString", "hipGetErrorString"},

    FunctionName{"cuDeviceGetCount", "hipGetDeviceCount"},
    FunctionName{"cuDeviceGet", "hipDeviceGet"},
    FunctionName{"cuDeviceGetName", "hipDeviceGetName"},
    FunctionName{"cuDeviceGetUuid", "hipDeviceGetUuid"},
    FunctionName{"cuDeviceTotalMem", "hipDeviceTotalMem"},
    FunctionName{"cuDeviceGetAttribute", "hipDeviceGetAttribute"},
    FunctionName{"cuDeviceGetPCIBusId", "hipDeviceGetPCIBusId"},
    FunctionName{"cuDevicePrimaryCtxRetain", "hipDevicePrimaryCtxRetain"},
    FunctionName{"cuDevicePrimaryCtxRelease", "hipDevicePrimaryCtxRelease"},
    FunctionName{"cuDeviceCanAccessPeer", "hipDeviceCanAccessPeer"},

    FunctionName{"cuCtxGetCurrent", "hipCtxGetCurrent"},
    FunctionName{"cuCtxSetCurrent", "hipCtxSetCurrent"},
    FunctionName{"cuCtxSynchronize", "hipDeviceSynchronize"},  // a HIP context is its device
    FunctionName{"cuCtxGetStreamPriorityRange", "hipDeviceGetStreamPriorityRange"},
    FunctionName{"cuMemGetInfo", "hipMemGetInfo"},
    FunctionName{"cuCtxEnablePeerAccess", "hipDeviceEnablePeerAccess"},

    FunctionName{"cuStreamCreateWithPriority", "hipStreamCreateWithPriority"},
    FunctionName{"cuStreamDestroy", "hipStreamDestroy"},
    FunctionName{"cuStreamSynchronize", "hipStreamSynchronize"},
    FunctionName{"cuStreamQuery", "hipStreamQuery"},
    FunctionName{"cuStreamWaitEvent", "hipStreamWaitEvent"},
    FunctionName{"cuStreamGetPriority", "hipStreamGetPriority"},
    FunctionName{"cuStreamGetFlags", "hipStreamGetFlags"},
    FunctionName{"cuStreamGetCtx", nullptr},
    FunctionName{"cuStreamIsCapturing", "hipStreamIsCapturing"},
    FunctionName{"cuStreamBeginCapture", "hipStreamBeginCapture"},
    FunctionName{"cuStreamEndCapture", "hipStreamEndCapture"},

    FunctionName{"cuEventCreate", "hipEventCreateWithFlags"},
    FunctionName{"cuEventDestroy", "hipEventDestroy"},
    FunctionName{"cuEventRecord", "hipEventRecord"},
    FunctionName{"cuEventQuery", "hipEventQuery"},
    FunctionName{"cuEventSynchronize", "hipEventSynchronize"},
    FunctionName{"cuEventElapsedTime", "hipEventElapsedTime"},

    FunctionName{"cuMemAlloc", "hipMalloc"},
    FunctionName{"cuMemFree", "hipFree"},
    FunctionName{"cuMemAllocAsync", "hipMallocAsync"},
    FunctionName{"cuMemFreeAsync", "hipFreeAsync"},
    FunctionName{"cuDeviceGetDefaultMemPool", "hipDeviceGetDefaultMemPool"},
    FunctionName{"cuMemPoolSetAttribute", "hipMemPoolSetAttribute"},
    FunctionName{"cuMemPoolTrimTo", "hipMemPoolTrimTo"},
    FunctionName{"cuMemPoolGetAttribute", "hipMemPoolGetAttribute"},
    FunctionName{"cuMemAllocManaged", "hipMallocManaged"},
    FunctionName{"cuMemPrefetchAsync", "hipMemPrefetchAsync"},
    FunctionName{"cuMemHostAlloc", "hipHostMalloc"},
    FunctionName{"cuMemFreeHost", "hipHostFree"},
    FunctionName{"cuMemcpyHtoDAsync", "hipMemcpyHtoDAsync"},
    FunctionName{"cuMemcpyDtoHAsync", "hipMemcpyDtoHAsync"},
    FunctionName{"cuMemcpyDtoDAsync", "hipMemcpyDtoDAsync"},
    FunctionName{"cuMemcpyPeerAsync", "hipMemcpyPeerAsync"},
    FunctionName{"cuMemsetD8Async", "hipMemsetD8Async"},
    FunctionName{"cuMemsetD32Async", "hipMemsetD32Async"},
    FunctionName{"cuPointerGetAttributes", nullptr},
    FunctionName{"cuMemGetAddressRange", nullptr},

    FunctionName{"cuModuleLoadData", "hipModuleLoadData"},
    FunctionName{"cuModuleUnload", "hipModuleUnload"},
    FunctionName{"cuModuleGetFunction", "hipModuleGetFunction"},
    FunctionName{"cuModuleGetGlobal", "hipModuleGetGlobal"},
    FunctionName{"cuFuncGetAttribute", "hipFuncGetAttribute"},
    // Emulated: the adapter checks the size against the current device's per-block LDS, which it
    // asks hipGetDevice and hipDeviceGetAttribute for (HIP's hipFuncSetAttribute takes a host symbol).
    FunctionName{"cuFuncSetAttribute", "hipGetDevice/hipDeviceGetAttribute"},
    FunctionName{"cuFuncGetParamInfo", nullptr},
    FunctionName{"cuLaunchKernel", "hipModuleLaunchKernel"},
    // HIP leaves launch_kernel_ex empty, and the launcher then sends a launch with attributes (on HIP:
    // a cooperative one; clusters are refused before any call) through launch_cooperative_kernel,
    // still reporting it as cuLaunchKernelEx.
    FunctionName{"cuLaunchKernelEx", "hipModuleLaunchCooperativeKernel"},
    FunctionName{"cuLaunchCooperativeKernel", "hipModuleLaunchCooperativeKernel"},
    FunctionName{"cuOccupancyMaxActiveBlocksPerMultiprocessor",
                 "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor"},

    FunctionName{"cuGraphInstantiateWithFlags", "hipGraphInstantiateWithFlags"},
    FunctionName{"cuGraphLaunch", "hipGraphLaunch"},
    FunctionName{"cuGraphDestroy", "hipGraphDestroy"},
    FunctionName{"cuGraphExecDestroy", "hipGraphExecDestroy"},
    FunctionName{"cuGraphExecUpdate", "hipGraphExecUpdate"},
    FunctionName{"cuGraphUpload", "hipGraphUpload"},
};

}  // namespace

std::span<const FunctionName> function_names() noexcept {
    return kFunctionNames;
}

const char* hip_function_for(std::string_view cuda_name) noexcept {
    for (const FunctionName& entry : kFunctionNames) {
        if (cuda_name == entry.cuda) return entry.hip;
    }
    return nullptr;
}

}  // namespace cudarc::sys::hip

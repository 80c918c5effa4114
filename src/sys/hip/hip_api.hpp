// The HIP runtime entry points the HIP backend calls, declared from HIP's documentation (no HIP
// header is included). Internal to src/sys/hip.
//
// Note: HIP's handle types (hipStream_t, hipEvent_t, hipModule_t, ...) are opaque pointers, as
// CUDA's are, so they travel through DriverApi's CUDA-typed slots by a cast. hipDeviceptr_t is a
// void*, while DriverApi's DevicePtr is a 64-bit integer: the adapters convert between them.
#pragma once

#include <cstddef>

namespace cudarc::sys::hip {

using HipError = int;  // hipError_t; the codes cudarc tests have CUresult's numbers (see docs/hip.md)
using HipStream = void*;
using HipEvent = void*;
using HipModule = void*;
using HipFunction = void*;
using HipContext = void*;
using HipMemPool = void*;
using HipGraph = void*;
using HipGraphExec = void*;
using HipMemHandle = void*;  // hipMemGenericAllocationHandle_t

inline constexpr HipError kHipSuccess = 0;
inline constexpr HipError kHipErrorInvalidValue = 1;
inline constexpr HipError kHipErrorOutOfMemory = 2;
inline constexpr HipError kHipErrorNotSupported = 801;

// hipLaunchKernel's `extra` markers: HIP ends the list with 0x3 where CUDA ends it with 0x0.
inline constexpr std::size_t kLaunchParamBufferPointer = 0x1;
inline constexpr std::size_t kLaunchParamBufferSize = 0x2;
inline constexpr std::size_t kHipLaunchParamEnd = 0x3;
inline constexpr std::size_t kCudaLaunchParamEnd = 0x0;

// Every HIP runtime function the backend uses. A null member was not exported by the loaded
// libamdhip64 (an older ROCm); its DriverApi slot stays null and callers get "not supported on HIP".
struct HipEntryPoints {
    HipError (*init)(unsigned flags) = nullptr;
    HipError (*driver_get_version)(int* version) = nullptr;
    HipError (*runtime_get_version)(int* version) = nullptr;
    const char* (*get_error_name)(HipError error) = nullptr;
    const char* (*get_error_string)(HipError error) = nullptr;

    HipError (*get_device_count)(int* count) = nullptr;
    HipError (*device_get)(int* device, int ordinal) = nullptr;
    HipError (*device_get_name)(char* name, int len, int device) = nullptr;
    HipError (*device_get_uuid)(void* uuid, int device) = nullptr;
    HipError (*device_total_mem)(std::size_t* bytes, int device) = nullptr;
    HipError (*device_get_attribute)(int* value, int attribute, int device) = nullptr;
    HipError (*device_get_pci_bus_id)(char* id, int len, int device) = nullptr;
    HipError (*device_primary_ctx_retain)(HipContext* ctx, int device) = nullptr;
    HipError (*device_primary_ctx_release)(int device) = nullptr;
    HipError (*device_can_access_peer)(int* can_access, int device, int peer) = nullptr;
    // For the current device (the one whose context is current).
    HipError (*device_enable_peer_access)(int peer, unsigned flags) = nullptr;
    // hipGetDeviceProperties (R0600 on ROCm >= 6); the struct's layout is read by content only.
    HipError (*get_device_properties)(void* properties, int device) = nullptr;
    HipError (*get_device)(int* device) = nullptr;

    HipError (*ctx_get_current)(HipContext* ctx) = nullptr;
    HipError (*ctx_set_current)(HipContext ctx) = nullptr;
    HipError (*device_synchronize)() = nullptr;
    HipError (*device_get_stream_priority_range)(int* least, int* greatest) = nullptr;
    HipError (*mem_get_info)(std::size_t* free, std::size_t* total) = nullptr;

    HipError (*stream_create_with_priority)(HipStream* stream, unsigned flags, int priority) = nullptr;
    HipError (*stream_destroy)(HipStream stream) = nullptr;
    HipError (*stream_synchronize)(HipStream stream) = nullptr;
    HipError (*stream_query)(HipStream stream) = nullptr;
    HipError (*stream_wait_event)(HipStream stream, HipEvent event, unsigned flags) = nullptr;
    HipError (*stream_get_priority)(HipStream stream, int* priority) = nullptr;
    HipError (*stream_get_flags)(HipStream stream, unsigned* flags) = nullptr;
    HipError (*stream_is_capturing)(HipStream stream, int* status) = nullptr;
    HipError (*stream_begin_capture)(HipStream stream, int mode) = nullptr;
    HipError (*stream_end_capture)(HipStream stream, HipGraph* graph) = nullptr;

    HipError (*event_create_with_flags)(HipEvent* event, unsigned flags) = nullptr;
    HipError (*event_destroy)(HipEvent event) = nullptr;
    HipError (*event_record)(HipEvent event, HipStream stream) = nullptr;
    HipError (*event_query)(HipEvent event) = nullptr;
    HipError (*event_synchronize)(HipEvent event) = nullptr;
    HipError (*event_elapsed_time)(float* ms, HipEvent start, HipEvent end) = nullptr;

    HipError (*malloc)(void** ptr, std::size_t bytes) = nullptr;
    HipError (*free)(void* ptr) = nullptr;
    HipError (*malloc_async)(void** ptr, std::size_t bytes, HipStream stream) = nullptr;
    HipError (*free_async)(void* ptr, HipStream stream) = nullptr;
    HipError (*device_get_default_mem_pool)(HipMemPool* pool, int device) = nullptr;
    HipError (*mem_pool_set_attribute)(HipMemPool pool, int attribute, void* value) = nullptr;
    HipError (*mem_pool_trim_to)(HipMemPool pool, std::size_t min_bytes_to_keep) = nullptr;
    HipError (*mem_pool_get_attribute)(HipMemPool pool, int attribute, void* value) = nullptr;
    HipError (*malloc_managed)(void** ptr, std::size_t bytes, unsigned flags) = nullptr;
    HipError (*mem_prefetch_async)(const void* ptr, std::size_t bytes, int device,
                                   HipStream stream) = nullptr;
    HipError (*host_malloc)(void** ptr, std::size_t bytes, unsigned flags) = nullptr;
    HipError (*host_free)(void* ptr) = nullptr;
    HipError (*host_register)(void* ptr, std::size_t bytes, unsigned flags) = nullptr;
    HipError (*host_unregister)(void* ptr) = nullptr;
    HipError (*mem_alloc_pitch)(void** ptr, std::size_t* pitch, std::size_t width_bytes, std::size_t height,
                                unsigned element_bytes) = nullptr;
    // hipMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, stream); kind 4 is hipMemcpyDefault.
    HipError (*memcpy_2d_async)(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                                std::size_t width, std::size_t height, int kind, HipStream stream) = nullptr;
    HipError (*launch_host_func)(HipStream stream, void (*fn)(void*), void* data) = nullptr;
    HipError (*memcpy_htod_async)(void* dst, const void* src, std::size_t bytes, HipStream stream) = nullptr;
    HipError (*memcpy_dtoh_async)(void* dst, void* src, std::size_t bytes, HipStream stream) = nullptr;
    HipError (*memcpy_dtod_async)(void* dst, void* src, std::size_t bytes, HipStream stream) = nullptr;
    HipError (*memcpy_peer_async)(void* dst, int dst_device, const void* src, int src_device,
                                  std::size_t bytes, HipStream stream) = nullptr;
    HipError (*memset_d8_async)(void* dst, unsigned char value, std::size_t count,
                                HipStream stream) = nullptr;
    HipError (*memset_d32_async)(void* dst, int value, std::size_t count, HipStream stream) = nullptr;

    // Virtual memory (hipMemAllocationProp and hipMemAccessDesc have CUDA's layout: sys::MemAllocationProp).
    HipError (*mem_address_reserve)(void** ptr, std::size_t bytes, std::size_t alignment, void* hint,
                                    unsigned long long flags) = nullptr;
    HipError (*mem_address_free)(void* ptr, std::size_t bytes) = nullptr;
    HipError (*mem_create)(HipMemHandle* handle, std::size_t bytes, const void* prop,
                           unsigned long long flags) = nullptr;
    HipError (*mem_release)(HipMemHandle handle) = nullptr;
    HipError (*mem_map)(void* ptr, std::size_t bytes, std::size_t offset, HipMemHandle handle,
                        unsigned long long flags) = nullptr;
    HipError (*mem_unmap)(void* ptr, std::size_t bytes) = nullptr;
    HipError (*mem_set_access)(void* ptr, std::size_t bytes, const void* desc, std::size_t count) = nullptr;
    HipError (*mem_get_allocation_granularity)(std::size_t* granularity, const void* prop,
                                               int option) = nullptr;

    HipError (*module_load_data)(HipModule* module, const void* image) = nullptr;
    HipError (*module_unload)(HipModule module) = nullptr;
    HipError (*module_get_function)(HipFunction* function, HipModule module, const char* name) = nullptr;
    HipError (*module_get_global)(void** ptr, std::size_t* bytes, HipModule module,
                                  const char* name) = nullptr;
    HipError (*func_get_attribute)(int* value, int attribute, HipFunction function) = nullptr;
    HipError (*module_launch_kernel)(HipFunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                     unsigned block_x, unsigned block_y, unsigned block_z,
                                     unsigned shared_mem_bytes, HipStream stream, void** params,
                                     void** extra) = nullptr;
    HipError (*module_launch_cooperative_kernel)(HipFunction function, unsigned grid_x, unsigned grid_y,
                                                 unsigned grid_z, unsigned block_x, unsigned block_y,
                                                 unsigned block_z, unsigned shared_mem_bytes,
                                                 HipStream stream, void** params) = nullptr;
    HipError (*module_occupancy_max_active_blocks_per_multiprocessor)(int* blocks, HipFunction function,
                                                                      int block_size,
                                                                      std::size_t dynamic_smem) = nullptr;

    HipError (*graph_instantiate_with_flags)(HipGraphExec* exec, HipGraph graph,
                                             unsigned long long flags) = nullptr;
    HipError (*graph_launch)(HipGraphExec exec, HipStream stream) = nullptr;
    HipError (*graph_destroy)(HipGraph graph) = nullptr;
    HipError (*graph_exec_destroy)(HipGraphExec exec) = nullptr;
    // hipGraphExecUpdate keeps the CUDA 11 form: the error node and the result through two pointers.
    HipError (*graph_exec_update)(HipGraphExec exec, HipGraph graph, void** error_node,
                                  int* result) = nullptr;
    HipError (*graph_upload)(HipGraphExec exec, HipStream stream) = nullptr;
};

}  // namespace cudarc::sys::hip

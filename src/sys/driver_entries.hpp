// Every driver entry point the library uses, once: the list DriverApi, both backends' loaders and the error
// messages are generated from. Internal to src/sys (and the fake driver in testing/).
//
// Note [One driver list]
// Each entry point is named here and nowhere else. From this list come:
// - DriverApi's function-pointer fields, with these signatures (the table speaks the CUDA driver API's
//   types, whatever the backend);
// - sys::Entry, the identity call sites give check / defer / make_error / require instead of a name;
// - the CUDA loader's resolution loop (cuGetProcAddress of the CUDA name, at the minimum version; a missing
//   required entry fails loading, a missing optional one leaves its field null);
// - the names errors report: entry_name(backend, entry) is the CUDA name on CUDA and, on HIP, the HIP
//   function the adapter in src/sys/hip/hip_driver.cpp calls for it ("hipA/hipB" where either can give the
//   result; null where HIP leaves the field empty, and then the CUDA name is reported);
// - the fake driver's and the fault injector's coverage of the table (testing/fake_driver).
// A new entry is one line here, an adapter in hip_driver.cpp (or a null field there) and a fake's body,
// bodies::X in testing/fake_driver/fake_driver.cpp (Note [Generated fake entries]). A host test (hip.driver_list_*) checks that every HIP name is a
// function hip_driver.cpp resolves and that no code outside src/sys spells a driver function's name.
//
// X(field, CUDA name, HIP name or nullptr, required or optional (on CUDA), minimum CUDA version for
//   cuGetProcAddress, signature)
//
// The version is the one whose ABI the field expects (12000: the CUDA version this code was written
// against, so "cuMemAlloc" resolves to cuMemAlloc_v2). Entry points newer than that must name the version
// that introduced them: the driver refuses a request for an older one.
#pragma once

#define CUDARC_SYS_DRIVER_ENTRIES(X)                                                                         \
    /* Initialization, versions, errors */                                                                   \
    X(init, "cuInit", "hipInit", required, 12000, Result(unsigned flags))                                    \
    X(driver_get_version, "cuDriverGetVersion", "hipDriverGetVersion", required, 12000,                      \
      Result(int* version))                                                                                  \
    X(get_error_name, "cuGetErrorName", "hipGetErrorName", required, 12000,                                  \
      Result(Result, const char** name))                                                                     \
    X(get_error_string, "cuGetErrorString", "hipGetErrorString", required, 12000,                            \
      Result(Result, const char** text))                                                                     \
    /* Devices */                                                                                            \
    X(device_get_count, "cuDeviceGetCount", "hipGetDeviceCount", required, 12000, Result(int* count))        \
    X(device_get, "cuDeviceGet", "hipDeviceGet", required, 12000, Result(Device* device, int ordinal))       \
    X(device_get_name, "cuDeviceGetName", "hipDeviceGetName", required, 12000,                               \
      Result(char* name, int len, Device device))                                                            \
    X(device_get_uuid, "cuDeviceGetUuid", "hipDeviceGetUuid", required, 12000,                               \
      Result(Uuid* uuid, Device device))                                                                     \
    X(device_total_mem, "cuDeviceTotalMem", "hipDeviceTotalMem", required, 12000,                            \
      Result(std::size_t* bytes, Device device))                                                             \
    X(device_get_attribute, "cuDeviceGetAttribute", "hipDeviceGetAttribute", required, 12000,                \
      Result(int* value, int attribute, Device device))                                                      \
    X(device_get_pci_bus_id, "cuDeviceGetPCIBusId", "hipDeviceGetPCIBusId", required, 12000,                 \
      Result(char* id, int len, Device device))                                                              \
    X(device_primary_ctx_retain, "cuDevicePrimaryCtxRetain", "hipDevicePrimaryCtxRetain", required, 12000,   \
      Result(Context* ctx, Device device))                                                                   \
    X(device_primary_ctx_release, "cuDevicePrimaryCtxRelease", "hipDevicePrimaryCtxRelease", required,       \
      12000, Result(Device device))                                                                          \
    /* Whether `device` can address `peer`'s memory directly (NVLink or PCIe peer to peer). */               \
    X(device_can_access_peer, "cuDeviceCanAccessPeer", "hipDeviceCanAccessPeer", required, 12000,            \
      Result(int* can_access, Device device, Device peer))                                                   \
    /* Contexts. On HIP a context is its device: cuCtxSynchronize is hipDeviceSynchronize. */                \
    X(ctx_get_current, "cuCtxGetCurrent", "hipCtxGetCurrent", required, 12000, Result(Context* ctx))         \
    X(ctx_set_current, "cuCtxSetCurrent", "hipCtxSetCurrent", required, 12000, Result(Context ctx))          \
    X(ctx_synchronize, "cuCtxSynchronize", "hipDeviceSynchronize", required, 12000, Result())                \
    X(ctx_get_stream_priority_range, "cuCtxGetStreamPriorityRange", "hipDeviceGetStreamPriorityRange",       \
      required, 12000, Result(int* least, int* greatest))                                                    \
    X(mem_get_info, "cuMemGetInfo", "hipMemGetInfo", required, 12000,                                        \
      Result(std::size_t* free, std::size_t* total))                                                         \
    /* Lets the current context address `peer`'s memory (one direction only); flags must be 0. */            \
    X(ctx_enable_peer_access, "cuCtxEnablePeerAccess", "hipDeviceEnablePeerAccess", required, 12000,         \
      Result(Context peer, unsigned flags))                                                                  \
    /* Streams */                                                                                            \
    X(stream_create_with_priority, "cuStreamCreateWithPriority", "hipStreamCreateWithPriority", required,    \
      12000, Result(Stream* stream, unsigned flags, int priority))                                           \
    X(stream_destroy, "cuStreamDestroy", "hipStreamDestroy", required, 12000, Result(Stream stream))         \
    X(stream_synchronize, "cuStreamSynchronize", "hipStreamSynchronize", required, 12000,                    \
      Result(Stream stream))                                                                                 \
    X(stream_query, "cuStreamQuery", "hipStreamQuery", required, 12000, Result(Stream stream))               \
    X(stream_wait_event, "cuStreamWaitEvent", "hipStreamWaitEvent", required, 12000,                         \
      Result(Stream stream, Event event, unsigned flags))                                                    \
    X(stream_get_priority, "cuStreamGetPriority", "hipStreamGetPriority", required, 12000,                   \
      Result(Stream stream, int* priority))                                                                  \
    X(stream_get_flags, "cuStreamGetFlags", "hipStreamGetFlags", required, 12000,                            \
      Result(Stream stream, unsigned* flags))                                                                \
    /* HIP has no hipStreamGetCtx: null there. */                                                            \
    X(stream_get_ctx, "cuStreamGetCtx", nullptr, required, 12000, Result(Stream stream, Context* ctx))       \
    X(stream_is_capturing, "cuStreamIsCapturing", "hipStreamIsCapturing", required, 12000,                   \
      Result(Stream stream, int* status))                                                                    \
    X(stream_begin_capture, "cuStreamBeginCapture", "hipStreamBeginCapture", required, 12000,                \
      Result(Stream stream, int mode))                                                                       \
    X(stream_end_capture, "cuStreamEndCapture", "hipStreamEndCapture", required, 12000,                      \
      Result(Stream stream, Graph* graph))                                                                   \
    /* Runs fn(data) in stream order on a driver thread (Stream::host_function); fn must not call CUDA. */   \
    X(launch_host_func, "cuLaunchHostFunc", "hipLaunchHostFunc", optional, 12000,                            \
      Result(Stream stream, HostFn fn, void* data))                                                          \
    /* Events */                                                                                             \
    X(event_create, "cuEventCreate", "hipEventCreateWithFlags", required, 12000,                             \
      Result(Event* event, unsigned flags))                                                                  \
    X(event_destroy, "cuEventDestroy", "hipEventDestroy", required, 12000, Result(Event event))              \
    X(event_record, "cuEventRecord", "hipEventRecord", required, 12000, Result(Event event, Stream stream))  \
    X(event_query, "cuEventQuery", "hipEventQuery", required, 12000, Result(Event event))                    \
    X(event_synchronize, "cuEventSynchronize", "hipEventSynchronize", required, 12000, Result(Event event))  \
    X(event_elapsed_time, "cuEventElapsedTime", "hipEventElapsedTime", required, 12000,                      \
      Result(float* ms, Event start, Event end))                                                             \
    /* Memory */                                                                                             \
    X(mem_alloc, "cuMemAlloc", "hipMalloc", required, 12000, Result(DevicePtr* ptr, std::size_t bytes))      \
    X(mem_free, "cuMemFree", "hipFree", required, 12000, Result(DevicePtr ptr))                              \
    X(mem_alloc_async, "cuMemAllocAsync", "hipMallocAsync", optional, 12000,                                 \
      Result(DevicePtr* ptr, std::size_t bytes, Stream stream))                                              \
    X(mem_free_async, "cuMemFreeAsync", "hipFreeAsync", optional, 12000,                                     \
      Result(DevicePtr ptr, Stream stream))                                                                  \
    X(device_get_default_mem_pool, "cuDeviceGetDefaultMemPool", "hipDeviceGetDefaultMemPool", optional,      \
      12000, Result(MemoryPool* pool, Device device))                                                        \
    X(mem_pool_set_attribute, "cuMemPoolSetAttribute", "hipMemPoolSetAttribute", optional, 12000,            \
      Result(MemoryPool pool, int attribute, void* value))                                                   \
    X(mem_pool_trim_to, "cuMemPoolTrimTo", "hipMemPoolTrimTo", optional, 12000,                              \
      Result(MemoryPool pool, std::size_t min_bytes_to_keep))                                                \
    X(mem_pool_get_attribute, "cuMemPoolGetAttribute", "hipMemPoolGetAttribute", optional, 12000,            \
      Result(MemoryPool pool, int attribute, void* value))                                                   \
    X(mem_alloc_managed, "cuMemAllocManaged", "hipMallocManaged", optional, 12000,                           \
      Result(DevicePtr* ptr, std::size_t bytes, unsigned flags))                                             \
    X(mem_prefetch_async, "cuMemPrefetchAsync", "hipMemPrefetchAsync", optional, 12000,                      \
      Result(DevicePtr ptr, std::size_t bytes, Device device, Stream stream))                                \
    X(mem_host_alloc, "cuMemHostAlloc", "hipHostMalloc", required, 12000,                                    \
      Result(void** ptr, std::size_t bytes, unsigned flags))                                                 \
    X(mem_free_host, "cuMemFreeHost", "hipHostFree", required, 12000, Result(void* ptr))                     \
    /* Page-locks existing host memory (PinnedBuffer::register_memory); flags: kMemHostRegisterPortable. */  \
    X(mem_host_register, "cuMemHostRegister", "hipHostRegister", optional, 12000,                            \
      Result(void* ptr, std::size_t bytes, unsigned flags))                                                  \
    X(mem_host_unregister, "cuMemHostUnregister", "hipHostUnregister", optional, 12000, Result(void* ptr))   \
    /* cuMemAllocPitch: for callers of the table (PitchedSlice takes its rows from the memory source, */     \
    /* at the driver's 512-byte pitch); cuMemcpy2DAsync: cudarc::copy_2d. */                                 \
    X(mem_alloc_pitch, "cuMemAllocPitch", "hipMemAllocPitch", optional, 12000,                               \
      Result(DevicePtr* ptr, std::size_t* pitch, std::size_t width_bytes, std::size_t height,                \
             unsigned element_bytes))                                                                        \
    X(memcpy_2d_async, "cuMemcpy2DAsync", "hipMemcpy2DAsync", optional, 12000,                               \
      Result(const Memcpy2D* copy, Stream stream))                                                           \
    X(memcpy_htod_async, "cuMemcpyHtoDAsync", "hipMemcpyHtoDAsync", required, 12000,                         \
      Result(DevicePtr dst, const void* src, std::size_t bytes, Stream stream))                              \
    X(memcpy_dtoh_async, "cuMemcpyDtoHAsync", "hipMemcpyDtoHAsync", required, 12000,                         \
      Result(void* dst, DevicePtr src, std::size_t bytes, Stream stream))                                    \
    X(memcpy_dtod_async, "cuMemcpyDtoDAsync", "hipMemcpyDtoDAsync", required, 12000,                         \
      Result(DevicePtr dst, DevicePtr src, std::size_t bytes, Stream stream))                                \
    /* Between the memory of two contexts; without peer access the driver stages it through host memory. */  \
    X(memcpy_peer_async, "cuMemcpyPeerAsync", "hipMemcpyPeerAsync", required, 12000,                         \
      Result(DevicePtr dst, Context dst_ctx, DevicePtr src, Context src_ctx, std::size_t bytes,              \
             Stream stream))                                                                                 \
    X(memset_d8_async, "cuMemsetD8Async", "hipMemsetD8Async", required, 12000,                               \
      Result(DevicePtr dst, unsigned char value, std::size_t count, Stream stream))                          \
    X(memset_d32_async, "cuMemsetD32Async", "hipMemsetD32Async", required, 12000,                            \
      Result(DevicePtr dst, unsigned value, std::size_t count, Stream stream))                               \
    /* cuPointerGetAttributes: with kPointerAttributeMemoryType it tells page-locked host memory */          \
    /* (kMemoryTypeHost) from pageable memory (0). Unlike the singular form it reports an unknown pointer */ \
    /* as success with zeroed values, not as an error. Null (always on HIP): treat every host pointer as */  \
    /* page-locked. */                                                                                       \
    X(pointer_get_attributes, "cuPointerGetAttributes", nullptr, optional, 12000,                            \
      Result(unsigned count, int* attributes, void** data, DevicePtr ptr))                                   \
    /* The allocation containing `ptr`: borrowed memory's bounds check where cuPointerGetAttributes gives */ \
    /* no range. Null on HIP. */                                                                             \
    X(mem_get_address_range, "cuMemGetAddressRange", nullptr, optional, 12000,                               \
      Result(DevicePtr* base, std::size_t* size, DevicePtr ptr))                                             \
    /* Virtual memory: the expandable source's address ranges and the physical chunks mapped into them */    \
    /* (Note [Expandable segments] in src/alloc/expandable_segments.hpp). Null where the driver lacks them.  \
     */                                                                                                      \
    X(mem_address_reserve, "cuMemAddressReserve", "hipMemAddressReserve", optional, 12000,                   \
      Result(DevicePtr* ptr, std::size_t bytes, std::size_t alignment, DevicePtr hint,                       \
             unsigned long long flags))                                                                      \
    X(mem_address_free, "cuMemAddressFree", "hipMemAddressFree", optional, 12000,                            \
      Result(DevicePtr ptr, std::size_t bytes))                                                              \
    X(mem_create, "cuMemCreate", "hipMemCreate", optional, 12000,                                            \
      Result(MemHandle* handle, std::size_t bytes, const MemAllocationProp* prop, unsigned long long flags)) \
    X(mem_release, "cuMemRelease", "hipMemRelease", optional, 12000, Result(MemHandle handle))               \
    X(mem_map, "cuMemMap", "hipMemMap", optional, 12000,                                                     \
      Result(DevicePtr ptr, std::size_t bytes, std::size_t offset, MemHandle handle,                         \
             unsigned long long flags))                                                                      \
    X(mem_unmap, "cuMemUnmap", "hipMemUnmap", optional, 12000, Result(DevicePtr ptr, std::size_t bytes))     \
    X(mem_set_access, "cuMemSetAccess", "hipMemSetAccess", optional, 12000,                                  \
      Result(DevicePtr ptr, std::size_t bytes, const MemAccessDesc* desc, std::size_t count))                \
    X(mem_get_allocation_granularity, "cuMemGetAllocationGranularity", "hipMemGetAllocationGranularity",     \
      optional, 12000, Result(std::size_t* granularity, const MemAllocationProp* prop, int option))          \
    /* Modules and launches. cuModuleLoadData has the signature the table wants; options go through NVRTC.   \
     */                                                                                                      \
    X(module_load_data, "cuModuleLoadData", "hipModuleLoadData", required, 12000,                            \
      Result(Module* module, const void* image))                                                             \
    X(module_unload, "cuModuleUnload", "hipModuleUnload", required, 12000, Result(Module module))            \
    X(module_get_function, "cuModuleGetFunction", "hipModuleGetFunction", required, 12000,                   \
      Result(Function* function, Module module, const char* name))                                           \
    X(module_get_global, "cuModuleGetGlobal", "hipModuleGetGlobal", required, 12000,                         \
      Result(DevicePtr* ptr, std::size_t* bytes, Module module, const char* name))                           \
    X(func_get_attribute, "cuFuncGetAttribute", "hipFuncGetAttribute", required, 12000,                      \
      Result(int* value, int attribute, Function function))                                                  \
    /* On HIP emulated: the size is checked against the current device's per-block LDS, asked of */          \
    /* hipGetDevice and hipDeviceGetAttribute (HIP's hipFuncSetAttribute takes a host symbol). */            \
    X(func_set_attribute, "cuFuncSetAttribute", "hipGetDevice/hipDeviceGetAttribute", required, 12000,       \
      Result(Function function, int attribute, int value))                                                   \
    /* CUDA >= 12.4 only (requested with that version); null elsewhere. */                                   \
    X(func_get_param_info, "cuFuncGetParamInfo", nullptr, optional, 12040,                                   \
      Result(Function function, std::size_t index, std::size_t* offset, std::size_t* size))                  \
    X(launch_kernel, "cuLaunchKernel", "hipModuleLaunchKernel", required, 12000,                             \
      Result(Function function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,         \
             unsigned block_y, unsigned block_z, unsigned shared_mem_bytes, Stream stream, void** params,    \
             void** extra))                                                                                  \
    /* HIP leaves it null; the launcher then sends a launch with attributes (on HIP: a cooperative */        \
    /* one; clusters are refused before any call) through launch_cooperative_kernel, still reporting it as   \
     */                                                                                                      \
    /* this entry. */                                                                                        \
    X(launch_kernel_ex, "cuLaunchKernelEx", "hipModuleLaunchCooperativeKernel", optional, 12000,             \
      Result(const LaunchConfig* config, Function function, void** params, void** extra))                    \
    X(launch_cooperative_kernel, "cuLaunchCooperativeKernel", "hipModuleLaunchCooperativeKernel", optional,  \
      12000,                                                                                                 \
      Result(Function function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,         \
             unsigned block_y, unsigned block_z, unsigned shared_mem_bytes, Stream stream, void** params))   \
    X(occupancy_max_active_blocks_per_multiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor",         \
      "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor", required, 12000,                                 \
      Result(int* blocks, Function function, int block_size, std::size_t dynamic_smem))                      \
    /* Graphs */                                                                                             \
    X(graph_instantiate, "cuGraphInstantiateWithFlags", "hipGraphInstantiateWithFlags", optional, 12000,     \
      Result(GraphExec* exec, Graph graph, unsigned long long flags))                                        \
    X(graph_launch, "cuGraphLaunch", "hipGraphLaunch", optional, 12000,                                      \
      Result(GraphExec exec, Stream stream))                                                                 \
    X(graph_destroy, "cuGraphDestroy", "hipGraphDestroy", optional, 12000, Result(Graph graph))              \
    X(graph_exec_destroy, "cuGraphExecDestroy", "hipGraphExecDestroy", optional, 12000,                      \
      Result(GraphExec exec))                                                                                \
    /* cuGraphExecUpdate is the CUDA 12 form (through API version 12000). */                                 \
    X(graph_exec_update, "cuGraphExecUpdate", "hipGraphExecUpdate", optional, 12000,                         \
      Result(GraphExec exec, Graph graph, GraphExecUpdateResultInfo* info))                                  \
    X(graph_upload, "cuGraphUpload", "hipGraphUpload", optional, 12000, Result(GraphExec exec, Stream stream))

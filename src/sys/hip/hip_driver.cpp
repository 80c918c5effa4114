// Fills the DriverApi table from the HIP runtime (libamdhip64), loaded at run time.
//
// Note: DriverApi speaks the CUDA driver API. Where HIP's entry point has exactly the table's
// signature it is stored as is; everywhere else a small adapter converts (handles, device pointers,
// the legacy stream, attribute numbers, launch markers). The adapters are plain functions, so they
// reach the HIP entry points through one process-wide, immutable table published at load time.
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "sys/backends.hpp"
#include "sys/dynamic_library.hpp"
#include "sys/hip/hip_api.hpp"
#include "sys/hip/hip_attributes.hpp"
#include "sys/hip/hip_runtime_loader.hpp"

namespace cudarc::sys {
namespace {

using hip::HipEntryPoints;

// Newest first: a machine with several ROCm releases should get the newest runtime.
constexpr const char* kHipSonames[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"};
constexpr const char* kHipUnversioned = "libamdhip64.so";

// hipDeviceAttributeMaxSharedMemoryPerBlock (the same number in ROCm 5.2 through 7).
constexpr int kHipAttributeMaxSharedMemoryPerBlock = 74;

std::atomic<const HipEntryPoints*> g_entry_points{nullptr};

const HipEntryPoints& hip_entry() {
    return *g_entry_points.load(std::memory_order_acquire);
}

// HIP has no handle for CUDA's CU_STREAM_LEGACY; its NULL stream has the legacy (blocking) semantics.
void* native(Stream stream) noexcept {
    return stream == legacy_stream() ? nullptr : static_cast<void*>(stream);
}
void* native(Event event) noexcept {
    return static_cast<void*>(event);
}
void* native(Function function) noexcept {
    return static_cast<void*>(function);
}
void* native(Module module) noexcept {
    return static_cast<void*>(module);
}
void* native(Graph graph) noexcept {
    return static_cast<void*>(graph);
}
void* native(GraphExec exec) noexcept {
    return static_cast<void*>(exec);
}
void* native(MemoryPool pool) noexcept {
    return static_cast<void*>(pool);
}
void* native(Context ctx) noexcept {
    return static_cast<void*>(ctx);
}
void* as_pointer(DevicePtr ptr) noexcept {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr));
}
DevicePtr as_device_ptr(const void* ptr) noexcept {
    return static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(ptr));
}

// ---- Adapters, in DriverApi's order ----
// Errors name the HIP function each adapter calls: keep the HIP names in src/sys/driver_entries.hpp in
// step (Note [One driver list]).

Result get_error_name(Result result, const char** name) {
    const char* text = hip_entry().get_error_name(result);
    if (text == nullptr) return kErrorInvalidValue;
    *name = text;
    return kSuccess;
}

Result get_error_string(Result result, const char** text) {
    const char* description = hip_entry().get_error_string(result);
    if (description == nullptr) return kErrorInvalidValue;
    *text = description;
    return kSuccess;
}

// HIP encodes its version as major * 10^7 + minor * 10^5 + patch (5.2.21153 -> 50221153); the
// table reports CUDA's major * 1000 + minor * 10, so that version / 1000 is the major version.
Result driver_get_version(int* version) {
    int hip_version = 0;
    const Result result = hip_entry().driver_get_version(&hip_version);
    if (result == kSuccess) *version = hip_version_as_cuda_encoding(hip_version);
    return result;
}

Result device_get_uuid(Uuid* uuid, Device device) {
    return hip_entry().device_get_uuid(uuid, device);
}

Result device_get_attribute(int* value, int attribute, Device device) {
    const auto mapping = hip::hip_attribute_for(attribute);
    if (!mapping) return hip::kHipErrorNotSupported;
    int answer = 0;
    Result result = hip_entry().device_get_attribute(&answer, mapping->hip, device);
    if (mapping->hip_fallback >= 0 && (result != kSuccess || answer == 0)) {
        int fallback = 0;
        if (hip_entry().device_get_attribute(&fallback, mapping->hip_fallback, device) == kSuccess) {
            answer = fallback;
            result = kSuccess;
        }
    }
    if (result == kSuccess) *value = answer;
    return result;
}

// Note: HIP's peer functions take device ordinals where the table (CUDA's) takes contexts. Every context
// the library holds is a primary context retained through the adapter below, which remembers whose it is.
class PrimaryContexts {
  public:
    void remember(Context ctx, Device device) {
        std::lock_guard lock(mutex_);
        for (auto& entry : entries_) {
            if (entry.first == ctx) {
                entry.second = device;
                return;
            }
        }
        entries_.emplace_back(ctx, device);
    }
    [[nodiscard]] std::optional<Device> device_of(Context ctx) {
        std::lock_guard lock(mutex_);
        for (const auto& entry : entries_) {
            if (entry.first == ctx) return entry.second;
        }
        return std::nullopt;
    }

  private:
    std::mutex mutex_;
    std::vector<std::pair<Context, Device>> entries_;
};

PrimaryContexts& primary_contexts() {
    static PrimaryContexts contexts;
    return contexts;
}

Result device_primary_ctx_retain(Context* ctx, Device device) {
    void* native_ctx = nullptr;
    const Result result = hip_entry().device_primary_ctx_retain(&native_ctx, device);
    if (result == kSuccess) {
        *ctx = static_cast<Context>(native_ctx);
        try {
            primary_contexts().remember(*ctx, device);
        } catch (...) {
            return hip::kHipErrorOutOfMemory;
        }
    }
    return result;
}

// hipDeviceEnablePeerAccess acts for the current device, as cuCtxEnablePeerAccess acts for the current
// context.
Result ctx_enable_peer_access(Context peer, unsigned flags) {
    const auto device = primary_contexts().device_of(peer);
    if (!device) return kErrorInvalidValue;
    return hip_entry().device_enable_peer_access(*device, flags);
}

Result ctx_get_current(Context* ctx) {
    void* native_ctx = nullptr;
    const Result result = hip_entry().ctx_get_current(&native_ctx);
    if (result == kSuccess) *ctx = static_cast<Context>(native_ctx);
    return result;
}

Result ctx_set_current(Context ctx) {
    return hip_entry().ctx_set_current(native(ctx));
}

// Note: a HIP context is its device; synchronizing the current device is cuCtxSynchronize.
Result ctx_synchronize() {
    return hip_entry().device_synchronize();
}

Result stream_create_with_priority(Stream* stream, unsigned flags, int priority) {
    void* created = nullptr;
    const Result result = hip_entry().stream_create_with_priority(&created, flags, priority);
    if (result == kSuccess) *stream = static_cast<Stream>(created);
    return result;
}

Result stream_destroy(Stream stream) {
    return hip_entry().stream_destroy(native(stream));
}
Result stream_synchronize(Stream stream) {
    return hip_entry().stream_synchronize(native(stream));
}
Result stream_query(Stream stream) {
    return hip_entry().stream_query(native(stream));
}
Result stream_wait_event(Stream stream, Event event, unsigned flags) {
    return hip_entry().stream_wait_event(native(stream), native(event), flags);
}
Result stream_get_priority(Stream stream, int* priority) {
    return hip_entry().stream_get_priority(native(stream), priority);
}
Result stream_get_flags(Stream stream, unsigned* flags) {
    return hip_entry().stream_get_flags(native(stream), flags);
}
// hipStreamCaptureStatus and hipStreamCaptureMode number their values as CUDA does.
Result stream_is_capturing(Stream stream, int* status) {
    return hip_entry().stream_is_capturing(native(stream), status);
}
Result stream_begin_capture(Stream stream, int mode) {
    return hip_entry().stream_begin_capture(native(stream), mode);
}
Result stream_end_capture(Stream stream, Graph* graph) {
    void* captured = nullptr;
    const Result result = hip_entry().stream_end_capture(native(stream), &captured);
    if (result == kSuccess) *graph = static_cast<Graph>(captured);
    return result;
}

// hipEventDefault / hipEventDisableTiming have CUDA's values.
Result event_create(Event* event, unsigned flags) {
    void* created = nullptr;
    const Result result = hip_entry().event_create_with_flags(&created, flags);
    if (result == kSuccess) *event = static_cast<Event>(created);
    return result;
}
Result event_destroy(Event event) {
    return hip_entry().event_destroy(native(event));
}
Result event_record(Event event, Stream stream) {
    return hip_entry().event_record(native(event), native(stream));
}
Result event_query(Event event) {
    return hip_entry().event_query(native(event));
}
Result event_synchronize(Event event) {
    return hip_entry().event_synchronize(native(event));
}
Result event_elapsed_time(float* ms, Event start, Event end) {
    return hip_entry().event_elapsed_time(ms, native(start), native(end));
}

Result mem_alloc(DevicePtr* ptr, std::size_t bytes) {
    void* allocated = nullptr;
    const Result result = hip_entry().malloc(&allocated, bytes);
    if (result == kSuccess) *ptr = as_device_ptr(allocated);
    return result;
}
Result mem_free(DevicePtr ptr) {
    return hip_entry().free(as_pointer(ptr));
}
Result mem_alloc_async(DevicePtr* ptr, std::size_t bytes, Stream stream) {
    void* allocated = nullptr;
    const Result result = hip_entry().malloc_async(&allocated, bytes, native(stream));
    if (result == kSuccess) *ptr = as_device_ptr(allocated);
    return result;
}
Result mem_free_async(DevicePtr ptr, Stream stream) {
    return hip_entry().free_async(as_pointer(ptr), native(stream));
}
Result device_get_default_mem_pool(MemoryPool* pool, Device device) {
    void* native_pool = nullptr;
    const Result result = hip_entry().device_get_default_mem_pool(&native_pool, device);
    if (result == kSuccess) *pool = static_cast<MemoryPool>(native_pool);
    return result;
}
// hipMemPoolAttr numbers its values as CUDA does (release threshold = 4).
Result mem_pool_set_attribute(MemoryPool pool, int attribute, void* value) {
    return hip_entry().mem_pool_set_attribute(native(pool), attribute, value);
}
Result mem_pool_trim_to(MemoryPool pool, std::size_t min_bytes_to_keep) {
    return hip_entry().mem_pool_trim_to(native(pool), min_bytes_to_keep);
}
Result mem_pool_get_attribute(MemoryPool pool, int attribute, void* value) {
    return hip_entry().mem_pool_get_attribute(native(pool), attribute, value);
}
// Virtual memory: device pointers and handles converted; the property and access structs have CUDA's
// layout (sys::MemAllocationProp), and HIP numbers the enumerations in them as CUDA does.
Result mem_address_reserve(DevicePtr* ptr, std::size_t bytes, std::size_t alignment, DevicePtr hint,
                           unsigned long long flags) {
    void* reserved = nullptr;
    const Result result =
        hip_entry().mem_address_reserve(&reserved, bytes, alignment, as_pointer(hint), flags);
    if (result == kSuccess) *ptr = as_device_ptr(reserved);
    return result;
}
Result mem_address_free(DevicePtr ptr, std::size_t bytes) {
    return hip_entry().mem_address_free(as_pointer(ptr), bytes);
}
Result mem_create(MemHandle* handle, std::size_t bytes, const MemAllocationProp* prop,
                  unsigned long long flags) {
    hip::HipMemHandle created = nullptr;
    const Result result = hip_entry().mem_create(&created, bytes, prop, flags);
    if (result == kSuccess) *handle = static_cast<MemHandle>(reinterpret_cast<std::uintptr_t>(created));
    return result;
}
hip::HipMemHandle native(MemHandle handle) noexcept {
    return reinterpret_cast<hip::HipMemHandle>(static_cast<std::uintptr_t>(handle));
}
Result mem_release(MemHandle handle) {
    return hip_entry().mem_release(native(handle));
}
Result mem_map(DevicePtr ptr, std::size_t bytes, std::size_t offset, MemHandle handle,
               unsigned long long flags) {
    return hip_entry().mem_map(as_pointer(ptr), bytes, offset, native(handle), flags);
}
Result mem_unmap(DevicePtr ptr, std::size_t bytes) {
    return hip_entry().mem_unmap(as_pointer(ptr), bytes);
}
Result mem_set_access(DevicePtr ptr, std::size_t bytes, const MemAccessDesc* desc, std::size_t count) {
    return hip_entry().mem_set_access(as_pointer(ptr), bytes, desc, count);
}
Result mem_get_allocation_granularity(std::size_t* granularity, const MemAllocationProp* prop, int option) {
    return hip_entry().mem_get_allocation_granularity(granularity, prop, option);
}
// hipMemAttachGlobal has CUDA's value (1).
Result mem_alloc_managed(DevicePtr* ptr, std::size_t bytes, unsigned flags) {
    void* allocated = nullptr;
    const Result result = hip_entry().malloc_managed(&allocated, bytes, flags);
    if (result == kSuccess) *ptr = as_device_ptr(allocated);
    return result;
}
// hipCpuDeviceId is -1, as CU_DEVICE_CPU.
Result mem_prefetch_async(DevicePtr ptr, std::size_t bytes, Device device, Stream stream) {
    return hip_entry().mem_prefetch_async(as_pointer(ptr), bytes, device, native(stream));
}
Result mem_alloc_pitch(DevicePtr* ptr, std::size_t* pitch, std::size_t width_bytes, std::size_t height,
                       unsigned element_bytes) {
    void* allocated = nullptr;
    const Result result = hip_entry().mem_alloc_pitch(&allocated, pitch, width_bytes, height, element_bytes);
    if (result == kSuccess) *ptr = as_device_ptr(allocated);
    return result;
}
// Note: host and device addresses share one space under HIP's unified addressing: hipMemcpyDefault (4)
// lets the runtime tell them apart.
Result memcpy_2d_async(const Memcpy2D* copy, Stream stream) {
    if (copy->src_array != nullptr || copy->dst_array != nullptr) return kErrorInvalidValue;
    const auto address = [](int type, const void* host, DevicePtr device, std::size_t x, std::size_t y,
                            std::size_t pitch) {
        const auto* base =
            static_cast<const char*>(type == static_cast<int>(kMemoryTypeHost) ? host : as_pointer(device));
        return base + y * pitch + x;
    };
    const char* src = address(copy->src_memory_type, copy->src_host, copy->src_device, copy->src_x_in_bytes,
                              copy->src_y, copy->src_pitch);
    const char* dst = address(copy->dst_memory_type, copy->dst_host, copy->dst_device, copy->dst_x_in_bytes,
                              copy->dst_y, copy->dst_pitch);
    return hip_entry().memcpy_2d_async(const_cast<char*>(dst), copy->dst_pitch, src, copy->src_pitch,
                                       copy->width_in_bytes, copy->height, 4, native(stream));
}
Result launch_host_func(Stream stream, HostFn fn, void* data) {
    return hip_entry().launch_host_func(native(stream), fn, data);
}
Result memcpy_htod_async(DevicePtr dst, const void* src, std::size_t bytes, Stream stream) {
    return hip_entry().memcpy_htod_async(as_pointer(dst), src, bytes, native(stream));
}
Result memcpy_dtoh_async(void* dst, DevicePtr src, std::size_t bytes, Stream stream) {
    return hip_entry().memcpy_dtoh_async(dst, as_pointer(src), bytes, native(stream));
}
Result memcpy_peer_async(DevicePtr dst, Context dst_ctx, DevicePtr src, Context src_ctx, std::size_t bytes,
                         Stream stream) {
    const auto dst_device = primary_contexts().device_of(dst_ctx);
    const auto src_device = primary_contexts().device_of(src_ctx);
    if (!dst_device || !src_device) return kErrorInvalidValue;
    return hip_entry().memcpy_peer_async(as_pointer(dst), *dst_device, as_pointer(src), *src_device, bytes,
                                         native(stream));
}
Result memcpy_dtod_async(DevicePtr dst, DevicePtr src, std::size_t bytes, Stream stream) {
    return hip_entry().memcpy_dtod_async(as_pointer(dst), as_pointer(src), bytes, native(stream));
}
Result memset_d8_async(DevicePtr dst, unsigned char value, std::size_t count, Stream stream) {
    return hip_entry().memset_d8_async(as_pointer(dst), value, count, native(stream));
}
Result memset_d32_async(DevicePtr dst, unsigned value, std::size_t count, Stream stream) {
    // hipMemsetD32Async takes the 32-bit pattern as an int: the same bits.
    return hip_entry().memset_d32_async(as_pointer(dst), static_cast<int>(value), count, native(stream));
}

Result module_load_data(Module* module, const void* image) {
    void* loaded = nullptr;
    const Result result = hip_entry().module_load_data(&loaded, image);
    if (result == kSuccess) *module = static_cast<Module>(loaded);
    return result;
}
Result module_unload(Module module) {
    return hip_entry().module_unload(native(module));
}
Result module_get_function(Function* function, Module module, const char* name) {
    void* found = nullptr;
    const Result result = hip_entry().module_get_function(&found, native(module), name);
    if (result == kSuccess) *function = static_cast<Function>(found);
    return result;
}
Result module_get_global(DevicePtr* ptr, std::size_t* bytes, Module module, const char* name) {
    void* address = nullptr;
    const Result result = hip_entry().module_get_global(&address, bytes, native(module), name);
    if (result == kSuccess && ptr != nullptr) *ptr = as_device_ptr(address);
    return result;
}
// hipFunction_attribute numbers its values as CUfunction_attribute does.
Result func_get_attribute(int* value, int attribute, Function function) {
    return hip_entry().func_get_attribute(value, attribute, native(function));
}

// Note: HIP's hipFuncSetAttribute takes a host-side kernel symbol, not a module's hipFunction_t, so
// it cannot serve here. The one attribute cudarc sets is the dynamic shared memory limit, and AMD
// GPUs need no opt-in for it: any size up to the device's per-block LDS limit launches as is.
Result func_set_attribute(Function, int attribute, int value) {
    if (attribute != func_attr::kMaxDynamicSharedSizeBytes) return hip::kHipErrorNotSupported;
    int device = 0;
    Result result = hip_entry().get_device(&device);
    if (result != kSuccess) return result;
    int limit = 0;
    result = hip_entry().device_get_attribute(&limit, kHipAttributeMaxSharedMemoryPerBlock, device);
    if (result != kSuccess) return result;
    return value >= 0 && value <= limit ? kSuccess : kErrorInvalidValue;
}

Result launch_kernel(Function function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                     unsigned block_y, unsigned block_z, unsigned shared_mem_bytes, Stream stream,
                     void** params, void** extra) {
    std::array<void*, 16> hip_extra{};
    void** translated = nullptr;
    if (extra != nullptr) {
        if (!translate_launch_extra(extra, hip_extra)) return kErrorInvalidValue;
        translated = hip_extra.data();
    }
    return hip_entry().module_launch_kernel(native(function), grid_x, grid_y, grid_z, block_x, block_y,
                                            block_z, shared_mem_bytes, native(stream), params, translated);
}

Result launch_cooperative_kernel(Function function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                 unsigned block_x, unsigned block_y, unsigned block_z,
                                 unsigned shared_mem_bytes, Stream stream, void** params) {
    return hip_entry().module_launch_cooperative_kernel(native(function), grid_x, grid_y, grid_z, block_x,
                                                        block_y, block_z, shared_mem_bytes, native(stream),
                                                        params);
}

Result occupancy_max_active_blocks_per_multiprocessor(int* blocks, Function function, int block_size,
                                                      std::size_t dynamic_smem) {
    return hip_entry().module_occupancy_max_active_blocks_per_multiprocessor(blocks, native(function),
                                                                             block_size, dynamic_smem);
}

Result graph_instantiate(GraphExec* exec, Graph graph, unsigned long long flags) {
    void* instantiated = nullptr;
    const Result result = hip_entry().graph_instantiate_with_flags(&instantiated, native(graph), flags);
    if (result == kSuccess) *exec = static_cast<GraphExec>(instantiated);
    return result;
}
Result graph_launch(GraphExec exec, Stream stream) {
    return hip_entry().graph_launch(native(exec), native(stream));
}
Result graph_destroy(Graph graph) {
    return hip_entry().graph_destroy(native(graph));
}
Result graph_exec_destroy(GraphExec exec) {
    return hip_entry().graph_exec_destroy(native(exec));
}
Result graph_exec_update(GraphExec exec, Graph graph, GraphExecUpdateResultInfo* info) {
    GraphExecUpdateResultInfo out{};
    const Result result =
        hip_entry().graph_exec_update(native(exec), native(graph), &out.error_node, &out.result);
    if (info != nullptr) *info = out;
    return result;
}
Result graph_upload(GraphExec exec, Stream stream) {
    return hip_entry().graph_upload(native(exec), native(stream));
}

// ---- Loading ----

class Resolver {
  public:
    explicit Resolver(const DynamicLibrary& library) : library_(library) {}

    template <typename Fn>
    void operator()(Fn& slot, const char* name, bool required = true) {
        slot = reinterpret_cast<Fn>(library_.symbol(name));
        if (slot == nullptr && required) missing_.emplace_back(name);
    }
    [[nodiscard]] const std::vector<std::string>& missing() const { return missing_; }

  private:
    const DynamicLibrary& library_;
    std::vector<std::string> missing_;
};

HipEntryPoints resolve_entry_points(const DynamicLibrary& library, std::vector<std::string>& missing) {
    HipEntryPoints hip;
    Resolver resolve(library);
    resolve(hip.init, "hipInit");
    resolve(hip.driver_get_version, "hipDriverGetVersion");
    resolve(hip.runtime_get_version, "hipRuntimeGetVersion");
    resolve(hip.get_error_name, "hipGetErrorName");
    resolve(hip.get_error_string, "hipGetErrorString");
    resolve(hip.get_device_count, "hipGetDeviceCount");
    resolve(hip.device_get, "hipDeviceGet");
    resolve(hip.device_get_name, "hipDeviceGetName");
    resolve(hip.device_get_uuid, "hipDeviceGetUuid", false);
    resolve(hip.device_total_mem, "hipDeviceTotalMem");
    resolve(hip.device_get_attribute, "hipDeviceGetAttribute");
    resolve(hip.device_get_pci_bus_id, "hipDeviceGetPCIBusId");
    resolve(hip.device_primary_ctx_retain, "hipDevicePrimaryCtxRetain");
    resolve(hip.device_primary_ctx_release, "hipDevicePrimaryCtxRelease");
    resolve(hip.device_can_access_peer, "hipDeviceCanAccessPeer", false);
    resolve(hip.device_enable_peer_access, "hipDeviceEnablePeerAccess", false);
    // ROCm >= 6 exports the current hipDeviceProp_t layout as ...R0600; the plain name is the old one.
    resolve(hip.get_device_properties, "hipGetDevicePropertiesR0600", false);
    if (hip.get_device_properties == nullptr)
        resolve(hip.get_device_properties, "hipGetDeviceProperties", false);
    resolve(hip.get_device, "hipGetDevice");
    resolve(hip.ctx_get_current, "hipCtxGetCurrent");
    resolve(hip.ctx_set_current, "hipCtxSetCurrent");
    resolve(hip.device_synchronize, "hipDeviceSynchronize");
    resolve(hip.device_get_stream_priority_range, "hipDeviceGetStreamPriorityRange");
    resolve(hip.mem_get_info, "hipMemGetInfo");
    resolve(hip.stream_create_with_priority, "hipStreamCreateWithPriority");
    resolve(hip.stream_destroy, "hipStreamDestroy");
    resolve(hip.stream_synchronize, "hipStreamSynchronize");
    resolve(hip.stream_query, "hipStreamQuery");
    resolve(hip.stream_wait_event, "hipStreamWaitEvent");
    resolve(hip.stream_get_priority, "hipStreamGetPriority");
    resolve(hip.stream_get_flags, "hipStreamGetFlags");
    resolve(hip.stream_is_capturing, "hipStreamIsCapturing", false);
    resolve(hip.stream_begin_capture, "hipStreamBeginCapture", false);
    resolve(hip.stream_end_capture, "hipStreamEndCapture", false);
    resolve(hip.event_create_with_flags, "hipEventCreateWithFlags");
    resolve(hip.event_destroy, "hipEventDestroy");
    resolve(hip.event_record, "hipEventRecord");
    resolve(hip.event_query, "hipEventQuery");
    resolve(hip.event_synchronize, "hipEventSynchronize");
    resolve(hip.event_elapsed_time, "hipEventElapsedTime");
    resolve(hip.malloc, "hipMalloc");
    resolve(hip.free, "hipFree");
    resolve(hip.malloc_async, "hipMallocAsync", false);
    resolve(hip.free_async, "hipFreeAsync", false);
    resolve(hip.device_get_default_mem_pool, "hipDeviceGetDefaultMemPool", false);
    resolve(hip.mem_pool_set_attribute, "hipMemPoolSetAttribute", false);
    resolve(hip.mem_pool_trim_to, "hipMemPoolTrimTo", false);
    resolve(hip.mem_pool_get_attribute, "hipMemPoolGetAttribute", false);
    resolve(hip.malloc_managed, "hipMallocManaged", false);
    resolve(hip.mem_prefetch_async, "hipMemPrefetchAsync", false);
    resolve(hip.host_malloc, "hipHostMalloc");
    resolve(hip.host_free, "hipHostFree");
    resolve(hip.host_register, "hipHostRegister", false);
    resolve(hip.host_unregister, "hipHostUnregister", false);
    resolve(hip.mem_alloc_pitch, "hipMemAllocPitch", false);
    resolve(hip.memcpy_2d_async, "hipMemcpy2DAsync", false);
    resolve(hip.launch_host_func, "hipLaunchHostFunc", false);
    resolve(hip.memcpy_htod_async, "hipMemcpyHtoDAsync");
    resolve(hip.memcpy_dtoh_async, "hipMemcpyDtoHAsync");
    resolve(hip.memcpy_dtod_async, "hipMemcpyDtoDAsync");
    resolve(hip.memcpy_peer_async, "hipMemcpyPeerAsync", false);
    resolve(hip.memset_d8_async, "hipMemsetD8Async");
    resolve(hip.memset_d32_async, "hipMemsetD32Async");
    resolve(hip.mem_address_reserve, "hipMemAddressReserve", false);
    resolve(hip.mem_address_free, "hipMemAddressFree", false);
    resolve(hip.mem_create, "hipMemCreate", false);
    resolve(hip.mem_release, "hipMemRelease", false);
    resolve(hip.mem_map, "hipMemMap", false);
    resolve(hip.mem_unmap, "hipMemUnmap", false);
    resolve(hip.mem_set_access, "hipMemSetAccess", false);
    resolve(hip.mem_get_allocation_granularity, "hipMemGetAllocationGranularity", false);
    resolve(hip.module_load_data, "hipModuleLoadData");
    resolve(hip.module_unload, "hipModuleUnload");
    resolve(hip.module_get_function, "hipModuleGetFunction");
    resolve(hip.module_get_global, "hipModuleGetGlobal");
    resolve(hip.func_get_attribute, "hipFuncGetAttribute");
    resolve(hip.module_launch_kernel, "hipModuleLaunchKernel");
    resolve(hip.module_launch_cooperative_kernel, "hipModuleLaunchCooperativeKernel", false);
    resolve(hip.module_occupancy_max_active_blocks_per_multiprocessor,
            "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor");
    resolve(hip.graph_instantiate_with_flags, "hipGraphInstantiateWithFlags", false);
    resolve(hip.graph_launch, "hipGraphLaunch", false);
    resolve(hip.graph_destroy, "hipGraphDestroy", false);
    resolve(hip.graph_exec_destroy, "hipGraphExecDestroy", false);
    resolve(hip.graph_exec_update, "hipGraphExecUpdate", false);
    resolve(hip.graph_upload, "hipGraphUpload", false);
    missing = resolve.missing();
    return hip;
}

// Sets `slot` to `adapter` when HIP exports the entry point behind it; leaves it null otherwise,
// so that callers get "not supported on HIP" through sys::require.
template <typename Slot, typename EntryPoint>
void install(Slot& slot, Slot adapter, EntryPoint entry_point) {
    slot = entry_point != nullptr ? adapter : nullptr;
}

void fill_table(const HipEntryPoints& hip, DriverApi& api) {
    api = DriverApi{};
    api.backend = Backend::hip;
    // Identical signatures (ints, sizes, char buffers) are stored as HIP exports them.
    api.init = hip.init;
    api.device_get_count = hip.get_device_count;
    api.device_get = hip.device_get;
    api.device_get_name = hip.device_get_name;
    api.device_total_mem = hip.device_total_mem;
    api.device_get_pci_bus_id = hip.device_get_pci_bus_id;
    api.device_primary_ctx_release = hip.device_primary_ctx_release;
    api.device_can_access_peer = hip.device_can_access_peer;  // same signature (device ordinals); may be null
    api.ctx_get_stream_priority_range = hip.device_get_stream_priority_range;
    api.mem_get_info = hip.mem_get_info;
    api.mem_host_alloc = hip.host_malloc;  // hipHostMallocPortable/Mapped/WriteCombined = CUDA's 1/2/4
    api.mem_free_host = hip.host_free;
    api.mem_host_register = hip.host_register;  // hipHostRegisterPortable = CUDA's 1; may be null
    api.mem_host_unregister = hip.host_unregister;

    api.driver_get_version = driver_get_version;
    api.get_error_name = get_error_name;
    api.get_error_string = get_error_string;
    install(api.device_get_uuid, device_get_uuid, hip.device_get_uuid);
    api.device_get_attribute = device_get_attribute;
    api.device_primary_ctx_retain = device_primary_ctx_retain;
    api.ctx_get_current = ctx_get_current;
    api.ctx_set_current = ctx_set_current;
    install(api.ctx_enable_peer_access, ctx_enable_peer_access, hip.device_enable_peer_access);
    api.ctx_synchronize = ctx_synchronize;
    api.stream_create_with_priority = stream_create_with_priority;
    api.stream_destroy = stream_destroy;
    api.stream_synchronize = stream_synchronize;
    api.stream_query = stream_query;
    api.stream_wait_event = stream_wait_event;
    api.stream_get_priority = stream_get_priority;
    api.stream_get_flags = stream_get_flags;
    // stream_get_ctx stays null: HIP has no hipStreamGetCtx.
    install(api.stream_is_capturing, stream_is_capturing, hip.stream_is_capturing);
    install(api.stream_begin_capture, stream_begin_capture, hip.stream_begin_capture);
    install(api.stream_end_capture, stream_end_capture, hip.stream_end_capture);
    install(api.mem_alloc_pitch, mem_alloc_pitch, hip.mem_alloc_pitch);
    install(api.memcpy_2d_async, memcpy_2d_async, hip.memcpy_2d_async);
    install(api.launch_host_func, launch_host_func, hip.launch_host_func);
    api.event_create = event_create;
    api.event_destroy = event_destroy;
    api.event_record = event_record;
    api.event_query = event_query;
    api.event_synchronize = event_synchronize;
    api.event_elapsed_time = event_elapsed_time;
    api.mem_alloc = mem_alloc;
    api.mem_free = mem_free;
    install(api.mem_alloc_async, mem_alloc_async, hip.malloc_async);
    install(api.mem_free_async, mem_free_async, hip.free_async);
    install(api.device_get_default_mem_pool, device_get_default_mem_pool, hip.device_get_default_mem_pool);
    install(api.mem_pool_set_attribute, mem_pool_set_attribute, hip.mem_pool_set_attribute);
    install(api.mem_pool_trim_to, mem_pool_trim_to, hip.mem_pool_trim_to);
    install(api.mem_pool_get_attribute, mem_pool_get_attribute, hip.mem_pool_get_attribute);
    install(api.mem_alloc_managed, mem_alloc_managed, hip.malloc_managed);
    install(api.mem_prefetch_async, mem_prefetch_async, hip.mem_prefetch_async);
    api.memcpy_htod_async = memcpy_htod_async;
    api.memcpy_dtoh_async = memcpy_dtoh_async;
    api.memcpy_dtod_async = memcpy_dtod_async;
    install(api.memcpy_peer_async, memcpy_peer_async, hip.memcpy_peer_async);
    api.memset_d8_async = memset_d8_async;
    api.memset_d32_async = memset_d32_async;
    install(api.mem_address_reserve, mem_address_reserve, hip.mem_address_reserve);
    install(api.mem_address_free, mem_address_free, hip.mem_address_free);
    install(api.mem_create, mem_create, hip.mem_create);
    install(api.mem_release, mem_release, hip.mem_release);
    install(api.mem_map, mem_map, hip.mem_map);
    install(api.mem_unmap, mem_unmap, hip.mem_unmap);
    install(api.mem_set_access, mem_set_access, hip.mem_set_access);
    install(api.mem_get_allocation_granularity, mem_get_allocation_granularity,
            hip.mem_get_allocation_granularity);
    api.module_load_data = module_load_data;
    api.module_unload = module_unload;
    api.module_get_function = module_get_function;
    api.module_get_global = module_get_global;
    api.func_get_attribute = func_get_attribute;
    api.func_set_attribute = func_set_attribute;
    // func_get_param_info and launch_kernel_ex stay null: HIP has no counterpart (thread block
    // clusters are NVIDIA-only; cooperative launches go through launch_cooperative_kernel).
    api.launch_kernel = launch_kernel;
    install(api.launch_cooperative_kernel, launch_cooperative_kernel, hip.module_launch_cooperative_kernel);
    api.occupancy_max_active_blocks_per_multiprocessor = occupancy_max_active_blocks_per_multiprocessor;
    install(api.graph_instantiate, graph_instantiate, hip.graph_instantiate_with_flags);
    install(api.graph_launch, graph_launch, hip.graph_launch);
    install(api.graph_destroy, graph_destroy, hip.graph_destroy);
    install(api.graph_exec_destroy, graph_exec_destroy, hip.graph_exec_destroy);
    install(api.graph_exec_update, graph_exec_update, hip.graph_exec_update);
    install(api.graph_upload, graph_upload, hip.graph_upload);
}

bool is_gcn_arch_char(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == ':' || c == '+' || c == '-' || c == '_';
}

}  // namespace

std::vector<std::string> hip_runtime_candidates(const std::string& override_path,
                                                const std::string& rocm_path) {
    std::vector<std::string> out;
    auto add_folder = [&out](const std::string& folder) {
        for (const char* soname : kHipSonames) append_unique(out, folder + "/" + soname);
        append_unique(out, folder + "/" + kHipUnversioned);
    };
    if (!override_path.empty()) {
        add_overridden_candidates(out, override_path, add_folder);
        return out;
    }
    if (!rocm_path.empty()) add_folder(rocm_path + "/lib");
    for (const char* soname : kHipSonames) {
        append_unique(out, soname);  // the dynamic linker's search (LD_LIBRARY_PATH, ld.so.cache)
        append_unique(out, std::string("/opt/rocm/lib/") + soname);
    }
    append_unique(out, kHipUnversioned);
    append_unique(out, std::string("/opt/rocm/lib/") + kHipUnversioned);
    return out;
}

HipLoadReport load_hip_runtime_from(const std::vector<std::string>& candidates, DriverApi& api) {
    HipLoadReport report;
    std::vector<std::string> attempts;
    const auto use = [&api, &report](const DynamicLibrary& library) -> std::string {
        std::vector<std::string> missing;
        const HipEntryPoints entry_points = resolve_entry_points(library, missing);
        if (!missing.empty()) {
            report.stage = HipLoadStage::entry_points_missing;
            return "not a usable HIP runtime (lacks " + join_lines(missing, ", ") + ")";
        }
        report.library_path = library.resolved_path(reinterpret_cast<void*>(entry_points.init));
        // Note: published once per load and never freed, like the library handle itself (vendor
        // libraries are never dlclose'd): adapters of every table filled so far stay valid.
        g_entry_points.store(new HipEntryPoints(entry_points), std::memory_order_release);
        fill_table(entry_points, api);
        report.init_result = api.init(0);
        if (report.init_result != kSuccess) {
            report.stage = HipLoadStage::init_failed;
            report.why = std::string(make_error(api, Entry::init, report.init_result, -1).what()) +
                         " (HIP runtime loaded from " + report.library_path +
                         "; is an AMD GPU present and /dev/kfd accessible to this user?)";
            return {};  // taken: its hipInit failed, and no other runtime is tried
        }
        report.stage = HipLoadStage::ready;
        return {};
    };
    // Note [Loading a vendor library]
    if (DynamicLibrary::load_first(candidates, use, attempts)) return report;
    report.why = "the HIP runtime (libamdhip64.so.7, .so.6 or .so.5) could not be loaded; tried: " +
                 join_lines(attempts, "; ") +
                 ". Install ROCm's HIP runtime (e.g. Debian's libamdhip64-5), set ROCM_PATH, or set "
                 "CUDARC_HIP_LIBRARY to the library's path.";
    return report;
}

bool load_hip_driver(DriverApi& api, std::string& why) {
    const HipLoadReport report = load_hip_runtime_from(
        hip_runtime_candidates(env_or_empty("CUDARC_HIP_LIBRARY"), env_or_empty("ROCM_PATH")), api);
    why = report.why;
    return report.stage == HipLoadStage::ready;
}

std::string find_gcn_arch_name(std::span<const char> properties) {
    std::string first;
    for (std::size_t i = 0; i + 3 < properties.size(); ++i) {
        // Note: not necessarily after a NUL (the byte before may end an integer field), but not
        // inside a longer word either.
        if (i > 0 && std::isalnum(static_cast<unsigned char>(properties[i - 1])) != 0) continue;
        if (std::string_view(properties.data() + i, 3) != "gfx") continue;
        std::size_t end = i + 3;
        while (end < properties.size() && is_gcn_arch_char(properties[end])) ++end;
        if (end == properties.size() || properties[end] != '\0' || end == i + 3) continue;
        std::string name(properties.data() + i, end - i);
        // Prefer the full target ID ("gfx90a:sramecc+:xnack-") over a bare processor name.
        if (name.find(':') != std::string::npos) return name;
        if (first.empty()) first = std::move(name);
    }
    return first;
}

std::string hip_device_offload_arch(int ordinal) {
    const HipEntryPoints* hip = g_entry_points.load(std::memory_order_acquire);
    if (hip == nullptr)
        throw Error("cudarc: the HIP runtime is not loaded; cannot ask for a device's architecture");
    if (hip->get_device_properties == nullptr) {
        throw Error(
            "cudarc: the loaded HIP runtime exports no hipGetDeviceProperties; pass the architecture "
            "explicitly (e.g. CompileOptions::arch = \"gfx90a\")");
    }
    // Note: larger than any hipDeviceProp_t layout so far (about 1.5 KiB), zeroed so that the
    // search below never reads past what HIP wrote.
    std::vector<char> properties(64 * 1024, '\0');
    const int result = hip->get_device_properties(properties.data(), ordinal);
    if (result != kSuccess) {
        const char* name = hip->get_error_name != nullptr ? hip->get_error_name(result) : nullptr;
        throw Error("cudarc: hipGetDeviceProperties failed for HIP device " + std::to_string(ordinal) + ": " +
                    (name != nullptr ? name : "unknown error") + " (" + std::to_string(result) + ")");
    }
    std::string arch = find_gcn_arch_name(properties);
    if (arch.empty()) {
        throw Error("cudarc: HIP device " + std::to_string(ordinal) +
                    " reported no gcnArchName; pass the architecture explicitly (e.g. \"gfx90a\")");
    }
    return arch;
}

int hip_version_as_cuda_encoding(int hip_version) noexcept {
    if (hip_version <= 0) return hip_version;
    const int major = hip_version / 10000000;
    const int minor = (hip_version / 100000) % 100;
    return major * 1000 + minor * 10;
}

bool translate_launch_extra(void* const* cuda_extra, std::span<void*> out) noexcept {
    std::size_t i = 0;
    // Key/value pairs up to CUDA's end marker; a key without its value cannot be meant.
    while (reinterpret_cast<std::uintptr_t>(cuda_extra[i]) != hip::kCudaLaunchParamEnd) {
        if (i + 2 >= out.size()) return false;
        out[i] = cuda_extra[i];
        out[i + 1] = cuda_extra[i + 1];
        i += 2;
    }
    if (i >= out.size()) return false;
    out[i] = reinterpret_cast<void*>(hip::kHipLaunchParamEnd);
    return true;
}

}  // namespace cudarc::sys

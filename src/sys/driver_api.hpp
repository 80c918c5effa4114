// The one internal table through which all core code reaches a GPU driver.
//
// Note: the table speaks the CUDA driver API's types, numbering and semantics. The CUDA backend
// fills it straight from libcuda (cuGetProcAddress); the HIP backend fills it with adapters that
// translate (attribute numbers, handle types). Core code never names a vendor entry point.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cudarc/detail/native_handles.hpp"
#include "cudarc/error.hpp"

namespace cudarc::sys {

using Result = int;  // CUresult numbering; HIP's hipError_t shares the codes core code tests.

inline constexpr Result kSuccess = 0;
inline constexpr Result kErrorInvalidValue = 1;
inline constexpr Result kErrorOutOfMemory = 2;
inline constexpr Result kErrorNotInitialized = 3;
inline constexpr Result kErrorDeinitialized = 4;
inline constexpr Result kErrorStubLibrary = 34;
inline constexpr Result kErrorNoDevice = 100;
inline constexpr Result kErrorPeerAccessUnsupported = 217;
inline constexpr Result kErrorNotFound = 500;
inline constexpr Result kErrorNotReady = 600;
inline constexpr Result kErrorPeerAccessAlreadyEnabled = 704;
inline constexpr Result kErrorNotSupported = 801;
inline constexpr Result kErrorStreamCaptureUnsupported = 900;

// Errors after which the context is unusable and every later call fails the same way (the driver's
// documentation: "the process must be terminated and relaunched"): an illegal address (700), a launch
// timeout (702), a hardware stack error, an illegal instruction, a misaligned address, an invalid address
// space or program counter (714-718), a launch failure (719). HIP uses the same numbers for them.
[[nodiscard]] constexpr bool is_sticky_error(Result result) noexcept {
    return result == 700 || result == 702 || (result >= 714 && result <= 719);
}

using Device = int;
using Context = ::CUctx_st*;
using Stream = ::CUstream_st*;
using Event = ::CUevent_st*;
using Module = ::CUmod_st*;
using Function = ::CUfunc_st*;
using MemoryPool = ::CUmemPoolHandle_st*;
using Graph = ::CUgraph_st*;
using GraphExec = ::CUgraphExec_st*;
using DevicePtr = cudarc::DevicePtr;

// The legacy NULL stream's explicit handle (CU_STREAM_LEGACY).
inline Stream legacy_stream() noexcept {
    return reinterpret_cast<Stream>(std::uintptr_t{1});
}

// Flags and enumerations used by core code (values from the CUDA driver API).
inline constexpr unsigned kStreamNonBlocking = 0x1;      // CU_STREAM_NON_BLOCKING
inline constexpr unsigned kEventDefault = 0x0;           // CU_EVENT_DEFAULT
inline constexpr unsigned kEventDisableTiming = 0x2;     // CU_EVENT_DISABLE_TIMING
inline constexpr unsigned kMemHostAllocPortable = 0x1;   // CU_MEMHOSTALLOC_PORTABLE
inline constexpr unsigned kMemAttachGlobal = 0x1;        // CU_MEM_ATTACH_GLOBAL
inline constexpr int kMemPoolAttrReleaseThreshold = 4;   // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
inline constexpr int kStreamCaptureModeThreadLocal = 1;  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
inline constexpr int kStreamCaptureStatusNone = 0;       // CU_STREAM_CAPTURE_STATUS_NONE
inline constexpr int kStreamCaptureStatusActive = 1;     // CU_STREAM_CAPTURE_STATUS_ACTIVE
inline constexpr unsigned kEventWaitExternal = 0x1;      // CU_EVENT_WAIT_EXTERNAL
inline constexpr int kPointerAttributeMemoryType = 2;    // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
inline constexpr unsigned kMemoryTypeHost = 1;           // CU_MEMORYTYPE_HOST

// cuPointerGetAttributes attributes and memory types that borrowed memory is checked with.
inline constexpr unsigned kMemoryTypeDevice = 2;          // CU_MEMORYTYPE_DEVICE
inline constexpr int kPointerAttributeContext = 1;        // CU_POINTER_ATTRIBUTE_CONTEXT
inline constexpr int kPointerAttributeIsManaged = 8;      // CU_POINTER_ATTRIBUTE_IS_MANAGED
inline constexpr int kPointerAttributeDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL

// CUmemPool_attribute values read with cuMemPoolGetAttribute (each a 64-bit unsigned value).
inline constexpr int kMemPoolAttrReservedMemCurrent = 5;  // CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
inline constexpr int kMemPoolAttrReservedMemHigh = 6;     // CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH
inline constexpr int kMemPoolAttrUsedMemCurrent = 7;      // CU_MEMPOOL_ATTR_USED_MEM_CURRENT
inline constexpr int kMemPoolAttrUsedMemHigh = 8;         // CU_MEMPOOL_ATTR_USED_MEM_HIGH

// CUdevice_attribute values the library reads.
namespace attr {
inline constexpr int kMaxThreadsPerBlock = 1;
inline constexpr int kMaxSharedMemoryPerBlock = 8;
inline constexpr int kWarpSize = 10;
inline constexpr int kClockRate = 13;
inline constexpr int kMultiprocessorCount = 16;
inline constexpr int kPciBusId = 33;
inline constexpr int kPciDeviceId = 34;
inline constexpr int kMemoryClockRate = 36;
inline constexpr int kGlobalMemoryBusWidth = 37;
inline constexpr int kL2CacheSize = 38;
inline constexpr int kMaxThreadsPerMultiprocessor = 39;
inline constexpr int kComputeCapabilityMajor = 75;
inline constexpr int kComputeCapabilityMinor = 76;
inline constexpr int kMaxSharedMemoryPerMultiprocessor = 81;
inline constexpr int kManagedMemory = 83;
inline constexpr int kConcurrentManagedAccess = 89;
inline constexpr int kCooperativeLaunch = 95;
inline constexpr int kMaxSharedMemoryPerBlockOptin = 97;
inline constexpr int kMemoryPoolsSupported = 115;
}  // namespace attr

// CUfunction_attribute values.
namespace func_attr {
inline constexpr int kMaxThreadsPerBlock = 0;
inline constexpr int kSharedSizeBytes = 1;
inline constexpr int kConstSizeBytes = 2;
inline constexpr int kLocalSizeBytes = 3;
inline constexpr int kNumRegs = 4;
inline constexpr int kPtxVersion = 5;
inline constexpr int kBinaryVersion = 6;
inline constexpr int kMaxDynamicSharedSizeBytes = 8;
}  // namespace func_attr

struct Uuid {
    char bytes[16];
};

// CUlaunchAttribute / CUlaunchConfig layouts (cuLaunchKernelEx).
inline constexpr int kLaunchAttributeCooperative = 2;       // CU_LAUNCH_ATTRIBUTE_COOPERATIVE
inline constexpr int kLaunchAttributeClusterDimension = 4;  // CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
union LaunchAttributeValue {
    char pad[64];
    struct {
        unsigned x, y, z;
    } cluster_dim;
    int cooperative;
};
struct LaunchAttribute {
    int id;
    char pad[8 - sizeof(int)];
    LaunchAttributeValue value;
};

// CUgraphExecUpdateResultInfo: why cuGraphExecUpdate could not update an executable graph in place.
struct GraphExecUpdateResultInfo {
    int result = 0;  // CUgraphExecUpdateResult: 0 success, 2 topology changed, ...
    void* error_node = nullptr;
    void* error_from_node = nullptr;
};
inline constexpr int kGraphExecUpdateSuccess = 0;          // CU_GRAPH_EXEC_UPDATE_SUCCESS
inline constexpr int kGraphExecUpdateTopologyChanged = 2;  // CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED

struct LaunchConfig {
    unsigned grid_x, grid_y, grid_z;
    unsigned block_x, block_y, block_z;
    unsigned shared_mem_bytes;
    Stream stream;
    LaunchAttribute* attrs;
    unsigned num_attrs;
};

// Every driver entry point the library uses. A null pointer means "not available in this driver";
// callers that need it go through DriverApi::require().
struct DriverApi {
    Backend backend = Backend::cuda;

    // Initialization, versions, errors
    Result (*init)(unsigned flags) = nullptr;
    Result (*driver_get_version)(int* version) = nullptr;
    Result (*get_error_name)(Result, const char** name) = nullptr;
    Result (*get_error_string)(Result, const char** text) = nullptr;

    // Devices
    Result (*device_get_count)(int* count) = nullptr;
    Result (*device_get)(Device* device, int ordinal) = nullptr;
    Result (*device_get_name)(char* name, int len, Device device) = nullptr;
    Result (*device_get_uuid)(Uuid* uuid, Device device) = nullptr;
    Result (*device_total_mem)(std::size_t* bytes, Device device) = nullptr;
    Result (*device_get_attribute)(int* value, int attribute, Device device) = nullptr;
    Result (*device_get_pci_bus_id)(char* id, int len, Device device) = nullptr;
    Result (*device_primary_ctx_retain)(Context* ctx, Device device) = nullptr;
    Result (*device_primary_ctx_release)(Device device) = nullptr;
    // Whether `device` can address `peer`'s memory directly (NVLink or PCIe peer to peer).
    Result (*device_can_access_peer)(int* can_access, Device device, Device peer) = nullptr;

    // Contexts
    Result (*ctx_get_current)(Context* ctx) = nullptr;
    Result (*ctx_set_current)(Context ctx) = nullptr;
    Result (*ctx_synchronize)() = nullptr;
    Result (*ctx_get_stream_priority_range)(int* least, int* greatest) = nullptr;
    Result (*mem_get_info)(std::size_t* free, std::size_t* total) = nullptr;
    // Lets the current context address `peer`'s memory (one direction only); flags must be 0.
    Result (*ctx_enable_peer_access)(Context peer, unsigned flags) = nullptr;

    // Streams
    Result (*stream_create_with_priority)(Stream* stream, unsigned flags, int priority) = nullptr;
    Result (*stream_destroy)(Stream stream) = nullptr;
    Result (*stream_synchronize)(Stream stream) = nullptr;
    Result (*stream_query)(Stream stream) = nullptr;
    Result (*stream_wait_event)(Stream stream, Event event, unsigned flags) = nullptr;
    Result (*stream_get_priority)(Stream stream, int* priority) = nullptr;
    Result (*stream_get_flags)(Stream stream, unsigned* flags) = nullptr;
    Result (*stream_get_ctx)(Stream stream, Context* ctx) = nullptr;
    Result (*stream_is_capturing)(Stream stream, int* status) = nullptr;
    Result (*stream_begin_capture)(Stream stream, int mode) = nullptr;
    Result (*stream_end_capture)(Stream stream, Graph* graph) = nullptr;

    // Events
    Result (*event_create)(Event* event, unsigned flags) = nullptr;
    Result (*event_destroy)(Event event) = nullptr;
    Result (*event_record)(Event event, Stream stream) = nullptr;
    Result (*event_query)(Event event) = nullptr;
    Result (*event_synchronize)(Event event) = nullptr;
    Result (*event_elapsed_time)(float* ms, Event start, Event end) = nullptr;

    // Memory
    Result (*mem_alloc)(DevicePtr* ptr, std::size_t bytes) = nullptr;
    Result (*mem_free)(DevicePtr ptr) = nullptr;
    Result (*mem_alloc_async)(DevicePtr* ptr, std::size_t bytes, Stream stream) = nullptr;
    Result (*mem_free_async)(DevicePtr ptr, Stream stream) = nullptr;
    Result (*device_get_default_mem_pool)(MemoryPool* pool, Device device) = nullptr;
    Result (*mem_pool_set_attribute)(MemoryPool pool, int attribute, void* value) = nullptr;
    Result (*mem_pool_trim_to)(MemoryPool pool, std::size_t min_bytes_to_keep) = nullptr;
    Result (*mem_pool_get_attribute)(MemoryPool pool, int attribute, void* value) = nullptr;
    Result (*mem_alloc_managed)(DevicePtr* ptr, std::size_t bytes, unsigned flags) = nullptr;
    Result (*mem_prefetch_async)(DevicePtr ptr, std::size_t bytes, Device device, Stream stream) = nullptr;
    Result (*mem_host_alloc)(void** ptr, std::size_t bytes, unsigned flags) = nullptr;
    Result (*mem_free_host)(void* ptr) = nullptr;
    Result (*memcpy_htod_async)(DevicePtr dst, const void* src, std::size_t bytes, Stream stream) = nullptr;
    Result (*memcpy_dtoh_async)(void* dst, DevicePtr src, std::size_t bytes, Stream stream) = nullptr;
    Result (*memcpy_dtod_async)(DevicePtr dst, DevicePtr src, std::size_t bytes, Stream stream) = nullptr;
    // Between the memory of two contexts; without peer access the driver stages it through host memory.
    Result (*memcpy_peer_async)(DevicePtr dst, Context dst_ctx, DevicePtr src, Context src_ctx,
                                std::size_t bytes, Stream stream) = nullptr;
    Result (*memset_d8_async)(DevicePtr dst, unsigned char value, std::size_t count, Stream stream) = nullptr;
    Result (*memset_d32_async)(DevicePtr dst, unsigned value, std::size_t count, Stream stream) = nullptr;
    // cuPointerGetAttributes: with kPointerAttributeMemoryType it tells page-locked host memory
    // (kMemoryTypeHost) from pageable memory (0). Unlike the singular form it reports an unknown pointer
    // as success with zeroed values, not as an error. Null: treat every host pointer as page-locked.
    Result (*pointer_get_attributes)(unsigned count, int* attributes, void** data, DevicePtr ptr) = nullptr;
    // cuMemGetAddressRange: the allocation containing `ptr` (borrowed memory's bounds check). Optional.
    Result (*mem_get_address_range)(DevicePtr* base, std::size_t* size, DevicePtr ptr) = nullptr;

    // Modules and launches
    Result (*module_load_data)(Module* module, const void* image) = nullptr;
    Result (*module_unload)(Module module) = nullptr;
    Result (*module_get_function)(Function* function, Module module, const char* name) = nullptr;
    Result (*module_get_global)(DevicePtr* ptr, std::size_t* bytes, Module module,
                                const char* name) = nullptr;
    Result (*func_get_attribute)(int* value, int attribute, Function function) = nullptr;
    Result (*func_set_attribute)(Function function, int attribute, int value) = nullptr;
    // CUDA >= 12.4 only; null elsewhere.
    Result (*func_get_param_info)(Function function, std::size_t index, std::size_t* offset,
                                  std::size_t* size) = nullptr;
    Result (*launch_kernel)(Function function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                            unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_mem_bytes,
                            Stream stream, void** params, void** extra) = nullptr;
    Result (*launch_kernel_ex)(const LaunchConfig* config, Function function, void** params,
                               void** extra) = nullptr;
    Result (*launch_cooperative_kernel)(Function function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                        unsigned block_x, unsigned block_y, unsigned block_z,
                                        unsigned shared_mem_bytes, Stream stream, void** params) = nullptr;
    Result (*occupancy_max_active_blocks_per_multiprocessor)(int* blocks, Function function, int block_size,
                                                             std::size_t dynamic_smem) = nullptr;

    // Graphs
    Result (*graph_instantiate)(GraphExec* exec, Graph graph, unsigned long long flags) = nullptr;
    Result (*graph_launch)(GraphExec exec, Stream stream) = nullptr;
    Result (*graph_destroy)(Graph graph) = nullptr;
    Result (*graph_exec_destroy)(GraphExec exec) = nullptr;
    // cuGraphExecUpdate (the CUDA 12 form) and cuGraphUpload; optional.
    Result (*graph_exec_update)(GraphExec exec, Graph graph, GraphExecUpdateResultInfo* info) = nullptr;
    Result (*graph_upload)(GraphExec exec, Stream stream) = nullptr;
};

// The active backend's table, loaded and initialized on first use (thread-safe).
// Throws cudarc::Error naming what was looked for and where when no driver can be loaded.
[[nodiscard]] const DriverApi& driver();

// The table if it loads, else nullptr (never throws). For destructors and probes.
[[nodiscard]] const DriverApi* driver_if_loaded() noexcept;

// Why the driver could not be loaded (empty when it loaded).
[[nodiscard]] std::string driver_load_failure();

// Builds the Error for a failing call. `device` is the ordinal or -1.
[[nodiscard]] Error make_error(const DriverApi& api, const char* call, Result result, int device);

// Checks a result; throws the named error when it is not success.
inline void check(const DriverApi& api, Result result, const char* call, int device = -1) {
    if (result != kSuccess) throw make_error(api, call, result, device);
}

// Throws a clear error when an optional entry point is missing.
[[noreturn]] void throw_missing_entry_point(const DriverApi& api, const char* call);

template <typename Fn>
Fn require(const DriverApi& api, Fn fn, const char* call) {
    if (fn == nullptr) throw_missing_entry_point(api, call);
    return fn;
}

// Whether work on `stream` is being captured into a graph. An invalidated capture still counts until it
// is ended; a driver without the query cannot capture either (false). Throws the named error for a
// failing query. The one place that asks (Stream::is_capturing, the allocator's backend).
[[nodiscard]] bool stream_is_capturing(const DriverApi& api, Stream stream, int device = -1);

}  // namespace cudarc::sys

// The one internal table through which all core code reaches a GPU driver.
//
// Note: the table speaks the CUDA driver API's types, numbering and semantics. The CUDA backend
// fills it straight from libcuda (cuGetProcAddress); the HIP backend fills it with adapters that
// translate (attribute numbers, handle types). Its fields come from one list, src/sys/driver_entries.hpp
// (Note [One driver list]); core code never names a vendor entry point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cudarc/detail/native_handles.hpp"
#include "cudarc/error.hpp"
#include "sys/driver_entries.hpp"

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
// The per-thread default stream's explicit handle (CU_STREAM_PER_THREAD; hipStreamPerThread is the same
// value): one value that names a different stream on each thread.
inline Stream per_thread_stream() noexcept {
    return reinterpret_cast<Stream>(std::uintptr_t{2});
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
inline constexpr int kPointerAttributeRangeStart = 11;    // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR (a CUdeviceptr)
inline constexpr int kPointerAttributeRangeSize = 12;     // CU_POINTER_ATTRIBUTE_RANGE_SIZE (a size_t)

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
inline constexpr int kVirtualMemoryManagementSupported = 102;
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
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
inline constexpr int kLaunchAttributeProgrammaticStreamSerialization = 6;
union LaunchAttributeValue {
    char pad[64];
    struct {
        unsigned x, y, z;
    } cluster_dim;
    int cooperative;
    int programmatic_stream_serialization_allowed;
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

// The virtual memory management types (CUmemGenericAllocationHandle, CUmemLocation, CUmemAllocationProp,
// CUmemAccessDesc), as the CUDA driver API lays them out. HIP's hipMemAllocationProp has the same fields
// up to allocFlags, whose last four bytes HIP does not read; the HIP adapters pass these through.
using MemHandle = unsigned long long;
struct MemLocation {
    int type = 0;  // CUmemLocationType
    int id = 0;    // the device ordinal for kMemLocationTypeDevice
};
struct MemAllocationProp {
    int type = 0;                    // CUmemAllocationType
    int requested_handle_types = 0;  // CUmemAllocationHandleType (0: none, not shareable)
    MemLocation location;
    void* win32_handle_meta_data = nullptr;
    struct {
        unsigned char compression_type = 0;
        unsigned char gpu_direct_rdma_capable = 0;
        unsigned short usage = 0;
        unsigned char reserved[4] = {};
    } alloc_flags;
};
static_assert(sizeof(MemAllocationProp) == 32, "CUmemAllocationProp is 32 bytes");
struct MemAccessDesc {
    MemLocation location;
    int flags = 0;  // CUmemAccess_flags
};
static_assert(sizeof(MemAccessDesc) == 12, "CUmemAccessDesc is 12 bytes");
inline constexpr int kMemAllocationTypePinned = 1;          // CU_MEM_ALLOCATION_TYPE_PINNED
inline constexpr int kMemLocationTypeDevice = 1;            // CU_MEM_LOCATION_TYPE_DEVICE
inline constexpr int kMemAccessFlagsProtReadWrite = 3;      // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
inline constexpr int kMemAllocationGranularityMinimum = 0;  // CU_MEM_ALLOC_GRANULARITY_MINIMUM

// cuLaunchHostFunc's callback (CUhostFn).
using HostFn = void (*)(void* data);
inline constexpr unsigned kMemHostRegisterPortable = 0x1;  // CU_MEMHOSTREGISTER_PORTABLE

// CUDA_MEMCPY2D (the v2 layout cuMemcpy2DAsync takes at API version 12000).
struct Memcpy2D {
    std::size_t src_x_in_bytes = 0;
    std::size_t src_y = 0;
    int src_memory_type = 0;
    const void* src_host = nullptr;
    DevicePtr src_device = 0;
    void* src_array = nullptr;
    std::size_t src_pitch = 0;
    std::size_t dst_x_in_bytes = 0;
    std::size_t dst_y = 0;
    int dst_memory_type = 0;
    void* dst_host = nullptr;
    DevicePtr dst_device = 0;
    void* dst_array = nullptr;
    std::size_t dst_pitch = 0;
    std::size_t width_in_bytes = 0;
    std::size_t height = 0;
};
static_assert(sizeof(Memcpy2D) == 128, "CUDA_MEMCPY2D is 128 bytes");

struct LaunchConfig {
    unsigned grid_x, grid_y, grid_z;
    unsigned block_x, block_y, block_z;
    unsigned shared_mem_bytes;
    Stream stream;
    LaunchAttribute* attrs;
    unsigned num_attrs;
};

// The kind of entry point an entry is (Note [One driver list]): on CUDA a missing required one fails
// loading; a missing optional one leaves its field null.
enum class EntryNeed : unsigned char { required, optional };

// A field's function-pointer type: EntryPoint<Result(int* count)> is Result (*)(int* count).
template <typename Signature>
using EntryPoint = Signature*;

// Every driver entry point the library uses, one field per entry of Note [One driver list]. A null pointer
// means "not available in this driver"; callers that need it go through require().
struct DriverApi {
    Backend backend = Backend::cuda;

#define CUDARC_SYS_DRIVER_FIELD(field, cuda_name, hip_name, need, min_version, ...) \
    EntryPoint<__VA_ARGS__> field = nullptr;
    CUDARC_SYS_DRIVER_ENTRIES(CUDARC_SYS_DRIVER_FIELD)
#undef CUDARC_SYS_DRIVER_FIELD
};

// Which entry point a call was: what call sites give check, defer, make_error and require, so that the
// name an error reports is the active backend's (Note [One driver list]).
enum class Entry : unsigned char {
#define CUDARC_SYS_DRIVER_ENUM(field, ...) field,
    CUDARC_SYS_DRIVER_ENTRIES(CUDARC_SYS_DRIVER_ENUM)
#undef CUDARC_SYS_DRIVER_ENUM
};

// The facts the list holds about one entry.
struct EntryInfo {
    Entry entry;
    const char* cuda_name;  // "cuMemAlloc"
    const char* hip_name;   // "hipMalloc"; null where HIP leaves the field empty
    EntryNeed need;         // on CUDA
    int min_version;        // passed to cuGetProcAddress
};

// Every entry, in DriverApi's order.
[[nodiscard]] std::span<const EntryInfo> driver_entries() noexcept;

// The function `backend` calls for `entry`: "cuStreamDestroy" on CUDA, "hipStreamDestroy" on HIP (the CUDA
// name where HIP has no counterpart: such a call never reaches HIP).
[[nodiscard]] const char* entry_name(Backend backend, Entry entry) noexcept;

// The active backend's table, loaded and initialized on first use (thread-safe).
// Throws cudarc::Error naming what was looked for and where when no driver can be loaded.
[[nodiscard]] const DriverApi& driver();

// The table if it loads, else nullptr (never throws). For destructors and probes.
[[nodiscard]] const DriverApi* driver_if_loaded() noexcept;

// Why the driver could not be loaded (empty when it loaded).
[[nodiscard]] std::string driver_load_failure();

// Builds the Error for a failing call of `entry`, named as the active backend names it and followed by
// `context` as given (" ('saxpy' in a module)" makes "cuModuleGetFunction ('saxpy' in a module)").
// `device` is the ordinal or -1.
[[nodiscard]] Error make_error(const DriverApi& api, Entry entry, Result result, int device,
                               std::string_view context = {});

// Checks a result; throws the named error when it is not success.
inline void check(const DriverApi& api, Result result, Entry entry, int device = -1) {
    if (result != kSuccess) throw make_error(api, entry, result, device);
}

// Throws a clear error when an optional entry point is missing, naming the backend's function (followed by
// `context` as given).
[[noreturn]] void throw_missing_entry_point(const DriverApi& api, Entry entry, std::string_view context = {});

template <typename Fn>
Fn require(const DriverApi& api, Fn fn, Entry entry) {
    if (fn == nullptr) throw_missing_entry_point(api, entry);
    return fn;
}

// Whether work on `stream` is being captured into a graph. An invalidated capture still counts until it
// is ended; a driver without the query cannot capture either (false). Throws the named error for a
// failing query. The one place that asks (Stream::is_capturing, the allocator's backend).
[[nodiscard]] bool stream_is_capturing(const DriverApi& api, Stream stream, int device = -1);

// The offload target of HIP device `ordinal` as hiprtc takes it, e.g. "gfx90a:sramecc+:xnack-"
// (hipDeviceProp_t::gcnArchName). Throws cudarc::Error when the HIP runtime is not loaded or the device
// cannot be queried. HIP only: CUDA devices name their architecture from their compute capability.
[[nodiscard]] std::string hip_device_offload_arch(int ordinal);

}  // namespace cudarc::sys

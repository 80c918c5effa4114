#include "sys/hip/hip_attributes.hpp"

#include <algorithm>
#include <array>

namespace cudarc::sys::hip {
namespace {

// {CUDA number, CUDA name, HIP number, HIP name[, fallback number, fallback name]}: numbers from
// cuda.h and HIP's hip_runtime_api.h, sorted by CUDA number for the binary search below.
constexpr std::array kMappings = {
    AttributeMapping{1, "MAX_THREADS_PER_BLOCK", 56, "MaxThreadsPerBlock"},
    AttributeMapping{2, "MAX_BLOCK_DIM_X", 26, "MaxBlockDimX"},
    AttributeMapping{3, "MAX_BLOCK_DIM_Y", 27, "MaxBlockDimY"},
    AttributeMapping{4, "MAX_BLOCK_DIM_Z", 28, "MaxBlockDimZ"},
    AttributeMapping{5, "MAX_GRID_DIM_X", 29, "MaxGridDimX"},
    AttributeMapping{6, "MAX_GRID_DIM_Y", 30, "MaxGridDimY"},
    AttributeMapping{7, "MAX_GRID_DIM_Z", 31, "MaxGridDimZ"},
    AttributeMapping{8, "MAX_SHARED_MEMORY_PER_BLOCK", 74, "MaxSharedMemoryPerBlock"},
    AttributeMapping{9, "TOTAL_CONSTANT_MEMORY", 83, "TotalConstantMemory"},
    AttributeMapping{10, "WARP_SIZE", 87, "WarpSize"},  // 64 on most AMD GPUs
    AttributeMapping{11, "MAX_PITCH", 58, "MaxPitch"},
    AttributeMapping{12, "MAX_REGISTERS_PER_BLOCK", 71, "MaxRegistersPerBlock"},
    AttributeMapping{13, "CLOCK_RATE", 5, "ClockRate"},
    AttributeMapping{14, "TEXTURE_ALIGNMENT", 81, "TextureAlignment"},
    AttributeMapping{15, "GPU_OVERLAP", 12, "DeviceOverlap"},
    AttributeMapping{16, "MULTIPROCESSOR_COUNT", 63, "MultiprocessorCount"},  // compute units
    AttributeMapping{17, "KERNEL_EXEC_TIMEOUT", 18, "KernelExecTimeout"},
    AttributeMapping{18, "INTEGRATED", 16, "Integrated"},
    AttributeMapping{19, "CAN_MAP_HOST_MEMORY", 3, "CanMapHostMemory"},
    AttributeMapping{20, "COMPUTE_MODE", 6, "ComputeMode"},
    AttributeMapping{31, "CONCURRENT_KERNELS", 8, "ConcurrentKernels"},
    AttributeMapping{32, "ECC_ENABLED", 0, "EccEnabled"},
    AttributeMapping{33, "PCI_BUS_ID", 67, "PciBusId"},
    AttributeMapping{34, "PCI_DEVICE_ID", 68, "PciDeviceId"},
    AttributeMapping{35, "TCC_DRIVER", 80, "TccDriver"},
    AttributeMapping{36, "MEMORY_CLOCK_RATE", 60, "MemoryClockRate"},
    AttributeMapping{37, "GLOBAL_MEMORY_BUS_WIDTH", 59, "MemoryBusWidth"},
    AttributeMapping{38, "L2_CACHE_SIZE", 19, "L2CacheSize"},
    AttributeMapping{39, "MAX_THREADS_PER_MULTIPROCESSOR", 57, "MaxThreadsPerMultiProcessor"},
    AttributeMapping{40, "ASYNC_ENGINE_COUNT", 2, "AsyncEngineCount"},
    AttributeMapping{41, "UNIFIED_ADDRESSING", 85, "UnifiedAddressing"},
    AttributeMapping{50, "PCI_DOMAIN_ID", 69, "PciDomainID"},
    AttributeMapping{51, "TEXTURE_PITCH_ALIGNMENT", 82, "TexturePitchAlignment"},
    AttributeMapping{75, "COMPUTE_CAPABILITY_MAJOR", 23, "ComputeCapabilityMajor"},  // gfx90a: 9
    AttributeMapping{76, "COMPUTE_CAPABILITY_MINOR", 61, "ComputeCapabilityMinor"},  // gfx90a: 0
    AttributeMapping{78, "STREAM_PRIORITIES_SUPPORTED", 78, "StreamPrioritiesSupported"},
    AttributeMapping{79, "GLOBAL_L1_CACHE_SUPPORTED", 14, "GlobalL1CacheSupported"},
    AttributeMapping{80, "LOCAL_L1_CACHE_SUPPORTED", 20, "LocalL1CacheSupported"},
    AttributeMapping{81, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", 76, "SharedMemPerMultiprocessor", 10002,
                     "MaxSharedMemoryPerMultiprocessor"},
    AttributeMapping{82, "MAX_REGISTERS_PER_MULTIPROCESSOR", 72, "MaxRegistersPerMultiprocessor"},
    AttributeMapping{83, "MANAGED_MEMORY", 24, "ManagedMemory"},
    AttributeMapping{84, "MULTI_GPU_BOARD", 17, "IsMultiGpuBoard"},
    AttributeMapping{85, "MULTI_GPU_BOARD_GROUP_ID", 62, "MultiGpuBoardGroupID"},
    AttributeMapping{86, "HOST_NATIVE_ATOMIC_SUPPORTED", 15, "HostNativeAtomicSupported"},
    AttributeMapping{87, "SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO", 77, "SingleToDoublePrecisionPerfRatio"},
    AttributeMapping{88, "PAGEABLE_MEMORY_ACCESS", 65, "PageableMemoryAccess"},
    AttributeMapping{89, "CONCURRENT_MANAGED_ACCESS", 9, "ConcurrentManagedAccess"},
    AttributeMapping{90, "COMPUTE_PREEMPTION_SUPPORTED", 7, "ComputePreemptionSupported"},
    AttributeMapping{91, "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM", 4, "CanUseHostPointerForRegisteredMem"},
    AttributeMapping{95, "COOPERATIVE_LAUNCH", 10, "CooperativeLaunch"},
    AttributeMapping{96, "COOPERATIVE_MULTI_DEVICE_LAUNCH", 11, "CooperativeMultiDeviceLaunch"},
    AttributeMapping{97, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", 75, "SharedMemPerBlockOptin", 74,
                     "MaxSharedMemoryPerBlock"},
    AttributeMapping{100, "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES", 66,
                     "PageableMemoryAccessUsesHostPageTables"},
    AttributeMapping{101, "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST", 13, "DirectManagedMemAccessFromHost"},
    AttributeMapping{106, "MAX_BLOCKS_PER_MULTIPROCESSOR", 25, "MaxBlocksPerMultiProcessor"},
    AttributeMapping{108, "MAX_PERSISTING_L2_CACHE_SIZE", 70, "PersistingL2CacheMaxSize"},
    AttributeMapping{109, "MAX_ACCESS_POLICY_WINDOW_SIZE", 1, "AccessPolicyMaxWindowSize"},
    AttributeMapping{111, "RESERVED_SHARED_MEMORY_PER_BLOCK", 73, "ReservedSharedMemPerBlock"},
    AttributeMapping{115, "MEMORY_POOLS_SUPPORTED", 88, "MemoryPoolsSupported"},
};

static_assert(std::is_sorted(kMappings.begin(), kMappings.end(),
                             [](const AttributeMapping& a, const AttributeMapping& b) {
                                 return a.cuda < b.cuda;
                             }),
              "kMappings must stay sorted by CUDA number");

}  // namespace

std::span<const AttributeMapping> attribute_mappings() noexcept {
    return kMappings;
}

std::optional<AttributeMapping> hip_attribute_for(int cuda_attribute) noexcept {
    const auto it = std::lower_bound(kMappings.begin(), kMappings.end(), cuda_attribute,
                                     [](const AttributeMapping& m, int value) { return m.cuda < value; });
    if (it == kMappings.end() || it->cuda != cuda_attribute) return std::nullopt;
    return *it;
}

}  // namespace cudarc::sys::hip

// CUDA device attribute numbers -> HIP's hipDeviceAttribute_t numbers. Internal to src/sys/hip.
//
// Note: DriverApi::device_get_attribute speaks CUdevice_attribute; HIP numbers its enumeration
// differently (alphabetically within a "CUDA-compatible" block, then AMD-specific ones from 10000).
// The HIP numbers used here are the same in ROCm 5.2 through 7.x: later releases only renamed
// removed entries to hipDeviceAttributeUnusedN and appended new ones (see docs/hip.md). The names
// let a test check every number against the installed cuda.h and hip_runtime_api.h.
#pragma once

#include <optional>
#include <span>

namespace cudarc::sys::hip {

struct AttributeMapping {
    int cuda = 0;
    const char* cuda_name = "";  // CU_DEVICE_ATTRIBUTE_<cuda_name>
    int hip = 0;
    const char* hip_name = "";  // hipDeviceAttribute<hip_name>
    // Asked when `hip` fails or answers 0, or -1. AMD GPUs answer some CUDA-compatible queries only
    // through an AMD-specific attribute, and have no shared-memory opt-in (the opt-in limit is the
    // plain per-block limit).
    int hip_fallback = -1;
    const char* hip_fallback_name = nullptr;
};

// Every CUDA attribute the HIP backend can answer, sorted by CUDA number.
[[nodiscard]] std::span<const AttributeMapping> attribute_mappings() noexcept;

// The mapping for CUdevice_attribute `cuda_attribute`; nullopt where HIP has no counterpart.
[[nodiscard]] std::optional<AttributeMapping> hip_attribute_for(int cuda_attribute) noexcept;

}  // namespace cudarc::sys::hip

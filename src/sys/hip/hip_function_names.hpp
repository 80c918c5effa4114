// CUDA driver entry-point names -> the HIP functions the HIP backend calls for them. Internal to src/sys.
//
// Note [HIP function names]: core code names each driver call by its CUDA entry point ("cuMemAlloc"),
// because DriverApi speaks the CUDA driver API. On HIP the slot holds an adapter from hip_driver.cpp
// that calls a HIP function instead (cuMemAlloc -> hipMalloc), and an error should name what was
// really called. This table says, for each slot, which HIP function its adapter calls; cudarc::Error
// uses it (through sys::backend_function_name) when the backend is HIP. Keep it in step with the
// adapters in hip_driver.cpp: a host test checks that every HIP name here is one hip_driver.cpp
// resolves, and that every CUDA name a call site in src/ reports is here.
#pragma once

#include <span>
#include <string_view>

namespace cudarc::sys::hip {

struct FunctionName {
    const char* cuda;  // the entry point's name as call sites report it
    // What the HIP adapter calls: one HIP function, or "hipA/hipB" where either can give the result.
    // Null where HIP leaves the slot empty (no counterpart): such a call never reaches HIP.
    const char* hip;
};

// Every DriverApi slot's CUDA name, in the table's order.
[[nodiscard]] std::span<const FunctionName> function_names() noexcept;

// The HIP function called for CUDA entry point `cuda_name`; null when the name is unknown or HIP has
// no counterpart.
[[nodiscard]] const char* hip_function_for(std::string_view cuda_name) noexcept;

}  // namespace cudarc::sys::hip

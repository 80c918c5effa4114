// The HIP runtime (libamdhip64) loader behind load_hip_driver, split out so that tests can load from
// an explicit candidate list and see how far loading got: the process-wide driver() is chosen once,
// so a test cannot steer it through the environment.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "sys/driver_api.hpp"

namespace cudarc::sys {

// Where libamdhip64 is looked for, in order. A non-empty `override_path` (CUDARC_HIP_LIBRARY) is the
// only choice; a directory names the folder holding it. Otherwise: $ROCM_PATH/lib, then for each
// soname (libamdhip64.so.7, .so.6, .so.5: newest first) the dynamic linker's search and /opt/rocm/lib,
// then the unversioned libamdhip64.so.
[[nodiscard]] std::vector<std::string> hip_runtime_candidates(const std::string& override_path,
                                                              const std::string& rocm_path);

// How far loading the HIP runtime got.
enum class HipLoadStage {
    library_missing,       // no candidate could be opened
    entry_points_missing,  // a library opened but lacks required HIP entry points
    init_failed,           // hipInit failed (e.g. no AMD GPU, no /dev/kfd access)
    ready,                 // hipInit succeeded
};

struct HipLoadReport {
    HipLoadStage stage = HipLoadStage::library_missing;
    std::string library_path;  // the file the runtime was loaded from (empty when none was)
    int init_result = 0;       // hipInit's result when it was called
    std::string why;           // what was tried and what failed; empty when ready
};

// Loads the first usable candidate, fills `api` with adapters (api.backend = Backend::hip) and calls
// hipInit(0). Past library_missing / entry_points_missing `api` is filled even when hipInit fails,
// so callers can still ask it for error names.
HipLoadReport load_hip_runtime_from(const std::vector<std::string>& candidates, DriverApi& api);

// The gcnArchName held in a hipDeviceProp_t image. Found by content (a NUL-terminated "gfx..." that
// does not continue a longer word), because the struct's layout differs between ROCm releases.
// A full target ID ("gfx90a:sramecc+:xnack-") wins over a bare processor name. Empty if none.
[[nodiscard]] std::string find_gcn_arch_name(std::span<const char> properties);

// HIP's version number (major * 10^7 + minor * 10^5 + patch, e.g. 50221153 for 5.2.21153) in the
// CUDA encoding DriverApi::driver_get_version promises (major * 1000 + minor * 10, e.g. 5020).
[[nodiscard]] int hip_version_as_cuda_encoding(int hip_version) noexcept;

// Copies a CUDA-style `extra` launch list (key/value pairs ended by CU_LAUNCH_PARAM_END, 0x0) into
// `out` ended by HIP_LAUNCH_PARAM_END (0x3). False when the list does not fit in `out`.
[[nodiscard]] bool translate_launch_extra(void* const* cuda_extra, std::span<void*> out) noexcept;

}  // namespace cudarc::sys

// hiprtc's loader behind load_hiprtc, split out so that tests can load from an explicit candidate
// list: the real loader runs once per process (sys::rtc caches it).
#pragma once

#include <string>
#include <vector>

#include "sys/rtc_api.hpp"

namespace cudarc::sys {

// Where hiprtc is looked for, in order. A non-empty `override_path` (CUDARC_HIPRTC) is the only
// choice; a directory names the folder holding it. Otherwise libhiprtc (ROCm >= 5.3: $ROCM_PATH/lib,
// then libhiprtc.so.7/.6/.5 by soname and in /opt/rocm/lib, then libhiprtc.so), then libamdhip64,
// which holds hiprtc itself on older ROCm (Debian 12's 5.2.3).
[[nodiscard]] std::vector<std::string> hiprtc_candidates(const std::string& override_path,
                                                         const std::string& rocm_path);

// Loads the first candidate that opens and exports hiprtc, and fills `api` (api.backend =
// Backend::hip). On failure returns false and says in `why` what was tried and why each failed.
//
// The table keeps NVRTC's semantics: the log size counts a terminating NUL and the log is
// NUL-terminated (hiprtc 5.x writes neither); get_binary* return the AMD code object; get_ptx* and
// the supported-arch queries stay null. compile_program first checks every --offload-arch= (or
// --gpu-architecture=) target against comgr and rejects an unknown one with
// HIPRTC_ERROR_INVALID_OPTION and a log that lists the known targets, instead of letting hiprtc abort
// the process. A failed compile that hiprtc leaves without a log gets cudarc's explanation as its log.
bool load_hiprtc_from(const std::vector<std::string>& candidates, RtcApi& api, std::string& why);

// The processors (e.g. "gfx90a") the loaded hiprtc can compile for, as its comgr reports them.
// Empty when hiprtc has not been loaded (load_hiprtc / load_hiprtc_from) or comgr cannot be asked.
[[nodiscard]] std::vector<std::string> hiprtc_known_targets();

}  // namespace cudarc::sys

// NVRTC's loader, split out so that tests can load from an explicit candidate list: the real
// loader runs once per process (sys::rtc caches it), so a test cannot steer it through the environment.
#pragma once

#include <string>
#include <vector>

#include "sys/rtc_api.hpp"

namespace cudarc::sys {

// Where NVRTC is looked for, in order. A non-empty `override_path` (the value of CUDARC_NVRTC) is
// the only candidate: a user who names a library wants that one, not a silent fallback to another
// version. A directory names the folder that holds libnvrtc.so.13 / .12 / .so.
[[nodiscard]] std::vector<std::string> nvrtc_candidates(const std::string& override_path);

// Loads the first candidate that opens and has every required NVRTC entry point. On failure
// returns false and says in `why` what was tried and why each attempt failed.
bool load_nvrtc_from(const std::vector<std::string>& candidates, RtcApi& api, std::string& why);

}  // namespace cudarc::sys

// Loaders that fill the DriverApi table for one backend. Internal to src/sys.
#pragma once

#include <string>

#include "sys/driver_api.hpp"
#include "sys/rtc_api.hpp"

namespace cudarc::sys {

// Loads libcuda, resolves every entry point and calls cuInit(0). Returns false with a
// human-readable reason (what was looked for, where, and what failed) in `why`.
bool load_cuda_driver(DriverApi& api, std::string& why);

// Loads libamdhip64, fills the table with adapters and calls hipInit(0).
bool load_hip_driver(DriverApi& api, std::string& why);

// Loads NVRTC (libnvrtc.so.13/.12, $CUDA_PATH, /usr/local/cuda, pip wheels, CUDARC_NVRTC override).
bool load_nvrtc(RtcApi& api, std::string& why);

// Loads hiprtc (libhiprtc, or libamdhip64 on older ROCm).
bool load_hiprtc(RtcApi& api, std::string& why);

}  // namespace cudarc::sys

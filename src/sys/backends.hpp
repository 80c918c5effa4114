// Loaders that fill the DriverApi table for one backend. Internal to src/sys.
#pragma once

#include <string>

#include "sys/driver_api.hpp"

namespace cudarc::sys {

// Loads libcuda, resolves every entry point and calls cuInit(0). Returns false with a
// human-readable reason (what was looked for, where, and what failed) in `why`.
bool load_cuda_driver(DriverApi& api, std::string& why);

}  // namespace cudarc::sys

// Which GPU backend a process uses, chosen at run time. Internal to src/sys.
//
// Note: driver() runs the selection once per process and caches it. Tests run it from scratch
// through select_backend, with an explicit request and, if they want, stand-in loaders.
#pragma once

#include <string>
#include <string_view>

#include "sys/backends.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::sys {

enum class BackendRequest {
    automatic,  // CUDA if it has a device, else HIP if it has one
    cuda,       // CUDARC_BACKEND=cuda
    hip,        // CUDARC_BACKEND=hip
};

// Reads CUDARC_BACKEND's value: empty -> automatic, "cuda" / "hip" (any letter case) -> that backend.
// Throws cudarc::Error naming the accepted values for anything else.
[[nodiscard]] BackendRequest parse_backend_request(std::string_view value);

// The loaders selection tries; tests substitute their own.
struct BackendLoaders {
    bool (*cuda)(DriverApi& api, std::string& why) = load_cuda_driver;
    bool (*hip)(DriverApi& api, std::string& why) = load_hip_driver;
};

struct BackendSelection {
    DriverApi api;
    bool ok = false;
    std::string failure;  // what was tried for each backend and why it failed; empty when ok
};

// Runs backend selection from scratch. Automatic: CUDA when its driver loads, cuInit succeeds and it
// reports at least one device; else HIP under the same test. Forced: that backend when it loads and
// initializes (a device count of 0 is then Device's business). Never throws.
[[nodiscard]] BackendSelection select_backend(BackendRequest request, const BackendLoaders& loaders = {});

}  // namespace cudarc::sys

// The name a backend gives a driver call. Internal to src/sys.
#pragma once

#include <string>
#include <string_view>

#include "cudarc/error.hpp"

namespace cudarc::sys {

// `call` as `backend` names it. Call sites name driver calls by their CUDA entry point, possibly with
// context after it ("cuModuleLoadData (kernel 'saxpy' ...)"). On HIP the leading CUDA name is replaced
// by the HIP function the HIP backend calls for it (Note [HIP function names]), keeping the context;
// on CUDA, and for names without a HIP counterpart or unknown to the table, `call` comes back unchanged.
[[nodiscard]] std::string backend_function_name(Backend backend, std::string_view call);

}  // namespace cudarc::sys

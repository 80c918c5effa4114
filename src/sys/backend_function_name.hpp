// The name a backend gives a driver call named by its CUDA entry point. Internal to src/sys; behind
// cudarc::Error's constructor, which accepts CUDA names from any caller.
#pragma once

#include <string>
#include <string_view>

#include "cudarc/error.hpp"

namespace cudarc::sys {

// `call` as `backend` names it. `call` is a CUDA entry point's name, possibly with context after it
// ("cuModuleLoadData (kernel 'saxpy' ...)"). On HIP the leading CUDA name is replaced by the HIP function
// the HIP backend calls for it (Note [One driver list]), keeping the context; on CUDA, and for names
// without a HIP counterpart or not in the list (a HIP name already), `call` comes back unchanged.
// Implemented in driver_entries.cpp, from the list.
[[nodiscard]] std::string backend_function_name(Backend backend, std::string_view call);

}  // namespace cudarc::sys

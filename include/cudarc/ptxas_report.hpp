/// @file
/// Per-kernel resource usage read from ptxas' verbose report, which NVRTC appends to a program's
/// log when it compiles to CUBIN with the option "--ptxas-options=-v".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "cudarc/export.hpp"

namespace cudarc {

/// What ptxas reported for one kernel: registers, shared memory, stack and spills.
struct KernelResourceUsage {
    std::string function;  ///< the entry's symbol (mangled unless extern "C")
    std::string arch;      ///< e.g. "sm_90"
    /// Registers per thread.
    int registers = 0;
    std::size_t shared_bytes = 0;  ///< static shared memory ("smem"); dynamic shared memory comes at launch
    /// Stack frame bytes per thread.
    std::size_t stack_bytes = 0;
    /// Bytes of register spill stores.
    std::size_t spill_store_bytes = 0;
    /// Bytes of register spill loads.
    std::size_t spill_load_bytes = 0;
};

/// One entry per kernel ("Compiling entry function ...") in the order ptxas reported them; lines
/// that are not part of the report are ignored, so the whole compile log can be passed.
[[nodiscard]] CUDARC_API std::vector<KernelResourceUsage> parse_ptxas_report(std::string_view log);

}  // namespace cudarc

/// @file
/// cudarc::CompileOptions — how a kernel source is compiled at run time (NVRTC or hiprtc).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cudarc/error.hpp"
#include "cudarc/export.hpp"

namespace cudarc {

/// How a kernel source is compiled: the target, the language standard, defines, includes and flags. Rendered
/// into compiler arguments at compile time (and into the KernelCache key).
struct CompileOptions {
    /// Target architecture. Its form picks the output:
    ///   "sm_90" (also "sm_90a")  -> CUBIN for exactly that GPU
    ///   "compute_90"             -> PTX, which the driver JIT-compiles for any newer GPU
    ///   "gfx90a"                 -> an AMD code object (backend hip)
    /// Empty is not compiled: whoever knows the device (Module loading) fills in its exact arch.
    std::string arch;
    /// The language standard (--std= on NVRTC, -std= on hiprtc); empty passes none.
    std::string cpp_standard = "c++17";
    /// -D name=value; an empty value defines the name alone (-D name).
    std::vector<std::pair<std::string, std::string>> defines;
    /// Include directories (--include-path= on NVRTC, -I on hiprtc).
    std::vector<std::string> include_paths;
    /// Headers held in memory: {include name, text}. Every shipped kernels/*.cuh is added
    /// automatically; a header given here with the same name replaces the shipped one.
    std::vector<std::pair<std::string, std::string>> headers;
    /// --use_fast_math (NVRTC) or -ffast-math (hiprtc).
    bool fast_math = false;
    /// Line information for profilers: --generate-line-info (NVRTC) or -gline-tables-only (hiprtc).
    bool line_info = false;
    int max_registers = 0;  ///< 0: the compiler chooses
    /// Passed to the compiler verbatim, after everything above.
    std::vector<std::string> extra;
    /// Which run-time compiler compiles: NVRTC (Backend::cuda) or hiprtc (Backend::hip).
    Backend backend = Backend::cuda;
};

/// What a compile produces, as decided by CompileOptions::arch: `ptx` for a virtual arch ("compute_90"),
/// `cubin` for a real one ("sm_90"), `amd_code_object` on HIP ("gfx90a").
enum class CodeFormat { ptx, cubin, amd_code_object };

/// "PTX", "CUBIN" or "AMD code object".
[[nodiscard]] CUDARC_API const char* to_string(CodeFormat format) noexcept;

/// The format `arch` compiles to for `backend`; throws cudarc::Error when `arch` is not an
/// architecture name of that backend (for example "sm90", "gfx90a" on CUDA, empty).
[[nodiscard]] CUDARC_API CodeFormat code_format_for(const std::string& arch, Backend backend);

/// "sm_90" for compute capability 9.0: the exact architecture of a CUDA device.
[[nodiscard]] CUDARC_API std::string cuda_arch_name(int major, int minor);

}  // namespace cudarc

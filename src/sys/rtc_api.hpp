// The one internal table through which the library reaches a run-time compiler (NVRTC or hiprtc).
//
// Note: both compilers share one API shape (create, add name expressions, compile, fetch log, code
// and lowered names). The table uses NVRTC's semantics; hiprtc fills it directly (its "code" is an
// AMD code object, and it has no PTX, so get_ptx* stay null there).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cudarc/error.hpp"

struct _nvrtcProgram;

namespace cudarc::sys {

using RtcResult = int;                // nvrtcResult / hiprtcResult; 0 is success for both
using RtcProgram = ::_nvrtcProgram*;  // nvrtcProgram / hiprtcProgram (opaque)

inline constexpr RtcResult kRtcSuccess = 0;
inline constexpr RtcResult kRtcErrorCompilation = 6;  // NVRTC_ERROR_COMPILATION / HIPRTC_ERROR_COMPILATION

struct RtcApi {
    Backend backend = Backend::cuda;
    std::string library_path;  // where the compiler was loaded from, for messages and cache keys

    RtcResult (*version)(int* major, int* minor) = nullptr;
    const char* (*get_error_string)(RtcResult result) = nullptr;
    RtcResult (*create_program)(RtcProgram* program, const char* source, const char* name, int num_headers,
                                const char* const* headers, const char* const* include_names) = nullptr;
    RtcResult (*destroy_program)(RtcProgram* program) = nullptr;
    RtcResult (*compile_program)(RtcProgram program, int num_options, const char* const* options) = nullptr;
    RtcResult (*get_log_size)(RtcProgram program, std::size_t* bytes) = nullptr;
    RtcResult (*get_log)(RtcProgram program, char* log) = nullptr;
    // PTX: NVRTC only (null on hiprtc).
    RtcResult (*get_ptx_size)(RtcProgram program, std::size_t* bytes) = nullptr;
    RtcResult (*get_ptx)(RtcProgram program, char* ptx) = nullptr;
    // Binary: CUBIN on NVRTC (null when compiled for a virtual architecture), code object on hiprtc.
    RtcResult (*get_binary_size)(RtcProgram program, std::size_t* bytes) = nullptr;
    RtcResult (*get_binary)(RtcProgram program, char* binary) = nullptr;
    RtcResult (*add_name_expression)(RtcProgram program, const char* name_expression) = nullptr;
    RtcResult (*get_lowered_name)(RtcProgram program, const char* name_expression,
                                  const char** lowered_name) = nullptr;
    // Optional (NVRTC >= 11.2).
    RtcResult (*get_num_supported_archs)(int* count) = nullptr;
    RtcResult (*get_supported_archs)(int* archs) = nullptr;
    // hiprtc only (null on NVRTC, whose targets are the numbers above): the processors it can compile for
    // ("gfx90a"), as its code object manager (comgr) reports them; empty when comgr cannot be asked.
    std::vector<std::string> (*known_targets)() = nullptr;
};

// The run-time compiler for `backend`, loaded on first use (thread-safe). Throws cudarc::Error naming
// what was looked for and where when it cannot be loaded.
[[nodiscard]] const RtcApi& rtc(Backend backend);

// Builds the Error for a failing compiler call.
[[nodiscard]] Error make_rtc_error(const RtcApi& api, const char* call, RtcResult result);

}  // namespace cudarc::sys

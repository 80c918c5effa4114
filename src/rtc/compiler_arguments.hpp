// Turns CompileOptions into the compiler's command-line options. Internal to src/rtc.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cudarc/compile_options.hpp"

namespace cudarc::rtc {

// The options passed to NVRTC / hiprtc, in order. Throws cudarc::Error for options that cannot be
// expressed (an empty or malformed arch, a define without a name, max_registers on hiprtc).
[[nodiscard]] std::vector<std::string> compiler_arguments(const CompileOptions& options);

// The in-memory headers a compile sees: the caller's, plus every shipped kernels/*.cuh the caller
// did not replace; sorted by name so that the same inputs always give the same cache key. The views
// point into `options` and the library's embedded sources.
using HeaderView = std::pair<std::string_view, std::string_view>;  // {include name, text}
[[nodiscard]] std::vector<HeaderView> headers_for(const CompileOptions& options);

}  // namespace cudarc::rtc

// Profiler ranges (NVTX 3) around what cudarc does, for Nsight Systems and other NVTX tools.
#pragma once

#include <cstdio>

#if CUDARC_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace cudarc::detail {

// Note [Profiler ranges]
// ~~~~~~~~~~~~~~~~~~~~~~
// Users tune pipelines in a profiler, so the library names its work there: "cudarc: copy", "cudarc:
// capture", "cudarc: replay", "cudarc: step of N tensors" (an IndirectAccess: the optimizer's multi-tensor
// launches), and "cudarc: hazard wait: stream A waits for stream B" around each cross-stream wait that
// hazard tracking enqueues. NVTX 3 is header-only: CMake looks for nvtx3/nvToolsExt.h (the CUDA toolkit's
// include folder: $CUDA_PATH, $CUDA_HOME, /usr/local/cuda) and defines CUDARC_HAVE_NVTX when it finds it;
// nothing is linked (NVTX loads a tool only when one sets NVTX_INJECTION64_PATH). Without the headers
// every range compiles to nothing. With them, a range costs a call through NVTX's table (a no-op without
// a tool), and names holding numbers are formatted only while a tool is attached.
class ProfilerRange {
  public:
    explicit ProfilerRange(const char* name) noexcept {
#if CUDARC_HAVE_NVTX
        nvtxRangePushA(name);
#else
        static_cast<void>(name);
#endif
    }
    ProfilerRange(const ProfilerRange&) = delete;
    ProfilerRange& operator=(const ProfilerRange&) = delete;
    ~ProfilerRange() {
#if CUDARC_HAVE_NVTX
        nvtxRangePop();
#endif
    }
};

// Whether a profiler tool is attached (NVTX_INJECTION64_PATH is set; read once).
[[nodiscard]] bool profiler_attached() noexcept;

// A range whose name is printf-formatted, only while a tool is attached (else a plain `fallback`).
template <typename... Args>
void profiler_push(const char* fallback, const char* format, Args... args) noexcept {
#if CUDARC_HAVE_NVTX
    if (profiler_attached()) {
        if constexpr (sizeof...(Args) == 0) {
            nvtxRangePushA(format);  // nothing to format
        } else {
            char name[128];
            std::snprintf(name, sizeof name, format, args...);
            nvtxRangePushA(name);
        }
    } else {
        nvtxRangePushA(fallback);
    }
#else
    static_cast<void>(fallback);
    static_cast<void>(format);
    (static_cast<void>(args), ...);
#endif
}
inline void profiler_pop() noexcept {
#if CUDARC_HAVE_NVTX
    nvtxRangePop();
#endif
}
// Pops the range profiler_push pushed, at the end of a scope.
struct ProfilerPop {
    ProfilerPop() = default;
    ProfilerPop(const ProfilerPop&) = delete;
    ProfilerPop& operator=(const ProfilerPop&) = delete;
    ~ProfilerPop() { profiler_pop(); }
};

}  // namespace cudarc::detail

// A dlopen'ed vendor library. The only place cudarc opens shared objects.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace cudarc::sys {

class DynamicLibrary {
  public:
    DynamicLibrary() = default;
    DynamicLibrary(const DynamicLibrary&) = delete;
    DynamicLibrary& operator=(const DynamicLibrary&) = delete;
    DynamicLibrary(DynamicLibrary&& other) noexcept;
    DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
    // Note: vendor libraries are never dlclose'd: their atexit handlers and threads outlive us.
    ~DynamicLibrary() = default;

    // What a loader makes of a library that opened: empty when it takes it (loading stops there, whether
    // or not the loader then succeeds with it), else why it is not usable ("lacks nvrtcVersion").
    using Use = std::function<std::string(const DynamicLibrary& library)>;

    // Note [Loading a vendor library]: every loader (CUDA driver, NVRTC, HIP runtime, hiprtc, comgr, NCCL)
    // goes through this one loop. It tries each candidate (a soname or a path) in order: one that does not
    // open is recorded in `attempts` as "candidate (dlerror's reason)"; one that opens is given to `use`,
    // and a rejection is recorded as "candidate: why" before the next candidate is tried. True when `use`
    // took a library; false when none was taken, with `attempts` holding one line per candidate, or
    // "(no candidate paths)" when there were none. The loader words its own message around `attempts`.
    static bool load_first(const std::vector<std::string>& candidates, const Use& use,
                           std::vector<std::string>& attempts);

    // Opens the library at `path` (a file) for the rest of the process and returns nothing of it: for a
    // library that another vendor library dlopens by soname itself, so that its dlopen finds this one
    // already loaded instead of searching the dynamic linker's path (Note [NVRTC's builtins]). False, with
    // dlerror's reason in `why`, when it does not open.
    static bool preload(const std::string& path, std::string& why);

    [[nodiscard]] bool loaded() const noexcept { return handle_ != nullptr; }
    [[nodiscard]] const std::string& path() const noexcept { return path_; }
    [[nodiscard]] void* symbol(const char* name) const noexcept;
    // The file the library was really loaded from, found through one of its symbols (a soname says little
    // in a message or a cache key); path() when that fails.
    [[nodiscard]] std::string resolved_path(void* any_symbol) const;

  private:
    void* handle_ = nullptr;
    std::string path_;
};

// The value of an environment variable, or empty.
[[nodiscard]] std::string env_or_empty(const char* name);

// Candidate paths for `soname` under CUDA_PATH, CUDA_HOME, /usr/local/cuda and pip's nvidia wheels.
[[nodiscard]] std::vector<std::string> cuda_toolkit_candidates(const std::string& soname,
                                                               const std::string& wheel_subdir);

// Appends `candidate` unless it is already in `out` (candidate lists keep their first occurrence).
void append_unique(std::vector<std::string>& out, const std::string& candidate);

// The candidates when the user named the library (an environment variable such as CUDARC_HIP_LIBRARY): a
// file is the only choice (no silent fallback), a folder gets `add_folder(folder)`'s appended to `out`.
void add_overridden_candidates(std::vector<std::string>& out, const std::string& override_path,
                               const std::function<void(const std::string& folder)>& add_folder);

// "a, b, c" — for error messages.
[[nodiscard]] std::string join_lines(const std::vector<std::string>& lines, const char* separator);

}  // namespace cudarc::sys

// A dlopen'ed vendor library. The only place cudarc opens shared objects.
#pragma once

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

    // Tries each candidate (a soname or a path) in order; the first that loads wins. On failure the
    // returned library is empty and `attempts` holds one "candidate: dlerror" line per try.
    static DynamicLibrary open_first(const std::vector<std::string>& candidates,
                                     std::vector<std::string>& attempts);

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

// "a, b, c" — for error messages.
[[nodiscard]] std::string join_lines(const std::vector<std::string>& lines, const char* separator);

}  // namespace cudarc::sys

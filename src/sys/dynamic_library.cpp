#include "sys/dynamic_library.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <utility>

namespace cudarc::sys {

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), path_(std::move(other.path_)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
    return *this;
}

bool DynamicLibrary::load_first(const std::vector<std::string>& candidates, const Use& use,
                                std::vector<std::string>& attempts) {
    if (candidates.empty()) attempts.emplace_back("(no candidate paths)");
    for (const auto& candidate : candidates) {
        if (candidate.empty()) continue;
        dlerror();
        void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle == nullptr) {
            // dlerror() usually starts with "<candidate>: "; keep only the reason.
            const char* raw = dlerror();
            std::string why = raw != nullptr ? raw : "not found";
            if (why.rfind(candidate + ": ", 0) == 0) why = why.substr(candidate.size() + 2);
            attempts.push_back(candidate + " (" + why + ")");
            continue;
        }
        DynamicLibrary library;
        library.handle_ = handle;
        library.path_ = candidate;
        // Note: a rejected library stays open (vendor libraries are never dlclose'd).
        std::string rejection = use(library);
        if (rejection.empty()) return true;
        attempts.push_back(candidate + ": " + std::move(rejection));
    }
    return false;
}

bool DynamicLibrary::preload(const std::string& path, std::string& why) {
    dlerror();
    // Note: RTLD_LOCAL is enough: a later dlopen of the soname matches a loaded object by its DT_SONAME,
    // whatever its scope, and nothing of the library needs to be global. Never closed (as above).
    if (dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) != nullptr) return true;
    const char* raw = dlerror();
    why = raw != nullptr ? raw : "not found";
    return false;
}

void* DynamicLibrary::symbol(const char* name) const noexcept {
    return handle_ != nullptr ? dlsym(handle_, name) : nullptr;
}

std::string DynamicLibrary::resolved_path(void* any_symbol) const {
    Dl_info info{};
    if (any_symbol != nullptr && dladdr(any_symbol, &info) != 0 && info.dli_fname != nullptr) {
        std::error_code ec;
        const auto canonical = std::filesystem::canonical(info.dli_fname, ec);
        return ec ? std::string(info.dli_fname) : canonical.string();
    }
    return path_;
}

void append_unique(std::vector<std::string>& out, const std::string& candidate) {
    if (std::find(out.begin(), out.end(), candidate) == out.end()) out.push_back(candidate);
}

void add_overridden_candidates(std::vector<std::string>& out, const std::string& override_path,
                               const std::function<void(const std::string& folder)>& add_folder) {
    std::error_code ec;
    if (std::filesystem::is_directory(override_path, ec)) {
        add_folder(override_path);
    } else {
        out.push_back(override_path);
    }
}

std::string env_or_empty(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? std::string(value) : std::string();
}

std::vector<std::string> cuda_toolkit_candidates(const std::string& soname, const std::string& wheel_subdir) {
    std::vector<std::string> out;
    for (const char* variable : {"CUDA_PATH", "CUDA_HOME"}) {
        const std::string root = env_or_empty(variable);
        if (!root.empty()) {
            out.push_back(root + "/lib64/" + soname);
            out.push_back(root + "/lib/" + soname);
        }
    }
    out.push_back("/usr/local/cuda/lib64/" + soname);
    out.push_back("/usr/local/cuda/lib/" + soname);
    // pip's nvidia-* wheels: <site-packages>/nvidia/<subdir>/lib/<soname>
    for (const char* variable : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
        const std::string prefix = env_or_empty(variable);
        if (prefix.empty()) continue;
        std::error_code ec;
        const std::filesystem::path lib = std::filesystem::path(prefix) / "lib";
        for (const auto& entry : std::filesystem::directory_iterator(lib, ec)) {
            const auto candidate = entry.path() / "site-packages" / "nvidia" / wheel_subdir / "lib" / soname;
            if (std::filesystem::exists(candidate, ec)) out.push_back(candidate.string());
        }
    }
    return out;
}

std::string join_lines(const std::vector<std::string>& lines, const char* separator) {
    std::string out;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (i != 0) out += separator;
        out += lines[i];
    }
    return out;
}

}  // namespace cudarc::sys

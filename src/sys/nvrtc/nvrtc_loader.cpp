// Fills the RtcApi table from NVRTC (libnvrtc), loaded at run time.
#include "sys/nvrtc/nvrtc_loader.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "sys/backends.hpp"
#include "sys/dynamic_library.hpp"

namespace cudarc::sys {
namespace {

// Newest first: a newer NVRTC knows every architecture an older one does, and more.
constexpr const char* kSonames[] = {"libnvrtc.so.13", "libnvrtc.so.12"};

template <typename Fn>
void resolve(const DynamicLibrary& library, Fn& slot, const char* name, std::vector<std::string>* missing) {
    slot = reinterpret_cast<Fn>(library.symbol(name));
    if (slot == nullptr && missing != nullptr) missing->emplace_back(name);
}

// Note [NVRTC's builtins]
// At its first compile libnvrtc opens libnvrtc-builtins.so.MAJOR.MINOR by soname, so the dynamic linker
// looks on its own path (LD_LIBRARY_PATH, its cache), not in the folder NVRTC came from. An NVRTC found
// elsewhere (pip's nvidia wheel, a folder named by CUDARC_NVRTC) then fails every compile with
// NVRTC_ERROR_BUILTIN_OPERATION_FAILURE ("failed to open libnvrtc-builtins.so.13.0"), or compiles with
// another toolkit's builtins that happen to be on the linker's path. So the loader first opens the builtins
// next to the chosen libnvrtc (the folder it was named in, then the folder of the file it resolved to), by
// path; libnvrtc's own dlopen then finds them loaded. Where there is no such file nothing is preloaded
// and libnvrtc searches as it always does.
void preload_builtins(const DynamicLibrary& library, const RtcApi& table) {
    int major = 0;
    int minor = 0;
    if (table.version(&major, &minor) != kRtcSuccess) return;
    namespace fs = std::filesystem;
    std::vector<fs::path> folders;
    if (library.path().find('/') != std::string::npos)
        folders.push_back(fs::path(library.path()).parent_path());
    folders.push_back(fs::path(table.library_path).parent_path());
    // NVRTC's alternative build (libnvrtc.alt.so) comes with builtins of the same kind.
    const bool alt = fs::path(table.library_path).filename().string().starts_with("libnvrtc.alt.");
    const std::string name = std::string(alt ? "libnvrtc-builtins.alt.so." : "libnvrtc-builtins.so.") +
                             std::to_string(major) + "." + std::to_string(minor);
    for (const fs::path& folder : folders) {
        std::error_code ec;
        const fs::path builtins = folder / name;
        if (!fs::exists(builtins, ec)) continue;
        std::string why;
        // Note: a failure is not fatal here: NVRTC may still find builtins of its own, and if it does not,
        // the compile's error says that a built-in operation failed.
        static_cast<void>(DynamicLibrary::preload(builtins.string(), why));
        return;
    }
}

}  // namespace

std::vector<std::string> nvrtc_candidates(const std::string& override_path) {
    std::vector<std::string> out;
    if (!override_path.empty()) {
        std::error_code ec;
        if (std::filesystem::is_directory(override_path, ec)) {
            for (const char* soname : kSonames) out.push_back(override_path + "/" + soname);
            out.push_back(override_path + "/libnvrtc.so");
        } else {
            out.push_back(override_path);
        }
        return out;
    }
    for (const char* soname : kSonames) append_unique(out, soname);  // the dynamic linker's own search
    for (const char* soname : kSonames) {
        // pip wheels: nvidia/cu13/lib (CUDA 13) and nvidia/cuda_nvrtc/lib (CUDA 12).
        for (const char* wheel : {"cu13", "cuda_nvrtc"}) {
            for (const auto& path : cuda_toolkit_candidates(soname, wheel)) append_unique(out, path);
        }
    }
    return out;
}

bool load_nvrtc_from(const std::vector<std::string>& candidates, RtcApi& api, std::string& why) {
    std::vector<std::string> attempts;
    const auto use = [&api](const DynamicLibrary& library) -> std::string {
        RtcApi table;
        table.backend = Backend::cuda;
        std::vector<std::string> missing;
        resolve(library, table.version, "nvrtcVersion", &missing);
        resolve(library, table.get_error_string, "nvrtcGetErrorString", &missing);
        resolve(library, table.create_program, "nvrtcCreateProgram", &missing);
        resolve(library, table.destroy_program, "nvrtcDestroyProgram", &missing);
        resolve(library, table.compile_program, "nvrtcCompileProgram", &missing);
        resolve(library, table.get_log_size, "nvrtcGetProgramLogSize", &missing);
        resolve(library, table.get_log, "nvrtcGetProgramLog", &missing);
        resolve(library, table.get_ptx_size, "nvrtcGetPTXSize", &missing);
        resolve(library, table.get_ptx, "nvrtcGetPTX", &missing);
        resolve(library, table.get_binary_size, "nvrtcGetCUBINSize", &missing);
        resolve(library, table.get_binary, "nvrtcGetCUBIN", &missing);
        resolve(library, table.add_name_expression, "nvrtcAddNameExpression", &missing);
        resolve(library, table.get_lowered_name, "nvrtcGetLoweredName", &missing);
        resolve(library, table.get_num_supported_archs, "nvrtcGetNumSupportedArchs", nullptr);
        resolve(library, table.get_supported_archs, "nvrtcGetSupportedArchs", nullptr);
        if (!missing.empty()) return "not a usable NVRTC (lacks " + join_lines(missing, ", ") + ")";
        table.library_path = library.resolved_path(reinterpret_cast<void*>(table.version));
        preload_builtins(library, table);  // Note [NVRTC's builtins]
        api = std::move(table);
        return {};
    };
    // Note [Loading a vendor library]
    if (DynamicLibrary::load_first(candidates, use, attempts)) return true;
    why =
        "NVRTC (libnvrtc.so.13 or libnvrtc.so.12) could not be loaded; tried: " + join_lines(attempts, "; ") +
        ". Install the CUDA toolkit's NVRTC (e.g. the cuda-nvrtc package, or pip's nvidia-cuda-nvrtc wheel), "
        "or set CUDARC_NVRTC to the library's path.";
    return false;
}

bool load_nvrtc(RtcApi& api, std::string& why) {
    return load_nvrtc_from(nvrtc_candidates(env_or_empty("CUDARC_NVRTC")), api, why);
}

}  // namespace cudarc::sys

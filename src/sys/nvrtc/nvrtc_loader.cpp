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

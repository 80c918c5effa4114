#include "rtc/compiler_arguments.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

#include "rtc/embedded_kernels.hpp"

namespace cudarc {
namespace {

bool all_digits(std::string_view text) {
    return !text.empty() && std::all_of(text.begin(), text.end(),
                                        [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// "90", "90a", "100f": a compute capability with an optional feature-set suffix.
bool is_cuda_arch_number(std::string_view text) {
    if (!text.empty() && (text.back() == 'a' || text.back() == 'f')) text.remove_suffix(1);
    return all_digits(text);
}

bool is_amd_arch(std::string_view arch) {
    // "gfx90a", "gfx1100", "gfx90a:sramecc+:xnack-": gfx then a hex-ish model, then feature flags.
    if (arch.size() < 4 || arch.substr(0, 3) != "gfx") return false;
    const std::string_view model = arch.substr(
        3, arch.find(':') == std::string_view::npos ? std::string_view::npos : arch.find(':') - 3);
    return !model.empty() && std::all_of(model.begin(), model.end(),
                                         [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
}

}  // namespace

const char* to_string(CodeFormat format) noexcept {
    switch (format) {
        case CodeFormat::ptx:
            return "PTX";
        case CodeFormat::cubin:
            return "CUBIN";
        case CodeFormat::amd_code_object:
            return "AMD code object";
    }
    return "unknown";
}

CodeFormat code_format_for(const std::string& arch, Backend backend) {
    if (arch.empty()) {
        throw Error(
            "cudarc: CompileOptions::arch is empty: set it to the target architecture, e.g. \"sm_90\" "
            "(CUBIN), \"compute_90\" (PTX) or \"gfx90a\" (HIP); Module loading fills in the device's own");
    }
    if (backend == Backend::hip) {
        if (is_amd_arch(arch)) return CodeFormat::amd_code_object;
        throw Error("cudarc: \"" + arch +
                    "\" is not an AMD GPU architecture (expected e.g. \"gfx90a\", \"gfx942\")");
    }
    const std::string_view view(arch);
    if (view.substr(0, 3) == "sm_" && is_cuda_arch_number(view.substr(3))) return CodeFormat::cubin;
    if (view.substr(0, 8) == "compute_" && is_cuda_arch_number(view.substr(8))) return CodeFormat::ptx;
    throw Error("cudarc: \"" + arch +
                "\" is not a CUDA architecture (expected \"sm_XY\" for CUBIN, e.g. \"sm_90\", or "
                "\"compute_XY\" for PTX, e.g. \"compute_90\")");
}

std::string cuda_arch_name(int major, int minor) {
    return "sm_" + std::to_string(major) + std::to_string(minor);
}

namespace rtc {
namespace {

std::string checked_define(const std::pair<std::string, std::string>& define) {
    const auto& [name, value] = define;
    const bool bad_name = name.empty() || name.find_first_of(" \t\n=") != std::string::npos;
    if (bad_name) throw Error("cudarc: the define \"" + name + "\" has no valid macro name");
    return value.empty() ? name : name + "=" + value;
}

}  // namespace

std::vector<std::string> compiler_arguments(const CompileOptions& options) {
    // Checked first so that a bad arch gets cudarc's explanation rather than the compiler's.
    static_cast<void>(code_format_for(options.arch, options.backend));
    std::vector<std::string> args;
    const bool hip = options.backend == Backend::hip;
    if (hip) {
        args.push_back("--offload-arch=" + options.arch);
        if (!options.cpp_standard.empty()) args.push_back("-std=" + options.cpp_standard);
        for (const auto& define : options.defines) args.push_back("-D" + checked_define(define));
        for (const auto& path : options.include_paths) args.push_back("-I" + path);
        if (options.fast_math) args.emplace_back("-ffast-math");
        if (options.line_info) args.emplace_back("-gline-tables-only");
        if (options.max_registers > 0) {
            throw Error(
                "cudarc: CompileOptions::max_registers is not supported by hiprtc (AMD GPUs allocate "
                "registers per launch bounds); use __launch_bounds__ in the kernel instead");
        }
    } else {
        args.push_back("--gpu-architecture=" + options.arch);
        if (!options.cpp_standard.empty()) args.push_back("--std=" + options.cpp_standard);
        for (const auto& define : options.defines) args.push_back("--define-macro=" + checked_define(define));
        for (const auto& path : options.include_paths) args.push_back("--include-path=" + path);
        if (options.fast_math) args.emplace_back("--use_fast_math");
        if (options.line_info) args.emplace_back("--generate-line-info");
        if (options.max_registers > 0)
            args.push_back("--maxrregcount=" + std::to_string(options.max_registers));
    }
    if (options.max_registers < 0) throw Error("cudarc: CompileOptions::max_registers must not be negative");
    args.insert(args.end(), options.extra.begin(), options.extra.end());
    return args;
}

std::vector<HeaderView> headers_for(const CompileOptions& options) {
    std::vector<HeaderView> headers(options.headers.begin(), options.headers.end());
    for (const auto& entry : detail::embedded_kernel_sources()) {
        if (!entry.name.ends_with(".cuh")) continue;
        const bool replaced = std::any_of(options.headers.begin(), options.headers.end(),
                                          [&](const auto& header) { return header.first == entry.name; });
        if (!replaced) headers.emplace_back(entry.name, entry.source);
    }
    std::stable_sort(headers.begin(), headers.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    return headers;
}

}  // namespace rtc
}  // namespace cudarc

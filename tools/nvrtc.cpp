// cudarc-nvrtc: compiles one CUDA source file with NVRTC (loaded at run time, as the library does),
// prints the compiler's log and each kernel's registers and static shared memory, and writes the
// PTX or CUBIN next to the input.
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in fmt/format.h before fmt 11)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cudarc/compile_options.hpp"
#include "cudarc/error.hpp"
#include "cudarc/fmt.hpp"
#include "cudarc/nvrtc.hpp"
#include "cudarc/ptxas_report.hpp"
#include "cudarc/version.hpp"
#include "nvrtc_cli.hpp"
#include "sys/driver_api.hpp"

namespace {

using cudarc::tools::NvrtcArguments;
using cudarc::tools::NvrtcOutput;
using cudarc::tools::UsageError;

// sm_XY of device 0, when a driver and a GPU are present.
std::optional<std::string> present_gpu_arch() {
    const cudarc::sys::DriverApi* api = cudarc::sys::driver_if_loaded();
    if (api == nullptr || api->backend != cudarc::Backend::cuda) return std::nullopt;
    int count = 0;
    cudarc::sys::Device device = 0;
    int major = 0;
    int minor = 0;
    if (api->device_get_count(&count) != cudarc::sys::kSuccess || count == 0) return std::nullopt;
    if (api->device_get(&device, 0) != cudarc::sys::kSuccess) return std::nullopt;
    if (api->device_get_attribute(&major, cudarc::sys::attr::kComputeCapabilityMajor, device) !=
            cudarc::sys::kSuccess ||
        api->device_get_attribute(&minor, cudarc::sys::attr::kComputeCapabilityMinor, device) !=
            cudarc::sys::kSuccess) {
        return std::nullopt;
    }
    return cudarc::cuda_arch_name(major, minor);
}

// "sm_90" <-> "compute_90" as --ptx / --cubin ask.
std::string arch_for_output(std::string arch, NvrtcOutput output) {
    auto swap_prefix = [&](std::string_view from, std::string_view to) {
        if (std::string_view(arch).starts_with(from)) arch = std::string(to) + arch.substr(from.size());
    };
    if (output == NvrtcOutput::ptx) swap_prefix("sm_", "compute_");
    if (output == NvrtcOutput::cubin) swap_prefix("compute_", "sm_");
    return arch;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError{fmt::format("cannot open {}", path)};
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The log without ptxas' -v lines (they are shown as the table instead).
std::string log_without_ptxas_report(const std::string& log) {
    std::string out;
    std::size_t start = 0;
    while (start < log.size()) {
        auto end = log.find('\n', start);
        if (end == std::string::npos) end = log.size();
        const std::string_view line(log.data() + start, end - start);
        if (!line.starts_with("ptxas info") && !line.starts_with("ptxas         .")) {
            out.append(line);
            out.push_back('\n');
        }
        start = end + 1;
    }
    return out;
}

// Names of the .entry functions in a PTX text.
std::vector<std::string> ptx_entries(const std::string& ptx) {
    std::vector<std::string> names;
    std::size_t at = 0;
    while ((at = ptx.find(".entry ", at)) != std::string::npos) {
        at += 7;
        const auto end = ptx.find_first_of("( \n", at);
        names.push_back(ptx.substr(at, end - at));
    }
    return names;
}

// Kernels by the name expression they were asked for ("scale<float>"), else by their symbol.
void print_report(const std::vector<cudarc::KernelResourceUsage>& kernels,
                  const std::map<std::string, std::string>& lowered_names) {
    std::vector<cudarc::KernelResourceUsage> named = kernels;
    for (auto& k : named) {
        for (const auto& [expression, lowered] : lowered_names) {
            if (lowered == k.function) k.function = expression;
        }
    }
    std::size_t width = 6;
    for (const auto& k : named) width = std::max(width, k.function.size());
    fmt::print("{:<{}}  {:>9}  {:>11}  {:>6}  {:>16}\n", "kernel", width, "registers", "static smem", "stack",
               "spill store/load");
    for (const auto& k : named) {
        fmt::print("{:<{}}  {:>9}  {:>9} B  {:>4} B  {:>7} B/{:>4} B\n", k.function, width, k.registers,
                   k.shared_bytes, k.stack_bytes, k.spill_store_bytes, k.spill_load_bytes);
    }
}

int run(const NvrtcArguments& args) {
    std::string arch = args.arch;
    if (arch.empty()) {
        if (auto present = present_gpu_arch()) {
            arch = *present;
        } else {
            arch = "sm_90";
            fmt::print(stderr, "cudarc-nvrtc: no GPU found; compiling for sm_90 (choose with --arch)\n");
        }
    }
    cudarc::CompileOptions options = args.options;
    options.arch = arch_for_output(arch, args.output);
    const std::filesystem::path input(args.file);
    // The input's folder first, as nvcc searches it for "quoted" includes.
    options.include_paths.insert(options.include_paths.begin(),
                                 input.has_parent_path() ? input.parent_path().string() : std::string("."));
    // A file on the include path named like a shipped header wins over the embedded copy, so that
    // editing kernels/*.cuh next to FILE.cu takes effect without rebuilding the library.
    for (const auto& name : cudarc::embedded_kernel_files()) {
        if (!name.ends_with(".cuh")) continue;
        for (const auto& folder : options.include_paths) {
            const std::filesystem::path candidate = std::filesystem::path(folder) / name;
            if (std::filesystem::exists(candidate)) {
                options.headers.emplace_back(name, read_file(candidate.string()));
                break;
            }
        }
    }
    const bool cubin = cudarc::code_format_for(options.arch, options.backend) == cudarc::CodeFormat::cubin;
    bool ptxas_report_added = false;
    if (cubin) {
        bool already = false;
        for (const auto& option : options.extra)
            already = already || option.find("ptxas") != std::string::npos;
        if (!already) {
            options.extra.emplace_back("--ptxas-options=-v");
            ptxas_report_added = true;
        }
    }

    cudarc::Program program(read_file(args.file), input.filename().string());
    for (const auto& expression : args.name_expressions) program.add_name_expression(expression);

    const auto started = std::chrono::steady_clock::now();
    const cudarc::CompiledProgram compiled = program.compile(options);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();

    const cudarc::CompilerVersion version = cudarc::compiler_version();
    const std::string log = ptxas_report_added ? log_without_ptxas_report(compiled.log) : compiled.log;
    if (!log.empty()) fmt::print("{}{}", log, log.back() == '\n' ? "" : "\n");
    fmt::print("compiled {} for {} with NVRTC {}.{} ({}) in {:.1f} ms\n", args.file, options.arch,
               version.major, version.minor, version.library_path, ms);

    if (cubin) {
        const auto kernels = cudarc::parse_ptxas_report(compiled.log);
        if (kernels.empty()) {
            fmt::print("no kernels (no __global__ function, or templates without -e name expressions)\n");
        } else {
            print_report(kernels, compiled.lowered_names);
        }
    } else {
        const auto entries = ptx_entries(compiled.ptx);
        fmt::print(
            "kernels in the PTX: {} (registers and shared memory are known once assembled: use --cubin)\n",
            entries.empty() ? std::string("none") : fmt::format("{}", fmt::join(entries, ", ")));
    }
    for (const auto& [expression, lowered] : compiled.lowered_names)
        fmt::print("{} -> {}\n", expression, lowered);

    std::filesystem::path output =
        args.output_path.empty() ? std::filesystem::path(input).replace_extension(cubin ? ".cubin" : ".ptx")
                                 : std::filesystem::path(args.output_path);
    std::ofstream out(output, std::ios::binary | std::ios::trunc);
    if (cubin) {
        out.write(compiled.binary.data(), static_cast<std::streamsize>(compiled.binary.size()));
    } else {
        out.write(compiled.ptx.data(), static_cast<std::streamsize>(compiled.ptx.size()));
    }
    out.close();
    if (!out) {
        fmt::print(stderr, "cudarc-nvrtc: cannot write {}\n", output.string());
        return 1;
    }
    fmt::print("wrote {} ({} bytes)\n", output.string(),
               cubin ? compiled.binary.size() : compiled.ptx.size());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    auto parsed = cudarc::tools::parse_nvrtc_command_line(argc, argv, std::cout, std::cerr);
    if (const int* status = std::get_if<int>(&parsed)) return *status;
    try {
        return run(std::get<cudarc::tools::NvrtcArguments>(parsed));
    } catch (const UsageError& e) {
        fmt::print(stderr, "cudarc-nvrtc: {}\n", e.message);
        return 2;
    } catch (const cudarc::CompileError& e) {
        fmt::print(stderr, "{}\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "cudarc-nvrtc: {}\n", e.what());
        return 1;
    }
}

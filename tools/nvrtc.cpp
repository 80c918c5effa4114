// cudarc-nvrtc: compiles one CUDA source file with NVRTC (loaded at run time, as the library does),
// prints the compiler's log and each kernel's registers and static shared memory, and writes the
// PTX or CUBIN next to the input.
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in fmt/format.h before fmt 11)
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
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
#include "sys/driver_api.hpp"

namespace {

constexpr const char* kDescription =
    R"(cudarc-nvrtc: compiles FILE.cu with NVRTC, prints the compiler's log and, for CUBIN, each kernel's registers and
static shared memory, and writes FILE.cubin or FILE.ptx next to FILE.cu.)";

constexpr const char* kFooter = R"(
Any other option starting with '-' goes to NVRTC unchanged, e.g. --use_fast_math, --generate-line-info,
--maxrregcount=64 (see NVRTC's documentation for the list).
The kernels shipped with cudarc (kernels/*.cuh) are available to #include by name.
Exit status: 0 compiled, 1 the compiler rejected the source or options, 2 bad command line.)";

enum class Output { from_arch, ptx, cubin };

struct Arguments {
    std::string file;
    std::string arch;
    Output output = Output::from_arch;
    std::string output_path;
    cudarc::CompileOptions options;
    std::vector<std::string> name_expressions;
};

struct UsageError {
    std::string message;
};

// cudarc-nvrtc's own options, as they may be spelt; every other argument that starts with '-' is NVRTC's.
bool is_own_option(std::string_view arg) {
    for (std::string_view exact :
         {"-h", "--help", "--version", "--ptx", "--cubin", "--arch", "-e", "--name-expression", "-o"}) {
        if (arg == exact) return true;
    }
    for (std::string_view prefix : {"--arch=", "--name-expression=", "--std=", "-D", "-I"}) {
        if (arg.starts_with(prefix)) return true;
    }
    return false;
}

// Parses with CLI11 after setting NVRTC's options aside. nvcc's single-dash spellings -arch and -std are
// taken as --arch and --std.
Arguments parse(CLI::App& app, int argc, char** argv) {
    std::vector<std::string> ours;
    Arguments out;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "-arch" || arg.starts_with("-arch=") || arg.starts_with("-std=")) arg.insert(0, "-");
        if (arg.size() > 1 && arg[0] == '-' && !is_own_option(arg)) {
            out.options.extra.push_back(arg);
        } else {
            ours.push_back(std::move(arg));
        }
    }
    std::vector<std::string> defines;
    std::vector<std::string> includes;
    bool ptx = false;
    bool cubin = false;
    app.add_option("file", out.file, "the CUDA source to compile");
    app.add_option("--arch", out.arch,
                   "sm_XY (CUBIN, e.g. sm_90) or compute_XY (PTX, e.g. compute_90); default: the GPU present "
                   "(device 0), else sm_90");
    app.add_flag("--cubin", cubin, "write CUBIN (turns a compute_XY arch into sm_XY)");
    app.add_flag("--ptx", ptx, "write PTX (turns an sm_XY arch into compute_XY)");
    app.add_option("-D", defines, "define a macro: -DNAME[=VALUE] or -D NAME[=VALUE]")
        ->allow_extra_args(false);
    app.add_option("-I", includes,
                   "add an include folder: -IDIR or -I DIR; FILE's own folder is always searched")
        ->allow_extra_args(false);
    app.add_option("--std", out.options.cpp_standard, "C++ standard, e.g. --std=c++20")
        ->capture_default_str();
    app.add_option("-e,--name-expression", out.name_expressions,
                   "instantiate a template, e.g. -e \"scale<float>\", and print its lowered name")
        ->allow_extra_args(false);
    app.add_option("-o", out.output_path, "write the output to this path instead");
    app.get_option("--cubin")->excludes(app.get_option("--ptx"));
    std::reverse(ours.begin(), ours.end());  // CLI11 takes its arguments last first
    app.parse(ours);
    if (out.file.empty()) throw UsageError{"no input file"};
    if (ptx) out.output = Output::ptx;
    if (cubin) out.output = Output::cubin;
    for (const std::string& define : defines) {
        const auto eq = define.find('=');
        out.options.defines.emplace_back(define.substr(0, eq),
                                         eq == std::string::npos ? std::string() : define.substr(eq + 1));
    }
    out.options.include_paths = includes;
    return out;
}

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
std::string arch_for_output(std::string arch, Output output) {
    auto swap_prefix = [&](std::string_view from, std::string_view to) {
        if (std::string_view(arch).starts_with(from)) arch = std::string(to) + arch.substr(from.size());
    };
    if (output == Output::ptx) swap_prefix("sm_", "compute_");
    if (output == Output::cubin) swap_prefix("compute_", "sm_");
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

int run(const Arguments& args) {
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
    CLI::App app{kDescription, "cudarc-nvrtc"};
    app.set_version_flag("--version", fmt::format("cudarc-nvrtc {}", cudarc::version()));
    app.footer(kFooter);
    Arguments args;
    try {
        args = parse(app, argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    } catch (const UsageError& e) {
        fmt::print(stderr, "cudarc-nvrtc: {}\nRun with --help for more information.\n", e.message);
        return 2;
    }
    try {
        return run(args);
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

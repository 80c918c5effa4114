#include "nvrtc_cli.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <string_view>

#include "cudarc/fmt.hpp"
#include "cudarc/version.hpp"

namespace cudarc::tools {
namespace {

constexpr const char* kDescription =
    R"(cudarc-nvrtc: compiles FILE.cu with NVRTC, prints the compiler's log and, for CUBIN, each kernel's registers and
static shared memory, and writes FILE.cubin or FILE.ptx next to FILE.cu.)";

constexpr const char* kFooter = R"(
Any other option starting with '-' goes to NVRTC unchanged, e.g. --use_fast_math, --generate-line-info,
--maxrregcount=64 (see NVRTC's documentation for the list).
The kernels shipped with cudarc (kernels/*.cuh) are available to #include by name.
Exit status: 0 compiled, 1 the compiler rejected the source or options, 2 bad command line.)";

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
NvrtcArguments parse(CLI::App& app, int argc, const char* const* argv) {
    std::vector<std::string> ours;
    NvrtcArguments out;
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
    if (ptx) out.output = NvrtcOutput::ptx;
    if (cubin) out.output = NvrtcOutput::cubin;
    for (const std::string& define : defines) {
        const auto eq = define.find('=');
        out.options.defines.emplace_back(define.substr(0, eq),
                                         eq == std::string::npos ? std::string() : define.substr(eq + 1));
    }
    out.options.include_paths = includes;
    return out;
}

}  // namespace

std::variant<int, NvrtcArguments> parse_nvrtc_command_line(int argc, const char* const* argv,
                                                           std::ostream& out, std::ostream& err) {
    CLI::App app{kDescription, "cudarc-nvrtc"};
    app.set_version_flag("--version", fmt::format("cudarc-nvrtc {}", cudarc::version()));
    app.footer(kFooter);
    try {
        return parse(app, argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e, out, err) == 0 ? 0 : 2;
    } catch (const UsageError& e) {
        err << "cudarc-nvrtc: " << e.message << "\nRun with --help for more information.\n";
        return 2;
    }
}

}  // namespace cudarc::tools

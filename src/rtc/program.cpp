// Program: one run-time compile through the RtcApi table (NVRTC or hiprtc).
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in fmt/format.h before fmt 11)

#include <algorithm>
#include <utility>

#include "cudarc/nvrtc.hpp"
#include "rtc/compiler_arguments.hpp"
#include "rtc/embedded_kernels.hpp"
#include "sys/rtc_api.hpp"

namespace cudarc {
namespace {

const char* compiler_name(Backend backend) {
    return backend == Backend::hip ? "hiprtc" : "NVRTC";
}

std::string describe_compile_failure(const std::string& source_name, const std::vector<std::string>& options,
                                     const std::string& log, const std::string& reason) {
    std::string message =
        fmt::format("cudarc: compiling {} failed: {}\n  options: {}", source_name, reason,
                    options.empty() ? std::string("(none)") : fmt::format("{}", fmt::join(options, " ")));
    message += log.empty() ? std::string("\n  log: (empty)") : "\n  log:\n" + log;
    return message;
}

// Owns a compiler program handle; destroyed on every path out of compile().
class ProgramHandle {
  public:
    explicit ProgramHandle(const sys::RtcApi& api) : api_(api) {}
    ProgramHandle(const ProgramHandle&) = delete;
    ProgramHandle& operator=(const ProgramHandle&) = delete;
    ~ProgramHandle() {
        if (handle_ != nullptr) static_cast<void>(api_.destroy_program(&handle_));
    }
    sys::RtcProgram* out() noexcept { return &handle_; }
    [[nodiscard]] sys::RtcProgram get() const noexcept { return handle_; }

  private:
    const sys::RtcApi& api_;
    sys::RtcProgram handle_ = nullptr;
};

void check(const sys::RtcApi& api, sys::RtcResult result, const char* call) {
    if (result != sys::kRtcSuccess) throw sys::make_rtc_error(api, call, result);
}

std::string read_log(const sys::RtcApi& api, sys::RtcProgram program) {
    std::size_t bytes = 0;
    if (api.get_log_size(program, &bytes) != sys::kRtcSuccess || bytes == 0) return {};
    std::string log(bytes, '\0');
    if (api.get_log(program, log.data()) != sys::kRtcSuccess) return {};
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    return log;
}

// The architecture number of "sm_90a" / "compute_90" -> 90, or -1.
int cuda_arch_number(const std::string& arch) {
    const auto underscore = arch.find('_');
    if (underscore == std::string::npos) return -1;
    std::string digits = arch.substr(underscore + 1);
    while (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) digits.pop_back();
    try {
        return std::stoi(digits);
    } catch (const std::exception&) {
        return -1;
    }
}

std::vector<int> supported_arch_numbers(const sys::RtcApi& api) {
    if (api.get_num_supported_archs == nullptr || api.get_supported_archs == nullptr) return {};
    int count = 0;
    if (api.get_num_supported_archs(&count) != sys::kRtcSuccess || count <= 0) return {};
    std::vector<int> archs(static_cast<std::size_t>(count));
    if (api.get_supported_archs(archs.data()) != sys::kRtcSuccess) return {};
    return archs;
}

std::string version_text(const sys::RtcApi& api) {
    int major = 0;
    int minor = 0;
    if (api.version(&major, &minor) != sys::kRtcSuccess) return compiler_name(api.backend);
    return fmt::format("{} {}.{}", compiler_name(api.backend), major, minor);
}

}  // namespace

// ---- CompiledProgram ----------------------------------------------------------------------------

CodeFormat CompiledProgram::format() const {
    if (backend == Backend::hip) return CodeFormat::amd_code_object;
    return binary.empty() ? CodeFormat::ptx : CodeFormat::cubin;
}

const std::string& CompiledProgram::lowered_name(const std::string& expression) const {
    const auto found = lowered_names.find(expression);
    if (found != lowered_names.end()) return found->second;
    std::vector<std::string> known;
    for (const auto& [name, lowered] : lowered_names) known.push_back(name);
    throw Error(fmt::format(
        "cudarc: \"{}\" was not a name expression of this program (known: {}); add it with "
        "Program::add_name_expression before compiling",
        expression, known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", "))));
}

// ---- CompileError -------------------------------------------------------------------------------

CompileError::CompileError(std::string source_name, std::vector<std::string> options, std::string log,
                           const std::string& reason)
    : Error(describe_compile_failure(source_name, options, log, reason)),
      source_name_(std::move(source_name)),
      options_(std::move(options)),
      log_(std::move(log)) {}

// ---- Program ------------------------------------------------------------------------------------

Program::Program(std::string source, std::string name) : source_(std::move(source)), name_(std::move(name)) {
    if (name_.empty()) name_ = "program.cu";
}

Program Program::embedded(std::string_view file_name) {
    const auto source = detail::find_embedded_source(file_name);
    if (!source) {
        throw Error(fmt::format("cudarc: no kernel file \"{}\" is embedded in the library (embedded: {})",
                                file_name, fmt::join(embedded_kernel_files(), ", ")));
    }
    return Program(std::string(*source), std::string(file_name));
}

Program& Program::add_name_expression(std::string expression) {
    if (std::find(name_expressions_.begin(), name_expressions_.end(), expression) ==
        name_expressions_.end()) {
        name_expressions_.push_back(std::move(expression));
    }
    return *this;
}

CompiledProgram Program::compile(const CompileOptions& options) const {
    const sys::RtcApi& api = sys::rtc(options.backend);  // a missing compiler is an Error, not a CompileError

    std::vector<std::string> arguments;
    try {
        arguments = rtc::compiler_arguments(options);
    } catch (const Error& e) {
        std::string_view reason = e.what();
        if (reason.starts_with("cudarc: ")) reason.remove_prefix(8);
        throw CompileError(name_, options.extra, {}, std::string(reason));
    }
    if (options.backend == Backend::cuda) {
        const std::vector<int> supported = supported_arch_numbers(api);
        const int wanted = cuda_arch_number(options.arch);
        if (!supported.empty() && std::find(supported.begin(), supported.end(), wanted) == supported.end()) {
            std::vector<std::string> names;
            for (int arch : supported) names.push_back("sm_" + std::to_string(arch));
            throw CompileError(name_, arguments, {},
                               fmt::format("{} ({}) does not support {}; it supports {}", version_text(api),
                                           api.library_path, options.arch, fmt::join(names, ", ")));
        }
    }

    const auto headers = rtc::headers_for(options);
    std::vector<std::string> header_names;
    std::vector<std::string> header_texts;
    for (const auto& [name, text] : headers) {
        header_names.emplace_back(name);
        header_texts.emplace_back(text);
    }
    std::vector<const char*> header_name_ptrs;
    std::vector<const char*> header_text_ptrs;
    for (std::size_t i = 0; i < headers.size(); ++i) {
        header_name_ptrs.push_back(header_names[i].c_str());
        header_text_ptrs.push_back(header_texts[i].c_str());
    }

    ProgramHandle program(api);
    check(api,
          api.create_program(program.out(), source_.c_str(), name_.c_str(), static_cast<int>(headers.size()),
                             header_text_ptrs.data(), header_name_ptrs.data()),
          "nvrtcCreateProgram");
    for (const auto& expression : name_expressions_) {
        const sys::RtcResult added = api.add_name_expression(program.get(), expression.c_str());
        if (added != sys::kRtcSuccess) {
            throw CompileError(name_, arguments, {},
                               fmt::format("the name expression \"{}\" was rejected ({})", expression,
                                           sys::make_rtc_error(api, "nvrtcAddNameExpression", added).what()));
        }
    }

    std::vector<const char*> argv;
    for (const auto& argument : arguments) argv.push_back(argument.c_str());
    const sys::RtcResult compiled =
        api.compile_program(program.get(), static_cast<int>(argv.size()), argv.data());
    CompiledProgram out;
    out.log = read_log(api, program.get());
    if (compiled != sys::kRtcSuccess) {
        const char* result_name = api.get_error_string != nullptr ? api.get_error_string(compiled) : nullptr;
        throw CompileError(name_, arguments, out.log,
                           fmt::format("{} returned {} ({})", version_text(api),
                                       result_name != nullptr ? result_name : "an error", compiled));
    }
    out.arch = options.arch;
    out.backend = options.backend;

    const CodeFormat format = code_format_for(options.arch, options.backend);
    if (format == CodeFormat::ptx) {
        std::size_t bytes = 0;
        check(api, api.get_ptx_size(program.get(), &bytes), "nvrtcGetPTXSize");
        out.ptx.assign(bytes, '\0');
        check(api, api.get_ptx(program.get(), out.ptx.data()), "nvrtcGetPTX");
        while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();  // c_str() supplies the NUL
    } else {
        std::size_t bytes = 0;
        check(api, api.get_binary_size(program.get(), &bytes), "nvrtcGetCUBINSize");
        out.binary.resize(bytes);
        check(api, api.get_binary(program.get(), out.binary.data()), "nvrtcGetCUBIN");
    }
    for (const auto& expression : name_expressions_) {
        const char* lowered = nullptr;
        check(api, api.get_lowered_name(program.get(), expression.c_str(), &lowered), "nvrtcGetLoweredName");
        if (lowered != nullptr) out.lowered_names.emplace(expression, lowered);
    }
    return out;
}

// ---- free functions -----------------------------------------------------------------------------

CompiledProgram compile_embedded(std::string_view file_name, const CompileOptions& options,
                                 const std::vector<std::string>& name_expressions) {
    Program program = Program::embedded(file_name);
    for (const auto& expression : name_expressions) program.add_name_expression(expression);
    return program.compile(options);
}

std::vector<std::string> embedded_kernel_files() {
    std::vector<std::string> names;
    for (const auto& entry : detail::embedded_kernel_sources()) names.emplace_back(entry.name);
    return names;
}

CompilerVersion compiler_version(Backend backend) {
    const sys::RtcApi& api = sys::rtc(backend);
    CompilerVersion version;
    version.backend = backend;
    version.library_path = api.library_path;
    if (const auto result = api.version(&version.major, &version.minor); result != sys::kRtcSuccess) {
        throw sys::make_rtc_error(api, "nvrtcVersion", result);
    }
    return version;
}

std::vector<std::string> supported_architectures(Backend backend) {
    const sys::RtcApi& api = sys::rtc(backend);
    if (backend == Backend::hip)  // gfx names, asked of the code object manager
        return api.known_targets != nullptr ? api.known_targets() : std::vector<std::string>{};
    std::vector<std::string> names;
    for (int arch : supported_arch_numbers(api)) names.push_back("sm_" + std::to_string(arch));
    return names;
}

}  // namespace cudarc

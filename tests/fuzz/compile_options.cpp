// Fuzz target: CompileOptions to the compiler's arguments (Note [Fuzzing] in docs/reliability.md). Random
// options either throw cudarc::Error or give arguments that say what the options say: the arch first, each
// define and include path, the caller's extra options last and verbatim; and the headers a compile sees are
// sorted, with the caller's own replacing shipped ones of the same name.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "cudarc/compile_options.hpp"
#include "cudarc/error.hpp"
#include "rtc/compiler_arguments.hpp"

namespace {

// Short strings, often near the forms the checks care about.
std::string text(FuzzedDataProvider& in) {
    static const char* const kPieces[] = {"sm_", "compute_", "gfx", "90", "90a", "100f",  "a", ":xnack-",
                                          "=",   " ",        "-",   "\n", "",    "c++20", "X"};
    std::string out;
    const int parts = in.ConsumeIntegralInRange(0, 3);
    for (int i = 0; i < parts; ++i) {
        if (in.ConsumeBool()) {
            out += kPieces[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kPieces) - 1)];
        } else {
            out += in.ConsumeRandomLengthString(12);
        }
    }
    return out;
}

bool valid_define_name(const std::string& name) {
    return !name.empty() && name.find_first_of(" \t\n=") == std::string::npos;
}

bool contains(const std::vector<std::string>& args, const std::string& arg) {
    return std::find(args.begin(), args.end(), arg) != args.end();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    cudarc::CompileOptions options;
    options.backend = in.ConsumeBool() ? cudarc::Backend::hip : cudarc::Backend::cuda;
    options.arch = text(in);
    options.cpp_standard = text(in);
    for (int i = in.ConsumeIntegralInRange(0, 3); i > 0; --i)
        options.defines.emplace_back(text(in), text(in));
    for (int i = in.ConsumeIntegralInRange(0, 2); i > 0; --i) options.include_paths.push_back(text(in));
    for (int i = in.ConsumeIntegralInRange(0, 3); i > 0; --i) {
        // Sometimes the name of a shipped header, which the caller's replaces.
        options.headers.emplace_back(in.ConsumeBool() ? "optim_common.cuh" : text(in), text(in));
    }
    options.fast_math = in.ConsumeBool();
    options.line_info = in.ConsumeBool();
    options.max_registers = in.ConsumeIntegralInRange(-2, 300);
    for (int i = in.ConsumeIntegralInRange(0, 3); i > 0; --i) options.extra.push_back(text(in));
    const bool hip = options.backend == cudarc::Backend::hip;

    bool arch_ok = true;
    try {
        static_cast<void>(cudarc::code_format_for(options.arch, options.backend));
    } catch (const cudarc::Error&) {
        arch_ok = false;
    }
    const bool should_accept =
        arch_ok && options.max_registers >= 0 && !(hip && options.max_registers > 0) &&
        std::all_of(options.defines.begin(), options.defines.end(),
                    [](const auto& define) { return valid_define_name(define.first); });
    std::vector<std::string> args;
    try {
        args = cudarc::rtc::compiler_arguments(options);
    } catch (const cudarc::Error&) {
        if (should_accept) std::abort();
        return 0;
    }
    if (!should_accept) std::abort();
    if (args.empty() || args.front() != (hip ? "--offload-arch=" : "--gpu-architecture=") + options.arch)
        std::abort();
    if (args.size() < options.extra.size() ||
        !std::equal(options.extra.begin(), options.extra.end(), args.end() - options.extra.size()))
        std::abort();
    for (const auto& [name, value] : options.defines) {
        const std::string define = value.empty() ? name : name + "=" + value;
        if (!contains(args, (hip ? "-D" : "--define-macro=") + define)) std::abort();
    }
    for (const auto& path : options.include_paths) {
        if (!contains(args, (hip ? "-I" : "--include-path=") + path)) std::abort();
    }
    if (options.fast_math != contains(args, hip ? "-ffast-math" : "--use_fast_math")) {
        // The caller's extra options may spell it too.
        if (!contains(options.extra, hip ? "-ffast-math" : "--use_fast_math")) std::abort();
    }

    const auto headers = cudarc::rtc::headers_for(options);
    if (!std::is_sorted(headers.begin(), headers.end(),
                        [](const auto& a, const auto& b) { return a.first < b.first; }))
        std::abort();
    for (const auto& given_header : options.headers) {
        const bool seen = std::any_of(headers.begin(), headers.end(), [&](const auto& header) {
            return header.first == given_header.first && header.second == given_header.second;
        });
        if (!seen) std::abort();
    }
    // A shipped header the caller replaced is there once, as the caller's.
    const auto shipped = std::count_if(headers.begin(), headers.end(),
                                       [](const auto& header) { return header.first == "optim_common.cuh"; });
    const auto given = std::count_if(options.headers.begin(), options.headers.end(),
                                     [](const auto& header) { return header.first == "optim_common.cuh"; });
    if (shipped != std::max<std::ptrdiff_t>(given, 1)) std::abort();
    return 0;
}

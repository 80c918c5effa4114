// Fuzz target: the tools' command lines (Note [Fuzzing] in docs/reliability.md). The first byte picks the
// tool (cudarc-info, cudarc-nvrtc, cudarc-bench); the rest, split at NUL bytes, is argv. Parsing runs nothing
// and opens no device; it either asks to run, or exits with 0 (--help, --version) or 2 (a bad command line,
// with a message), and never crashes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "bench.hpp"
#include "info_cli.hpp"
#include "nvrtc_cli.hpp"

namespace {

template <typename Parsed>
void check_status(const Parsed& status, const std::ostringstream& out, const std::ostringstream& err) {
    if (status != 0 && status != 2) std::abort();
    if (status == 2 && err.str().empty()) std::abort();  // a bad command line says why
    if (status == 0 && out.str().empty()) std::abort();  // --help or --version printed something
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const int tool = data[0] % 3;
    static const char* const kNames[] = {"cudarc-info", "cudarc-nvrtc", "cudarc-bench"};
    std::vector<std::string> words{kNames[tool]};
    std::string word;
    for (std::size_t i = 1; i < size; ++i) {
        if (data[i] == 0) {
            words.push_back(word);
            word.clear();
        } else {
            word.push_back(static_cast<char>(data[i]));
        }
    }
    if (size > 1) words.push_back(word);
    std::vector<const char*> argv;
    for (const auto& w : words) argv.push_back(w.c_str());
    argv.push_back(nullptr);
    const int argc = static_cast<int>(words.size());

    std::ostringstream out;
    std::ostringstream err;
    switch (tool) {
        case 0:
            if (const auto status = cudarc::tools::parse_info_command_line(argc, argv.data(), out, err))
                check_status(*status, out, err);
            break;
        case 1: {
            const auto parsed = cudarc::tools::parse_nvrtc_command_line(argc, argv.data(), out, err);
            if (const int* status = std::get_if<int>(&parsed)) {
                check_status(*status, out, err);
            } else if (std::get<cudarc::tools::NvrtcArguments>(parsed).file.empty()) {
                std::abort();  // running needs an input file
            }
            break;
        }
        default: {
            const auto parsed = cudarc::bench::parse_command_line(argc, argv.data(), out, err);
            if (const int* status = std::get_if<int>(&parsed)) {
                check_status(*status, out, err);
            } else if (!std::get<cudarc::bench::BenchCommand>(parsed).run) {
                std::abort();
            }
            break;
        }
    }
    return 0;
}

// cudarc-nvrtc's command line, apart from what the tool does (tests/fuzz/tools_cli.cpp parses without
// running).
#pragma once

#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include "cudarc/compile_options.hpp"

namespace cudarc::tools {

enum class NvrtcOutput { from_arch, ptx, cubin };

struct NvrtcArguments {
    std::string file;
    std::string arch;
    NvrtcOutput output = NvrtcOutput::from_arch;
    std::string output_path;
    cudarc::CompileOptions options;
    std::vector<std::string> name_expressions;
};

// A command line the tool cannot act on (also thrown while running, e.g. an unreadable file).
struct UsageError {
    std::string message;
};

// The arguments, or the status to exit with at once after writing to `out` (--help, --version: 0) or `err`
// (a bad command line: 2). Every argument that starts with '-' and is not the tool's own goes to NVRTC.
[[nodiscard]] std::variant<int, NvrtcArguments> parse_nvrtc_command_line(int argc, const char* const* argv,
                                                                         std::ostream& out,
                                                                         std::ostream& err);

}  // namespace cudarc::tools

// cudarc-info's command line, apart from what the tool does (tests/fuzz/tools_cli.cpp parses without
// running).
#pragma once

#include <optional>
#include <ostream>

namespace cudarc::tools {

// nullopt: list the devices. Otherwise the status to exit with at once, after writing to `out` (--help,
// --version: 0) or `err` (a bad command line: 2).
[[nodiscard]] std::optional<int> parse_info_command_line(int argc, const char* const* argv, std::ostream& out,
                                                         std::ostream& err);

}  // namespace cudarc::tools

#include "info_cli.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cudarc/fmt.hpp"
#include "cudarc/version.hpp"

namespace cudarc::tools {
namespace {

constexpr const char* kFooter = R"(
Exit status: 0 devices listed; 1 no usable GPU (no driver, or no device: the message says which);
2 bad command line; 3 a device failed while being described.)";

}  // namespace

std::optional<int> parse_info_command_line(int argc, const char* const* argv, std::ostream& out,
                                           std::ostream& err) {
    CLI::App app{"cudarc-info: lists the GPUs cudarc can see, with the driver, memory and compute capability",
                 "cudarc-info"};
    app.set_version_flag("--version", fmt::format("cudarc-info {}", cudarc::version()));
    app.footer(kFooter);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e, out, err) == 0 ? 0 : 2;
    }
    return std::nullopt;
}

}  // namespace cudarc::tools

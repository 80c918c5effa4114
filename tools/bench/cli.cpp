// cudarc-bench's command line: the registry of subcommands and their options over CLI11 (the only file that
// includes it), and the parse that main.cpp and tests/fuzz/tools_cli.cpp call.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench.hpp"
#include "cudarc/fmt.hpp"
#include "cudarc/version.hpp"

namespace cudarc::bench {
namespace {

struct Entry {
    std::string summary;
    Declare declare;
};

std::map<std::string, Entry>& registry() {
    static std::map<std::string, Entry> commands;
    return commands;
}

template <typename Number>
CLI::Option* with_check(CLI::Option* option, Check check) {
    constexpr Number kMax = std::numeric_limits<Number>::max();
    switch (check) {
        case Check::none:
            break;
        case Check::positive:
            option->check(std::is_integral_v<Number> ? CLI::Validator(CLI::Range(Number{1}, kMax))
                                                     : CLI::Validator(CLI::PositiveNumber));
            break;
        case Check::non_negative:
            option->check(CLI::Range(Number{0}, kMax));
            break;
    }
    return option;
}

}  // namespace

void register_subcommand(const char* name, const char* summary, Declare declare) {
    registry()[name] = Entry{summary, std::move(declare)};
}

OptionSet& OptionSet::add(const std::string& name, int& value, const std::string& help, Check check) {
    with_check<int>(app_.add_option(name, value, help)->capture_default_str(), check);
    return *this;
}

OptionSet& OptionSet::add(const std::string& name, double& value, const std::string& help, Check check) {
    with_check<double>(app_.add_option(name, value, help)->capture_default_str(), check);
    return *this;
}

OptionSet& OptionSet::add(const std::string& name, std::string& value, const std::string& help,
                          const std::vector<std::string>& choices) {
    auto* option = app_.add_option(name, value, help)->capture_default_str();
    if (!choices.empty()) option->check(CLI::IsMember(choices));
    return *this;
}

OptionSet& OptionSet::add_list(const std::string& name, std::vector<std::string>& values,
                               const std::string& help, const std::vector<std::string>& choices) {
    // One argument per occurrence, split at commas ("--dtypes fp16,bf16"); the list replaces the default.
    auto* option =
        app_.add_option(name, values, help)->delimiter(',')->capture_default_str()->allow_extra_args(false);
    if (!choices.empty()) option->check(CLI::IsMember(choices));
    return *this;
}

OptionSet& OptionSet::add_list(const std::string& name, std::vector<int>& values, const std::string& help,
                               Check check) {
    with_check<int>(
        app_.add_option(name, values, help)->delimiter(',')->capture_default_str()->allow_extra_args(false),
        check);
    return *this;
}

OptionSet& OptionSet::add_flag(const std::string& name, bool& value, const std::string& help) {
    app_.add_flag(name, value, help);
    return *this;
}

void add_common_options(OptionSet& options, CommonArgs& args) {
    options.add("--device", args.device, "device ordinal", Check::non_negative)
        .add("--warmups", args.warmups, "warm-up rounds, not counted", Check::non_negative)
        .add("--rounds", args.rounds, "timed rounds (figures are their median)", Check::positive)
        .add("--output", args.output, "append one JSON object per result to this file");
}

std::variant<int, BenchCommand> parse_command_line(int argc, const char* const* argv, std::ostream& out,
                                                   std::ostream& err) {
    CLI::App app{
        "cudarc-bench: compares cudarc with raw driver calls in the same run (ratios; medians of "
        "rounds after warm-up)",
        "cudarc-bench"};
    app.set_version_flag("--version", fmt::format("cudarc-bench {}", cudarc::version()));
    app.require_subcommand(1, 1);
    std::map<std::string, std::function<int()>> runs;
    std::vector<std::pair<CLI::App*, std::string>> subcommands;
    for (const auto& [name, entry] : registry()) {
        CLI::App* sub = app.add_subcommand(name, entry.summary);
        OptionSet options(*sub);
        runs[name] = entry.declare(options);
        subcommands.emplace_back(sub, name);
    }
    if (argc > 1 && argv[1][0] != '-' && registry().count(argv[1]) == 0) {
        std::string known;
        for (const auto& [name, entry] : registry()) known += (known.empty() ? "" : ", ") + name;
        err << fmt::format("cudarc-bench: unknown subcommand '{}' (known: {}; try --help)\n", argv[1], known);
        return 2;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // --help and --version exit 0; anything else is a bad command line: the message, then status 2.
        return app.exit(e, out, err) == 0 ? 0 : 2;
    }
    for (const auto& [sub, name] : subcommands) {
        if (sub->parsed()) return BenchCommand{name, std::move(runs[name])};
    }
    return 2;  // unreachable: require_subcommand(1) made parse() throw
}

}  // namespace cudarc::bench

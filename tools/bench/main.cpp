// cudarc-bench SUBCOMMAND [options]: benchmarks that compare cudarc with raw driver calls in one run.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>

#include "bench.hpp"
#include "cudarc/error.hpp"

namespace cudarc::bench {
namespace {
struct Entry {
    std::string summary;
    Command command;
};
std::map<std::string, Entry>& registry() {
    static std::map<std::string, Entry> commands;
    return commands;
}
}  // namespace

Registration::Registration(const char* name, const char* summary, Command command) {
    registry()[name] = Entry{summary, command};
}

Options::Options(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg.rfind("--", 0) != 0) {
            values_["_positional"] += (values_["_positional"].empty() ? "" : ",") + arg;
            continue;
        }
        arg = arg.substr(2);
        const auto eq = arg.find('=');
        if (eq != std::string::npos) {
            values_[arg.substr(0, eq)] = arg.substr(eq + 1);
        } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
            values_[arg] = argv[++i];
        } else {
            values_[arg] = "";
        }
    }
}

std::string Options::get(const std::string& name, const std::string& fallback) const {
    const auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
}

int Options::get_int(const std::string& name, int fallback) const {
    const std::string value = get(name, "");
    if (value.empty()) return fallback;
    char* end = nullptr;
    const long parsed = std::strtol(value.c_str(), &end, 10);
    if (end == value.c_str() || *end != '\0')
        throw Error(fmt::format("--{} expects an integer, got '{}'", name, value));
    return static_cast<int>(parsed);
}

std::vector<std::string> Options::get_list(const std::string& name, const std::string& fallback) const {
    std::vector<std::string> out;
    std::string text = get(name, fallback);
    std::size_t start = 0;
    while (start <= text.size()) {
        const auto comma = text.find(',', start);
        const std::string item =
            text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!item.empty()) out.push_back(item);
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

JsonLines::JsonLines(const Options& options) {
    const std::string path = options.get("output", "");
    if (path.empty()) return;
    file_ = std::fopen(path.c_str(), "a");
    if (file_ == nullptr) throw Error(fmt::format("cannot open --output file '{}'", path));
}

JsonLines::~JsonLines() {
    if (file_ != nullptr) std::fclose(file_);
}

void JsonLines::write(const std::vector<std::pair<std::string, std::string>>& fields) {
    if (file_ == nullptr) return;
    std::string line = "{";
    for (std::size_t i = 0; i < fields.size(); ++i) {
        line += fmt::format("{}\"{}\": {}", i == 0 ? "" : ", ", fields[i].first, fields[i].second);
    }
    line += "}\n";
    std::fputs(line.c_str(), file_);
}

void print_row(const std::string& name, double value, const char* unit, const std::string& note) {
    std::printf("  %-58s %12.3f %-6s %s\n", name.c_str(), value, unit, note.c_str());
}

}  // namespace cudarc::bench

int main(int argc, char** argv) {
    using namespace cudarc::bench;
    const std::string command = argc > 1 ? argv[1] : "--help";
    if (command == "--help" || command == "-h" || command == "help") {
        std::printf("usage: cudarc-bench SUBCOMMAND [--option value ...]\n\nsubcommands:\n");
        for (const auto& [name, entry] : registry())
            std::printf("  %-12s %s\n", name.c_str(), entry.summary.c_str());
        std::printf("\ncommon options: --warmups N --rounds N --output results.jsonl\n");
        return argc > 1 ? 0 : 2;
    }
    const auto it = registry().find(command);
    if (it == registry().end()) {
        std::fprintf(stderr, "cudarc-bench: unknown subcommand '%s' (try --help)\n", command.c_str());
        return 2;
    }
    try {
        return it->second.command(Options(argc, argv, 2));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cudarc-bench %s: %s\n", command.c_str(), e.what());
        return 1;
    }
}

// cudarc-bench: a registry of subcommands, their options, and the reporting and timing helpers they share.
//
// Every benchmark compares against its baseline in the same run and reports ratios; figures are medians of
// several rounds after warm-up.
//
// A subcommand is a function of its own arguments struct, registered with the options it adds to the common
// ones (--device, --warmups, --rounds, --output):
//
//     struct LaunchArgs : CommonArgs {
//         int iterations = 500;
//     };
//     int run_launch(const LaunchArgs& args);
//     const Subcommand<LaunchArgs> registration{"launch", "one line for --help", run_launch,
//         [](OptionSet& options, LaunchArgs& args) {
//             options.add("--iterations", args.iterations, "launches per round", Check::positive);
//         }};
//
// Every command line is parsed and checked (CLI11, in cli.cpp) before any subcommand runs, so --help and a
// bad option never reach the driver: a bad command line exits with status 2, a failure while running with 1.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

namespace cudarc {
class Device;
}
namespace CLI {
class App;
}

namespace cudarc::bench {

// What every subcommand takes. A subcommand's own struct derives from it and may change the defaults in its
// constructor (the defaults are what --help shows).
struct CommonArgs {
    int device = 0;
    int warmups = 3;
    int rounds = 15;
    std::string output;  // JSON lines are appended here when set
};

enum class Check { none, positive, non_negative };

// The options of one subcommand, declared against its arguments struct. Implemented over CLI11 (cli.cpp),
// which parses, checks, and writes --help; this header keeps CLI11 out of every subcommand's compile.
class OptionSet {
  public:
    explicit OptionSet(CLI::App& app) : app_(app) {}

    OptionSet& add(const std::string& name, int& value, const std::string& help, Check check = Check::none);
    OptionSet& add(const std::string& name, double& value, const std::string& help,
                   Check check = Check::none);
    // A string; when `choices` is not empty, one of them.
    OptionSet& add(const std::string& name, std::string& value, const std::string& help,
                   const std::vector<std::string>& choices = {});
    // Comma-separated lists ("--dtypes fp16,bf16"); the given value replaces the default list.
    OptionSet& add_list(const std::string& name, std::vector<std::string>& values, const std::string& help,
                        const std::vector<std::string>& choices = {});
    OptionSet& add_list(const std::string& name, std::vector<int>& values, const std::string& help,
                        Check check = Check::none);
    OptionSet& add_flag(const std::string& name, bool& value, const std::string& help);

  private:
    CLI::App& app_;
};

// Adds --device, --warmups, --rounds and --output.
void add_common_options(OptionSet& options, CommonArgs& args);

// How a subcommand comes to run: its options are declared on the parser (cli.cpp), then, once parsing
// succeeded, main.cpp runs what the declaration returned.
using Declare = std::function<std::function<int()>(OptionSet&)>;
void register_subcommand(const char* name, const char* summary, Declare declare);

// A parsed command line: the subcommand and what runs it.
struct BenchCommand {
    std::string name;
    std::function<int()> run;
};
// The command, or the status to exit with at once after writing to `out` (--help, --version: 0) or `err`
// (a bad command line: 2). Nothing runs and no device is opened (cli.cpp; tests/fuzz/tools_cli.cpp).
[[nodiscard]] std::variant<int, BenchCommand> parse_command_line(int argc, const char* const* argv,
                                                                 std::ostream& out, std::ostream& err);

// Registers a subcommand at static-initialization time (see the example at the top of this file).
template <typename Args>
struct Subcommand {
    using Run = int (*)(const Args&);
    using AddOptions = void (*)(OptionSet&, Args&);

    Subcommand(const char* name, const char* summary, Run run, AddOptions add_options = nullptr) {
        register_subcommand(name, summary, [run, add_options](OptionSet& options) -> std::function<int()> {
            auto args = std::make_shared<Args>();
            add_common_options(options, *args);
            if (add_options != nullptr) add_options(options, *args);
            return [run, args] { return run(*args); };
        });
    }
};

// What every JSON line says about the run, besides its own fields.
struct RunContext {
    std::string bench;           // the subcommand
    std::string cudarc_version;  // "0.1.0"
    std::string device;          // "NVIDIA H200"
    std::string arch;            // "sm_90"
    std::string driver;          // "13.0"
    std::string date;            // the run's start, UTC, ISO 8601: "2026-11-29T12:34:56Z"

    [[nodiscard]] static RunContext of(const Device& device, std::string bench);
};

// The header line of a subcommand's text output: "cudarc-bench core 0.1.0 on NVIDIA H200 (sm_90), driver
// 13.0; <details>".
void print_header(const RunContext& context, const std::string& details);

// Appends one JSON object per line to a file (when a path is given): the row's fields, then the run's
// context. Lines are flushed as written, so a killed run keeps every row it produced. Strings are escaped
// and a non-finite number is written as null, so every line parses as JSON.
class JsonLines {
  public:
    JsonLines(const std::string& path, RunContext context);
    JsonLines(const CommonArgs& args, const Device& device, std::string bench)
        : JsonLines(args.output, RunContext::of(device, std::move(bench))) {}
    ~JsonLines();
    JsonLines(const JsonLines&) = delete;
    JsonLines& operator=(const JsonLines&) = delete;

    void write(nlohmann::ordered_json row);
    [[nodiscard]] const RunContext& context() const noexcept { return context_; }

  private:
    std::FILE* file_ = nullptr;
    RunContext context_;
};

// A progress line on stderr while a long run goes on, only when stderr is a terminal:
// "[ 5/36] 1024x256K bf16 8-bit  |  0:42 elapsed, about 1:13 left". Items carry an estimate of their
// relative cost; the time left scales the estimate of what remains by the time taken per estimated unit.
class Progress {
  public:
    Progress(std::size_t items, double total_cost);
    ~Progress();  // clears the line
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    // Before an item: shows its label; `cost` is its estimate, counted as done at the next call or at done().
    void next(const std::string& label, double cost);
    // Erases the line (before printing a row to the same terminal); the next next() shows it again.
    void clear();
    void done();

    // "[ 5/36] label  |  0:42 elapsed, about 1:13 left" (what next() shows; pure, for tests).
    [[nodiscard]] static std::string line(std::size_t item, std::size_t items, const std::string& label,
                                          double elapsed_s, double cost_done, double cost_total);

  private:
    void finish_current();

    bool enabled_ = false;
    std::size_t items_ = 0;
    std::size_t item_ = 0;
    double total_cost_ = 0.0;
    double cost_done_ = 0.0;
    double current_cost_ = 0.0;
    std::chrono::steady_clock::time_point start_;
};

[[nodiscard]] inline double median(std::vector<double> values) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    const std::size_t mid = values.size() / 2;
    return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

[[nodiscard]] inline double percentile(std::vector<double> values, double p) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    const double position = p * static_cast<double>(values.size() - 1);
    const auto below = static_cast<std::size_t>(position);
    const std::size_t above = std::min(below + 1, values.size() - 1);
    const double fraction = position - static_cast<double>(below);
    return values[below] * (1.0 - fraction) + values[above] * fraction;
}

// Host wall time of `body` per iteration, in microseconds: `warmups` rounds discarded, then `rounds`
// rounds of `iterations` calls each; `after_round` runs outside the timed region (e.g. a synchronize).
template <typename Body, typename AfterRound>
std::vector<double> time_rounds_us(int warmups, int rounds, int iterations, Body&& body,
                                   AfterRound&& after_round) {
    std::vector<double> per_call;
    for (int round = 0; round < warmups + rounds; ++round) {
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iterations; ++i) body();
        const auto stop = std::chrono::steady_clock::now();
        after_round();
        if (round >= warmups) {
            per_call.push_back(std::chrono::duration<double, std::micro>(stop - start).count() / iterations);
        }
    }
    return per_call;
}

// Prints one row of a results table: name, value with unit, and an optional note (flushed at once).
void print_row(const std::string& name, double value, const char* unit, const std::string& note = "");

}  // namespace cudarc::bench

// cudarc-bench: a registry of subcommands and the timing helpers they share.
//
// Every benchmark compares against its baseline in the same run and reports ratios; figures are medians of
// several rounds after warm-up.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace cudarc::bench {

// Command-line options: `--name value` pairs and bare `--flag`s.
class Options {
  public:
    Options(int argc, char** argv, int first);
    [[nodiscard]] std::string get(const std::string& name, const std::string& fallback) const;
    [[nodiscard]] int get_int(const std::string& name, int fallback) const;
    [[nodiscard]] bool has(const std::string& name) const { return values_.count(name) != 0; }
    // Comma-separated list, e.g. "--dtypes fp16,bf16".
    [[nodiscard]] std::vector<std::string> get_list(const std::string& name,
                                                    const std::string& fallback) const;

  private:
    std::map<std::string, std::string> values_;
};

using Command = int (*)(const Options&);

// Registers a subcommand at static-initialization time: `static Registration r{"core", "...", run_core};`
struct Registration {
    Registration(const char* name, const char* summary, Command command);
};

// Appends one JSON object per line to --output (if given) and echoes nothing.
class JsonLines {
  public:
    explicit JsonLines(const Options& options);
    ~JsonLines();
    JsonLines(const JsonLines&) = delete;
    JsonLines& operator=(const JsonLines&) = delete;
    // `fields`: already-formatted JSON values keyed by name (strings must carry their quotes).
    void write(const std::vector<std::pair<std::string, std::string>>& fields);

  private:
    std::FILE* file_ = nullptr;
};

[[nodiscard]] inline std::string quoted(const std::string& text) {
    return "\"" + text + "\"";
}

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

// Prints one row of a results table: name, value with unit, and an optional note.
void print_row(const std::string& name, double value, const char* unit, const std::string& note = "");

}  // namespace cudarc::bench

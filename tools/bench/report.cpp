// cudarc-bench's reporting: the run's context, JSON lines, text rows and the progress line.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <utility>

#include "bench.hpp"
#include "cudarc/device.hpp"
#include "cudarc/error.hpp"
#include "cudarc/fmt.hpp"
#include "cudarc/version.hpp"

namespace cudarc::bench {
namespace {

std::string utc_now_iso8601() {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char text[32];
    const std::size_t length = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return std::string(text, length);
}

// "1:05", "12:00", "1:02:03"
std::string clock_text(double seconds) {
    const auto total = static_cast<long long>(std::max(0.0, seconds) + 0.5);
    if (total >= 3600) return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
    return fmt::format("{}:{:02}", total / 60, total % 60);
}

}  // namespace

RunContext RunContext::of(const Device& device, std::string bench) {
    RunContext context;
    context.bench = std::move(bench);
    context.cudarc_version = fmt::format("{}", version());
    context.device = device.name();
    context.arch = device.arch();
    context.driver = fmt::format("{}", DriverVersion{Device::driver_version()});
    context.date = utc_now_iso8601();
    return context;
}

void print_header(const RunContext& context, const std::string& details) {
    fmt::print("cudarc-bench {} {} on {} ({}), driver {}; {}\n", context.bench, context.cudarc_version,
               context.device, context.arch, context.driver, details);
    std::fflush(stdout);
}

JsonLines::JsonLines(const std::string& path, RunContext context) : context_(std::move(context)) {
    if (path.empty()) return;
    file_ = std::fopen(path.c_str(), "a");
    if (file_ == nullptr) throw Error(fmt::format("cannot open --output file '{}'", path));
}

JsonLines::~JsonLines() {
    if (file_ != nullptr) std::fclose(file_);
}

void JsonLines::write(nlohmann::ordered_json row) {
    if (file_ == nullptr) return;
    nlohmann::ordered_json line;
    line["bench"] = context_.bench;
    for (auto& [key, value] : row.items()) line[key] = std::move(value);
    line["cudarc_version"] = context_.cudarc_version;
    line["device"] = context_.device;
    line["arch"] = context_.arch;
    line["driver"] = context_.driver;
    line["date"] = context_.date;
    // Note: nlohmann-json writes NaN and infinities as null, and replaces invalid UTF-8 rather than
    // throwing (a device name is the driver's bytes): every line is valid JSON.
    const std::string text =
        line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    std::fputs(text.c_str(), file_);
    std::fflush(file_);
}

void print_row(const std::string& name, double value, const char* unit, const std::string& note) {
    fmt::print("  {:<58} {:>12.3f} {:<6} {}\n", name, value, unit, note);
    std::fflush(stdout);
}

Progress::Progress(std::size_t items, double total_cost)
    : enabled_(::isatty(STDERR_FILENO) == 1),
      items_(items),
      total_cost_(total_cost),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
    done();
}

void Progress::finish_current() {
    cost_done_ += current_cost_;
    current_cost_ = 0.0;
}

void Progress::next(const std::string& label, double cost) {
    finish_current();
    ++item_;
    current_cost_ = cost;
    if (!enabled_) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    // \r and "erase to end of line": the line is rewritten in place.
    fmt::print(stderr, "\r{}\x1b[K", line(item_, items_, label, elapsed, cost_done_, total_cost_));
    std::fflush(stderr);
}

void Progress::clear() {
    if (!enabled_) return;
    fmt::print(stderr, "\r\x1b[K");
    std::fflush(stderr);
}

void Progress::done() {
    finish_current();
    clear();
    enabled_ = false;
}

std::string Progress::line(std::size_t item, std::size_t items, const std::string& label, double elapsed_s,
                           double cost_done, double cost_total) {
    const int width = static_cast<int>(fmt::formatted_size("{}", items));
    std::string left = "estimating time left";
    if (cost_done > 0.0 && cost_total >= cost_done) {
        left = fmt::format("about {} left", clock_text(elapsed_s / cost_done * (cost_total - cost_done)));
    }
    return fmt::format("[{:>{}}/{}] {}  |  {} elapsed, {}", item, width, items, label, clock_text(elapsed_s),
                       left);
}

}  // namespace cudarc::bench

// cudarc-bench's reporting, without a device: JSON lines that parse, carry the run's context and reach the
// file as they are written; the progress line's arithmetic.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench.hpp"

using cudarc::bench::JsonLines;
using cudarc::bench::Progress;
using cudarc::bench::RunContext;

namespace {

struct TemporaryFile {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("cudarc-bench-report-" + std::to_string(::getpid()) + "-" +
                                                  std::to_string(std::random_device{}()) + ".jsonl");
    ~TemporaryFile() {
        std::error_code ignored;
        std::filesystem::remove(path, ignored);
    }
};

std::vector<std::string> lines_of(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

RunContext context() {
    RunContext c;
    c.bench = "core";
    c.cudarc_version = "0.1.0";
    c.device = "NVIDIA \"Quoted\" GPU\\";
    c.arch = "sm_90";
    c.driver = "13.0";
    c.date = "2026-11-29T12:34:56Z";
    return c;
}

}  // namespace

TEST_CASE("core.tools_bench_json_lines_parse_and_carry_the_run") {
    TemporaryFile file;
    {
        JsonLines json(file.path.string(), context());
        json.write({{"case", "fork + join \"pair\"\n\ttabbed \x01"}, {"value", 1.25}, {"unit", "us"}});
        // Written and flushed: visible before the writer is closed (a killed run keeps its rows).
        REQUIRE(lines_of(file.path).size() == 1);
        json.write({{"case", "ratio of nothing"},
                    {"value", std::numeric_limits<double>::infinity()},
                    {"nan", std::nan("")},
                    {"stats", {{"median", 1.0}, {"p90", -std::numeric_limits<double>::infinity()}}},
                    {"count", std::uint64_t{18446744073709551615ull}},
                    {"ok", true}});
        json.write({{"case", std::string("invalid utf-8 \xff\xfe")}, {"value", 0.0}});
    }
    const auto lines = lines_of(file.path);
    REQUIRE(lines.size() == 3);
    for (const auto& line : lines) {
        INFO(line);
        CHECK(line.find("inf") == std::string::npos);
        CHECK(line.find("NaN") == std::string::npos);
        nlohmann::json row;
        REQUIRE_NOTHROW(row = nlohmann::json::parse(line));
        CHECK(row.at("bench") == "core");
        CHECK(row.at("cudarc_version") == "0.1.0");
        CHECK(row.at("device") == "NVIDIA \"Quoted\" GPU\\");
        CHECK(row.at("arch") == "sm_90");
        CHECK(row.at("driver") == "13.0");
        CHECK(row.at("date") == "2026-11-29T12:34:56Z");
    }
    const auto first = nlohmann::json::parse(lines[0]);
    CHECK(first.at("case") == "fork + join \"pair\"\n\ttabbed \x01");
    CHECK(first.at("value") == 1.25);
    const auto second = nlohmann::json::parse(lines[1]);
    CHECK(second.at("value").is_null());
    CHECK(second.at("nan").is_null());
    CHECK(second.at("stats").at("median") == 1.0);
    CHECK(second.at("stats").at("p90").is_null());
    CHECK(second.at("count") == std::uint64_t{18446744073709551615ull});
    CHECK(second.at("ok") == true);
    // Rows' own fields come first, in the order given, after "bench".
    CHECK(lines[0].rfind("{\"bench\":\"core\",\"case\":", 0) == 0);
}

TEST_CASE("core.tools_bench_json_lines_append_and_report_bad_paths") {
    TemporaryFile file;
    {
        JsonLines json(file.path.string(), context());
        json.write({{"case", "a"}});
    }
    {
        JsonLines json(file.path.string(), context());
        json.write({{"case", "b"}});
    }
    CHECK(lines_of(file.path).size() == 2);
    CHECK_THROWS_WITH_AS(JsonLines("/nonexistent-folder/x.jsonl", context()),
                         doctest::Contains("/nonexistent-folder/x.jsonl"), std::exception);
    // No path: rows are dropped, nothing is opened.
    JsonLines none("", context());
    CHECK_NOTHROW(none.write({{"case", "c"}}));
}

TEST_CASE("core.tools_bench_progress_line") {
    // Nothing done yet: no estimate.
    CHECK(Progress::line(1, 36, "32 fp16 8-bit", 0.0, 0.0, 100.0) ==
          "[ 1/36] 32 fp16 8-bit  |  0:00 elapsed, estimating time left");
    // A quarter of the estimated cost took 30 s: three quarters take 90 s more.
    CHECK(Progress::line(10, 36, "1024x256K bf16 8-bit", 30.0, 25.0, 100.0) ==
          "[10/36] 1024x256K bf16 8-bit  |  0:30 elapsed, about 1:30 left");
    CHECK(Progress::line(3, 3, "1x256M fp32 32-bit", 3725.0, 50.0, 100.0) ==
          "[3/3] 1x256M fp32 32-bit  |  1:02:05 elapsed, about 1:02:05 left");
    // Off a terminal (as under ctest) it prints nothing and counts quietly.
    Progress progress(2, 2.0);
    progress.next("a", 1.0);
    progress.clear();
    progress.next("b", 1.0);
    progress.done();
}

// cudarc-bench SUBCOMMAND [options]: benchmarks that compare cudarc with raw driver calls in one run.
//
// The command line is parsed (cli.cpp) for every subcommand before anything runs (see bench.hpp).
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <iostream>

#include "bench.hpp"

int main(int argc, char** argv) {
    using namespace cudarc::bench;
    // Rows reach a log (a pipe or a file) as they are produced, not when the buffer fills.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    auto parsed = parse_command_line(argc, argv, std::cout, std::cerr);
    if (const int* status = std::get_if<int>(&parsed)) return *status;
    const auto& command = std::get<BenchCommand>(parsed);
    try {
        return command.run();
    } catch (const std::exception& e) {
        std::fflush(stdout);
        fmt::print(stderr, "cudarc-bench {}: {}\n", command.name, e.what());
        return 1;
    }
}

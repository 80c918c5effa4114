// Issue 28: NVRTC loaded from a folder that is not on the dynamic linker's path (pip's nvidia wheel, or
// CUDARC_NVRTC naming a folder of one's own) must compile with the libnvrtc-builtins next to it (Note
// [NVRTC's builtins] in src/sys/nvrtc/nvrtc_loader.cpp). The toolkit's libnvrtc and its builtins are copied
// to a fresh folder, and a fresh process (tests/host/nvrtc_probe) compiles through CUDARC_NVRTC pointing
// there. Where the toolkit is also on the linker's path (its folder in ld.so.cache, as on most machines with
// the toolkit installed), libnvrtc alone would still find the toolkit's builtins and compile: so the test
// checks which builtins the process loaded, which must be the copy next to the chosen libnvrtc.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "rtc_test_support.hpp"

namespace fs = std::filesystem;

namespace {

struct ProbeRun {
    int status = -1;
    std::string output;
};

// Runs the probe with CUDARC_NVRTC=`nvrtc` (paths under the temporary folder: no quotes in them).
ProbeRun run_probe(const std::string& nvrtc) {
    const std::string command =
        "CUDARC_NVRTC='" + nvrtc + "' CUDARC_CACHE_DIR=off '" + std::string(CUDARC_NVRTC_PROBE) + "' 2>&1";
    ProbeRun run;
    FILE* pipe = ::popen(command.c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::array<char, 4096> chunk{};
    while (std::fgets(chunk.data(), static_cast<int>(chunk.size()), pipe) != nullptr)
        run.output += chunk.data();
    const int status = ::pclose(pipe);
    run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return run;
}

}  // namespace

TEST_CASE("rtc.nvrtc_builtins_next_to_the_chosen_library") {
    const cudarc::CompilerVersion version = cudarc::test::require_nvrtc();
    const fs::path nvrtc = fs::canonical(version.library_path);
    const std::string major = std::to_string(version.major);
    const std::string builtins_name = "libnvrtc-builtins.so." + major + "." + std::to_string(version.minor);
    const fs::path builtins = nvrtc.parent_path() / builtins_name;
    if (!fs::exists(builtins)) {
        MESSAGE("skipped: no " << builtins_name << " next to " << nvrtc.string() << " to copy");
        return;
    }
    cudarc::test::TemporaryFolder folder;
    const fs::path copied_nvrtc = folder.path() / ("libnvrtc.so." + major);
    const fs::path copied_builtins = folder.path() / builtins_name;
    fs::copy_file(nvrtc, copied_nvrtc);
    fs::copy_file(fs::canonical(builtins), copied_builtins);

    // CUDARC_NVRTC naming the file, then the folder.
    for (const fs::path& named : {copied_nvrtc, folder.path()}) {
        CAPTURE(named.string());
        const ProbeRun run = run_probe(named.string());
        INFO(run.output);
        CHECK(run.status == 0);
        CHECK(run.output.find("builtins: " + copied_builtins.string() + "\n") != std::string::npos);
        // No other builtins library stood in for it.
        std::size_t loaded = 0;
        for (std::size_t at = run.output.find("builtins: "); at != std::string::npos;
             at = run.output.find("builtins: ", at + 1))
            ++loaded;
        CHECK(loaded == 1);
    }
}

// GPU test runner: without a usable GPU every test case exits with 77, which ctest reports as skipped
// (SKIP_RETURN_CODE), never as passed. Listing (used by test discovery) works everywhere.
//
// Tests that need more than the machine has (a second GPU, NCCL) call test::skip_test: they print why and
// return early. When every test case of a run skipped itself (ctest runs one case per process), the runner
// exits with 77 too; in a run of many cases the skipped ones are listed in the output.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "cudarc/device.hpp"
#include "gpu_test.hpp"
#include "sys/driver_api.hpp"

namespace {

int g_started = 0;
int g_skipped = 0;
std::string g_current;

// Counts the test cases that start, so that main can tell a run of skipped cases from a passing one.
struct StartCounter : doctest::IReporter {
    explicit StartCounter(const doctest::ContextOptions&) {}
    void report_query(const doctest::QueryData&) override {}
    void test_run_start() override {}
    void test_run_end(const doctest::TestRunStats&) override {}
    void test_case_start(const doctest::TestCaseData& data) override {
        ++g_started;
        g_current = data.m_name;
    }
    void test_case_reenter(const doctest::TestCaseData&) override {}
    void test_case_end(const doctest::CurrentTestCaseStats&) override {}
    void test_case_exception(const doctest::TestCaseException&) override {}
    void subcase_start(const doctest::SubcaseSignature&) override {}
    void subcase_end() override {}
    void log_assert(const doctest::AssertData&) override {}
    void log_message(const doctest::MessageData&) override {}
    void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("cudarc_start_counter", 1, StartCounter);

}  // namespace

namespace cudarc::test {

void skip_test(const std::string& why) {
    ++g_skipped;
    std::printf("SKIPPED: %s: %s\n", g_current.c_str(), why.c_str());
    std::fflush(stdout);
}

bool kernels_serialized_by_a_tool() {
    static const bool serialized = [] {
        if (std::getenv("CUDA_INJECTION64_PATH") != nullptr) return true;
        std::ifstream maps("/proc/self/maps");
        std::string line;
        while (std::getline(maps, line)) {
            if (line.find("sanitizer") != std::string::npos) return true;
        }
        return false;
    }();
    return serialized;
}

}  // namespace cudarc::test

int main(int argc, char** argv) {
    // NVLink multicast stays off in every test (docs/multi-gpu.md says why), whatever the caller's
    // environment.
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);
    bool listing = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-l", 2) == 0) listing = true;
    }
    if (!listing && !cudarc::Device::available()) {
        const std::string why = cudarc::sys::driver_load_failure();
        std::printf("SKIPPED: no GPU available%s%s\n", why.empty() ? "" : ": ", why.c_str());
        return 77;
    }
    doctest::Context context(argc, argv);
    const int result = context.run();
    if (context.shouldExit() || listing) return result;
    if (result == 0 && g_started > 0 && g_skipped == g_started) {
        std::printf("SKIPPED: every test case run here skipped itself (see above)\n");
        return 77;
    }
    return result;
}

// hip.* host tests of the CUDA -> HIP function-name table behind cudarc::Error's messages on HIP
// (Note [HIP function names]). They read the library's sources (CUDARC_SOURCE_ROOT, set by CMake) so
// that a new call site or a changed adapter cannot slip past the table. No HIP runtime is needed.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "cudarc/error.hpp"
#include "sys/backend_function_name.hpp"
#include "sys/hip/hip_function_names.hpp"

namespace fs = std::filesystem;
namespace sys = cudarc::sys;
using cudarc::Backend;

namespace {

const fs::path kSourceRoot = CUDARC_SOURCE_ROOT;

std::string read_file(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// Every CUDA entry-point name a call site reports: a string literal that starts with "cu" and a capital
// and is the whole literal or is followed by context in parentheses ("cuModuleLoadData (...)"). The
// loaders under src/sys/cuda and src/sys/hip are left out: they name entry points to resolve them.
std::map<std::string, std::string> reported_cuda_names() {
    const std::regex literal(R"re("(cu[A-Z][A-Za-z0-9_]*)(?:"| \())re");
    std::map<std::string, std::string> found;  // name -> a file that reports it
    for (const char* folder : {"src", "include"}) {
        for (const auto& entry : fs::recursive_directory_iterator(kSourceRoot / folder)) {
            const fs::path& path = entry.path();
            const std::string relative = fs::relative(path, kSourceRoot).generic_string();
            if (relative.starts_with("src/sys/cuda/") || relative.starts_with("src/sys/hip/")) continue;
            const std::string extension = path.extension().string();
            if (extension != ".cpp" && extension != ".hpp" && extension != ".h") continue;
            const std::string text = read_file(path);
            for (std::sregex_iterator it(text.begin(), text.end(), literal), end; it != end; ++it)
                found.emplace((*it)[1].str(), relative);
        }
    }
    return found;
}

// The HIP functions hip_driver.cpp resolves from libamdhip64.
std::set<std::string> resolved_hip_functions() {
    const std::string text = read_file(kSourceRoot / "src/sys/hip/hip_driver.cpp");
    const std::regex resolve(R"re(resolve\(hip\.[a-z0-9_]+,\s*"(hip[A-Za-z0-9]+)")re");
    std::set<std::string> out;
    for (std::sregex_iterator it(text.begin(), text.end(), resolve), end; it != end; ++it)
        out.insert((*it)[1].str());
    return out;
}

}  // namespace

TEST_CASE("hip.function_names_cover_every_call_the_library_reports") {
    const auto reported = reported_cuda_names();
    // The scan must have read the sources: these are reported in three different forms.
    REQUIRE(reported.size() >= 50);
    REQUIRE(reported.contains("cuMemAlloc"));           // a plain literal (src/core)
    REQUIRE(reported.contains("cuModuleLoadData"));     // a literal with context (src/rtc)
    REQUIRE(reported.contains("cuStreamIsCapturing"));  // in src/sys/driver.cpp
    for (const auto& [name, file] : reported) {
        INFO(name, " (reported in ", file, ") is not in src/sys/hip/hip_function_names.cpp");
        bool known = false;
        for (const auto& entry : sys::hip::function_names()) known = known || name == entry.cuda;
        CHECK(known);
    }
}

TEST_CASE("hip.function_names_are_functions_the_hip_backend_calls") {
    const auto resolved = resolved_hip_functions();
    REQUIRE(resolved.size() >= 60);
    REQUIRE(resolved.contains("hipMalloc"));
    // Slots HIP leaves empty (docs/hip.md, "Not supported on HIP"): their calls never reach HIP.
    const std::set<std::string> without_counterpart = {"cuStreamGetCtx", "cuPointerGetAttributes",
                                                       "cuMemGetAddressRange", "cuFuncGetParamInfo"};
    std::set<std::string> seen;
    for (const auto& entry : sys::hip::function_names()) {
        INFO("CUDA name ", entry.cuda);
        CHECK(seen.insert(entry.cuda).second);  // one entry per name
        if (entry.hip == nullptr) {
            CHECK(without_counterpart.contains(entry.cuda));
            continue;
        }
        CHECK_FALSE(without_counterpart.contains(entry.cuda));
        // "hipA/hipB": each part must be a function hip_driver.cpp resolves.
        std::stringstream parts(entry.hip);
        std::string part;
        int count = 0;
        while (std::getline(parts, part, '/')) {
            INFO("HIP name ", part);
            CHECK(resolved.contains(part));
            ++count;
        }
        CHECK(count >= 1);
    }
    CHECK(seen.size() == sys::hip::function_names().size());
}

TEST_CASE("hip.function_names_follow_the_adapters") {
    // Where the HIP name is not the CUDA name with another prefix.
    CHECK(sys::backend_function_name(Backend::hip, "cuMemAlloc") == "hipMalloc");
    CHECK(sys::backend_function_name(Backend::hip, "cuMemHostAlloc") == "hipHostMalloc");
    CHECK(sys::backend_function_name(Backend::hip, "cuLaunchKernel") == "hipModuleLaunchKernel");
    CHECK(sys::backend_function_name(Backend::hip, "cuCtxSynchronize") == "hipDeviceSynchronize");
    CHECK(sys::backend_function_name(Backend::hip, "cuDeviceGetCount") == "hipGetDeviceCount");
    CHECK(sys::backend_function_name(Backend::hip, "cuEventCreate") == "hipEventCreateWithFlags");
    CHECK(sys::backend_function_name(Backend::hip, "cuCtxEnablePeerAccess") == "hipDeviceEnablePeerAccess");
    CHECK(sys::backend_function_name(Backend::hip, "cuModuleLoadData") == "hipModuleLoadData");
    CHECK(sys::backend_function_name(Backend::hip, "cuStreamWaitEvent") == "hipStreamWaitEvent");
    CHECK(sys::backend_function_name(Backend::hip, "cuFuncSetAttribute") ==
          "hipGetDevice/hipDeviceGetAttribute");
    // Context after the name is kept.
    CHECK(sys::backend_function_name(Backend::hip, "cuModuleGetFunction ('saxpy' in a module)") ==
          "hipModuleGetFunction ('saxpy' in a module)");
}

TEST_CASE("hip.function_names_pass_unknown_names_and_cuda_through") {
    // CUDA keeps its own names, context included.
    CHECK(sys::backend_function_name(Backend::cuda, "cuMemAlloc") == "cuMemAlloc");
    CHECK(sys::backend_function_name(Backend::cuda, "cuLaunchKernel (kernel 'k')") ==
          "cuLaunchKernel (kernel 'k')");
    // Names the table does not know, names HIP has no counterpart for, HIP's own names, prefixes.
    for (const char* name : {"cuNotAnEntryPoint", "cuStreamGetCtx", "cuMemGetAddressRange", "hipInit",
                             "nvrtcCompileProgram", "cuMemAllocX", "cuMem", "", "(cuMemAlloc)"}) {
        INFO(name);
        CHECK(sys::backend_function_name(Backend::hip, name) == name);
        CHECK(sys::hip::hip_function_for(name) == nullptr);
    }
}

TEST_CASE("hip.error_names_the_hip_function_called") {
    const cudarc::Error hip_error("cuMemAlloc", 2, "hipErrorOutOfMemory", "out of memory", 0, Backend::hip);
    const std::string what = hip_error.what();
    INFO(what);
    CHECK(what.starts_with("hipMalloc failed on HIP device 0: hipErrorOutOfMemory (2)"));
    CHECK(what.find("cuMemAlloc") == std::string::npos);
    CHECK(hip_error.api() == "hipMalloc");
    CHECK(hip_error.backend() == Backend::hip);

    // With context, as rtc's call sites report.
    const cudarc::Error with_context("cuLaunchKernel (kernel 'saxpy', grid 1x1x1)", 1, "hipErrorInvalidValue",
                                     "invalid argument", -1, Backend::hip);
    CHECK(std::string(with_context.what())
              .starts_with(
                  "hipModuleLaunchKernel (kernel 'saxpy', grid 1x1x1) failed (HIP): hipErrorInvalidValue"));
    CHECK(with_context.api() == "hipModuleLaunchKernel (kernel 'saxpy', grid 1x1x1)");

    // The same call on CUDA is named as called.
    const cudarc::Error cuda_error("cuMemAlloc", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", 0,
                                   Backend::cuda);
    CHECK(std::string(cuda_error.what()).starts_with("cuMemAlloc failed on CUDA device 0"));
    CHECK(cuda_error.api() == "cuMemAlloc");
}

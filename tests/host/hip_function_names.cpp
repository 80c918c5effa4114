// hip.* host tests of the driver list's names (Note [One driver list]): what cudarc::Error and the
// "not supported" errors name on each backend. Some read the library's sources (CUDARC_SOURCE_ROOT, set by
// CMake) so that a call site spelling a driver function's name, or a HIP name no adapter calls, cannot slip
// past the list. No HIP runtime is needed.
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
#include "sys/driver_api.hpp"

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

// A string literal that starts with "cu" and a capital: a CUDA driver function's name, alone or followed by
// more text ("cuModuleLoadData (...)", "cuMemAlloc would ...").
const std::regex kCudaNameLiteral(R"re("(cu[A-Z][A-Za-z0-9_]*))re");

// Every such literal in the C++ files under `folders`, but for those under `skipped` -> a file holding it.
std::map<std::string, std::string> cuda_name_literals(std::initializer_list<const char*> folders,
                                                      std::initializer_list<const char*> skipped,
                                                      int& files_read) {
    std::map<std::string, std::string> found;
    for (const char* folder : folders) {
        for (const auto& entry : fs::recursive_directory_iterator(kSourceRoot / folder)) {
            const fs::path& path = entry.path();
            const std::string relative = fs::relative(path, kSourceRoot).generic_string();
            bool skip = false;
            for (const char* prefix : skipped) skip = skip || relative.starts_with(prefix);
            const std::string extension = path.extension().string();
            if (skip || (extension != ".cpp" && extension != ".hpp" && extension != ".h")) continue;
            const std::string text = read_file(path);
            ++files_read;
            for (std::sregex_iterator it(text.begin(), text.end(), kCudaNameLiteral), end; it != end; ++it)
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

// The list's entry for CUDA name `name`, or null.
const sys::EntryInfo* entry_named(std::string_view name) {
    for (const auto& info : sys::driver_entries()) {
        if (name == info.cuda_name) return &info;
    }
    return nullptr;
}

}  // namespace

TEST_CASE("hip.driver_list_is_the_only_place_that_names_driver_functions") {
    // The scan works: it finds every CUDA name in the list itself.
    int list_files = 0;
    const auto in_sys = cuda_name_literals({"src/sys"}, {}, list_files);
    REQUIRE(list_files >= 10);
    const std::string list = read_file(kSourceRoot / "src/sys/driver_entries.hpp");
    for (const auto& info : sys::driver_entries()) {
        INFO(info.cuda_name);
        CHECK(in_sys.contains(info.cuda_name));
        CHECK(list.find("\"" + std::string(info.cuda_name) + "\"") != std::string::npos);
    }
    // Outside src/sys nothing spells one: call sites give sys::Entry, and the name comes from the list.
    int files = 0;
    const auto outside = cuda_name_literals({"src"}, {"src/sys/"}, files);
    REQUIRE(files >= 40);
    // Note: by element, not structured bindings: clang 14 does not capture those in INFO's lambda.
    for (const auto& spelled : outside) {
        const auto& name = spelled.first;
        INFO(name, " is spelled in ", spelled.second,
             ": name it by its sys::Entry (src/sys/driver_entries.hpp)");
        CHECK(entry_named(name) == nullptr);
    }
    CHECK(outside.empty());
}

TEST_CASE("hip.driver_list_names_functions_the_hip_backend_calls") {
    const auto resolved = resolved_hip_functions();
    REQUIRE(resolved.size() >= 60);
    REQUIRE(resolved.contains("hipMalloc"));
    // Slots HIP leaves empty (docs/hip.md, "Not supported on HIP"): their calls never reach HIP.
    const std::set<std::string> without_counterpart = {"cuStreamGetCtx", "cuPointerGetAttributes",
                                                       "cuMemGetAddressRange", "cuFuncGetParamInfo"};
    std::set<std::string> seen;
    std::size_t index = 0;
    for (const auto& entry : sys::driver_entries()) {
        INFO("CUDA name ", entry.cuda_name);
        CHECK(static_cast<std::size_t>(entry.entry) == index++);  // Entry's value is the position
        CHECK(seen.insert(entry.cuda_name).second);               // one entry per name
        CHECK(std::string(sys::entry_name(Backend::cuda, entry.entry)) == entry.cuda_name);
        if (entry.hip_name == nullptr) {
            CHECK(without_counterpart.contains(entry.cuda_name));
            CHECK(std::string(sys::entry_name(Backend::hip, entry.entry)) == entry.cuda_name);
            continue;
        }
        CHECK_FALSE(without_counterpart.contains(entry.cuda_name));
        CHECK(std::string(sys::entry_name(Backend::hip, entry.entry)) == entry.hip_name);
        // "hipA/hipB": each part must be a function hip_driver.cpp resolves.
        std::stringstream parts(entry.hip_name);
        std::string part;
        int count = 0;
        while (std::getline(parts, part, '/')) {
            INFO("HIP name ", part);
            CHECK(resolved.contains(part));
            ++count;
        }
        CHECK(count >= 1);
    }
    CHECK(seen.size() == sys::driver_entries().size());
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
        const sys::EntryInfo* entry = entry_named(name);
        CHECK((entry == nullptr || entry->hip_name == nullptr));
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

TEST_CASE("hip.driver_errors_name_the_backends_function") {
    sys::DriverApi cuda_api;  // no error-name entries: the codes are described as unknown
    cuda_api.backend = Backend::cuda;
    sys::DriverApi hip_api;
    hip_api.backend = Backend::hip;

    const cudarc::Error on_cuda = sys::make_error(cuda_api, sys::Entry::stream_destroy, 1, 0);
    CHECK(std::string(on_cuda.what()) ==
          "cuStreamDestroy failed on CUDA device 0: unknown error code (1): no description");
    CHECK(on_cuda.api() == "cuStreamDestroy");
    const cudarc::Error on_hip = sys::make_error(hip_api, sys::Entry::stream_destroy, 1, 0);
    CHECK(std::string(on_hip.what()) ==
          "hipStreamDestroy failed on HIP device 0: unknown error code (1): no description");
    CHECK(on_hip.api() == "hipStreamDestroy");
    // Context follows the name as given.
    const cudarc::Error in_context =
        sys::make_error(cuda_api, sys::Entry::module_get_function, 500, -1, " ('saxpy' in PTX)");
    CHECK(std::string(in_context.what())
              .starts_with("cuModuleGetFunction ('saxpy' in PTX) failed (CUDA): unknown error code (500)"));
    CHECK(std::string(sys::make_error(hip_api, sys::Entry::mem_alloc, 2, -1).what())
              .starts_with("hipMalloc failed (HIP)"));

    // A missing optional entry point is named as the backend names it; one HIP has no counterpart for
    // keeps its CUDA name.
    CHECK_THROWS_WITH_AS((void)sys::require(cuda_api, cuda_api.mem_alloc_async, sys::Entry::mem_alloc_async),
                         "cudarc: cuMemAllocAsync is not supported on CUDA by the loaded driver",
                         cudarc::Error);
    CHECK_THROWS_WITH_AS((void)sys::require(hip_api, hip_api.mem_alloc_async, sys::Entry::mem_alloc_async),
                         "cudarc: hipMallocAsync is not supported on HIP by the loaded driver",
                         cudarc::Error);
    CHECK_THROWS_WITH_AS((void)sys::require(hip_api, hip_api.stream_get_ctx, sys::Entry::stream_get_ctx),
                         "cudarc: cuStreamGetCtx is not supported on HIP by the loaded driver",
                         cudarc::Error);
    CHECK_THROWS_WITH_AS(sys::throw_missing_entry_point(cuda_api, sys::Entry::launch_kernel_ex,
                                                        " (needed for cluster launches)"),
                         "cudarc: cuLaunchKernelEx (needed for cluster launches) is not supported on CUDA by "
                         "the loaded driver",
                         cudarc::Error);
    // A present entry point comes back as it is.
    hip_api.mem_alloc_async = [](cudarc::DevicePtr*, std::size_t, sys::Stream) { return sys::kSuccess; };
    const bool same = sys::require(hip_api, hip_api.mem_alloc_async, sys::Entry::mem_alloc_async) ==
                      hip_api.mem_alloc_async;
    CHECK(same);
}

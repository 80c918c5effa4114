// hip.* host tests of the HIP runtime loader and its adapters. They need ROCm's HIP runtime
// (libamdhip64) but no AMD GPU: on a machine without one, hipInit must fail cleanly.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "hip_test_support.hpp"
#include "sys/driver_api.hpp"
#include "sys/hip/hip_runtime_loader.hpp"

namespace sys = cudarc::sys;

namespace {

std::ptrdiff_t position_of(const std::vector<std::string>& list, const std::string& item) {
    const auto it = std::find(list.begin(), list.end(), item);
    return it == list.end() ? -1 : it - list.begin();
}

// The HIP runtime as the library itself would find it (CUDARC_HIP_LIBRARY, ROCM_PATH, sonames).
sys::HipLoadReport load_real_runtime(sys::DriverApi& api) {
    const char* override_path = std::getenv("CUDARC_HIP_LIBRARY");
    const char* rocm_path = std::getenv("ROCM_PATH");
    return sys::load_hip_runtime_from(
        sys::hip_runtime_candidates(override_path != nullptr ? override_path : "",
                                    rocm_path != nullptr ? rocm_path : ""),
        api);
}

// True when the runtime loaded and reports at least one AMD GPU (never in CI).
bool has_amd_gpu(const sys::DriverApi& api, const sys::HipLoadReport& report) {
    if (report.stage != sys::HipLoadStage::ready) return false;
    int count = 0;
    return api.device_get_count(&count) == sys::kSuccess && count > 0;
}

}  // namespace

TEST_CASE("hip.runtime_candidates_follow_the_documented_order") {
    const auto defaults = sys::hip_runtime_candidates("", "");
    const auto v7 = position_of(defaults, "libamdhip64.so.7");
    const auto v6 = position_of(defaults, "libamdhip64.so.6");
    const auto v5 = position_of(defaults, "libamdhip64.so.5");
    const auto unversioned = position_of(defaults, "libamdhip64.so");
    REQUIRE(v7 >= 0);
    REQUIRE(v6 >= 0);
    REQUIRE(v5 >= 0);
    REQUIRE(unversioned >= 0);
    CHECK(v7 < v6);
    CHECK(v6 < v5);
    CHECK(v5 < unversioned);
    CHECK(position_of(defaults, "/opt/rocm/lib/libamdhip64.so.6") >= 0);

    // $ROCM_PATH/lib comes before everything else.
    const auto with_rocm = sys::hip_runtime_candidates("", "/my/rocm");
    REQUIRE_FALSE(with_rocm.empty());
    CHECK(with_rocm.front() == "/my/rocm/lib/libamdhip64.so.7");
    CHECK(position_of(with_rocm, "/my/rocm/lib/libamdhip64.so.5") <
          position_of(with_rocm, "libamdhip64.so.7"));

    // An override file is the only candidate: no silent fallback to another library.
    const auto overridden = sys::hip_runtime_candidates("/somewhere/libamdhip64.so.6", "/my/rocm");
    CHECK(overridden == std::vector<std::string>{"/somewhere/libamdhip64.so.6"});

    // An override folder names where to look for the sonames.
    const auto folder = std::filesystem::temp_directory_path().string();
    const auto in_folder = sys::hip_runtime_candidates(folder, "");
    REQUIRE_FALSE(in_folder.empty());
    CHECK(std::all_of(in_folder.begin(), in_folder.end(), [&](const std::string& path) {
        return path.rfind(folder + "/libamdhip64.so", 0) == 0;
    }));
}

TEST_CASE("hip.runtime_missing_library_names_what_was_tried") {
    sys::DriverApi api;
    const auto report = sys::load_hip_runtime_from({"/nonexistent/rocm/lib/libamdhip64.so.6"}, api);
    CHECK(report.stage == sys::HipLoadStage::library_missing);
    CHECK(report.library_path.empty());
    CHECK(report.why.find("/nonexistent/rocm/lib/libamdhip64.so.6") != std::string::npos);
    CHECK(report.why.find("CUDARC_HIP_LIBRARY") != std::string::npos);
    CHECK((api.init == nullptr));  // nothing was filled in

    const auto none = sys::load_hip_runtime_from({}, api);
    CHECK(none.stage == sys::HipLoadStage::library_missing);
    CHECK(none.why.find("no candidate") != std::string::npos);
}

TEST_CASE("hip.runtime_rejects_a_library_without_hip") {
    sys::DriverApi api;
    const auto report = sys::load_hip_runtime_from({"libm.so.6"}, api);
    CHECK(report.stage == sys::HipLoadStage::entry_points_missing);
    CHECK(report.why.find("libm.so.6") != std::string::npos);
    CHECK(report.why.find("hipInit") != std::string::npos);
    CHECK((api.init == nullptr));
}

TEST_CASE("hip.runtime_loads_and_hipinit_fails_cleanly_without_a_gpu") {
    if (hip_test::skipped_by_request()) return;
    sys::DriverApi api;
    const auto report = load_real_runtime(api);
    INFO("load report: ", report.why);
    REQUIRE_MESSAGE(
        report.stage != sys::HipLoadStage::library_missing,
        "libamdhip64 is not installed; CI installs .ci/hip-packages.txt (set CUDARC_SKIP_HIP_TESTS=1 "
        "to skip the HIP tests on a developer machine without ROCm)");
    REQUIRE(report.stage != sys::HipLoadStage::entry_points_missing);
    CHECK(std::filesystem::exists(report.library_path));
    CHECK(report.library_path.find("libamdhip64") != std::string::npos);

    // The table is HIP's, complete where HIP has the entry point, null where it has none.
    CHECK(api.backend == cudarc::Backend::hip);
    CHECK((api.init != nullptr));
    CHECK((api.device_get_attribute != nullptr));
    CHECK((api.stream_create_with_priority != nullptr));
    CHECK((api.event_record != nullptr));
    CHECK((api.memcpy_htod_async != nullptr));
    CHECK((api.module_load_data != nullptr));
    CHECK((api.launch_kernel != nullptr));
    CHECK((api.func_get_param_info == nullptr));
    CHECK((api.launch_kernel_ex == nullptr));
    CHECK((api.stream_get_ctx == nullptr));

    if (report.stage == sys::HipLoadStage::ready) {
        MESSAGE("hipInit succeeded here (an AMD GPU or a ROCm runtime that reports none)");
        int count = -1;
        CHECK(api.device_get_count(&count) == sys::kSuccess);
        CHECK(count >= 0);
        return;
    }
    CHECK(report.stage == sys::HipLoadStage::init_failed);
    CHECK(report.init_result != sys::kSuccess);
    CHECK(report.why.find("hipInit") != std::string::npos);
    CHECK(report.why.find(report.library_path) != std::string::npos);
    CHECK(report.why.find("HIP") != std::string::npos);
}

TEST_CASE("hip.result_codes_mirror_the_cuda_codes_core_code_checks") {
    if (hip_test::skipped_by_request()) return;
    // Core code tests raw results against CUresult numbers; the HIP runtime must name the same
    // condition under each of those numbers (hipGetErrorName of the installed runtime).
    sys::DriverApi api;
    const auto report = load_real_runtime(api);
    REQUIRE(report.stage != sys::HipLoadStage::library_missing);
    REQUIRE((api.get_error_name != nullptr));
    struct Expectation {
        sys::Result code;
        std::vector<std::string> hip_names;  // HIP has aliases for a few codes
    };
    const std::vector<Expectation> expectations = {
        {sys::kSuccess, {"hipSuccess"}},
        {sys::kErrorInvalidValue, {"hipErrorInvalidValue"}},
        {sys::kErrorOutOfMemory, {"hipErrorOutOfMemory", "hipErrorMemoryAllocation"}},
        {sys::kErrorNotInitialized, {"hipErrorNotInitialized", "hipErrorInitializationError"}},
        {sys::kErrorDeinitialized, {"hipErrorDeinitialized"}},
        {sys::kErrorNoDevice, {"hipErrorNoDevice"}},
        {sys::kErrorNotFound, {"hipErrorNotFound"}},
        {sys::kErrorNotReady, {"hipErrorNotReady"}},
        {sys::kErrorNotSupported, {"hipErrorNotSupported"}},
        {sys::kErrorStreamCaptureUnsupported, {"hipErrorStreamCaptureUnsupported"}},
    };
    for (const auto& expectation : expectations) {
        const char* name = nullptr;
        REQUIRE(api.get_error_name(expectation.code, &name) == sys::kSuccess);
        REQUIRE(name != nullptr);
        INFO("code ", expectation.code, " is named ", name);
        CHECK(std::find(expectation.hip_names.begin(), expectation.hip_names.end(), std::string(name)) !=
              expectation.hip_names.end());
        const char* text = nullptr;
        CHECK(api.get_error_string(expectation.code, &text) == sys::kSuccess);
        CHECK(text != nullptr);
    }
    // An Error built from a HIP result names the HIP condition and the backend.
    const cudarc::Error error = sys::make_error(api, sys::Entry::stream_query, sys::kErrorNotReady, 0);
    const std::string what = error.what();
    CHECK(what.find("hipErrorNotReady") != std::string::npos);
    CHECK(what.find("HIP device 0") != std::string::npos);
    CHECK(error.backend() == cudarc::Backend::hip);
    // ... and the HIP function the adapter called, not the CUDA entry point (Note [One driver list]).
    CHECK(what.starts_with("hipStreamQuery failed"));
    CHECK(error.api() == "hipStreamQuery");
}

TEST_CASE("hip.adapters_fail_cleanly_without_a_gpu") {
    if (hip_test::skipped_by_request()) return;
    sys::DriverApi api;
    const auto report = load_real_runtime(api);
    REQUIRE(report.stage != sys::HipLoadStage::library_missing);
    REQUIRE(report.stage != sys::HipLoadStage::entry_points_missing);

    // A CUDA attribute HIP has no counterpart for is refused before HIP is asked.
    int value = 12345;
    CHECK(api.device_get_attribute(&value, 100000, 0) == sys::kErrorNotSupported);
    CHECK(value == 12345);
    CHECK(api.func_set_attribute(nullptr, cudarc::sys::func_attr::kNumRegs, 1) == sys::kErrorNotSupported);

    if (has_amd_gpu(api, report)) {
        int warp = 0;
        CHECK(api.device_get_attribute(&warp, sys::attr::kWarpSize, 0) == sys::kSuccess);
        CHECK((warp == 32 || warp == 64));
        const std::string arch = sys::hip_device_offload_arch(0);
        CHECK(arch.rfind("gfx", 0) == 0);
        return;
    }
    // No device: every query fails with a HIP result (no crash), and outputs stay untouched.
    value = 12345;
    CHECK(api.device_get_attribute(&value, sys::attr::kWarpSize, 0) != sys::kSuccess);
    CHECK(value == 12345);
    sys::Stream stream = nullptr;
    CHECK(api.stream_create_with_priority(&stream, sys::kStreamNonBlocking, 0) != sys::kSuccess);
    CHECK(stream == nullptr);
    sys::DevicePtr ptr = 0;
    CHECK(api.mem_alloc(&ptr, 256) != sys::kSuccess);
    CHECK(ptr == 0);
    CHECK_THROWS_AS((void)sys::hip_device_offload_arch(0), cudarc::Error);
}

TEST_CASE("hip.launch_extra_gets_hips_end_marker") {
    // CUDA ends the `extra` list with 0x0, HIP with 0x3; the key/value pairs pass unchanged.
    std::mt19937_64 random(std::random_device{}());
    int buffer_value = 0;
    std::size_t size = random() % 4096;
    void* const cuda_extra[] = {reinterpret_cast<void*>(std::uintptr_t{1}), &buffer_value,
                                reinterpret_cast<void*>(std::uintptr_t{2}), &size, nullptr};
    std::array<void*, 8> out{};
    REQUIRE(sys::translate_launch_extra(cuda_extra, out));
    CHECK(out[0] == cuda_extra[0]);
    CHECK(out[1] == cuda_extra[1]);
    CHECK(out[2] == cuda_extra[2]);
    CHECK(out[3] == cuda_extra[3]);
    CHECK(reinterpret_cast<std::uintptr_t>(out[4]) == 0x3);

    void* const empty[] = {nullptr};
    REQUIRE(sys::translate_launch_extra(empty, out));
    CHECK(reinterpret_cast<std::uintptr_t>(out[0]) == 0x3);

    // Too long for the output: refused, not overrun.
    std::array<void*, 4> small{};
    CHECK_FALSE(sys::translate_launch_extra(cuda_extra, small));
}

TEST_CASE("hip.gcn_arch_name_is_found_in_any_device_properties_layout") {
    std::mt19937_64 random(std::random_device{}());
    for (int round = 0; round < 50; ++round) {
        // A fake hipDeviceProp_t: filler bytes, the device name first, gcnArchName at a random offset,
        // and a random non-NUL byte (the end of an integer field) right before it.
        std::vector<char> properties(2048);
        for (auto& byte : properties) byte = static_cast<char>(random() % 256);
        const std::string device_name = "AMD Instinct MI210";
        std::copy(device_name.begin(), device_name.end(), properties.begin());
        properties[device_name.size()] = '\0';
        const std::string arch = round % 2 == 0 ? "gfx90a:sramecc+:xnack-" : "gfx1030";
        const std::size_t offset = 300 + random() % 1400;
        properties[offset - 1] = static_cast<char>(0x80 + random() % 0x7f);  // not a letter or digit
        std::copy(arch.begin(), arch.end(), properties.begin() + static_cast<std::ptrdiff_t>(offset));
        properties[offset + arch.size()] = '\0';
        // Filler that happens to read "gfx..." must not be taken.
        for (std::size_t i = 0; i + 3 < properties.size(); ++i) {
            if (i + 3 >= offset && i <= offset + arch.size()) continue;
            if (properties[i] == 'g' && properties[i + 1] == 'f' && properties[i + 2] == 'x')
                properties[i] = 'G';
        }
        CHECK(sys::find_gcn_arch_name(properties) == arch);
    }
    // A bare processor name loses to a full target ID, wherever they are.
    std::vector<char> both(512, '\0');
    const std::string bare = "gfx90a";
    const std::string full = "gfx90a:sramecc-:xnack+";
    std::copy(bare.begin(), bare.end(), both.begin() + 10);
    std::copy(full.begin(), full.end(), both.begin() + 300);
    CHECK(sys::find_gcn_arch_name(both) == full);
    // Inside a longer word, or not NUL-terminated: not an arch name.
    std::vector<char> none(64, '\0');
    const std::string word = "xgfx90a";
    std::copy(word.begin(), word.end(), none.begin());
    CHECK(sys::find_gcn_arch_name(none).empty());
    std::vector<char> unterminated = {'g', 'f', 'x', '9', '0', 'a'};
    CHECK(sys::find_gcn_arch_name(unterminated).empty());
}

TEST_CASE("hip.driver_version_is_reported_in_cudas_encoding") {
    std::mt19937 random(std::random_device{}());
    for (int round = 0; round < 100; ++round) {
        const int major = 5 + static_cast<int>(random() % 5);
        const int minor = static_cast<int>(random() % 100);
        const int patch = static_cast<int>(random() % 100000);
        const int hip_version = major * 10000000 + minor * 100000 + patch;
        const int cuda_encoding = sys::hip_version_as_cuda_encoding(hip_version);
        CHECK(cuda_encoding / 1000 == major);
        CHECK((cuda_encoding % 1000) / 10 == minor);
    }
    if (hip_test::skipped_by_request()) return;
    // hipDriverGetVersion answers without a GPU; the table reports it as CUDA would (5020 for 5.2).
    sys::DriverApi api;
    const auto report = load_real_runtime(api);
    REQUIRE(report.stage != sys::HipLoadStage::library_missing);
    int version = 0;
    REQUIRE(api.driver_get_version(&version) == sys::kSuccess);
    MESSAGE("HIP driver version ", version / 1000, ".", (version % 1000) / 10);
    CHECK(version / 1000 >= 5);
    CHECK(version / 1000 < 100);
}

// hip.* host tests of run-time backend selection (CUDA, else HIP; CUDARC_BACKEND forces one).
// Selection runs from scratch through sys::select_backend: driver() caches its choice per process.
#include <doctest/doctest.h>

#include <string>

#include "hip_test_support.hpp"
#include "sys/backend_selection.hpp"
#include "sys/driver_api.hpp"

namespace sys = cudarc::sys;

namespace {

// Stand-in loaders: a backend that loads, initializes and reports a given number of devices, or one
// that fails with a given reason. Plain functions, as the loader slots are function pointers.
int g_cuda_devices = 0;
int g_hip_devices = 0;

sys::Result count_cuda(int* count) {
    *count = g_cuda_devices;
    return sys::kSuccess;
}
sys::Result count_hip(int* count) {
    *count = g_hip_devices;
    return sys::kSuccess;
}
bool fake_cuda(sys::DriverApi& api, std::string&) {
    api = sys::DriverApi{};
    api.backend = cudarc::Backend::cuda;
    api.device_get_count = count_cuda;
    return true;
}
bool fake_hip(sys::DriverApi& api, std::string&) {
    api = sys::DriverApi{};
    api.backend = cudarc::Backend::hip;
    api.device_get_count = count_hip;
    return true;
}
bool missing_cuda(sys::DriverApi&, std::string& why) {
    why = "libcuda.so.1 not found (stand-in)";
    return false;
}
bool missing_hip(sys::DriverApi&, std::string& why) {
    why = "libamdhip64.so.6 not found (stand-in)";
    return false;
}

}  // namespace

TEST_CASE("hip.backend_request_parsing") {
    CHECK(sys::parse_backend_request("") == sys::BackendRequest::automatic);
    CHECK(sys::parse_backend_request("cuda") == sys::BackendRequest::cuda);
    CHECK(sys::parse_backend_request("CUDA") == sys::BackendRequest::cuda);
    CHECK(sys::parse_backend_request("hip") == sys::BackendRequest::hip);
    CHECK(sys::parse_backend_request("Hip") == sys::BackendRequest::hip);
    for (const char* bad : {"rocm", "cuda ", "opencl", "1", "hip,cuda"}) {
        INFO("value: '", bad, "'");
        try {
            (void)sys::parse_backend_request(bad);
            FAIL("an unknown CUDARC_BACKEND value was accepted");
        } catch (const cudarc::Error& e) {
            const std::string what = e.what();
            CHECK(what.find("CUDARC_BACKEND") != std::string::npos);
            CHECK(what.find(std::string("\"") + bad + "\"") != std::string::npos);
            CHECK(what.find("\"cuda\"") != std::string::npos);
            CHECK(what.find("\"hip\"") != std::string::npos);
        }
    }
}

TEST_CASE("hip.automatic_selection_prefers_cuda_with_a_device") {
    g_cuda_devices = 1;
    g_hip_devices = 2;
    const auto selection = sys::select_backend(sys::BackendRequest::automatic, {fake_cuda, fake_hip});
    CHECK(selection.ok);
    CHECK(selection.failure.empty());
    CHECK(selection.api.backend == cudarc::Backend::cuda);
}

TEST_CASE("hip.automatic_selection_falls_back_to_hip") {
    g_hip_devices = 1;
    SUBCASE("CUDA driver missing") {
        const auto selection = sys::select_backend(sys::BackendRequest::automatic, {missing_cuda, fake_hip});
        CHECK(selection.ok);
        CHECK(selection.api.backend == cudarc::Backend::hip);
    }
    SUBCASE("CUDA driver present but without a device") {
        g_cuda_devices = 0;
        const auto selection = sys::select_backend(sys::BackendRequest::automatic, {fake_cuda, fake_hip});
        CHECK(selection.ok);
        CHECK(selection.api.backend == cudarc::Backend::hip);
    }
}

TEST_CASE("hip.automatic_selection_explains_both_failures") {
    g_cuda_devices = 0;
    g_hip_devices = 0;
    SUBCASE("neither loads") {
        const auto selection =
            sys::select_backend(sys::BackendRequest::automatic, {missing_cuda, missing_hip});
        CHECK_FALSE(selection.ok);
        CHECK(selection.failure.find("libcuda.so.1 not found (stand-in)") != std::string::npos);
        CHECK(selection.failure.find("libamdhip64.so.6 not found (stand-in)") != std::string::npos);
        CHECK(selection.failure.find("CUDA:") < selection.failure.find("HIP:"));
        CHECK((selection.api.init == nullptr));
    }
    SUBCASE("both load, neither has a device") {
        const auto selection = sys::select_backend(sys::BackendRequest::automatic, {fake_cuda, fake_hip});
        CHECK_FALSE(selection.ok);
        CHECK(selection.failure.find("CUDA driver loaded and initialized but reports no device") !=
              std::string::npos);
        CHECK(selection.failure.find("HIP driver loaded and initialized but reports no device") !=
              std::string::npos);
        CHECK((selection.api.device_get_count == nullptr));  // no half-chosen table is handed out
    }
}

TEST_CASE("hip.forced_backend_is_the_only_one_tried") {
    g_cuda_devices = 1;
    g_hip_devices = 1;
    const auto hip = sys::select_backend(sys::BackendRequest::hip, {fake_cuda, fake_hip});
    CHECK(hip.ok);
    CHECK(hip.api.backend == cudarc::Backend::hip);

    const auto cuda_missing = sys::select_backend(sys::BackendRequest::cuda, {missing_cuda, fake_hip});
    CHECK_FALSE(cuda_missing.ok);
    CHECK(cuda_missing.failure.find("CUDARC_BACKEND=cuda") != std::string::npos);
    CHECK(cuda_missing.failure.find("libcuda.so.1 not found (stand-in)") != std::string::npos);
    CHECK(cuda_missing.failure.find("libamdhip64") == std::string::npos);

    // Forced, a backend without devices is still chosen: Device::count() then says 0.
    g_hip_devices = 0;
    const auto hip_empty = sys::select_backend(sys::BackendRequest::hip, {missing_cuda, fake_hip});
    CHECK(hip_empty.ok);
}

TEST_CASE("hip.forced_hip_without_a_gpu_gives_a_clear_error") {
    if (hip_test::skipped_by_request()) return;
    // The real loaders, as CUDARC_BACKEND=hip would run them on a machine without an AMD GPU (CI).
    const auto selection = sys::select_backend(sys::BackendRequest::hip);
    if (selection.ok) {
        MESSAGE("hipInit succeeded on this machine; the failure path is covered where there is no AMD GPU");
        CHECK(selection.api.backend == cudarc::Backend::hip);
        return;
    }
    INFO(selection.failure);
    CHECK(selection.failure.find("CUDARC_BACKEND=hip") != std::string::npos);
    CHECK(selection.failure.find("hipInit") != std::string::npos);
    CHECK(selection.failure.find("libamdhip64") != std::string::npos);
    CHECK(selection.failure.find("could not be loaded") == std::string::npos);  // it did load
}

TEST_CASE("hip.automatic_selection_with_the_real_loaders_never_crashes") {
    if (hip_test::skipped_by_request()) return;
    const auto selection = sys::select_backend(sys::BackendRequest::automatic);
    if (selection.ok) {
        int count = 0;
        REQUIRE(selection.api.device_get_count(&count) == sys::kSuccess);
        CHECK(count >= 1);
        return;
    }
    INFO(selection.failure);
    CHECK(selection.failure.find("CUDA:") != std::string::npos);
    CHECK(selection.failure.find("HIP:") != std::string::npos);
    CHECK(selection.failure.find("hipInit") != std::string::npos);  // the HIP runtime loaded, then failed
}

// Loading NVRTC at run time: the search order and the failure message. The process-wide loader
// runs once, so these tests go through the explicit-candidate seam (load_nvrtc_from).
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "rtc_test_support.hpp"
#include "sys/nvrtc/nvrtc_loader.hpp"

using namespace cudarc;

namespace {
bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("rtc.loader_search_order") {
    const auto defaults = sys::nvrtc_candidates("");
    REQUIRE(defaults.size() >= 4);
    CHECK(defaults[0] == "libnvrtc.so.13");
    CHECK(defaults[1] == "libnvrtc.so.12");
    const auto position = [&](const std::string& path) {
        return std::find(defaults.begin(), defaults.end(), path) - defaults.begin();
    };
    const auto toolkit13 = position("/usr/local/cuda/lib64/libnvrtc.so.13");
    const auto toolkit12 = position("/usr/local/cuda/lib64/libnvrtc.so.12");
    CHECK(toolkit13 < static_cast<long>(defaults.size()));
    CHECK(toolkit12 < static_cast<long>(defaults.size()));
    CHECK(toolkit13 < toolkit12);

    // An override is the only candidate: a file as given, a folder searched for the sonames.
    CHECK(sys::nvrtc_candidates("/opt/nvrtc/libnvrtc.so.13.0") ==
          std::vector<std::string>{"/opt/nvrtc/libnvrtc.so.13.0"});
    test::TemporaryFolder folder;
    const auto in_folder = sys::nvrtc_candidates(folder.path().string());
    REQUIRE(in_folder.size() == 3);
    CHECK(in_folder[0] == folder.path().string() + "/libnvrtc.so.13");
}

TEST_CASE("rtc.loader_failure_names_every_place_tried") {
    test::TemporaryFolder folder;
    const std::string not_a_library = (folder.path() / "libnvrtc.so.13").string();
    {
        std::ofstream file(not_a_library);
        file << "this is not an ELF file\n";
    }
    const std::string missing = "/nonexistent/cudarc-test/libnvrtc.so.13";
    const std::string wrong_library = "libm.so.6";  // loads, but has no NVRTC entry points
    sys::RtcApi api;
    std::string why;
    CHECK_FALSE(sys::load_nvrtc_from({missing, not_a_library, wrong_library}, api, why));
    CHECK((api.compile_program == nullptr));  // the table is left as it was
    INFO(why);
    CHECK(contains(why, missing));
    CHECK(contains(why, not_a_library));
    CHECK(contains(why, "libm.so.6: not a usable NVRTC (lacks nvrtcVersion"));
    CHECK(contains(why, "CUDARC_NVRTC"));  // how to point cudarc at a library

    // The bogus-override case: CUDARC_NVRTC names one path and nothing else is tried.
    CHECK_FALSE(sys::load_nvrtc_from(sys::nvrtc_candidates(missing), api, why));
    CHECK(contains(why, missing));
    CHECK_FALSE(contains(why, "/usr/local/cuda"));
}

TEST_CASE("rtc.loader_loads_from_default_candidates") {
    sys::RtcApi api;
    std::string why;
    REQUIRE_MESSAGE(sys::load_nvrtc_from(sys::nvrtc_candidates(""), api, why), why);
    CHECK(api.backend == Backend::cuda);
    CHECK(std::filesystem::path(api.library_path).is_absolute());
    int major = 0;
    int minor = 0;
    REQUIRE(api.version(&major, &minor) == sys::kRtcSuccess);
    CHECK(major >= 12);
    CHECK((api.get_lowered_name != nullptr));
    CHECK(std::string(api.get_error_string(sys::kRtcErrorCompilation)) == "NVRTC_ERROR_COMPILATION");
}

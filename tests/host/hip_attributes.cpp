// hip.* host tests of the CUDA -> HIP device attribute table: every number is checked against the
// enumerations in the vendor headers installed on this machine (read as text, never included).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "hip_test_support.hpp"
#include "sys/driver_api.hpp"
#include "sys/hip/hip_attributes.hpp"

namespace sys = cudarc::sys;
namespace hip = cudarc::sys::hip;

namespace {

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string without_comments(const std::string& text) {
    std::string out;
    for (std::size_t i = 0; i < text.size();) {
        if (text.compare(i, 2, "//") == 0) {
            i = text.find('\n', i);
            if (i == std::string::npos) break;
        } else if (text.compare(i, 2, "/*") == 0) {
            i = text.find("*/", i);
            if (i == std::string::npos) break;
            i += 2;
        } else {
            out += text[i++];
        }
    }
    return out;
}

std::string trimmed(const std::string& text) {
    const auto first = text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return {};
    const auto last = text.find_last_not_of(" \t\r\n");
    return text.substr(first, last - first + 1);
}

// The enumerators of the C enum whose body follows `opening` (e.g. "typedef enum hipDeviceAttribute_t {"),
// with C's numbering rules: an explicit value (a number or an earlier name), else the previous + 1.
std::map<std::string, long> parse_enum(const std::string& header, const std::string& opening) {
    std::map<std::string, long> values;
    const auto start = header.find(opening);
    if (start == std::string::npos) return values;
    const auto body_start = start + opening.size();
    const auto body_end = header.find('}', body_start);
    if (body_end == std::string::npos) return values;
    std::stringstream body(without_comments(header.substr(body_start, body_end - body_start)));
    std::string item;
    long next = 0;
    while (std::getline(body, item, ',')) {
        item = trimmed(item);
        if (item.empty()) continue;
        const auto equals = item.find('=');
        const std::string name = trimmed(item.substr(0, equals));
        long value = next;
        if (equals != std::string::npos) {
            const std::string expression = trimmed(item.substr(equals + 1));
            if (const auto it = values.find(expression); it != values.end()) {
                value = it->second;
            } else {
                value = std::strtol(expression.c_str(), nullptr, 0);
            }
        }
        values[name] = value;
        next = value + 1;
    }
    return values;
}

std::optional<std::filesystem::path> first_existing(const std::vector<std::string>& paths) {
    for (const auto& path : paths) {
        if (!path.empty() && std::filesystem::exists(path)) return path;
    }
    return std::nullopt;
}

std::string env(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? value : "";
}

}  // namespace

TEST_CASE("hip.attribute_table_matches_the_installed_vendor_headers") {
    if (hip_test::skipped_by_request()) return;
    const auto hip_header =
        first_existing({env("ROCM_PATH").empty() ? "" : env("ROCM_PATH") + "/include/hip/hip_runtime_api.h",
                        "/opt/rocm/include/hip/hip_runtime_api.h", "/usr/include/hip/hip_runtime_api.h"});
    REQUIRE_MESSAGE(hip_header.has_value(),
                    "hip_runtime_api.h not found: install libamdhip64-dev (.ci/hip-packages.txt)");
    const auto hip_values = parse_enum(read_file(*hip_header), "typedef enum hipDeviceAttribute_t {");
    REQUIRE_MESSAGE(hip_values.size() > 50, "could not read hipDeviceAttribute_t from ",
                    hip_header->string());

    for (const auto& mapping : hip::attribute_mappings()) {
        const std::string hip_name = std::string("hipDeviceAttribute") + mapping.hip_name;
        INFO("CUDA ", mapping.cuda_name, " -> ", hip_name);
        REQUIRE(hip_values.count(hip_name) == 1);
        CHECK(hip_values.at(hip_name) == mapping.hip);
        if (mapping.hip_fallback >= 0) {
            const std::string fallback = std::string("hipDeviceAttribute") + mapping.hip_fallback_name;
            REQUIRE(hip_values.count(fallback) == 1);
            CHECK(hip_values.at(fallback) == mapping.hip_fallback);
        }
    }

    // cuda.h comes with the CUDA toolkit, which is not a HIP package: checked where present.
    const auto cuda_header =
        first_existing({env("CUDA_PATH").empty() ? "" : env("CUDA_PATH") + "/include/cuda.h",
                        "/usr/local/cuda/include/cuda.h", "/usr/include/cuda.h"});
    if (!cuda_header) {
        MESSAGE("cuda.h not found: the CUDA side of the table was not checked here");
        return;
    }
    const auto cuda_values = parse_enum(read_file(*cuda_header), "typedef enum CUdevice_attribute_enum {");
    REQUIRE_MESSAGE(cuda_values.size() > 50, "could not read CUdevice_attribute from ",
                    cuda_header->string());
    for (const auto& mapping : hip::attribute_mappings()) {
        const std::string cuda_name = std::string("CU_DEVICE_ATTRIBUTE_") + mapping.cuda_name;
        INFO(cuda_name);
        REQUIRE(cuda_values.count(cuda_name) == 1);
        CHECK(cuda_values.at(cuda_name) == mapping.cuda);
    }
}

TEST_CASE("hip.attribute_table_covers_every_attribute_the_library_reads") {
    // Every sys::attr constant (driver_api.hpp) must be answerable on HIP.
    const std::vector<int> read_by_the_library = {
        sys::attr::kMaxThreadsPerBlock,
        sys::attr::kMaxSharedMemoryPerBlock,
        sys::attr::kWarpSize,
        sys::attr::kClockRate,
        sys::attr::kMultiprocessorCount,
        sys::attr::kPciBusId,
        sys::attr::kPciDeviceId,
        sys::attr::kMemoryClockRate,
        sys::attr::kGlobalMemoryBusWidth,
        sys::attr::kL2CacheSize,
        sys::attr::kMaxThreadsPerMultiprocessor,
        sys::attr::kComputeCapabilityMajor,
        sys::attr::kComputeCapabilityMinor,
        sys::attr::kMaxSharedMemoryPerMultiprocessor,
        sys::attr::kManagedMemory,
        sys::attr::kConcurrentManagedAccess,
        sys::attr::kCooperativeLaunch,
        sys::attr::kMaxSharedMemoryPerBlockOptin,
        sys::attr::kMemoryPoolsSupported,
    };
    for (const int attribute : read_by_the_library) {
        INFO("CUDA attribute ", attribute);
        const auto mapping = hip::hip_attribute_for(attribute);
        REQUIRE(mapping.has_value());
        CHECK(mapping->cuda == attribute);
    }
    CHECK_FALSE(hip::hip_attribute_for(0).has_value());  // no CUdevice_attribute 0
    CHECK_FALSE(hip::hip_attribute_for(-1).has_value());
    CHECK_FALSE(hip::hip_attribute_for(100000).has_value());
}

TEST_CASE("hip.attribute_table_is_one_to_one") {
    std::set<int> cuda_numbers;
    std::set<int> hip_numbers;
    for (const auto& mapping : hip::attribute_mappings()) {
        INFO(mapping.cuda_name);
        CHECK(cuda_numbers.insert(mapping.cuda).second);
        CHECK(hip_numbers.insert(mapping.hip).second);
        CHECK(hip::hip_attribute_for(mapping.cuda)->hip == mapping.hip);
    }
}

// hip.* host tests of hiprtc through cudarc's loader: every shipped kernel compiles to an AMD code
// object for gfx90a, compile errors carry the log, unknown targets are refused instead of aborting the
// process. They need ROCm's hiprtc, comgr and device libraries, but no AMD GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cudarc/nvrtc.hpp"
#include "hip_test_support.hpp"
#include "sys/backends.hpp"
#include "sys/hip/hip_runtime_loader.hpp"
#include "sys/hip/hiprtc_loader.hpp"
#include "sys/rtc_api.hpp"

namespace sys = cudarc::sys;

namespace {

constexpr sys::RtcResult kInvalidOption = 5;  // HIPRTC_ERROR_INVALID_OPTION

// ELF facts of an AMD code object (LLVM's AMDGPUUsage): EM_AMDGPU, ELFOSABI_AMDGPU_HSA, and the
// processor in the low byte of e_flags (EF_AMDGPU_MACH).
constexpr std::uint16_t kElfMachineAmdgpu = 224;
constexpr unsigned char kElfOsAbiAmdgpuHsa = 64;
constexpr unsigned kMachGfx908 = 0x30;
constexpr unsigned kMachGfx90a = 0x3f;

const sys::RtcApi& hiprtc() {
    static const auto loaded = [] {
        std::pair<sys::RtcApi, std::string> out;
        if (!sys::load_hiprtc(out.first, out.second)) out.first.compile_program = nullptr;
        return out;
    }();
    const bool loaded_ok = loaded.first.compile_program != nullptr;
    REQUIRE_MESSAGE(
        loaded_ok,
        "hiprtc could not be loaded (CI installs .ci/hip-packages.txt; set CUDARC_SKIP_HIP_TESTS=1 "
        "to skip the HIP tests on a developer machine without ROCm): ",
        loaded.second);
    return loaded.first;
}

struct Compiled {
    sys::RtcResult result = -1;
    std::string log;
    std::size_t log_size = 0;  // as get_log_size reported it
    std::vector<unsigned char> code;
    std::map<std::string, std::string> lowered;
};

Compiled compile(const std::string& source, const std::string& name, const std::vector<std::string>& options,
                 const std::vector<std::pair<std::string, std::string>>& headers = {},
                 const std::vector<std::string>& expressions = {}) {
    const sys::RtcApi& api = hiprtc();
    std::vector<const char*> header_texts;
    std::vector<const char*> header_names;
    for (const auto& [include_name, text] : headers) {
        header_names.push_back(include_name.c_str());
        header_texts.push_back(text.c_str());
    }
    sys::RtcProgram program = nullptr;
    REQUIRE(api.create_program(&program, source.c_str(), name.c_str(), static_cast<int>(headers.size()),
                               header_texts.data(), header_names.data()) == sys::kRtcSuccess);
    for (const auto& expression : expressions) {
        REQUIRE(api.add_name_expression(program, expression.c_str()) == sys::kRtcSuccess);
    }
    std::vector<const char*> argv;
    for (const auto& option : options) argv.push_back(option.c_str());
    Compiled out;
    out.result = api.compile_program(program, static_cast<int>(argv.size()), argv.data());
    REQUIRE(api.get_log_size(program, &out.log_size) == sys::kRtcSuccess);
    REQUIRE(out.log_size >= 1);  // NVRTC semantics: the size counts the terminating NUL
    // One byte more than announced, poisoned, to catch a missing or misplaced terminator.
    std::vector<char> log(out.log_size + 1, '#');
    REQUIRE(api.get_log(program, log.data()) == sys::kRtcSuccess);
    REQUIRE(log[out.log_size - 1] == '\0');
    out.log.assign(log.data(), out.log_size - 1);
    CHECK(out.log.find('\0') == std::string::npos);
    if (out.result == sys::kRtcSuccess) {
        std::size_t size = 0;
        REQUIRE(api.get_binary_size(program, &size) == sys::kRtcSuccess);
        out.code.resize(size);
        if (size > 0)
            REQUIRE(api.get_binary(program, reinterpret_cast<char*>(out.code.data())) == sys::kRtcSuccess);
        for (const auto& expression : expressions) {
            const char* lowered = nullptr;
            REQUIRE(api.get_lowered_name(program, expression.c_str(), &lowered) == sys::kRtcSuccess);
            REQUIRE(lowered != nullptr);
            out.lowered[expression] = lowered;
        }
    }
    REQUIRE(api.destroy_program(&program) == sys::kRtcSuccess);
    return out;
}

bool is_amd_code_object(const std::vector<unsigned char>& code, unsigned expected_mach) {
    if (code.size() < 64) return false;
    const bool elf = code[0] == 0x7f && code[1] == 'E' && code[2] == 'L' && code[3] == 'F';
    const bool elf64_le = code[4] == 2 && code[5] == 1;
    std::uint16_t machine = 0;
    std::uint32_t flags = 0;
    std::memcpy(&machine, code.data() + 18, sizeof machine);
    std::memcpy(&flags, code.data() + 48, sizeof flags);
    return elf && elf64_le && code[7] == kElfOsAbiAmdgpuHsa && machine == kElfMachineAmdgpu &&
           (flags & 0xffu) == expected_mach;
}

bool contains(const std::vector<unsigned char>& bytes, const std::string& text) {
    return std::search(bytes.begin(), bytes.end(), text.begin(), text.end()) != bytes.end();
}

// Targets newer than gfx90a that the installed hiprtc knows, one per kind: the newest data-center
// gfx9 (gfx94x/gfx95x; ROCm >= 5.5) and the newest processor of the newest family (gfx10/11/12).
std::vector<std::string> newer_targets(const std::vector<std::string>& known) {
    std::vector<std::string> out;
    std::string datacenter;
    std::string newest;
    const auto newer = [](const std::string& a, const std::string& b) {
        return a.size() != b.size() ? a.size() > b.size() : a > b;  // "gfx1100" > "gfx942" > "gfx90a"
    };
    for (const auto& processor : known) {
        if (processor.find('-') != std::string::npos) continue;  // generic targets ("gfx9-generic")
        if (processor.rfind("gfx94", 0) == 0 || processor.rfind("gfx95", 0) == 0) {
            if (datacenter.empty() || newer(processor, datacenter)) datacenter = processor;
        }
        if (newest.empty() || newer(processor, newest)) newest = processor;
    }
    if (!datacenter.empty()) out.push_back(datacenter);
    if (!newest.empty() && newest != datacenter && newer(newest, "gfx90a")) out.push_back(newest);
    return out;
}

// Compiles every kernels/*.cu for `target` through the public API (cudarc::compile_embedded: the
// shipped headers and the options a user gets); returns how many files.
int compile_shipped_kernels(const std::string& target, bool check_code_object_mach) {
    cudarc::CompileOptions options;
    options.backend = cudarc::Backend::hip;
    options.arch = target;
    int files = 0;
    for (const auto& file : cudarc::embedded_kernel_files()) {
        if (!file.ends_with(".cu")) continue;
        ++files;
        INFO(file, " for ", target);
        try {
            const cudarc::CompiledProgram compiled = cudarc::compile_embedded(file, options);
            CHECK(compiled.format() == cudarc::CodeFormat::amd_code_object);
            const std::vector<unsigned char> code(compiled.binary.begin(), compiled.binary.end());
            CHECK(code.size() > 4);
            if (check_code_object_mach) CHECK(is_amd_code_object(code, kMachGfx90a));
        } catch (const cudarc::Error& e) {
            FAIL_CHECK("hiprtc rejected ", file, ": ", std::string(e.what()));
        }
    }
    return files;
}

}  // namespace

TEST_CASE("hip.hiprtc_candidates_follow_the_documented_order") {
    const auto defaults = sys::hiprtc_candidates("", "");
    const auto position = [&](const std::string& item) {
        const auto it = std::find(defaults.begin(), defaults.end(), item);
        return it == defaults.end() ? -1 : it - defaults.begin();
    };
    REQUIRE(position("libhiprtc.so.7") >= 0);
    CHECK(position("libhiprtc.so.7") < position("libhiprtc.so.6"));
    CHECK(position("libhiprtc.so.6") < position("libhiprtc.so.5"));
    CHECK(position("libhiprtc.so.5") < position("libhiprtc.so"));
    // ROCm 5.2 and older: hiprtc inside the HIP runtime, tried after every libhiprtc.
    REQUIRE(position("libamdhip64.so.5") >= 0);
    CHECK(position("libhiprtc.so") < position("libamdhip64.so.7"));

    const auto with_rocm = sys::hiprtc_candidates("", "/my/rocm");
    CHECK(with_rocm.front() == "/my/rocm/lib/libhiprtc.so.7");

    CHECK(sys::hiprtc_candidates("/x/libhiprtc.so.6", "/my/rocm") ==
          std::vector<std::string>{"/x/libhiprtc.so.6"});
}

TEST_CASE("hip.hiprtc_missing_library_names_what_was_tried") {
    sys::RtcApi api;
    std::string why;
    CHECK_FALSE(sys::load_hiprtc_from({"/nonexistent/lib/libhiprtc.so.6"}, api, why));
    CHECK(why.find("/nonexistent/lib/libhiprtc.so.6") != std::string::npos);
    CHECK(why.find("CUDARC_HIPRTC") != std::string::npos);
    CHECK((api.compile_program == nullptr));

    why.clear();
    CHECK_FALSE(sys::load_hiprtc_from({"libm.so.6"}, api, why));
    CHECK(why.find("libm.so.6") != std::string::npos);
    CHECK(why.find("hiprtcCreateProgram") != std::string::npos);
}

TEST_CASE("hip.hiprtc_loads_without_an_amd_gpu") {
    if (hip_test::skipped_by_request()) return;
    const sys::RtcApi& api = hiprtc();
    CHECK(api.backend == cudarc::Backend::hip);
    CHECK(api.library_path.find("hip") != std::string::npos);
    int major = -1;
    int minor = -1;
    REQUIRE(api.version(&major, &minor) == sys::kRtcSuccess);
    CHECK(major >= 0);
    MESSAGE("hiprtc ", major, ".", minor, " from ", api.library_path);
    // No PTX on AMD, and NVRTC's arch list does not apply.
    CHECK((api.get_ptx == nullptr));
    CHECK((api.get_ptx_size == nullptr));
    CHECK((api.get_num_supported_archs == nullptr));
    CHECK(std::string(api.get_error_string(6)) == "HIPRTC_ERROR_COMPILATION");
}

TEST_CASE("hip.hiprtc_compiles_a_kernel_to_a_gfx90a_code_object") {
    if (hip_test::skipped_by_request()) return;
    // A random constant baked into the kernel, so that each run compiles a new source.
    std::mt19937 random(std::random_device{}());
    const std::string constant = std::to_string(random() % 100000) + ".5f";
    const std::string source =
        "extern \"C\" __global__ void cudarc_scale(float* x, unsigned n) {\n"
        "    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) x[i] = sqrtf(x[i]) * " +
        constant + ";\n}\n";
    const Compiled gfx90a = compile(source, "scale.cu", {"--offload-arch=gfx90a", "-std=c++17"});
    INFO(gfx90a.log);
    REQUIRE(gfx90a.result == sys::kRtcSuccess);
    CHECK(is_amd_code_object(gfx90a.code, kMachGfx90a));
    CHECK(contains(gfx90a.code, "cudarc_scale"));

    // The architecture option is honoured: another target gives another code object.
    const Compiled gfx908 = compile(source, "scale.cu", {"--offload-arch=gfx908", "-std=c++17"});
    REQUIRE(gfx908.result == sys::kRtcSuccess);
    CHECK(is_amd_code_object(gfx908.code, kMachGfx908));
    CHECK_FALSE(is_amd_code_object(gfx908.code, kMachGfx90a));

    // A target ID with features is accepted as well.
    const Compiled features = compile(source, "scale.cu", {"--offload-arch=gfx90a:sramecc+:xnack-"});
    CHECK(features.result == sys::kRtcSuccess);
    CHECK(is_amd_code_object(features.code, kMachGfx90a));
}

TEST_CASE("hip.hiprtc_compiles_for_every_target_it_knows") {
    if (hip_test::skipped_by_request()) return;
    (void)hiprtc();
    const std::vector<std::string> known = sys::hiprtc_known_targets();
    REQUIRE_MESSAGE(!known.empty(), "comgr could not be asked for its targets");
    CHECK(std::find(known.begin(), known.end(), "gfx90a") != known.end());
    std::string list;
    for (const auto& target : known) list += target + " ";
    MESSAGE("targets the installed hiprtc knows: ", list);
    for (const auto& target : known) {
        INFO("target ", target);
        const Compiled compiled = compile("extern \"C\" __global__ void cudarc_empty() {}", "empty.cu",
                                          {"--offload-arch=" + target});
        INFO(compiled.log);
        CHECK(compiled.result == sys::kRtcSuccess);
        CHECK((compiled.code.size() > 4 && compiled.code[0] == 0x7f && compiled.code[1] == 'E'));
    }
}

TEST_CASE("hip.hiprtc_compiles_every_shipped_kernel_for_gfx90a") {
    if (hip_test::skipped_by_request()) return;
    const int files = compile_shipped_kernels("gfx90a", true);
    if (files == 0) WARN_MESSAGE(false, "no kernels/*.cu is embedded yet: nothing shipped was compiled");
    MESSAGE(files, " shipped kernel files compiled for gfx90a");
}

TEST_CASE("hip.hiprtc_compiles_every_shipped_kernel_for_newer_targets") {
    if (hip_test::skipped_by_request()) return;
    (void)hiprtc();
    const auto targets = newer_targets(sys::hiprtc_known_targets());
    REQUIRE_MESSAGE(!targets.empty(), "the installed hiprtc knows no target newer than gfx90a");
    for (const auto& target : targets) {
        const int files = compile_shipped_kernels(target, false);
        MESSAGE(files, " shipped kernel files compiled for ", target);
    }
}

TEST_CASE("hip.hiprtc_compile_error_carries_the_log") {
    if (hip_test::skipped_by_request()) return;
    const std::string source =
        "extern \"C\" __global__ void cudarc_broken(float* x) {\n    x[0] = "
        "cudarc_not_declared_anywhere;\n}\n";
    const Compiled compiled = compile(source, "broken.cu", {"--offload-arch=gfx90a"});
    CHECK(compiled.result == sys::kRtcErrorCompilation);
    CHECK(compiled.code.empty());
    INFO(compiled.log);
    CHECK(compiled.log.find("cudarc_not_declared_anywhere") != std::string::npos);
    CHECK(compiled.log.find("broken.cu:2:") != std::string::npos);  // the source's name, not a temporary file
    CHECK(compiled.log.find("CompileSource") == std::string::npos);
    CHECK(compiled.log.find("error") != std::string::npos);
    CHECK(compiled.log_size == compiled.log.size() + 1);

    // An error inside an in-memory header names the header by its include name.
    const std::vector<std::pair<std::string, std::string>> headers = {
        {"helper.cuh", "#pragma once\n__device__ int helper() { return cudarc_not_in_header; }\n"}};
    const Compiled in_header =
        compile("#include \"helper.cuh\"\nextern \"C\" __global__ void k(int* x) { x[0] = helper(); }\n",
                "uses_helper.cu", {"--offload-arch=gfx90a"}, headers);
    CHECK(in_header.result == sys::kRtcErrorCompilation);
    INFO(in_header.log);
    CHECK(in_header.log.find("helper.cuh:2:") != std::string::npos);
    CHECK(in_header.log.find("uses_helper.cu:1") != std::string::npos);
    CHECK(in_header.log.find("cudarc_not_in_header") != std::string::npos);
    CHECK(in_header.log.find("comgr-") == std::string::npos);
}

TEST_CASE("hip.hiprtc_refuses_an_unknown_target_instead_of_aborting") {
    if (hip_test::skipped_by_request()) return;
    (void)hiprtc();
    const std::vector<std::string> known = sys::hiprtc_known_targets();
    std::vector<std::string> unknown = {"gfx9999", "sm_90", "gfx90a:no_such_feature+"};
    // ROCm 5.2's comgr predates gfx94x and gfx11: where it does not know them, they are refused too.
    for (const char* newer : {"gfx942", "gfx1100"}) {
        if (std::find(known.begin(), known.end(), newer) == known.end()) unknown.emplace_back(newer);
    }
    for (const auto& target : unknown) {
        for (const char* spelling : {"--offload-arch=", "--gpu-architecture="}) {
            INFO(spelling, target);
            const Compiled compiled =
                compile("extern \"C\" __global__ void k() {}", "k.cu", {spelling + target});
            CHECK(compiled.result == kInvalidOption);
            CHECK(compiled.log.find("\"" + target + "\"") != std::string::npos);
            CHECK(compiled.log.find("gfx90a") != std::string::npos);  // the known targets are listed
        }
    }
    // The same program compiles afterwards: a refusal leaves nothing behind.
    const Compiled fine = compile("extern \"C\" __global__ void k() {}", "k.cu", {"--offload-arch=gfx90a"});
    CHECK(fine.result == sys::kRtcSuccess);
    CHECK(fine.log.find("cudarc:") == std::string::npos);
}

TEST_CASE("hip.hiprtc_without_an_arch_explains_itself_when_there_is_no_gpu") {
    if (hip_test::skipped_by_request()) return;
    sys::DriverApi driver;
    const char* rocm_path = std::getenv("ROCM_PATH");
    const auto report =
        sys::load_hip_runtime_from(sys::hip_runtime_candidates("", rocm_path ? rocm_path : ""), driver);
    int devices = 0;
    if (report.stage == sys::HipLoadStage::ready && driver.device_get_count(&devices) == 0 && devices > 0) {
        MESSAGE("an AMD GPU is present: hiprtc takes the arch from it, nothing to explain");
        return;
    }
    const Compiled compiled = compile("extern \"C\" __global__ void k() {}", "k.cu", {"-std=c++17"});
    if (compiled.result == sys::kRtcSuccess) {
        MESSAGE("this hiprtc compiled without --offload-arch and without a GPU (a default target)");
        return;
    }
    INFO(compiled.log);
    CHECK(compiled.log.find("--offload-arch") != std::string::npos);
}

TEST_CASE("hip.hiprtc_name_expressions_give_lowered_names") {
    if (hip_test::skipped_by_request()) return;
    const std::vector<std::pair<std::string, std::string>> headers = {
        {"twice.cuh", "#pragma once\ntemplate <typename T> __device__ T twice(T x) { return x + x; }\n"}};
    const std::string source =
        "#include \"twice.cuh\"\n"
        "template <typename T> __global__ void scale(T* x, T a) {\n"
        "    x[threadIdx.x] = twice(x[threadIdx.x]) * a;\n}\n";
    const Compiled compiled = compile(source, "scale.cu", {"--offload-arch=gfx90a", "-std=c++17"}, headers,
                                      {"scale<float>", "scale<double>"});
    INFO(compiled.log);
    REQUIRE(compiled.result == sys::kRtcSuccess);
    REQUIRE(compiled.lowered.size() == 2);
    const std::string& as_float = compiled.lowered.at("scale<float>");
    const std::string& as_double = compiled.lowered.at("scale<double>");
    CHECK(as_float != as_double);
    CHECK(as_float.find("scale") != std::string::npos);
    // Each lowered name is a kernel symbol of the code object, as hipModuleGetFunction will look it up.
    CHECK(contains(compiled.code, as_float));
    CHECK(contains(compiled.code, as_double));
}

// Run-time compilation with NVRTC: loading, every shipped kernel, options, name expressions and errors.
// These run in CI (NVRTC from the CUDA toolkit, no GPU).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "cudarc/nvrtc.hpp"
#include "cudarc/ptxas_report.hpp"
#include "rtc/compiler_arguments.hpp"
#include "rtc/embedded_kernels.hpp"
#include "rtc_test_support.hpp"

using namespace cudarc;
using cudarc::test::options_for;
using cudarc::test::require_nvrtc;

namespace {

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

bool is_elf(const std::vector<char>& binary) {
    return binary.size() > 4 && std::memcmp(binary.data(),
                                            "\x7f"
                                            "ELF",
                                            4) == 0;
}

std::vector<std::string> embedded_files_ending_with(std::string_view suffix) {
    std::vector<std::string> out;
    for (const auto& entry : detail::embedded_kernel_sources()) {
        if (entry.name.ends_with(suffix)) out.emplace_back(entry.name);
    }
    return out;
}

// Compiles every embedded .cu for `arch`; there must be at least one.
void compile_every_embedded_kernel(const std::string& arch) {
    require_nvrtc();
    const auto files = embedded_files_ending_with(".cu");
    REQUIRE_FALSE(files.empty());
    for (const auto& file : files) {
        INFO("kernel file: " << file << ", arch: " << arch);
        CompiledProgram compiled;
        try {
            compiled = compile_embedded(file, options_for(arch));
        } catch (const CompileError& e) {
            FAIL(std::string(e.what()));
        }
        CHECK(compiled.arch == arch);
        if (arch.starts_with("sm_")) {
            CHECK(compiled.format() == CodeFormat::cubin);
            CHECK(is_elf(compiled.binary));
            CHECK(compiled.ptx.empty());
        } else {
            CHECK(compiled.format() == CodeFormat::ptx);
            CHECK(compiled.binary.empty());
            CHECK(contains(compiled.ptx, ".target " + arch.substr(std::strlen("compute_")).insert(0, "sm_")));
        }
    }
}

}  // namespace

TEST_CASE("rtc.nvrtc_loads") {
    const CompilerVersion version = require_nvrtc();
    CHECK(version.backend == Backend::cuda);
    CHECK(version.major >= 12);
    CHECK(version.minor >= 0);
    CHECK(std::filesystem::path(version.library_path).is_absolute());
    CHECK(std::filesystem::exists(version.library_path));
}

TEST_CASE("rtc.supported_architectures") {
    require_nvrtc();
    const auto archs = supported_architectures();
    REQUIRE_FALSE(archs.empty());
    for (const auto& arch : archs) {
        INFO(arch);
        CHECK(arch.starts_with("sm_"));
        CHECK(code_format_for(arch, Backend::cuda) == CodeFormat::cubin);
    }
    // The oldest and the newest architecture the compiler lists must both really compile.
    for (const auto& arch : {archs.front(), archs.back()}) {
        INFO(arch);
        const auto compiled = test::fresh_small_program().compile(options_for(arch));
        CHECK(is_elf(compiled.binary));
    }
}

TEST_CASE("rtc.embedded_kernels_compile_sm_80") {
    compile_every_embedded_kernel("sm_80");
}
TEST_CASE("rtc.embedded_kernels_compile_sm_90") {
    compile_every_embedded_kernel("sm_90");
}
TEST_CASE("rtc.embedded_kernels_compile_compute_90") {
    compile_every_embedded_kernel("compute_90");
}

TEST_CASE("rtc.embedded_headers_are_includable") {
    require_nvrtc();
    const auto headers = embedded_files_ending_with(".cuh");
    REQUIRE_FALSE(headers.empty());
    for (const auto& header : headers) {
        INFO("header: " << header);
        // Each shipped header stands alone: included by name, with nothing before it.
        Program program(
            "#include \"" + header + "\"\nextern \"C\" __global__ void uses_header(int* p) { *p = 1; }\n",
            "includes_" + header + ".cu");
        CHECK_NOTHROW(static_cast<void>(program.compile(options_for("compute_90"))));
    }
    CHECK(embedded_kernel_files().size() == detail::embedded_kernel_sources().size());
}

TEST_CASE("rtc.bench_kernels_have_documented_names") {
    require_nvrtc();
    const CompiledProgram compiled = compile_embedded("bench.cu", options_for("compute_90"));
    // name -> parameter count, as documented at the top of kernels/bench.cu.
    const std::vector<std::pair<std::string, int>> kernels = {
        {"bench_empty", 0}, {"bench_empty_args", 4}, {"bench_fill", 3}, {"bench_copy", 3}, {"bench_triad", 5},
        {"bench_saxpy", 4}, {"bench_sum", 3},        {"bench_spin", 2}, {"bench_gate", 3}};
    // Note: by element, not structured bindings: clang 14 does not capture those in INFO's lambda.
    for (const auto& kernel : kernels) {
        const std::string& name = kernel.first;
        const int parameters = kernel.second;
        INFO(name);
        const auto entry = compiled.ptx.find(".entry " + name + "(");
        REQUIRE(entry != std::string::npos);
        const auto close = compiled.ptx.find(')', entry);
        const std::string signature = compiled.ptx.substr(entry, close - entry);
        CHECK(std::count(signature.begin(), signature.end(), ',') == std::max(parameters - 1, 0));
        CHECK(contains(signature, "_param_") == (parameters > 0));
    }
    // The bandwidth kernels move 16 bytes per access on the aligned path.
    CHECK(contains(compiled.ptx, "ld.global.nc.v4"));
    CHECK(contains(compiled.ptx, "st.global.v4"));
}

TEST_CASE("rtc.name_expressions_give_lowered_names") {
    require_nvrtc();
    Program program(R"(
template <typename T> __global__ void scale(T* data, T factor) { data[threadIdx.x] *= factor; }
namespace outer { template <int N> __global__ void fill_n(int* data) { data[threadIdx.x] = N; } }
)",
                    "templates.cu");
    program.add_name_expression("scale<float>").add_name_expression("scale<double>");
    program.add_name_expression("outer::fill_n<7>")
        .add_name_expression("scale<float>");  // duplicate: ignored
    CHECK(program.name_expressions().size() == 3);

    const CompiledProgram compiled = program.compile(options_for("compute_90"));
    REQUIRE(compiled.lowered_names.size() == 3);
    const std::string& as_float = compiled.lowered_name("scale<float>");
    const std::string& as_double = compiled.lowered_name("scale<double>");
    const std::string& filled = compiled.lowered_name("outer::fill_n<7>");
    CHECK(as_float.starts_with("_Z"));
    CHECK(as_float != as_double);
    CHECK(contains(filled, "outer"));
    for (const auto& lowered : {as_float, as_double, filled}) {
        INFO(lowered);
        CHECK(contains(compiled.ptx, ".entry " + lowered + "("));
    }
    try {
        static_cast<void>(compiled.lowered_name("scale<int>"));
        FAIL("an unknown name expression must throw");
    } catch (const Error& e) {
        CHECK(contains(e.what(), "scale<int>"));
        CHECK(contains(e.what(), "outer::fill_n<7>"));  // the known ones are listed
    }
    // The same expressions give the same names in a CUBIN compile.
    const CompiledProgram cubin = program.compile(options_for("sm_90"));
    CHECK(cubin.lowered_names == compiled.lowered_names);
}

TEST_CASE("rtc.compile_error_carries_log_source_and_options") {
    require_nvrtc();
    Program program("extern \"C\" __global__ void broken(float* p) {\n  p[0] = not_declared_anywhere;\n}\n",
                    "broken_kernel.cu");
    CompileOptions options = options_for("sm_90");
    options.defines = {{"MY_DEFINE", "42"}};
    try {
        static_cast<void>(program.compile(options));
        FAIL("the broken program compiled");
    } catch (const CompileError& e) {
        CHECK(e.source_name() == "broken_kernel.cu");
        CHECK(contains(e.log(), "not_declared_anywhere"));
        CHECK(contains(e.log(), "broken_kernel.cu(2)"));  // the compiler names the file and line
        const auto& used = e.options();
        CHECK(std::find(used.begin(), used.end(), "--gpu-architecture=sm_90") != used.end());
        CHECK(std::find(used.begin(), used.end(), "--define-macro=MY_DEFINE=42") != used.end());
        const std::string what = e.what();
        CHECK(contains(what, "broken_kernel.cu"));
        CHECK(contains(what, "--gpu-architecture=sm_90"));
        CHECK(contains(what, "--define-macro=MY_DEFINE=42"));
        CHECK(contains(what, "not_declared_anywhere"));
        CHECK(contains(what, "NVRTC_ERROR_COMPILATION"));
    }
}

TEST_CASE("rtc.bad_options_are_rejected_clearly") {
    require_nvrtc();
    const Program program = test::fresh_small_program("opts.cu");
    auto message_for = [&](const CompileOptions& options) -> std::string {
        try {
            static_cast<void>(program.compile(options));
        } catch (const CompileError& e) {
            CHECK(e.source_name() == "opts.cu");
            return e.what();
        }
        return "(compiled)";
    };
    CHECK(contains(message_for(options_for("")), "arch is empty"));
    CHECK(contains(message_for(options_for("sm90")), "not a CUDA architecture"));
    CHECK(contains(message_for(options_for("gfx90a")), "not a CUDA architecture"));
    const std::string too_old = message_for(options_for("sm_20"));
    CHECK(contains(too_old, "does not support sm_20"));
    CHECK(contains(too_old, "sm_90"));  // the supported ones are listed
    CompileOptions unknown = options_for("sm_90");
    unknown.extra = {"--no-such-option-anywhere"};
    const std::string rejected = message_for(unknown);
    CHECK(contains(rejected, "--no-such-option-anywhere"));
    CHECK(contains(rejected, "NVRTC_ERROR_INVALID_OPTION"));
    CompileOptions bad_define = options_for("sm_90");
    bad_define.defines = {{"", "1"}};
    CHECK(contains(message_for(bad_define), "no valid macro name"));
    CHECK_THROWS_AS(static_cast<void>(Program::embedded("no_such_file.cu")), Error);
}

TEST_CASE("rtc.compile_options_render") {
    CompileOptions options = options_for("sm_90");
    options.cpp_standard = "c++20";
    options.defines = {{"A", "1"}, {"FLAG", ""}};
    options.include_paths = {"/opt/include"};
    options.fast_math = true;
    options.line_info = true;
    options.max_registers = 64;
    options.extra = {"--extra-device-vectorization"};
    const std::vector<std::string> expected = {
        "--gpu-architecture=sm_90",    "--std=c++20",     "--define-macro=A=1",   "--define-macro=FLAG",
        "--include-path=/opt/include", "--use_fast_math", "--generate-line-info", "--maxrregcount=64",
        "--extra-device-vectorization"};
    CHECK(rtc::compiler_arguments(options) == expected);

    CompileOptions hip = options;
    hip.backend = Backend::hip;
    hip.arch = "gfx90a";
    hip.max_registers = 0;
    const std::vector<std::string> expected_hip = {"--offload-arch=gfx90a",
                                                   "-std=c++20",
                                                   "-DA=1",
                                                   "-DFLAG",
                                                   "-I/opt/include",
                                                   "-ffast-math",
                                                   "-gline-tables-only",
                                                   "--extra-device-vectorization"};
    CHECK(rtc::compiler_arguments(hip) == expected_hip);
    hip.max_registers = 32;
    CHECK_THROWS_AS(static_cast<void>(rtc::compiler_arguments(hip)), Error);

    CHECK(code_format_for("sm_90a", Backend::cuda) == CodeFormat::cubin);
    CHECK(code_format_for("compute_100f", Backend::cuda) == CodeFormat::ptx);
    CHECK(code_format_for("gfx942", Backend::hip) == CodeFormat::amd_code_object);
    CHECK_THROWS_AS(static_cast<void>(code_format_for("sm_90", Backend::hip)), Error);
    CHECK(cuda_arch_name(9, 0) == "sm_90");
    CHECK(cuda_arch_name(12, 1) == "sm_121");
}

TEST_CASE("rtc.defines_includes_and_headers_reach_the_compiler") {
    require_nvrtc();
    test::TemporaryFolder folder;
    {
        std::ofstream header(folder.path() / "from_disk.cuh");
        header << "#define FROM_DISK 7001\n";
    }
    Program program(R"(
#include "from_disk.cuh"
#include "in_memory.cuh"
#include "bench_vector.cuh"
extern "C" __global__ void values(int* out) {
    out[0] = FROM_DISK; out[1] = IN_MEMORY; out[2] = FROM_DEFINE; out[3] = REPLACED_SHIPPED_HEADER;
}
)",
                    "values.cu");
    CompileOptions options = options_for("compute_90");
    options.include_paths = {folder.path().string()};
    options.headers = {{"in_memory.cuh", "#define IN_MEMORY 7002\n"},
                       // A header given by name replaces the shipped header of that name.
                       {"bench_vector.cuh", "#define REPLACED_SHIPPED_HEADER 7004\n"}};
    options.defines = {{"FROM_DEFINE", "7003"}};
    const CompiledProgram compiled = program.compile(options);
    for (const char* value : {"7001", "7002", "7003", "7004"}) {
        INFO(value);
        CHECK(contains(compiled.ptx, value));
    }
}

TEST_CASE("rtc.fast_math_line_info_and_max_registers_take_effect") {
    require_nvrtc();
    const Program divide(
        "extern \"C\" __global__ void divide(float* p) { p[threadIdx.x] = p[threadIdx.x] / p[64]; }\n",
        "divide.cu");
    CompileOptions options = options_for("compute_90");
    const CompiledProgram plain = divide.compile(options);
    CHECK(contains(plain.ptx, "div.rn.f32"));  // IEEE division by default
    CHECK_FALSE(contains(plain.ptx, ".loc"));
    options.fast_math = true;
    options.line_info = true;
    const CompiledProgram fast = divide.compile(options);
    CHECK_FALSE(contains(fast.ptx, "div.rn.f32"));
    CHECK(contains(fast.ptx, ".loc"));

    // ptxas obeys the register cap: 64 values that stay live need many registers (about 70).
    const Program heavy(R"(
extern "C" __global__ void heavy(float* p) {
    float v[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) v[i] = p[threadIdx.x + i * 1024];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 64; ++i) s += v[i] * v[63 - i] + v[(i * 7) % 64];
    p[threadIdx.x + 65536] = s;
}
)",
                        "heavy.cu");
    CompileOptions report = options_for("sm_90");
    report.extra = {"--ptxas-options=-v"};
    auto registers_of_heavy = [&](const CompileOptions& o) {
        const auto usage = parse_ptxas_report(heavy.compile(o).log);
        REQUIRE(usage.size() == 1);
        return usage[0].registers;
    };
    const int uncapped = registers_of_heavy(report);
    report.max_registers = 32;
    const int capped = registers_of_heavy(report);
    CHECK(uncapped > 32);
    CHECK(capped <= 32);
}

TEST_CASE("rtc.ptxas_report_parses") {
    require_nvrtc();
    Program program(R"(
__device__ __noinline__ float helper(float x) { return x * 2.0f; }
extern "C" __global__ void uses_shared(float* out, const float* in) {
    __shared__ float tile[300];
    tile[threadIdx.x] = helper(in[threadIdx.x]);
    __syncthreads();
    out[threadIdx.x] = tile[299 - threadIdx.x];
}
extern "C" __global__ void no_shared(float* out) { out[threadIdx.x] = 1.0f; }
)",
                    "report.cu");
    CompileOptions options = options_for("sm_90");
    options.extra = {"--ptxas-options=-v"};
    const auto report = parse_ptxas_report(program.compile(options).log);
    REQUIRE(report.size() == 2);
    const auto find = [&](const std::string& name) {
        return *std::find_if(report.begin(), report.end(), [&](const auto& u) { return u.function == name; });
    };
    CHECK(find("uses_shared").shared_bytes == 1200);
    CHECK(find("uses_shared").registers > 0);
    CHECK(find("uses_shared").arch == "sm_90");
    CHECK(find("no_shared").shared_bytes == 0);

    // A hand-written report: the device function's properties must not land on the entry.
    const auto parsed = parse_ptxas_report(
        "ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
        "ptxas info    : Function properties for helper\n"
        "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Function properties for k\n"
        "ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 37 registers, used 1 barriers, 2048 bytes smem, 368 bytes cmem[0]\n");
    REQUIRE(parsed.size() == 1);
    CHECK(parsed[0].function == "k");
    CHECK(parsed[0].arch == "sm_80");
    CHECK(parsed[0].registers == 37);
    CHECK(parsed[0].shared_bytes == 2048);
    CHECK(parsed[0].stack_bytes == 16);
    CHECK(parsed[0].spill_store_bytes == 0);
}

// Modules on a real GPU: loading PTX and CUBIN, the kernel cache's hit path (memory, then disk), lookups by
// name and by name expression with clear errors, globals, function attributes and the shipped-module cache.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>

#include "cudarc/kernel_cache.hpp"
#include "cudarc/nvrtc.hpp"
#include "launch_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

constexpr const char* kScaleSource = R"(
// A template kernel (found through name expressions) and a kernel using two globals.
template <typename T>
__global__ void scale(T* y, const T* x, T factor, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        y[i] = factor * x[i];
    }
}

__constant__ float scale_factor;
__device__ unsigned int block_hits[4];

extern "C" __global__ void scale_by_constant(float* y, const float* x, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        y[i] = scale_factor * x[i];
    }
    if (threadIdx.x == 0) atomicAdd(&block_hits[blockIdx.x % 4], 1u);
}
)";

Program scale_program() {
    Program program(kScaleSource, "scale_test.cu");
    program.add_name_expression("scale<float>");
    program.add_name_expression("scale<double>");
    return program;
}

// Runs bench_fill from `module` and checks every element.
void check_fill_works(const Module& module, Stream& stream) {
    const auto fill = module.kernel<BenchFill::signature>("bench_fill");
    const std::size_t n = 4099;
    const float value = random_floats(1, -9.0f, 9.0f)[0];
    auto out = DeviceSlice<float>::from_host(stream, poisoned(n));
    launch(stream, LaunchConfig{8, 128}, fill, out, value, n);
    const auto got = out.to_vector(stream);
    CHECK(std::count(got.begin(), got.end(), value) == static_cast<std::ptrdiff_t>(n));
}

std::filesystem::path fresh_temp_dir() {
    auto dir = std::filesystem::temp_directory_path() / ("cudarc-rtc-module-test-" + std::to_string(rng()()));
    std::filesystem::remove_all(dir);
    return dir;
}

}  // namespace

TEST_CASE("rtc.module_from_ptx_and_cubin") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    const Program program = Program::embedded("bench.cu");

    // PTX for the device's virtual architecture, which the driver compiles when loading.
    CompileOptions ptx_options;
    ptx_options.arch = "compute_" + std::to_string(device.compute_capability().major) +
                       std::to_string(device.compute_capability().minor);
    const CompiledProgram ptx = program.compile(ptx_options);
    REQUIRE(ptx.format() == CodeFormat::ptx);
    check_fill_works(Module::from_ptx(device, ptx.ptx), stream);
    check_fill_works(Module::from_program(device, ptx), stream);

    // CUBIN for the exact architecture.
    CompileOptions cubin_options;
    cubin_options.arch = device.arch();
    const CompiledProgram cubin = program.compile(cubin_options);
    REQUIRE(cubin.format() == CodeFormat::cubin);
    check_fill_works(Module::from_binary(device, cubin.binary), stream);
    check_fill_works(Module::from_program(device, cubin), stream);
}

TEST_CASE("rtc.module_load_errors") {
    auto device = Device::open(0);
    const std::vector<char> garbage = {'n', 'o', 't', ' ', 'c', 'o', 'd', 'e'};
    CHECK_THROWS_WITH_AS(static_cast<void>(Module::from_binary(device, garbage)),
                         doctest::Contains("neither a CUBIN (ELF) nor a fatbin"), Error);
    CHECK_THROWS_AS(static_cast<void>(Module::from_ptx(device, "this is not PTX")), Error);
    CHECK_THROWS_AS(static_cast<void>(Module::from_ptx(device, "")), Error);

    // A CUBIN for another major architecture cannot run here; the message names both.
    const std::string other = device.compute_capability().major == 8 ? "sm_90" : "sm_80";
    const auto supported = supported_architectures();
    if (std::find(supported.begin(), supported.end(), other) != supported.end()) {
        CompileOptions options;
        options.arch = other;
        const CompiledProgram foreign = compile_embedded("bench.cu", options);
        try {
            static_cast<void>(Module::from_program(device, foreign));
            FAIL("a CUBIN for " << other << " loaded on " << device.arch());
        } catch (const Error& e) {
            const std::string message = e.what();
            CHECK(message.find(other) != std::string::npos);
            CHECK(message.find(device.arch()) != std::string::npos);
        }
    }
}

TEST_CASE("rtc.kernel_cache_hit_path_memory_then_disk") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    const auto dir = fresh_temp_dir();
    {
        KernelCache cache(dir);
        const Program program = Program::embedded("bench.cu");
        CompileOptions options;
        options.arch = device.arch();

        const CachedProgram cold = cache.compile(program, options);
        CHECK(cold.source == CacheSource::compiled);
        const CachedProgram warm = cache.compile(program, options);
        CHECK(warm.source == CacheSource::memory);
        cache.clear_memory();
        const CachedProgram from_disk = cache.compile(program, options);
        CHECK(from_disk.source == CacheSource::disk);
        CHECK(from_disk.disk_note.empty());
        CHECK(cold.program == warm.program);
        CHECK(cold.program == from_disk.program);

        // Every path gives code that runs.
        check_fill_works(Module::from_program(device, cold.program), stream);
        check_fill_works(Module::from_program(device, warm.program), stream);
        check_fill_works(Module::from_program(device, from_disk.program), stream);
        // Module::compile goes through the same cache (an empty arch means the device's).
        check_fill_works(Module::compile(device, program, {}, cache), stream);
        CHECK(cache.memory_entries() == 1);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("rtc.function_lookup_by_name_and_expression") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    const Module module = Module::compile(device, scale_program());
    CHECK(module.lowered_names().size() == 2);
    CHECK(module.has_function("scale<float>"));
    CHECK(module.has_function("scale_by_constant"));
    CHECK_FALSE(module.has_function("scale<int>"));

    const std::size_t n = 10007;
    const auto x_host = random_floats(n);
    const float factor = random_floats(1, -4.0f, 4.0f)[0];
    const auto x = DeviceSlice<float>::from_host(stream, x_host);
    auto y = DeviceSlice<float>::from_host(stream, poisoned(n));
    const auto scale_f = module.kernel<void(float*, const float*, float, unsigned long long)>("scale<float>");
    CHECK(scale_f.name() == "scale<float>");
    CHECK(scale_f.function().symbol() == module.lowered_names().at("scale<float>"));
    launch(stream, LaunchConfig::for_elements(n, device), scale_f, y, x, factor, n);
    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = double{factor} * double{x_host[i]};
    CHECK(count_mismatches(
              y.to_vector(stream), want, [&](std::size_t i) { return fp32_tolerance(std::abs(want[i])); },
              "scale<float>") == 0);

    std::vector<double> x64(n);
    for (std::size_t i = 0; i < n; ++i) x64[i] = double{x_host[i]} * 3.0;
    const auto xd = DeviceSlice<double>::from_host(stream, x64);
    auto yd = DeviceSlice<double>::zeros(stream, n);
    const double factor64 = double{factor} / 3.0;
    launch(stream, LaunchConfig::for_elements(n, device),
           module.kernel<void(double*, const double*, double, unsigned long long)>("scale<double>"), yd, xd,
           factor64, n);
    const auto yd_got = yd.to_vector(stream);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i)
        bad += (yd_got[i] == factor64 * x64[i]) ? 0 : 1;  // one rounding, exact
    CHECK(bad == 0);
}

TEST_CASE("rtc.function_lookup_errors") {
    auto device = Device::open(0);
    const Module& bench = bench_module(device);
    CHECK_THROWS_WITH_AS(static_cast<void>(bench.function("bench_does_not_exist")),
                         doctest::Contains("no kernel named 'bench_does_not_exist' in module bench.cu"),
                         Error);
    CHECK_FALSE(bench.has_function("bench_does_not_exist"));

    const Module scaled = Module::compile(device, scale_program());
    CHECK_THROWS_WITH_AS(static_cast<void>(scaled.function("scale<int>")),
                         doctest::Contains("Program::add_name_expression"), Error);

    // A signature that does not match the kernel is caught at lookup where the driver reports parameters.
    if (bench.function("bench_fill").parameter_sizes()) {
        CHECK_THROWS_WITH_AS(static_cast<void>(bench.kernel<void(float*, float)>("bench_fill")),
                             doctest::Contains("takes 3 parameter(s)"), Error);
        CHECK_THROWS_WITH_AS(
            static_cast<void>(bench.kernel<void(float*, double, unsigned long long)>("bench_fill")),
            doctest::Contains("signature does not match"), Error);
    } else {
        MESSAGE(
            "no parameter sizes from the driver (cuFuncGetParamInfo needs CUDA 12.4 and its table entry): "
            "signature checks not exercised");
    }
}

TEST_CASE("rtc.module_globals") {
    auto device = Device::open(0);
    auto stream = device.create_stream();
    const Module module = Module::compile(device, scale_program());
    const GlobalSymbol factor_symbol = module.global("scale_factor");
    CHECK(factor_symbol.address != 0);
    CHECK(factor_symbol.bytes == sizeof(float));
    CHECK(module.global("block_hits").bytes == 4 * sizeof(unsigned));

    const float factor = random_floats(1, 0.5f, 4.0f)[0];
    module.copy_to_global(stream, "scale_factor", factor);
    const std::vector<unsigned> zeros(4, 0);
    module.copy_to_global(stream, "block_hits", std::span<const unsigned>(zeros));
    CHECK(module.read_global<float>(stream, "scale_factor") == factor);

    const std::size_t n = 50000;
    const auto x_host = random_floats(n);
    const auto x = DeviceSlice<float>::from_host(stream, x_host);
    auto y = DeviceSlice<float>::from_host(stream, poisoned(n));
    const unsigned blocks = 9 + static_cast<unsigned>(rng()() % 20);
    launch(stream, LaunchConfig{blocks, 128}, module.kernel<BenchCopy::signature>("scale_by_constant"), y, x,
           n);
    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = double{factor} * double{x_host[i]};
    CHECK(count_mismatches(
              y.to_vector(stream), want, [&](std::size_t i) { return fp32_tolerance(std::abs(want[i])); },
              "scale_by_constant") == 0);

    std::vector<unsigned> hits(4);
    module.copy_from_global(stream, "block_hits", std::span<unsigned>(hits));
    for (unsigned slot = 0; slot < 4; ++slot) {
        unsigned expected = 0;
        for (unsigned b = 0; b < blocks; ++b) expected += (b % 4 == slot) ? 1 : 0;
        CHECK(hits[slot] == expected);
    }

    CHECK_THROWS_WITH_AS(module.copy_to_global(stream, "scale_factor", 1.0),
                         doctest::Contains("has 4 bytes, 8"), Error);
    CHECK_THROWS_WITH_AS(static_cast<void>(module.global("no_such_global")),
                         doctest::Contains("no global variable named 'no_such_global'"), Error);
}

TEST_CASE("rtc.function_attributes") {
    auto device = Device::open(0);
    const auto sum = bench_module(device).function("bench_sum");
    const FunctionAttributes a = sum.attributes();
    CHECK(a.static_shared_bytes == 1024 * sizeof(float));  // __shared__ float partial[1024]
    CHECK(a.registers > 0);
    CHECK(a.registers <= 255);
    CHECK(a.max_threads_per_block >= 256);
    CHECK(a.max_threads_per_block <= 1024);
    const auto cc = device.compute_capability();
    CHECK(a.binary_version == cc.major * 10 + cc.minor);
    CHECK(a.ptx_version > 0);
    CHECK(a.local_bytes == 0);  // no spills in so small a kernel
    CHECK(a.max_dynamic_shared_bytes > 0);
    CHECK(sum.name() == "bench_sum");
    CHECK(sum.device_ordinal() == device.ordinal());
}

TEST_CASE("rtc.shipped_module_is_loaded_once_from_any_thread") {
    auto device = Device::open(0);
    std::vector<const Module*> seen(8, nullptr);
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < seen.size(); ++t) {
        threads.emplace_back([&, t] { seen[t] = &Module::shipped(device, "bench.cu"); });
    }
    for (auto& thread : threads) thread.join();
    for (const Module* module : seen) CHECK(module == seen[0]);
    CHECK(&Module::shipped(device, "bench.cu") == seen[0]);
    CHECK(seen[0]->origin() == "bench.cu");
    CHECK(seen[0]->device_ordinal() == device.ordinal());
    // Different options are a different module.
    CompileOptions fast;
    fast.fast_math = true;
    CHECK(&Module::shipped(device, "bench.cu", {}, fast) != seen[0]);
    CHECK_THROWS_AS(static_cast<void>(Module::shipped(device, "no_such_file.cu")), Error);

    auto& stream = device.default_stream();
    check_fill_works(*seen[0], stream);
}

TEST_CASE("rtc.kernels_keep_their_module_loaded") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    BenchFill fill;
    {
        const Module module = Module::compile(device, Program::embedded("bench.cu"));
        fill = module.kernel<BenchFill::signature>("bench_fill");
    }  // the Module object is gone; the kernel still holds the loaded code
    const std::size_t n = 777;
    auto out = DeviceSlice<float>::from_host(stream, poisoned(n));
    launch(stream, LaunchConfig{2, 64}, fill, out, 0.5f, n);
    const auto got = out.to_vector(stream);
    CHECK(std::count(got.begin(), got.end(), 0.5f) == static_cast<std::ptrdiff_t>(n));
}

// Issue 14 on a real GPU: what only a driver can show. The driver's stream-ordered pool trimmed by
// empty_cache(), a second context made current behind cudarc's back (cuCtxCreate), and a real illegal
// address losing the device (run in a child process: a sticky error poisons the whole process).
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "sys/driver_api.hpp"

extern char** environ;

using namespace cudarc;
using namespace cudarc::test;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

constexpr const char* kKernels = R"(
extern "C" __global__ void scale(float* y, const float* x, float a, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = a * x[i];
}
extern "C" __global__ void poke(int* unused) {
    *reinterpret_cast<volatile int*>(16) = 1;  // an illegal address: the context is lost
}
)";

using ScaleSignature = void(float*, const float*, float, unsigned long long);

// Driver entry points the library does not use, looked up the way it looks up its own (cuGetProcAddress
// at the CUDA 12.0 ABI) in the libcuda it already loaded.
// cuCtxCreate and cuCtxDestroy straight from libcuda, as a framework that owns its context calls them.
// cuCtxCreate changed its parameters in CUDA 12.5 (v4: a CUctxCreateParams pointer before the flags), and
// cuGetProcAddress hands out the newest version that the driver's API version has, so ask for that one.
struct ContextCalls {
    struct CreateParams {  // CUctxCreateParams: all null/zero makes an ordinary context
        void* exec_affinity_params = nullptr;
        int exec_affinity_param_count = 0;
        void* cig_params = nullptr;
    };
    using CreateV2 = int (*)(sys::Context*, unsigned, sys::Device);
    using CreateV4 = int (*)(sys::Context*, CreateParams*, unsigned, sys::Device);
    using Destroy = int (*)(sys::Context);
    using GetProcAddress = int (*)(const char*, void**, int, std::uint64_t, int*);
    using DriverGetVersion = int (*)(int*);
    void* create_entry = nullptr;
    bool create_v4 = false;
    Destroy destroy = nullptr;

    ContextCalls() {
        void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (library == nullptr) library = dlopen("libcuda.so.1", RTLD_NOW);
        REQUIRE_MESSAGE(library != nullptr, "libcuda.so.1 is not loadable here");
        auto get = reinterpret_cast<GetProcAddress>(dlsym(library, "cuGetProcAddress_v2"));
        auto driver_version = reinterpret_cast<DriverGetVersion>(dlsym(library, "cuDriverGetVersion"));
        const bool found = get != nullptr && driver_version != nullptr;
        REQUIRE_MESSAGE(found, "libcuda has no cuGetProcAddress_v2 or cuDriverGetVersion");
        int version = 0;
        REQUIRE(driver_version(&version) == 0);
        create_v4 = version >= 12050;
        void* pointer = nullptr;
        int status = 0;
        REQUIRE(get("cuCtxCreate", &create_entry, version, 0, &status) == 0);
        REQUIRE(get("cuCtxDestroy", &pointer, version, 0, &status) == 0);
        destroy = reinterpret_cast<Destroy>(pointer);
    }
    int create(sys::Context* context, unsigned flags, sys::Device device) const {
        if (create_v4) {
            CreateParams params;
            return reinterpret_cast<CreateV4>(create_entry)(context, &params, flags, device);
        }
        return reinterpret_cast<CreateV2>(create_entry)(context, flags, device);
    }
};

sys::Context current_context() {
    sys::Context context = nullptr;
    REQUIRE(sys::driver().ctx_get_current(&context) == sys::kSuccess);
    return context;
}

}  // namespace

TEST_CASE("reliability.gpu_empty_cache_trims_the_stream_ordered_pool") {
    DeviceOptions options;
    options.memory_source = MemorySource::stream_ordered;
    auto device = Device::open(0, options);
    if (device.memory_source() != MemorySource::stream_ordered) {
        // Only when another test of this process kept device 0 open with the caching allocator.
        MESSAGE("SKIPPED: device 0 is already open with another memory source in this process");
        return;
    }
    auto& stream = device.default_stream();
    device.empty_cache();
    const AllocatorStats start = device.allocator_stats();
    const MemoryInfo free_before = device.memory_info();
    constexpr std::size_t kBytes = 1024 * kMiB;
    {
        auto big = DeviceSlice<std::byte>::uninitialized(stream, kBytes);
        big.fill_zero(stream);
        const AllocatorStats held = device.allocator_stats();
        CHECK(held.allocated_bytes >= start.allocated_bytes + kBytes);
        CHECK(held.reserved_bytes >= start.reserved_bytes + kBytes);
        CHECK(held.live_allocations == start.live_allocations + 1);
    }
    stream.synchronize();
    const AllocatorStats cached = device.allocator_stats();
    CHECK(cached.allocated_bytes == start.allocated_bytes);
    CHECK(cached.reserved_bytes >= start.reserved_bytes + kBytes);  // kept by the raised release threshold
    device.empty_cache();
    const AllocatorStats trimmed = device.allocator_stats();
    const MemoryInfo free_after = device.memory_info();
    MESSAGE("pool reserved: " << start.reserved_bytes << " at start, " << cached.reserved_bytes
                              << " after the free, " << trimmed.reserved_bytes
                              << " after empty_cache; device free " << free_before.free << " -> "
                              << free_after.free);
    CHECK(trimmed.reserved_bytes <= start.reserved_bytes);
    CHECK(free_after.free + 64 * kMiB >= free_before.free);  // the gigabyte went back to the device
}

TEST_CASE("reliability.gpu_foreign_context_made_current_behind_cudarcs_back") {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    Program program(kKernels, "reliability.cu");
    auto module = Module::compile(device, program);
    auto scale = module.kernel<ScaleSignature>("scale");
    const std::size_t n = 1 << 20;
    const auto host = random_floats(n);
    auto x = DeviceSlice<float>::from_host(stream, host);
    auto y = DeviceSlice<float>::from_host(stream, std::vector<float>(n, poison_float()));
    Event timed(device, EventTiming::enabled);
    PinnedBuffer<float> pinned(device, n);
    stream.synchronize();

    // A framework creates and pushes its own context (cuCtxCreate makes it current on this thread).
    ContextCalls calls;
    sys::Device ordinal = 0;
    REQUIRE(sys::driver().device_get(&ordinal, 0) == sys::kSuccess);
    sys::Context foreign = nullptr;
    REQUIRE(calls.create(&foreign, 0, ordinal) == 0);
    REQUIRE(current_context() == foreign);

    // Every kind of call works, in cudarc's context, and leaves the framework's context current.
    timed.record(stream);
    CHECK(current_context() == foreign);
    launch(stream, LaunchConfig::for_elements(n, device), scale, y, x, 3.0f,
           static_cast<unsigned long long>(n));
    CHECK(current_context() == foreign);
    pinned.copy_from_device_async(stream, y.view());
    pinned.synchronize();
    CHECK(current_context() == foreign);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += pinned[i] == 3.0f * host[i] ? 0 : 1;  // one rounding: exact
    CHECK(wrong == 0);
    // Fresh pool objects (more children than the pools hold), created while the foreign context is current.
    {
        std::vector<Stream> children;
        for (int i = 0; i < 16; ++i) children.push_back(stream.fork());
        for (auto& child : children) copy(child, y.view(), x.view());
        auto extra = Module::compile(device, Program(kKernels, "reliability_again.cu"));
        (void)extra.kernel<ScaleSignature>("scale");
    }
    CHECK(current_context() == foreign);
    REQUIRE(calls.destroy(foreign) == 0);  // the framework is done: its context goes

    // The pooled events and streams made meanwhile belong to cudarc's context: they still work.
    for (int i = 0; i < 32; ++i) {
        auto child = stream.fork();
        launch(child, LaunchConfig::for_elements(n, device), scale, y, x, 2.0f,
               static_cast<unsigned long long>(n));
    }
    const std::vector<float> back = y.to_vector(stream);
    wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += back[i] == 2.0f * host[i] ? 0 : 1;
    CHECK(wrong == 0);
    device.rethrow_deferred_error();
}

// The child: run only by reliability.gpu_illegal_address_loses_the_device, in its own process.
TEST_CASE("reliability.gpu_illegal_address_child" * doctest::skip()) {
    auto device = Device::open(0);
    auto& stream = device.default_stream();
    {
        auto cached = DeviceSlice<float>::zeros(stream, 1 << 18);  // 1 MiB, cached afterwards
    }
    auto data = DeviceSlice<float>::from_host(stream, random_floats(1024));
    auto module = Module::compile(device, Program(kKernels, "reliability_poke.cu"));
    launch(stream, LaunchConfig{1, 1}, module.kernel<void(int*)>("poke"), static_cast<int*>(nullptr));
    try {
        stream.synchronize();
        FAIL("the illegal address went unnoticed");
    } catch (const DeviceLost& lost) {
        CHECK(lost.result() == 700);  // CUDA_ERROR_ILLEGAL_ADDRESS
        CHECK(std::string(lost.what()).find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos);
        CHECK(std::string(lost.what()).find("restart") != std::string::npos);
    }
    CHECK(device.lost());
    const AllocatorStats before = device.allocator_stats();
    CHECK_THROWS_AS((void)DeviceSlice<float>::uninitialized(stream, 1 << 18),
                    DeviceLost);  // not from the cache
    CHECK_THROWS_AS((void)data.to_vector(stream), DeviceLost);
    CHECK_THROWS_AS((void)stream.fork(), DeviceLost);
    CHECK_THROWS_AS(device.synchronize(), DeviceLost);
    CHECK(device.allocator_stats().cache_hits == before.cache_hits);
    MESSAGE("child: the device is lost as expected");
}

TEST_CASE("reliability.gpu_illegal_address_loses_the_device") {
    // The sticky error poisons the process, so a child process takes it: this binary, running the case above.
    char exe[4096] = {};
    const ssize_t length = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    REQUIRE(length > 0);
    const std::string log = "/tmp/cudarc-reliability-child-" + std::to_string(getpid()) + ".log";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    std::string filter = "--test-case=reliability.gpu_illegal_address_child";
    std::string no_skip = "--no-skip";
    std::vector<char*> argv{exe, filter.data(), no_skip.data(), nullptr};
    pid_t child = 0;
    REQUIRE(posix_spawn(&child, exe, &actions, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    std::ifstream in(log);
    const std::string output{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::remove(log.c_str());
    INFO("child output:\n" << output);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(output.find("child: the device is lost as expected") != std::string::npos);
    CHECK(output.find("Status: SUCCESS") != std::string::npos);
}

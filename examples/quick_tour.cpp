// The README's tour, compiled and run: streams, hazard-tracked copies, a kernel compiled at run time.
#include <cudarc/cudarc.hpp>

#include <cstdio>
#include <vector>

int main() {
    if (!cudarc::Device::available()) {
        std::printf("quick_tour: no GPU available: skipped\n");
        return 0;
    }
    try {
        auto device = cudarc::Device::open(0);
        auto& stream = device.default_stream();

        std::vector<float> host(1 << 20, 1.0f);
        auto x = cudarc::DeviceSlice<float>::from_host(stream, host);
        auto y = cudarc::DeviceSlice<float>::zeros(stream, host.size());
        {
            auto child = stream.fork();
            cudarc::copy(child, y.view(), x.view());
        }
        std::vector<float> back = y.to_vector(stream);
        const auto counters = device.counters();

        cudarc::Program program(
            R"(extern "C" __global__ void scale(float* y, const float* x, float a, unsigned long long n) {
    // 64-bit index and stride: n may exceed 2^32 (a 32-bit index would wrap and never reach it).
    const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
    for (unsigned long long i = 1ull * blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = a * x[i];
})",
            "scale.cu");
        auto module = cudarc::Module::compile(device, program);
        auto scale = module.kernel<void(float*, const float*, float, unsigned long long)>("scale");
        cudarc::launch(stream, cudarc::LaunchConfig::for_elements(host.size(), device), scale, y, x, 2.0f,
                       static_cast<unsigned long long>(host.size()));
        const auto scaled = y.to_vector(stream);

        const bool ok = back == host && scaled == std::vector<float>(host.size(), 2.0f);
        std::printf("quick_tour: copy through a forked stream and a run-time compiled kernel: %s\n",
                    ok ? "ok" : "WRONG");
        std::printf("quick_tour: %llu host synchronizations, %llu cross-stream waits so far\n",
                    static_cast<unsigned long long>(counters.host_synchronizations()),
                    static_cast<unsigned long long>(counters.cross_stream_waits));
        return ok ? 0 : 1;
    } catch (const cudarc::Error& e) {
        std::fprintf(stderr, "quick_tour: %s\n", e.what());
        return 1;
    }
}

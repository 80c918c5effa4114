#include <stdexcept>
#include <vector>

#include "core/device_state.hpp"
#include "gpu_test.hpp"
#include "sys/rtc_api.hpp"

namespace cudarc::test {
namespace {
constexpr const char* kSpinSource = R"(
extern "C" __global__ void test_spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
)";

std::vector<char> compile_spin(const std::string& arch) {
    const sys::RtcApi& rtc = sys::rtc(Backend::cuda);
    sys::RtcProgram program = nullptr;
    if (rtc.create_program(&program, kSpinSource, "test_spin.cu", 0, nullptr, nullptr) != sys::kRtcSuccess) {
        throw std::runtime_error("nvrtcCreateProgram failed");
    }
    const std::string arch_option = "--gpu-architecture=" + arch;
    const char* options[] = {arch_option.c_str()};
    const sys::RtcResult compiled = rtc.compile_program(program, 1, options);
    std::size_t size = 0;
    std::vector<char> binary;
    if (compiled == sys::kRtcSuccess && rtc.get_binary_size(program, &size) == sys::kRtcSuccess) {
        binary.resize(size);
        rtc.get_binary(program, binary.data());
    }
    rtc.destroy_program(&program);
    if (binary.empty()) throw std::runtime_error("compiling the spin kernel failed");
    return binary;
}
}  // namespace

SpinKernel::SpinKernel(const Device& device) : device_(device) {
    const auto binary = compile_spin(device.arch());
    auto& state = *cudarc::detail::Internals::device_state(device);
    const auto scope = state.bind();
    const sys::DriverApi& api = state.api();
    sys::Module module = nullptr;
    state.check(api.module_load_data(&module, binary.data()), sys::Entry::module_load_data);
    sys::Function function = nullptr;
    state.check(api.module_get_function(&function, module, "test_spin"), sys::Entry::module_get_function);
    module_ = module;
    function_ = function;
    clock_khz_ = device.attribute(sys::attr::kClockRate);
}

SpinKernel::~SpinKernel() {
    auto& state = *cudarc::detail::Internals::device_state(device_);
    const auto scope = state.bind_or_defer();
    (void)state.api().module_unload(static_cast<sys::Module>(module_));
}

void SpinKernel::launch(Stream& stream, long long cycles) {
    auto& state = *cudarc::detail::Internals::device_state(device_);
    const auto scope = state.bind();
    void* params[] = {&cycles};
    state.check(state.api().launch_kernel(static_cast<sys::Function>(function_), 1, 1, 1, 1, 1, 1, 0,
                                          stream.native(), params, nullptr),
                sys::Entry::launch_kernel);
}

long long SpinKernel::cycles_for_ms(double ms) const {
    return static_cast<long long>(ms * static_cast<double>(clock_khz_));
}

}  // namespace cudarc::test

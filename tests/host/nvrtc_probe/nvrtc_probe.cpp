// A program of its own for rtc.nvrtc_builtins_next_to_the_chosen_library: a fresh process, so that no NVRTC
// or builtins library loaded earlier by the test suite can stand in. It compiles one small kernel with
// whatever NVRTC the environment selects (CUDARC_NVRTC) and prints the libnvrtc-builtins the process
// loaded, one line "builtins: PATH" each. Exit status 0 when the compile succeeded, 1 when it threw.
#include <link.h>

#include <cstdio>
#include <exception>
#include <string>

#include "cudarc/nvrtc.hpp"

namespace {

int print_builtins(dl_phdr_info* info, std::size_t, void*) {
    const std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
    if (name.find("libnvrtc-builtins") != std::string::npos) std::printf("builtins: %s\n", name.c_str());
    return 0;
}

}  // namespace

int main() {
    int status = 0;
    try {
        cudarc::CompileOptions options;
        options.arch = "compute_75";
        const cudarc::Program program("extern \"C\" __global__ void k(int* p) { p[threadIdx.x] = 1; }\n",
                                      "probe.cu");
        const cudarc::CompiledProgram compiled = program.compile(options);
        std::printf("compiled: %zu bytes of PTX\n", compiled.ptx.size());
    } catch (const std::exception& e) {
        std::printf("failed: %s\n", e.what());
        status = 1;
    }
    dl_iterate_phdr(&print_builtins, nullptr);
    return status;
}

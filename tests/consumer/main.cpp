// An outside program built against the installed cudarc. It must start and behave sensibly with or
// without a GPU: it prints the device count, or the reason there is no driver.
#include <cudarc/cudarc.hpp>

#include <cstdio>

int main() {
    try {
        std::printf("cudarc devices: %d\n", cudarc::Device::count());
    } catch (const cudarc::Error& e) {
        std::printf("no GPU here, as cudarc says: %s\n", e.what());
    }
    return 0;
}

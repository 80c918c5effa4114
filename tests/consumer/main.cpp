// An outside program built against the installed cudarc (through CMake's find_package, or pkg-config). It
// must start and behave sensibly with or without a GPU: it prints the device count, or the reason there is
// no driver. It also checks that the headers' version is the library's.
#include <cudarc/cudarc.hpp>
#include <cudarc/version.hpp>

#include <cstdio>

int main() {
    const cudarc::Version linked = cudarc::version();
    std::printf("cudarc %s (library %d.%d.%d)\n", CUDARC_VERSION_STRING, linked.major, linked.minor,
                linked.patch);
    if (linked != cudarc::Version{CUDARC_VERSION_MAJOR, CUDARC_VERSION_MINOR, CUDARC_VERSION_PATCH}) {
        std::printf("the headers and the library disagree on the version\n");
        return 1;
    }
    try {
        std::printf("cudarc devices: %d\n", cudarc::Device::count());
    } catch (const cudarc::Error& e) {
        std::printf("no GPU here, as cudarc says: %s\n", e.what());
    }
    return 0;
}

// Run-time compiler selection: each backend's compiler is loaded once, on first use.
#include <string>

#include "sys/backends.hpp"
#include "sys/rtc_api.hpp"

namespace cudarc::sys {
namespace {

struct LoadedCompiler {
    RtcApi api;
    bool ok = false;
    std::string failure;
};

LoadedCompiler load(Backend backend) {
    LoadedCompiler out;
    out.api.backend = backend;
    out.ok = backend == Backend::hip ? load_hiprtc(out.api, out.failure) : load_nvrtc(out.api, out.failure);
    return out;
}

// Note: function-local statics give lazy, thread-safe, once-only loading, one per backend, so a
// process that only uses NVRTC never touches ROCm and vice versa.
const LoadedCompiler& loaded(Backend backend) {
    if (backend == Backend::hip) {
        static const LoadedCompiler hip = load(Backend::hip);
        return hip;
    }
    static const LoadedCompiler cuda = load(Backend::cuda);
    return cuda;
}

// Short explanations of the compiler's result codes (NVRTC numbering; hiprtc shares it).
const char* describe(RtcResult result) {
    switch (result) {
        case 0:
            return "success";
        case 1:
            return "the compiler ran out of memory";
        case 2:
            return "the program could not be created";
        case 3:
            return "an argument was invalid";
        case 4:
            return "the program handle was invalid";
        case 5:
            return "a compile option was not recognized or had a bad value";
        case 6:
            return "the source did not compile (see the log)";
        case 7:
            return "a built-in operation failed (on NVRTC, often: libnvrtc-builtins of the same version "
                   "could "
                   "not be loaded; it must sit next to libnvrtc or on the dynamic linker's path)";
        case 8:
            return "name expressions must be added before compiling";
        case 9:
            return "lowered names are only available after compiling";
        case 10:
            return "a name expression was not valid";
        case 11:
            return "internal compiler error";
        default:
            return "see the compiler's documentation";
    }
}

}  // namespace

const RtcApi& rtc(Backend backend) {
    const LoadedCompiler& c = loaded(backend);
    if (!c.ok) {
        const char* what = backend == Backend::hip ? "hiprtc" : "NVRTC";
        throw Error(std::string("cudarc: no run-time compiler (") + what + ") available: " + c.failure);
    }
    return c.api;
}

Error make_rtc_error(const RtcApi& api, const char* call, RtcResult result) {
    const char* name = api.get_error_string != nullptr ? api.get_error_string(result) : nullptr;
    return Error(call, result, name != nullptr ? name : "unknown compiler result", describe(result), -1,
                 api.backend);
}

}  // namespace cudarc::sys

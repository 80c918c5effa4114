// Backend selection and the error helpers shared by every driver call.
#include <mutex>
#include <string>

#include "sys/backends.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::sys {
namespace {

struct LoadedDriver {
    DriverApi api;
    bool ok = false;
    std::string failure;
};

LoadedDriver load_selected_backend() {
    LoadedDriver out;
    if (load_cuda_driver(out.api, out.failure)) out.ok = true;
    return out;
}

const LoadedDriver& loaded() {
    // Note: a function-local static gives lazy, thread-safe, once-only loading.
    static const LoadedDriver driver = load_selected_backend();
    return driver;
}

}  // namespace

const DriverApi& driver() {
    const LoadedDriver& d = loaded();
    if (!d.ok) throw Error("cudarc: no GPU driver available: " + d.failure);
    return d.api;
}

const DriverApi* driver_if_loaded() noexcept {
    try {
        const LoadedDriver& d = loaded();
        return d.ok ? &d.api : nullptr;
    } catch (...) {
        return nullptr;
    }
}

std::string driver_load_failure() { return loaded().failure; }

Error make_error(const DriverApi& api, const char* call, Result result, int device) {
    const char* name = nullptr;
    const char* text = nullptr;
    if (api.get_error_name == nullptr || api.get_error_name(result, &name) != kSuccess) name = nullptr;
    if (api.get_error_string == nullptr || api.get_error_string(result, &text) != kSuccess) text = nullptr;
    return Error(call, result, name != nullptr ? name : "unknown error code",
                 text != nullptr ? text : "no description", device, api.backend);
}

void throw_missing_entry_point(const DriverApi& api, const char* call) {
    throw Error(std::string("cudarc: ") + call + " is not supported on " + to_string(api.backend) +
                " by the loaded driver");
}

}  // namespace cudarc::sys

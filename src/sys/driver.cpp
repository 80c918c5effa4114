// Backend selection and the error helpers shared by every driver call.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <mutex>
#include <string>
#include <string_view>

#include "sys/backend_selection.hpp"
#include "sys/backends.hpp"
#include "sys/driver_api.hpp"
#include "sys/driver_override.hpp"
#include "sys/dynamic_library.hpp"

namespace cudarc::sys {
namespace {

struct Attempt {
    bool ok = false;
    std::string why;
};

// Loads one backend into `api`. With `need_device`, a backend that initializes but reports no device
// counts as failed, so that automatic selection moves on to the other one.
Attempt try_backend(bool (*load)(DriverApi&, std::string&), DriverApi& api, bool need_device) {
    Attempt attempt;
    if (load == nullptr) {
        attempt.why = "not built into this cudarc";
        return attempt;
    }
    if (!load(api, attempt.why)) return attempt;
    if (need_device) {
        int count = 0;
        const Result result = api.device_get_count != nullptr ? api.device_get_count(&count) : kErrorNotFound;
        if (result != kSuccess) {
            attempt.why = std::string(make_error(api, Entry::device_get_count, result, -1).what());
            return attempt;
        }
        if (count < 1) {
            attempt.why = std::string("the ") + to_string(api.backend) +
                          " driver loaded and initialized but reports no device";
            return attempt;
        }
    }
    attempt.ok = true;
    attempt.why.clear();
    return attempt;
}

struct LoadedDriver {
    DriverApi api;
    bool ok = false;
    std::string failure;
};

LoadedDriver load_selected_backend() {
    LoadedDriver out;
    try {
        BackendSelection selection = select_backend(parse_backend_request(env_or_empty("CUDARC_BACKEND")));
        out.api = selection.api;
        out.ok = selection.ok;
        out.failure = std::move(selection.failure);
    } catch (const std::exception& e) {
        // An unknown CUDARC_BACKEND value: reported by every driver() call, never a crash.
        std::string_view what = e.what();
        if (what.starts_with("cudarc: ")) what.remove_prefix(8);  // driver() adds its own prefix
        out.failure = what;
    }
    return out;
}

// Note [Driver override]: tests install a stand-in table (a fake driver, or a fault-injecting wrapper of
// the real one) before opening any device. One atomic load on driver() and driver_if_loaded(), which run
// when a device opens and in a few probes, never per operation: devices keep the table they opened with.
std::atomic<const DriverApi*> g_override{nullptr};

const LoadedDriver& loaded() {
    // Note: a function-local static gives lazy, thread-safe, once-only loading.
    static const LoadedDriver driver = load_selected_backend();
    return driver;
}

}  // namespace

BackendRequest parse_backend_request(std::string_view value) {
    std::string lower(value);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower.empty()) return BackendRequest::automatic;
    if (lower == "cuda") return BackendRequest::cuda;
    if (lower == "hip") return BackendRequest::hip;
    throw Error(
        "cudarc: CUDARC_BACKEND=\"" + std::string(value) +
        "\" is not a backend: use \"cuda\" or \"hip\", or leave it unset to use CUDA when it has a device "
        "and HIP otherwise");
}

BackendSelection select_backend(BackendRequest request, const BackendLoaders& loaders) {
    BackendSelection out;
    if (request == BackendRequest::cuda || request == BackendRequest::hip) {
        const bool cuda = request == BackendRequest::cuda;
        const Attempt attempt = try_backend(cuda ? loaders.cuda : loaders.hip, out.api, false);
        out.ok = attempt.ok;
        if (!attempt.ok) {
            out.failure = std::string("CUDARC_BACKEND=") + (cuda ? "cuda" : "hip") + " asks for " +
                          (cuda ? "CUDA" : "HIP") + " only, and it is not usable: " + attempt.why;
        }
        return out;
    }
    const Attempt cuda = try_backend(loaders.cuda, out.api, true);
    if (cuda.ok) {
        out.ok = true;
        return out;
    }
    const Attempt hip = try_backend(loaders.hip, out.api, true);
    if (hip.ok) {
        out.ok = true;
        return out;
    }
    out.api = DriverApi{};
    out.failure = "neither CUDA nor HIP is usable. CUDA: " + cuda.why + " HIP: " + hip.why +
                  " (CUDARC_BACKEND=cuda or =hip restricts the search to one of them.)";
    return out;
}

const DriverApi* set_driver_override(const DriverApi* api) noexcept {
    return g_override.exchange(api, std::memory_order_acq_rel);
}

const DriverApi& driver() {
    if (const DriverApi* stand_in = g_override.load(std::memory_order_acquire)) return *stand_in;
    const LoadedDriver& d = loaded();
    if (!d.ok) throw Error("cudarc: no GPU driver available: " + d.failure);
    return d.api;
}

const DriverApi* driver_if_loaded() noexcept {
    if (const DriverApi* stand_in = g_override.load(std::memory_order_acquire)) return stand_in;
    try {
        const LoadedDriver& d = loaded();
        return d.ok ? &d.api : nullptr;
    } catch (...) {
        return nullptr;
    }
}

std::string driver_load_failure() {
    if (g_override.load(std::memory_order_acquire) != nullptr) return {};
    return loaded().failure;
}

namespace {
// The entry's name on the active backend, followed by `context` as given.
std::string describe_call(const DriverApi& api, Entry entry, std::string_view context) {
    std::string call = entry_name(api.backend, entry);
    call += context;
    return call;
}
}  // namespace

Error make_error(const DriverApi& api, Entry entry, Result result, int device, std::string_view context) {
    const char* name = nullptr;
    const char* text = nullptr;
    if (api.get_error_name == nullptr || api.get_error_name(result, &name) != kSuccess) name = nullptr;
    if (api.get_error_string == nullptr || api.get_error_string(result, &text) != kSuccess) text = nullptr;
    return Error(describe_call(api, entry, context), result, name != nullptr ? name : "unknown error code",
                 text != nullptr ? text : "no description", device, api.backend);
}

void throw_missing_entry_point(const DriverApi& api, Entry entry, std::string_view context) {
    throw Error("cudarc: " + describe_call(api, entry, context) + " is not supported on " +
                to_string(api.backend) + " by the loaded driver");
}

bool stream_is_capturing(const DriverApi& api, Stream stream, int device) {
    if (api.stream_is_capturing == nullptr) return false;
    int status = kStreamCaptureStatusNone;
    check(api, api.stream_is_capturing(stream, &status), Entry::stream_is_capturing, device);
    return status != kStreamCaptureStatusNone;
}

}  // namespace cudarc::sys

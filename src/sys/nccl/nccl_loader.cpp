// Finds and loads NCCL (libnccl.so.2) at run time and fills the NcclApi table.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string_view>
#include <system_error>

#include "sys/dynamic_library.hpp"
#include "sys/nccl/nccl_api.hpp"
#include "sys/nccl/nccl_override.hpp"

namespace cudarc::sys {
namespace {

constexpr const char* kSoname = "libnccl.so.2";
constexpr const char* kUnversioned = "libnccl.so";

std::vector<std::string> split_path_list(const std::string& text) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= text.size()) {
        const auto colon = text.find(':', start);
        std::string item = text.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
        if (!item.empty()) out.push_back(std::move(item));
        if (colon == std::string::npos) break;
        start = colon + 1;
    }
    return out;
}

// The minor version of a "python3.N" folder name, or -1.
int python_minor(std::string_view name) {
    constexpr std::string_view prefix = "python3.";
    if (!name.starts_with(prefix) || name.size() == prefix.size()) return -1;
    int minor = 0;
    for (const char c : name.substr(prefix.size())) {
        if (c < '0' || c > '9') return -1;
        minor = minor * 10 + (c - '0');
    }
    return minor;
}

// The site folders under one Python prefix that exist: lib/python3.N/{site,dist}-packages (newest Python
// first), lib64/python3.N/site-packages, and Debian's lib/python3/dist-packages.
std::vector<std::string> site_folders_under(const std::string& prefix) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const char* lib : {"lib", "lib64"}) {
        const std::filesystem::path root = std::filesystem::path(prefix) / lib;
        std::vector<std::pair<int, std::filesystem::path>> versions;
        for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
            const int minor = python_minor(entry.path().filename().string());
            if (minor >= 0) versions.emplace_back(minor, entry.path());
        }
        std::sort(versions.begin(), versions.end(),
                  [](const auto& a, const auto& b) { return a.first > b.first; });
        for (const auto& version : versions) {
            for (const char* kind : {"site-packages", "dist-packages"}) {
                const auto folder = version.second / kind;
                if (std::filesystem::is_directory(folder, ec)) append_unique(out, folder.string());
            }
        }
        const auto debian = root / "python3" / "dist-packages";
        if (std::filesystem::is_directory(debian, ec)) append_unique(out, debian.string());
    }
    return out;
}

template <typename Fn>
void resolve(const DynamicLibrary& library, Fn& slot, const char* name, std::vector<std::string>* missing) {
    slot = reinterpret_cast<Fn>(library.symbol(name));
    if (slot == nullptr && missing != nullptr) missing->emplace_back(name);
}

// Fills `table` from `library`; returns what is wrong with it (empty when usable).
std::string fill_table(const DynamicLibrary& library, NcclApi& table) {
    std::vector<std::string> missing;
    resolve(library, table.get_version, "ncclGetVersion", &missing);
    resolve(library, table.get_error_string, "ncclGetErrorString", &missing);
    resolve(library, table.get_last_error, "ncclGetLastError", nullptr);
    resolve(library, table.get_unique_id, "ncclGetUniqueId", &missing);
    resolve(library, table.comm_init_rank, "ncclCommInitRank", &missing);
    resolve(library, table.comm_init_all, "ncclCommInitAll", &missing);
    resolve(library, table.comm_finalize, "ncclCommFinalize", nullptr);
    resolve(library, table.comm_destroy, "ncclCommDestroy", &missing);
    resolve(library, table.comm_abort, "ncclCommAbort", &missing);
    resolve(library, table.comm_get_async_error, "ncclCommGetAsyncError", &missing);
    resolve(library, table.comm_count, "ncclCommCount", &missing);
    resolve(library, table.comm_cu_device, "ncclCommCuDevice", &missing);
    resolve(library, table.comm_user_rank, "ncclCommUserRank", &missing);
    resolve(library, table.all_reduce, "ncclAllReduce", &missing);
    resolve(library, table.broadcast, "ncclBroadcast", &missing);
    resolve(library, table.reduce, "ncclReduce", &missing);
    resolve(library, table.all_gather, "ncclAllGather", &missing);
    resolve(library, table.reduce_scatter, "ncclReduceScatter", &missing);
    resolve(library, table.send, "ncclSend", &missing);
    resolve(library, table.recv, "ncclRecv", &missing);
    resolve(library, table.group_start, "ncclGroupStart", &missing);
    resolve(library, table.group_end, "ncclGroupEnd", &missing);
    if (!missing.empty()) return "not a usable NCCL (lacks " + join_lines(missing, ", ") + ")";
    if (table.get_version(&table.version) != kNcclSuccess) return "ncclGetVersion failed";
    const NcclVersion version = decode_nccl_version(table.version);
    if (version < kMinimumNcclVersion) {
        return fmt::format("NCCL {}.{}.{} is too old: cudarc needs {}.{} or newer (bf16, ncclAvg)",
                           version.major, version.minor, version.patch, kMinimumNcclVersion.major,
                           kMinimumNcclVersion.minor);
    }
    return {};
}

struct LoadedNccl {
    NcclApi api;
    bool ok = false;
    std::string failure;
};

// Note [NCCL override]: tests install a stand-in table (testing/fake_driver's FakeNccl, which works on the
// fake driver's memory and streams) before making any communicator. While one is installed libnccl is not
// even looked for. One atomic load per lookup.
std::atomic<const NcclApi*> g_override{nullptr};

const LoadedNccl& loaded() {
    // Note: a function-local static gives lazy, thread-safe, once-only loading.
    static const LoadedNccl nccl = [] {
        LoadedNccl out;
        default_nvls_off();
        try {
            out.ok = load_nccl_from(nccl_search(NcclSearchEnvironment::from_process()), out.api, out.failure);
        } catch (const std::exception& e) {
            out.failure = e.what();
        }
        return out;
    }();
    return nccl;
}

}  // namespace

std::string nccl_result_name(NcclResult result) {
    switch (result) {
        case kNcclSuccess:
            return "ncclSuccess";
        case kNcclUnhandledCudaError:
            return "ncclUnhandledCudaError";
        case kNcclSystemError:
            return "ncclSystemError";
        case kNcclInternalError:
            return "ncclInternalError";
        case kNcclInvalidArgument:
            return "ncclInvalidArgument";
        case kNcclInvalidUsage:
            return "ncclInvalidUsage";
        case kNcclRemoteError:
            return "ncclRemoteError";
        case kNcclInProgress:
            return "ncclInProgress";
        case kNcclTimeout:
            return "ncclTimeout";
        default:
            return fmt::format("ncclResult {}", result);
    }
}

NcclSearchEnvironment NcclSearchEnvironment::from_process() {
    NcclSearchEnvironment env;
    env.override_path = env_or_empty("CUDARC_NCCL");
    env.python_path = split_path_list(env_or_empty("PYTHONPATH"));
    for (const char* variable : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
        const std::string prefix = env_or_empty(variable);
        if (!prefix.empty()) env.python_prefixes.push_back(prefix);
    }
    // The user base (pip install --user): $PYTHONUSERBASE, else ~/.local.
    const std::string user_base = env_or_empty("PYTHONUSERBASE");
    const std::string home = env_or_empty("HOME");
    if (!user_base.empty()) {
        env.python_prefixes.push_back(user_base);
    } else if (!home.empty()) {
        env.python_prefixes.push_back(home + "/.local");
    }
    for (const char* prefix : {"/usr/local", "/usr", "/opt/conda"}) env.python_prefixes.emplace_back(prefix);
    env.system_folders = {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                          "/usr/local/lib"};
    return env;
}

NcclSearch nccl_search(const NcclSearchEnvironment& env) {
    NcclSearch search;
    if (!env.override_path.empty()) {
        // Note: an override is the only place looked at, as for CUDARC_CUDA_DRIVER and CUDARC_NVRTC: a
        // library the user named must not be silently replaced by another one.
        std::error_code ec;
        if (std::filesystem::is_directory(env.override_path, ec)) {
            search.candidates = {env.override_path + "/" + kSoname, env.override_path + "/" + kUnversioned};
        } else {
            search.candidates = {env.override_path};
        }
        return search;
    }
    search.candidates.emplace_back(kSoname);  // the dynamic linker's search (LD_LIBRARY_PATH, ld.so.cache)
    std::vector<std::string> sites;
    for (const auto& folder : env.python_path) append_unique(sites, folder);
    for (const auto& prefix : env.python_prefixes) {
        for (const auto& folder : site_folders_under(prefix)) append_unique(sites, folder);
    }
    std::error_code ec;
    for (const auto& site : sites) {
        const auto wheel = std::filesystem::path(site) / "nvidia" / "nccl" / "lib" / kSoname;
        if (std::filesystem::exists(wheel, ec)) append_unique(search.candidates, wheel.string());
    }
    search.site_folders = std::move(sites);
    for (const auto& folder : env.system_folders) append_unique(search.candidates, folder + "/" + kSoname);
    return search;
}

bool load_nccl_from(const NcclSearch& search, NcclApi& api, std::string& why) {
    std::vector<std::string> attempts;
    const auto use = [&api](const DynamicLibrary& library) -> std::string {
        NcclApi table;
        if (std::string problem = fill_table(library, table); !problem.empty()) return problem;
        table.library_path = library.resolved_path(reinterpret_cast<void*>(table.get_version));
        api = std::move(table);
        return {};
    };
    // Note [Loading a vendor library]
    if (DynamicLibrary::load_first(search.candidates, use, attempts)) return true;
    why = "NCCL (libnccl.so.2) could not be loaded; tried: " + join_lines(attempts, "; ");
    if (!search.site_folders.empty()) {
        why += ". No nvidia/nccl/lib/libnccl.so.2 in the Python site folders " +
               join_lines(search.site_folders, ", ");
    }
    why +=
        ". Install NCCL (e.g. the libnccl2 package, or pip's nvidia-nccl-cu12 / nvidia-nccl-cu13 wheel), or "
        "set "
        "CUDARC_NCCL to the library's path.";
    return false;
}

const NcclApi* set_nccl_override(const NcclApi* api) noexcept {
    return g_override.exchange(api, std::memory_order_acq_rel);
}

const NcclApi& nccl() {
    if (const NcclApi* stand_in = g_override.load(std::memory_order_acquire)) return *stand_in;
    const LoadedNccl& loaded_nccl = loaded();
    if (!loaded_nccl.ok) throw Error("cudarc: " + loaded_nccl.failure);
    return loaded_nccl.api;
}

const NcclApi* nccl_if_loaded() noexcept {
    if (const NcclApi* stand_in = g_override.load(std::memory_order_acquire)) return stand_in;
    try {
        const LoadedNccl& loaded_nccl = loaded();
        return loaded_nccl.ok ? &loaded_nccl.api : nullptr;
    } catch (...) {
        return nullptr;
    }
}

std::string nccl_load_failure() {
    if (g_override.load(std::memory_order_acquire) != nullptr) return {};
    return loaded().failure;
}

// Note [NVLink multicast stays off]: on NVSwitch machines NCCL's NVLS algorithms create NVLink multicast
// objects (cuMulticastCreate), a fabric-wide resource. On shared machines a run that dies holding them, or
// that races another tenant for them, has left GPUs unusable until an administrator reset them. cudarc never
// creates multicast objects itself, and keeps NCCL from doing so unless the user opted in by setting
// NCCL_NVLS_ENABLE (docs/multi-gpu.md). The cost: all-reduce inside one NVSwitch node loses the NVLS
// algorithm and uses ring or tree.
void default_nvls_off() noexcept {
    // Note: setenv is not thread-safe against concurrent getenv; this runs once, inside loaded()'s
    // initialization, before NCCL exists in the process and reads its parameters.
    ::setenv("NCCL_NVLS_ENABLE", "0", 0);
}

}  // namespace cudarc::sys

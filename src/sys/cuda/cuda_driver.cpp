// Fills the DriverApi table from libcuda at run time.
#include <cstdint>
#include <string>
#include <vector>

#include "sys/backends.hpp"
#include "sys/dynamic_library.hpp"

namespace cudarc::sys {
namespace {

using GetProcAddressV2 = Result (*)(const char*, void**, int, std::uint64_t, int*);
using GetProcAddressV1 = Result (*)(const char*, void**, int, std::uint64_t);

std::vector<std::string> driver_candidates() {
    std::vector<std::string> out;
    const std::string override_path = env_or_empty("CUDARC_CUDA_DRIVER");
    if (!override_path.empty()) return {override_path};  // an override is taken as the only choice
    out.emplace_back("libcuda.so.1");
    for (const char* dir : {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu",
                            "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib"}) {
        out.push_back(std::string(dir) + "/libcuda.so.1");
    }
    return out;
}

class Resolver {
  public:
    explicit Resolver(const DynamicLibrary& library) {
        v2_ = reinterpret_cast<GetProcAddressV2>(library.symbol("cuGetProcAddress_v2"));
        if (v2_ == nullptr) v1_ = reinterpret_cast<GetProcAddressV1>(library.symbol("cuGetProcAddress"));
    }
    [[nodiscard]] bool usable() const { return v2_ != nullptr || v1_ != nullptr; }

    // `version`: the CUDA version whose ABI the slot expects (Note [One driver list]).
    template <typename Fn>
    void operator()(Fn& slot, const char* name, EntryNeed need, int version) {
        void* pfn = nullptr;
        Result result = kErrorNotFound;
        if (v2_ != nullptr) {
            int status = 0;
            result = v2_(name, &pfn, version, 0, &status);
        } else if (v1_ != nullptr) {
            result = v1_(name, &pfn, version, 0);
        }
        if (result != kSuccess) pfn = nullptr;
        slot = reinterpret_cast<Fn>(pfn);
        if (slot == nullptr && need == EntryNeed::required) missing_.emplace_back(name);
    }
    [[nodiscard]] const std::vector<std::string>& missing() const { return missing_; }

  private:
    GetProcAddressV2 v2_ = nullptr;
    GetProcAddressV1 v1_ = nullptr;
    std::vector<std::string> missing_;
};

}  // namespace

bool load_cuda_driver(DriverApi& api, std::string& why) {
    bool ok = false;
    // The first libcuda that opens is taken: a newer one elsewhere would not match the kernel module.
    const auto use = [&api, &why, &ok](const DynamicLibrary& library) -> std::string {
        Resolver resolve(library);
        if (!resolve.usable()) {
            why = library.path() + " has no cuGetProcAddress: the driver is older than CUDA 11.3";
            return {};
        }
        api = DriverApi{};
        api.backend = Backend::cuda;
        // Note [One driver list]: each entry by its CUDA name, at its minimum version.
#define CUDARC_SYS_RESOLVE(field, cuda_name, hip_name, need, min_version, ...) \
    resolve(api.field, cuda_name, EntryNeed::need, min_version);
        CUDARC_SYS_DRIVER_ENTRIES(CUDARC_SYS_RESOLVE)
#undef CUDARC_SYS_RESOLVE
        if (!resolve.missing().empty()) {
            why = library.path() + " lacks required entry points: " + join_lines(resolve.missing(), ", ");
            return {};
        }
        const Result init = api.init(0);
        if (init != kSuccess) {
            why = make_error(api, Entry::init, init, -1).what();
            why += " (driver loaded from " + library.path() + ")";
            return {};
        }
        ok = true;
        return {};
    };
    std::vector<std::string> attempts;
    // Note [Loading a vendor library]
    if (DynamicLibrary::load_first(driver_candidates(), use, attempts)) return ok;
    why = "the CUDA driver (libcuda.so.1) could not be loaded; tried: " + join_lines(attempts, "; ") +
          ". Install the NVIDIA driver, or set CUDARC_CUDA_DRIVER to the library's path.";
    return false;
}

}  // namespace cudarc::sys

#include "sys/hip/comgr_targets.hpp"

#include <algorithm>

#include "sys/dynamic_library.hpp"

namespace cudarc::sys::hip {
namespace {

// comgr names ISAs by their full target triple plus the target ID.
constexpr std::string_view kIsaPrefix = "amdgcn-amd-amdhsa--";
constexpr const char* kComgrSonames[] = {"libamd_comgr.so.3", "libamd_comgr.so.2"};

}  // namespace

ComgrTargets ComgrTargets::load(const std::string& preferred_folder) {
    std::vector<std::string> candidates;
    auto add = [&candidates](const std::string& path) { append_unique(candidates, path); };
    if (!preferred_folder.empty()) {
        for (const char* soname : kComgrSonames) add(preferred_folder + "/" + soname);
    }
    for (const char* soname : kComgrSonames) add(soname);
    const std::string rocm_path = env_or_empty("ROCM_PATH");
    for (const char* soname : kComgrSonames) {
        if (!rocm_path.empty()) add(rocm_path + "/lib/" + soname);
        add(std::string("/opt/rocm/lib/") + soname);
    }

    ComgrTargets targets;
    // The first comgr that opens is taken.
    const auto use = [&targets](const DynamicLibrary& library) -> std::string {
        targets.get_isa_count_ =
            reinterpret_cast<decltype(get_isa_count_)>(library.symbol("amd_comgr_get_isa_count"));
        targets.get_isa_name_ =
            reinterpret_cast<decltype(get_isa_name_)>(library.symbol("amd_comgr_get_isa_name"));
        targets.get_isa_metadata_ =
            reinterpret_cast<decltype(get_isa_metadata_)>(library.symbol("amd_comgr_get_isa_metadata"));
        targets.destroy_metadata_ =
            reinterpret_cast<decltype(destroy_metadata_)>(library.symbol("amd_comgr_destroy_metadata"));
        if (targets.get_isa_count_ == nullptr || targets.get_isa_name_ == nullptr ||
            targets.get_isa_metadata_ == nullptr || targets.destroy_metadata_ == nullptr) {
            targets = ComgrTargets{};
            targets.why_ = library.path() + " lacks the amd_comgr ISA queries (older than comgr 2.0)";
            return {};
        }
        targets.library_path_ = library.path();
        return {};
    };
    std::vector<std::string> attempts;
    // Note [Loading a vendor library]
    if (!DynamicLibrary::load_first(candidates, use, attempts)) {
        targets.why_ = "the AMD code object manager (libamd_comgr) could not be loaded; tried: " +
                       join_lines(attempts, "; ");
    }
    return targets;
}

std::vector<std::string> ComgrTargets::processors() const {
    std::vector<std::string> out;
    if (!available()) return out;
    std::size_t count = 0;
    if (get_isa_count_(&count) != 0) return out;
    for (std::size_t i = 0; i < count; ++i) {
        const char* name = nullptr;
        if (get_isa_name_(i, &name) != 0 || name == nullptr) continue;
        std::string_view isa(name);
        if (!isa.starts_with(kIsaPrefix)) continue;
        isa.remove_prefix(kIsaPrefix.size());
        std::string processor(isa.substr(0, isa.find(':')));
        if (std::find(out.begin(), out.end(), processor) == out.end()) out.push_back(std::move(processor));
    }
    return out;
}

std::optional<bool> ComgrTargets::accepts(std::string_view target_id) const {
    if (!available()) return std::nullopt;
    if (target_id.empty()) return false;
    // Note: comgr validates the processor and each feature against that processor (e.g. gfx1030
    // has no xnack), which is exactly what hiprtc needs and cannot survive being wrong about.
    const std::string isa = std::string(kIsaPrefix) + std::string(target_id);
    MetadataNode metadata{0};
    if (get_isa_metadata_(isa.c_str(), &metadata) != 0) return false;
    destroy_metadata_(metadata);
    return true;
}

}  // namespace cudarc::sys::hip

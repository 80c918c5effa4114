// The AMD GPU targets the installed code object manager (comgr) knows. Internal to src/sys/hip.
//
// Note: hiprtc compiles through comgr, and ROCm 5.x's hiprtc aborts the whole process (a double free
// inside comgr, seen with Debian's ROCm 5.2.3) when asked for a target comgr does not know, e.g.
// "--offload-arch=gfx942" or "gfx1030:xnack+". cudarc therefore checks every target against comgr's
// own list before it calls hiprtcCompileProgram.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cudarc::sys::hip {

class ComgrTargets {
  public:
    // Loads comgr: first from `preferred_folder` (where hiprtc was loaded from, so both agree), then
    // by soname (libamd_comgr.so.3, .so.2), then $ROCM_PATH/lib and /opt/rocm/lib.
    [[nodiscard]] static ComgrTargets load(const std::string& preferred_folder);

    [[nodiscard]] bool available() const noexcept { return get_isa_count_ != nullptr; }
    [[nodiscard]] const std::string& library_path() const noexcept { return library_path_; }
    // Why comgr is not available (empty when it is).
    [[nodiscard]] const std::string& why_unavailable() const noexcept { return why_; }

    // Processor names comgr compiles for, e.g. "gfx90a", "gfx1030", in comgr's order; empty when
    // comgr is not available.
    [[nodiscard]] std::vector<std::string> processors() const;

    // Whether comgr accepts `target_id`: a processor with optional target features, e.g. "gfx90a",
    // "gfx90a:sramecc+:xnack-". nullopt when comgr is not available (nothing can be said).
    [[nodiscard]] std::optional<bool> accepts(std::string_view target_id) const;

  private:
    struct MetadataNode {
        std::uint64_t handle;
    };
    using Status = int;  // amd_comgr_status_t; 0 is success

    Status (*get_isa_count_)(std::size_t* count) = nullptr;
    Status (*get_isa_name_)(std::size_t index, const char** name) = nullptr;
    Status (*get_isa_metadata_)(const char* isa_name, MetadataNode* metadata) = nullptr;
    Status (*destroy_metadata_)(MetadataNode metadata) = nullptr;
    std::string library_path_;
    std::string why_;
};

}  // namespace cudarc::sys::hip

// The shared state behind a Module and every Function taken from it.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/device_state.hpp"
#include "cudarc/error.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::detail {

// A loaded module. Unloaded when the last Module / Function referring to it goes.
class ModuleState {
  public:
    ModuleState(std::shared_ptr<DeviceState> device, sys::Module handle, std::string origin,
                std::map<std::string, std::string> lowered_names, std::string arch) noexcept
        : device_(std::move(device)),
          handle_(handle),
          origin_(std::move(origin)),
          lowered_names_(std::move(lowered_names)),
          arch_(std::move(arch)) {}
    ModuleState(const ModuleState&) = delete;
    ModuleState& operator=(const ModuleState&) = delete;
    ~ModuleState() {
        const auto scope = device_->bind_or_defer();
        device_->defer(device_->api().module_unload(handle_), sys::Entry::module_unload);
    }

    [[nodiscard]] DeviceState& device() const noexcept { return *device_; }
    [[nodiscard]] sys::Module handle() const noexcept { return handle_; }
    [[nodiscard]] const std::string& origin() const noexcept { return origin_; }
    [[nodiscard]] const std::map<std::string, std::string>& lowered_names() const noexcept {
        return lowered_names_;
    }
    [[nodiscard]] const std::string& arch() const noexcept { return arch_; }

    // The symbol to look up for `name`: the lowered name of a name expression, else `name` itself.
    [[nodiscard]] std::string symbol_for(const std::string& name) const {
        const auto found = lowered_names_.find(name);
        return found != lowered_names_.end() ? found->second : name;
    }

  private:
    std::shared_ptr<DeviceState> device_;
    sys::Module handle_;
    std::string origin_;
    std::map<std::string, std::string> lowered_names_;
    std::string arch_;  // what the code was built for ("sm_90", "compute_90"); may be empty
};

// What a Function needs besides its handle: names for messages, and the module that keeps it loaded.
struct FunctionRecord {
    std::shared_ptr<const ModuleState> module;
    std::string name;    // as looked up
    std::string symbol;  // as found
};

}  // namespace cudarc::detail

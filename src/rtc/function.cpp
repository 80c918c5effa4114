// Function: attributes, dynamic shared memory, occupancy and parameter information of a loaded kernel.
#include <fmt/format.h>

#include <climits>

#include "core/device_state.hpp"
#include "cudarc/kernel.hpp"
#include "rtc/module_state.hpp"

namespace cudarc {

using detail::DeviceState;

namespace {

[[noreturn]] void throw_empty(const char* what) {
    throw Error(
        fmt::format("cudarc: Function::{} on an empty Function (default-constructed, not looked up in a "
                    "Module)",
                    what));
}

int function_attribute(const DeviceState& device, sys::Function function, int attribute, const char* what) {
    int value = 0;
    const sys::Result result = device.api().func_get_attribute(&value, attribute, function);
    if (result != sys::kSuccess)
        device.throw_error(result, sys::Entry::func_get_attribute, fmt::format(" ({})", what));
    return value;
}

std::size_t as_size(int value) {
    return value < 0 ? 0 : static_cast<std::size_t>(value);
}

}  // namespace

const std::string& Function::name() const noexcept {
    static const std::string none;
    return record_ ? record_->name : none;
}

const std::string& Function::symbol() const noexcept {
    static const std::string none;
    return record_ ? record_->symbol : none;
}

int Function::device_ordinal() const noexcept {
    return device_ != nullptr ? device_->ordinal() : -1;
}

FunctionAttributes Function::attributes() const {
    if (empty()) throw_empty("attributes");
    const auto scope = device_->bind();
    namespace fa = sys::func_attr;
    FunctionAttributes out;
    out.registers = function_attribute(*device_, handle_, fa::kNumRegs, "registers");
    out.static_shared_bytes =
        as_size(function_attribute(*device_, handle_, fa::kSharedSizeBytes, "static shared"));
    out.max_dynamic_shared_bytes =
        as_size(function_attribute(*device_, handle_, fa::kMaxDynamicSharedSizeBytes, "max dynamic shared"));
    out.const_bytes = as_size(function_attribute(*device_, handle_, fa::kConstSizeBytes, "constant bytes"));
    out.local_bytes = as_size(function_attribute(*device_, handle_, fa::kLocalSizeBytes, "local bytes"));
    out.max_threads_per_block =
        function_attribute(*device_, handle_, fa::kMaxThreadsPerBlock, "max threads per block");
    out.ptx_version = function_attribute(*device_, handle_, fa::kPtxVersion, "PTX version");
    out.binary_version = function_attribute(*device_, handle_, fa::kBinaryVersion, "binary version");
    return out;
}

void Function::set_max_dynamic_shared_memory(std::size_t bytes) const {
    if (empty()) throw_empty("set_max_dynamic_shared_memory");
    const auto scope = device_->bind();
    const sys::DriverApi& api = device_->api();
    int opt_in = 0;
    device_->check(
        api.device_get_attribute(&opt_in, sys::attr::kMaxSharedMemoryPerBlockOptin, device_->device()),
        sys::Entry::device_get_attribute);
    if (opt_in <= 0) {  // a driver that does not report the opt-in limit: fall back to the plain one
        device_->check(
            api.device_get_attribute(&opt_in, sys::attr::kMaxSharedMemoryPerBlock, device_->device()),
            sys::Entry::device_get_attribute);
    }
    const std::size_t static_bytes =
        as_size(function_attribute(*device_, handle_, sys::func_attr::kSharedSizeBytes, "static shared"));
    const std::size_t limit = as_size(opt_in);
    const std::size_t available = limit > static_bytes ? limit - static_bytes : 0;
    if (bytes > available) {
        throw Error(fmt::format(
            "cudarc: kernel '{}' cannot use {} bytes of dynamic shared memory on device {}: a block "
            "may use at most {} bytes there, and the kernel's static shared memory takes {}, "
            "leaving {}",
            name(), bytes, device_->ordinal(), limit, static_bytes, available));
    }
    const sys::Result result =
        api.func_set_attribute(handle_, sys::func_attr::kMaxDynamicSharedSizeBytes, static_cast<int>(bytes));
    if (result != sys::kSuccess) {
        device_->throw_error(
            result, sys::Entry::func_set_attribute,
            fmt::format(" (kernel '{}', max dynamic shared memory {} bytes)", name(), bytes));
    }
}

int Function::max_active_blocks_per_multiprocessor(unsigned block_size,
                                                   std::size_t dynamic_shared_bytes) const {
    if (empty()) throw_empty("max_active_blocks_per_multiprocessor");
    if (block_size == 0 || block_size > static_cast<unsigned>(INT_MAX)) {
        throw Error(
            fmt::format("cudarc: Function::max_active_blocks_per_multiprocessor: block size {} is not valid",
                        block_size));
    }
    const auto scope = device_->bind();
    const sys::DriverApi& api = device_->api();
    auto occupancy = sys::require(api, api.occupancy_max_active_blocks_per_multiprocessor,
                                  sys::Entry::occupancy_max_active_blocks_per_multiprocessor);
    int blocks = 0;
    const sys::Result result =
        occupancy(&blocks, handle_, static_cast<int>(block_size), dynamic_shared_bytes);
    if (result != sys::kSuccess) {
        device_->throw_error(result, sys::Entry::occupancy_max_active_blocks_per_multiprocessor,
                             fmt::format(" (kernel '{}', block {}, {} bytes dynamic shared memory)", name(),
                                         block_size, dynamic_shared_bytes));
    }
    return blocks;
}

std::optional<std::vector<std::size_t>> Function::parameter_sizes() const {
    if (empty()) throw_empty("parameter_sizes");
    const sys::DriverApi& api = device_->api();
    if (api.func_get_param_info == nullptr) return std::nullopt;
    const auto scope = device_->bind();
    // Note: the driver has no count query; indices past the last parameter answer CUDA_ERROR_INVALID_VALUE.
    // A CUDA kernel has at most 32764 bytes of parameters, so the loop is bounded.
    constexpr std::size_t kMaxParameters = 32764;
    std::vector<std::size_t> sizes;
    for (std::size_t index = 0; index < kMaxParameters; ++index) {
        std::size_t offset = 0;
        std::size_t size = 0;
        const sys::Result result = api.func_get_param_info(handle_, index, &offset, &size);
        if (result == sys::kErrorInvalidValue) return sizes;
        if (result != sys::kSuccess) return std::nullopt;  // not supported for this function: cannot tell
        sizes.push_back(size);
    }
    return std::nullopt;
}

}  // namespace cudarc

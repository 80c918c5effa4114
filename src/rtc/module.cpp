// Module: loading device code, kernel and global lookup, globals' copies, and the per-process cache of
// shipped modules.
#include "cudarc/module.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <utility>

#include "core/device_state.hpp"
#include "core/host_copy.hpp"
#include "cudarc/device.hpp"
#include "cudarc/kernel_cache.hpp"
#include "cudarc/nvrtc.hpp"
#include "cudarc/stream.hpp"
#include "rtc/module_state.hpp"
#include "rtc/shipped_modules.hpp"

namespace cudarc {

using detail::DeviceState;
using detail::ModuleState;

namespace {

constexpr sys::Result kErrorNoBinaryForGpu = 209;  // CUDA_ERROR_NO_BINARY_FOR_GPU

// What an image's first bytes say it is; empty when nothing the driver loads.
std::string_view binary_kind(std::span<const char> image) {
    auto starts_with = [&](std::string_view magic) {
        return image.size() >= magic.size() && std::memcmp(image.data(), magic.data(), magic.size()) == 0;
    };
    if (starts_with("\x7f"
                    "ELF"))
        return "CUBIN";
    if (starts_with("\x50\xed\x55\xba")) return "fatbin";  // 0xBA55ED50, little-endian
    if (starts_with("__CLANG_OFFLOAD_BUNDLE__")) return "code object bundle";
    return {};
}

std::string describe_bytes(std::span<const char> image) {
    std::string out;
    for (std::size_t i = 0; i < image.size() && i < 8; ++i) {
        out += fmt::format("{}{:02x}", i == 0 ? "" : " ", static_cast<unsigned char>(image[i]));
    }
    return out.empty() ? std::string("(empty)") : out;
}

[[noreturn]] void throw_moved_from() {
    throw Error("cudarc: use of a moved-from Module");
}

}  // namespace

Module::~Module() = default;

Module Module::load(const Device& device, const void* image, std::string origin,
                    std::map<std::string, std::string> lowered_names, std::string arch) {
    const std::shared_ptr<DeviceState>& state = detail::Internals::device_state(device);
    const auto scope = state->bind();
    sys::Module handle = nullptr;
    const sys::Result result = state->api().module_load_data(&handle, image);
    if (result != sys::kSuccess) {
        const std::string built_for = arch.empty() ? std::string() : fmt::format(", built for {}", arch);
        std::string context = fmt::format(" ({}{}, on {} device {} {})", origin, built_for,
                                          to_string(state->api().backend), state->ordinal(), device.arch());
        if (result == kErrorNoBinaryForGpu) {
            context += fmt::format(" [compile for {} or load PTX, which the driver compiles for the device]",
                                   device.arch());
        }
        state->throw_error(result, sys::Entry::module_load_data, context);
    }
    return Module(std::make_shared<ModuleState>(state, handle, std::move(origin), std::move(lowered_names),
                                                std::move(arch)));
}

Module Module::from_ptx(const Device& device, std::string_view ptx) {
    if (ptx.empty()) throw Error("cudarc: Module::from_ptx: the PTX text is empty");
    const std::string text(ptx);  // the driver wants it NUL-terminated
    return load(device, text.c_str(), "PTX", {}, {});
}

Module Module::from_binary(const Device& device, std::span<const char> image) {
    const std::string_view kind = binary_kind(image);
    if (kind.empty()) {
        throw Error(
            fmt::format("cudarc: Module::from_binary: the {} bytes given are neither a CUBIN (ELF) nor a "
                        "fatbin (first bytes: {}); PTX text goes to Module::from_ptx",
                        image.size(), describe_bytes(image)));
    }
    return load(device, image.data(), std::string(kind), {}, {});
}

Module Module::from_binary(const Device& device, std::span<const std::byte> image) {
    return from_binary(device,
                       std::span<const char>(reinterpret_cast<const char*>(image.data()), image.size()));
}

Module Module::from_program(const Device& device, const CompiledProgram& program) {
    if (program.binary.empty() && program.ptx.empty()) {
        throw Error("cudarc: Module::from_program: the CompiledProgram holds neither a binary nor PTX");
    }
    if (program.backend != device.backend()) {
        throw Error(
            fmt::format("cudarc: Module::from_program: the program was compiled for {}, device {} is a {} "
                        "device",
                        to_string(program.backend), device.ordinal(), to_string(device.backend())));
    }
    const std::string origin = fmt::format("a compiled program ({} for {})", to_string(program.format()),
                                           program.arch.empty() ? std::string("?") : program.arch);
    return load(device, program.image(), origin, program.lowered_names, program.arch);
}

Module Module::compile(const Device& device, const Program& program, CompileOptions options) {
    return compile(device, program, std::move(options), KernelCache::process_cache());
}

Module Module::compile(const Device& device, const Program& program, CompileOptions options,
                       KernelCache& cache) {
    if (options.arch.empty()) options.arch = device.arch();
    options.backend = device.backend();
    const CachedProgram cached = cache.compile(program, options);
    return load(device, cached.program.image(), program.name(), cached.program.lowered_names,
                cached.program.arch);
}

namespace {

// Everything in CompileOptions that changes the compiler's output, as one string.
// Note: keep in step with CompileOptions' fields.
std::string options_key(const CompileOptions& o) {
    std::string key = fmt::format("{}|{}|{}|{}|{}|{}|", o.arch, o.cpp_standard, o.fast_math, o.line_info,
                                  o.max_registers, static_cast<int>(o.backend));
    for (const auto& [name, value] : o.defines) key += fmt::format("D{}={}\x1f", name, value);
    for (const auto& path : o.include_paths) key += fmt::format("I{}\x1f", path);
    for (const auto& [name, text] : o.headers) key += fmt::format("H{}:{}:{}\x1f", name, text.size(), text);
    for (const auto& option : o.extra) key += fmt::format("X{}\x1f", option);
    return key;
}

struct ShippedEntry {
    std::once_flag loaded;
    std::optional<Module> module;
};

// The shipped modules loaded so far, keyed by device state, file, name expressions and options.
struct ShippedModules {
    std::mutex mutex;
    std::map<std::string, std::shared_ptr<ShippedEntry>> entries;
};

ShippedModules& shipped_modules() {
    static ShippedModules modules;
    return modules;
}

std::string device_key(const DeviceState& device) {
    return fmt::format("{}\n", static_cast<const void*>(&device));
}

}  // namespace

void detail::forget_shipped_modules(const DeviceState& device) noexcept {
    std::map<std::string, std::shared_ptr<ShippedEntry>> forgotten;
    try {
        const std::string prefix = device_key(device);
        ShippedModules& shipped = shipped_modules();
        std::lock_guard lock(shipped.mutex);
        for (auto it = shipped.entries.begin(); it != shipped.entries.end();) {
            if (it->first.starts_with(prefix)) {
                forgotten.insert(shipped.entries.extract(it++));
            } else {
                ++it;
            }
        }
    } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory; the modules stay loaded
    }
    // Note: the modules unload here, outside the lock (an unload binds the device's context).
}

const Module& Module::shipped(const Device& device, std::string_view file_name,
                              const std::vector<std::string>& name_expressions,
                              const CompileOptions& options) {
    CompileOptions resolved = options;
    if (resolved.arch.empty()) resolved.arch = device.arch();
    resolved.backend = device.backend();

    // Note: the entry keeps its module, and so the device state, alive; the state's address therefore
    // identifies the device for the process's lifetime.
    std::string key = device_key(*detail::Internals::device_state(device)) + std::string(file_name) + '\n';
    for (const auto& expression : name_expressions) key += expression + '\x1f';
    key += '\n' + options_key(resolved);

    ShippedModules& shipped = shipped_modules();
    std::shared_ptr<ShippedEntry> entry;
    {
        std::lock_guard lock(shipped.mutex);
        auto& slot = shipped.entries[key];
        if (!slot) slot = std::make_shared<ShippedEntry>();
        entry = slot;
    }
    // Note: compile outside the map's lock, so other files and devices are not held up; call_once makes
    // concurrent callers of the same entry wait for one compile (and retry if it threw).
    std::call_once(entry->loaded, [&] {
        Program program = Program::embedded(file_name);
        for (const auto& expression : name_expressions) program.add_name_expression(expression);
        entry->module.emplace(compile(device, program, resolved));
    });
    return *entry->module;
}

Function Module::function(std::string_view name) const {
    if (!state_) throw_moved_from();
    const ModuleState& module = *state_;
    DeviceState& device = module.device();
    const std::string wanted(name);
    const std::string symbol = module.symbol_for(wanted);
    const auto scope = device.bind();
    sys::Function handle = nullptr;
    const sys::Result result = device.api().module_get_function(&handle, module.handle(), symbol.c_str());
    if (result == sys::kErrorNotFound || result == sys::kErrorInvalidValue) {
        std::string hint;
        if (!module.lowered_names().empty()) {
            std::vector<std::string> known;
            for (const auto& [expression, lowered] : module.lowered_names()) known.push_back(expression);
            hint = fmt::format("; its name expressions: {}", fmt::join(known, ", "));
        }
        if (wanted.find_first_of("<(") != std::string::npos && symbol == wanted) {
            hint +=
                "; a template instance is found by its name expression, which must be given to the Program "
                "before compiling (Program::add_name_expression)";
        } else {
            hint += "; a kernel that is not extern \"C\" has a mangled name: look it up by a name expression";
        }
        throw Error(fmt::format("cudarc: no kernel named '{}' in module {} on device {}{}", wanted,
                                module.origin(), device.ordinal(), hint));
    }
    if (result != sys::kSuccess) {
        device.throw_error(result, sys::Entry::module_get_function,
                           fmt::format(" ('{}' in {})", wanted, module.origin()));
    }
    auto record =
        std::make_shared<const detail::FunctionRecord>(detail::FunctionRecord{state_, wanted, symbol});
    return detail::Internals::make_function(std::move(record), handle, &device);
}

bool Module::has_function(std::string_view name) const {
    if (!state_) throw_moved_from();
    DeviceState& device = state_->device();
    const std::string symbol = state_->symbol_for(std::string(name));
    const auto scope = device.bind();
    sys::Function handle = nullptr;
    const sys::Result result = device.api().module_get_function(&handle, state_->handle(), symbol.c_str());
    if (result == sys::kErrorNotFound || result == sys::kErrorInvalidValue) return false;
    device.check(result, sys::Entry::module_get_function);
    return true;
}

GlobalSymbol Module::global(std::string_view name) const {
    if (!state_) throw_moved_from();
    DeviceState& device = state_->device();
    const std::string wanted(name);
    const std::string symbol = state_->symbol_for(wanted);
    const auto scope = device.bind();
    GlobalSymbol out;
    const sys::Result result =
        device.api().module_get_global(&out.address, &out.bytes, state_->handle(), symbol.c_str());
    if (result == sys::kErrorNotFound || result == sys::kErrorInvalidValue) {
        throw Error(
            fmt::format("cudarc: no global variable named '{}' in module {} on device {} (a __device__ or "
                        "__constant__ variable that no kernel uses may have been removed by the compiler)",
                        wanted, state_->origin(), device.ordinal()));
    }
    if (result != sys::kSuccess) {
        device.throw_error(result, sys::Entry::module_get_global,
                           fmt::format(" ('{}' in {})", wanted, state_->origin()));
    }
    return out;
}

namespace {

// The global `name` after checking the stream's device and the size.
GlobalSymbol checked_global(const Module& module, const ModuleState& state, const Stream& stream,
                            std::string_view name, std::size_t bytes, const char* what) {
    if (&detail::Internals::stream_state(stream).device() != &state.device()) {
        throw Error(fmt::format("cudarc: Module::{}: the module is on device {}, the stream on device {}",
                                what, state.device().ordinal(), stream.device_ordinal()));
    }
    const GlobalSymbol global = module.global(name);
    if (global.bytes != bytes) {
        throw Error(fmt::format("cudarc: Module::{}: the global '{}' has {} bytes, {} were given", what, name,
                                global.bytes, bytes));
    }
    return global;
}

}  // namespace

void Module::copy_to_global_bytes(Stream& stream, std::string_view name, const void* src,
                                  std::size_t bytes) const {
    if (!state_) throw_moved_from();
    const GlobalSymbol global = checked_global(*this, *state_, stream, name, bytes, "copy_to_global");
    DeviceState& device = state_->device();
    const auto scope = device.bind();
    device.check(device.api().memcpy_htod_async(global.address, src, bytes, stream.native()),
                 sys::Entry::memcpy_htod_async);
}

void Module::copy_from_global_bytes(Stream& stream, std::string_view name, void* dst,
                                    std::size_t bytes) const {
    if (!state_) throw_moved_from();
    const GlobalSymbol global = checked_global(*this, *state_, stream, name, bytes, "copy_from_global");
    DeviceState& device = state_->device();
    const auto scope = device.bind();
    const sys::DriverApi& api = device.api();
    device.check(api.memcpy_dtoh_async(dst, global.address, bytes, stream.native()),
                 sys::Entry::memcpy_dtoh_async);
    // Note [Pageable copies already block]
    detail::complete_copy_to_host(device, stream.native(), dst, false);
}

void Module::check_signature(const Function& function, std::span<const std::size_t> sizes) const {
    const auto actual = function.parameter_sizes();
    if (!actual) return;  // the driver cannot tell (before CUDA 12.4, HIP)
    auto list = [](auto&& values) {
        return values.empty() ? std::string("none") : fmt::format("{}", fmt::join(values, ", "));
    };
    if (actual->size() != sizes.size() || !std::equal(actual->begin(), actual->end(), sizes.begin())) {
        throw Error(fmt::format(
            "cudarc: Module::kernel: the signature does not match kernel '{}' in {}: the kernel "
            "takes {} parameter(s) of {} bytes, the signature {} of {} bytes",
            function.name(), state_->origin(), actual->size(), list(*actual), sizes.size(), list(sizes)));
    }
}

const std::map<std::string, std::string>& Module::lowered_names() const noexcept {
    static const std::map<std::string, std::string> none;
    return state_ ? state_->lowered_names() : none;
}

const std::string& Module::origin() const noexcept {
    static const std::string none;
    return state_ ? state_->origin() : none;
}

int Module::device_ordinal() const noexcept {
    return state_ ? state_->device().ordinal() : -1;
}

NativeModule Module::native() const noexcept {
    return state_ ? state_->handle() : nullptr;
}

}  // namespace cudarc

/// @file
/// cudarc::Module — compiled device code (PTX, CUBIN or fatbin) loaded on one device: its kernels and
/// globals.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cudarc/compile_options.hpp"
#include "cudarc/detail/native_handles.hpp"
#include "cudarc/export.hpp"
#include "cudarc/kernel.hpp"
#include "cudarc/nvrtc.hpp"
#include "cudarc/slice.hpp"

namespace cudarc {

class Device;
class Stream;
class KernelCache;

namespace detail {
class ModuleState;
}

/// The driver's module handle (CUmodule; a hipModule_t on HIP).
using NativeModule = ::CUmod_st*;

/// A `__device__` or `__constant__` variable of a module.
struct GlobalSymbol {
    /// The variable's device address.
    DevicePtr address = 0;
    /// The variable's size in bytes.
    std::size_t bytes = 0;
};

/// Device code loaded into a device's primary context. Move-only; unloaded when the Module and every
/// Function / Kernel taken from it are gone (they keep it loaded).
class CUDARC_API Module {
  public:
    /// PTX text (the driver compiles it for the device). Throws cudarc::Error with the driver's message.
    [[nodiscard]] static Module from_ptx(const Device& device, std::string_view ptx);
    /// A CUBIN (ELF) or fatbin image. Throws when the bytes are neither, or the driver rejects them (e.g. a
    /// CUBIN built for another architecture).
    [[nodiscard]] static Module from_binary(const Device& device, std::span<const char> image);
    /// The same from bytes.
    [[nodiscard]] static Module from_binary(const Device& device, std::span<const std::byte> image);
    /// The output of a compile (PTX or CUBIN); its name expressions become lookups by expression.
    [[nodiscard]] static Module from_program(const Device& device, const CompiledProgram& program);
    /// Compiles through the kernel cache (memory, then disk; see kernel_cache.hpp) and loads the result.
    /// An empty `options.arch` means the device's exact architecture; the backend is the device's.
    [[nodiscard]] static Module compile(const Device& device, const Program& program,
                                        CompileOptions options = {});
    /// The same through `cache` instead of KernelCache::process_cache().
    [[nodiscard]] static Module compile(const Device& device, const Program& program, CompileOptions options,
                                        KernelCache& cache);

    /// A file shipped under kernels/ (for example "bench.cu"), compiled for `device` (cached) and loaded once
    /// per process: later calls with the same file, name expressions and options return the same module, from
    /// any thread. The module stays loaded, and keeps its device open, until the process exits.
    [[nodiscard]] static const Module& shipped(const Device& device, std::string_view file_name,
                                               const std::vector<std::string>& name_expressions = {},
                                               const CompileOptions& options = {});

    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;
    /// Takes over another module; a moved-from Module throws when used.
    Module(Module&&) noexcept = default;
    /// Takes over another module (this one is unloaded once no Function of it is left).
    Module& operator=(Module&&) noexcept = default;
    /// Drops this handle: the module is unloaded once no Function or Kernel taken from it is left.
    ~Module();

    /// A kernel by name expression (one given to the Program, for example "adamw<float>") or by symbol name
    /// (an extern "C" kernel's name, or a lowered name). Throws cudarc::Error naming the kernel and the
    /// module when there is none.
    [[nodiscard]] Function function(std::string_view name) const;
    /// Whether function(name) would find a kernel (one cuModuleGetFunction call).
    [[nodiscard]] bool has_function(std::string_view name) const;
    /// A typed kernel. Where the driver reports parameter sizes (CUDA 12.4+), they are compared with the
    /// signature's, so a wrong signature fails here, not in the kernel.
    template <typename Signature>
    [[nodiscard]] Kernel<Signature> kernel(std::string_view name) const;

    /// A global variable by name (or name expression, for example "&table<float>"). Throws when there is
    /// none.
    [[nodiscard]] GlobalSymbol global(std::string_view name) const;

    /// Copies into / out of a global variable, asynchronously on `stream` (from device to pageable host
    /// memory the copy returns when the data is there). The size must match the variable's exactly.
    /// Into a global from pageable memory, the driver has taken the values when the call returns; from
    /// page-locked memory (a PinnedBuffer's, or registered memory) the copy runs in stream order, so keep
    /// the values unchanged until `stream` has reached it.
    /// Note: globals are not hazard-tracked; use them on one stream, or order the streams yourself.
    template <typename T>
    void copy_to_global(Stream& stream, std::string_view name, std::span<const T> values) const {
        static_assert(DeviceCopyable<T>, "copy_to_global needs trivially copyable values");
        copy_to_global_bytes(stream, name, values.data(), values.size_bytes());
    }
    /// One value into a global variable of exactly sizeof(T) bytes.
    template <typename T>
    void copy_to_global(Stream& stream, std::string_view name, const T& value) const {
        static_assert(DeviceCopyable<T>, "copy_to_global needs a trivially copyable value");
        copy_to_global_bytes(stream, name, &value, sizeof(T));
    }
    /// Copies a global variable into `out`; returns once the data is in `out`.
    template <typename T>
    void copy_from_global(Stream& stream, std::string_view name, std::span<T> out) const {
        static_assert(DeviceCopyable<T> && !std::is_const_v<T>,
                      "copy_from_global needs writable, trivially "
                      "copyable elements");
        copy_from_global_bytes(stream, name, out.data(), out.size_bytes());
    }
    /// A global variable's value; returns once it has been read (the host waits for `stream`'s work so far).
    template <typename T>
    [[nodiscard]] T read_global(Stream& stream, std::string_view name) const {
        static_assert(DeviceCopyable<T>, "read_global needs a trivially copyable type");
        T value{};
        copy_from_global_bytes(stream, name, &value, sizeof(T));
        return value;
    }

    /// Name expression -> lowered name, for a module loaded from a CompiledProgram.
    [[nodiscard]] const std::map<std::string, std::string>& lowered_names() const noexcept;
    /// Where the code came from, for messages: a file name, "PTX", "CUBIN" ...
    [[nodiscard]] const std::string& origin() const noexcept;
    /// The ordinal of the device the module is loaded on (-1 once moved from).
    [[nodiscard]] int device_ordinal() const noexcept;
    /// The driver's handle (null once moved from). Calls made through it are not tracked.
    [[nodiscard]] NativeModule native() const noexcept;

  private:
    explicit Module(std::shared_ptr<detail::ModuleState> state) noexcept : state_(std::move(state)) {}
    static Module load(const Device& device, const void* image, std::string origin,
                       std::map<std::string, std::string> lowered_names, std::string arch);
    void copy_to_global_bytes(Stream& stream, std::string_view name, const void* src,
                              std::size_t bytes) const;
    void copy_from_global_bytes(Stream& stream, std::string_view name, void* dst, std::size_t bytes) const;
    // Throws when the driver's parameter sizes differ from the signature's.
    void check_signature(const Function& function, std::span<const std::size_t> sizes) const;

    std::shared_ptr<detail::ModuleState> state_;
};

template <typename Signature>
Kernel<Signature> Module::kernel(std::string_view name) const {
    return []<typename... Params>(const Module& self, std::string_view n, void (*)(Params...)) {
        Function function = self.function(n);
        const std::size_t sizes[] = {sizeof(Params)..., 0};  // trailing 0: no zero-length array
        self.check_signature(function, std::span<const std::size_t>(sizes, sizeof...(Params)));
        return Kernel<void(Params...)>(std::move(function));
    }(*this, name, static_cast<Signature*>(nullptr));
}

}  // namespace cudarc

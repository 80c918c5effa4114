/// @file
/// cudarc::Function (an untyped kernel in a loaded module) and cudarc::Kernel<void(Params...)> (a typed one).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cudarc/detail/internals.hpp"
#include "cudarc/detail/native_handles.hpp"
#include "cudarc/error.hpp"
#include "cudarc/export.hpp"

namespace cudarc {

namespace detail {
class DeviceState;
struct FunctionRecord;  ///< the kernel's name and the module that keeps it loaded (src/rtc)
}  // namespace detail

/// The driver's kernel handle (CUfunction; a hipFunction_t on HIP).
using NativeFunction = ::CUfunc_st*;

/// What the compiler decided for a kernel (cuFuncGetAttribute).
struct FunctionAttributes {
    int registers = 0;                         ///< per thread
    std::size_t static_shared_bytes = 0;       ///< __shared__ arrays of fixed size, per block
    std::size_t max_dynamic_shared_bytes = 0;  ///< the current limit for LaunchConfig::shared_mem_bytes
    std::size_t const_bytes = 0;               ///< __constant__ memory the kernel uses
    std::size_t local_bytes = 0;               ///< per thread: spills and local arrays
    int max_threads_per_block = 0;             ///< the most a launch may use with these registers
    int ptx_version = 0;                       ///< major * 10 + minor, e.g. 90
    int binary_version = 0;                    ///< the architecture the code runs as, e.g. 90 for sm_90
};

/// A kernel of a loaded module, without a signature. Cheap to copy; it keeps its module loaded.
/// Launch it through Kernel<Sig> (checked at compile time) or launch_dynamic (checked at run time).
class CUDARC_API Function {
  public:
    Function() = default;  ///< empty: launching it throws

    /// The name it was looked up by (a name expression, for example "adamw<float>", or a plain name).
    [[nodiscard]] const std::string& name() const noexcept;
    /// The symbol the driver found (the lowered name for a name expression).
    [[nodiscard]] const std::string& symbol() const noexcept;
    /// True for a default-constructed Function.
    [[nodiscard]] bool empty() const noexcept { return handle_ == nullptr; }
    /// The ordinal of the device whose module holds the kernel (-1 when empty).
    [[nodiscard]] int device_ordinal() const noexcept;

    /// The kernel's attributes: one cuFuncGetAttribute call per field, no synchronization. Throws
    /// cudarc::Error when empty.
    [[nodiscard]] FunctionAttributes attributes() const;
    /// Allows launches with up to `bytes` of dynamic shared memory. Needed above 48 KB; throws a clear
    /// error when the device cannot give that much (its opt-in limit minus the kernel's static shared
    /// memory). Note: the setting belongs to the kernel in its module, so every copy of this Function sees
    /// it.
    void set_max_dynamic_shared_memory(std::size_t bytes) const;
    /// How many blocks of `block_size` threads fit on one multiprocessor at once (occupancy).
    [[nodiscard]] int max_active_blocks_per_multiprocessor(unsigned block_size,
                                                           std::size_t dynamic_shared_bytes = 0) const;
    /// The size in bytes of each kernel parameter, from the driver (CUDA 12.4 and newer); nullopt when the
    /// driver cannot tell.
    [[nodiscard]] std::optional<std::vector<std::size_t>> parameter_sizes() const;

    /// The driver's handle (null when empty). It stays valid while a Function of it keeps the module loaded.
    [[nodiscard]] NativeFunction native() const noexcept { return handle_; }

  private:
    friend struct detail::Internals;  // Note [Internal access]
    Function(std::shared_ptr<const detail::FunctionRecord> record, NativeFunction handle,
             detail::DeviceState* device) noexcept
        : record_(std::move(record)), handle_(handle), device_(device) {}

    std::shared_ptr<const detail::FunctionRecord> record_;
    NativeFunction handle_ = nullptr;
    detail::DeviceState* device_ = nullptr;
};

/// @cond INTERNAL
inline detail::DeviceState* detail::Internals::function_device(const Function& function) noexcept {
    return function.device_;
}
inline Function detail::Internals::make_function(std::shared_ptr<const FunctionRecord> record,
                                                 NativeFunction handle, DeviceState* device) noexcept {
    return Function(std::move(record), handle, device);
}
/// @endcond

template <typename T>
class DeviceSlice;
template <typename T>
class DeviceView;
template <typename T>
class BorrowedSlice;

namespace detail {

template <typename T>
inline constexpr bool is_slice_or_view_v = false;
template <typename T>
inline constexpr bool is_slice_or_view_v<DeviceSlice<T>> = true;
template <typename T>
inline constexpr bool is_slice_or_view_v<DeviceView<T>> = true;
template <typename T>
inline constexpr bool is_slice_or_view_v<BorrowedSlice<T>> = true;

/// What a __global__ function can take: pointers and trivially copyable values (no references, no host
/// objects such as a DeviceSlice, whose bytes mean nothing on the device).
template <typename P>
inline constexpr bool is_kernel_parameter_v =
    !std::is_reference_v<P> && !std::is_array_v<P> && std::is_trivially_copyable_v<P> &&
    !is_slice_or_view_v<std::remove_cv_t<P>>;

template <typename T>
inline constexpr bool always_false_v = false;

}  // namespace detail

/// A kernel with a known signature, for example Kernel<void(float*, const float*, unsigned long long)>.
/// Get one with Module::kernel<Sig>(name); launch it with cudarc::launch. The signature is the promise
/// cudarc::launch checks arguments against, so it must match the kernel's declaration (Module::kernel
/// compares the parameter sizes with the driver's where the driver can tell).
template <typename Signature>
class Kernel {
    static_assert(detail::always_false_v<Signature>,
                  "cudarc::Kernel<Signature>: the signature must be a function type returning void, "
                  "e.g. Kernel<void(float*, const float*, int)>");
};

/// A kernel whose parameters are Params...: a Function plus the signature that cudarc::launch checks
/// arguments against. Cheap to copy, like Function.
template <typename... Params>
class Kernel<void(Params...)> {
    static_assert((detail::is_kernel_parameter_v<Params> && ...),
                  "cudarc::Kernel<void(Params...)>: kernel parameters must be pointers or trivially copyable "
                  "values (no references; a device buffer is a T* or const T* parameter, not a DeviceSlice)");

  public:
    /// The kernel's signature.
    using signature = void(Params...);
    /// The number of parameters.
    static constexpr std::size_t arity = sizeof...(Params);

    /// An empty kernel: launching it throws.
    Kernel() = default;
    /// Gives `function` the signature, unchecked (Module::kernel checks parameter sizes where the driver can
    /// tell).
    explicit Kernel(Function function) noexcept : function_(std::move(function)) {}

    /// The untyped Function.
    [[nodiscard]] const Function& function() const noexcept { return function_; }
    /// The name it was looked up by (Function::name).
    [[nodiscard]] const std::string& name() const noexcept { return function_.name(); }
    /// Function::attributes.
    [[nodiscard]] FunctionAttributes attributes() const { return function_.attributes(); }
    /// Function::set_max_dynamic_shared_memory.
    void set_max_dynamic_shared_memory(std::size_t bytes) const {
        function_.set_max_dynamic_shared_memory(bytes);
    }
    /// Function::native.
    [[nodiscard]] NativeFunction native() const noexcept { return function_.native(); }

  private:
    Function function_;
};

}  // namespace cudarc

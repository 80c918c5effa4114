// How cudarc::launch turns C++ arguments into the kernel's parameter array, and which arguments the
// kernel reads or writes. Everything here is decided at compile time; the run-time work is a few stores.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cudarc/borrowed.hpp"
#include "cudarc/detail/buffer.hpp"
#include "cudarc/export.hpp"
#include "cudarc/kernel.hpp"
#include "cudarc/launch_config.hpp"
#include "cudarc/slice.hpp"

namespace cudarc {
class Stream;
}

namespace cudarc::detail {

// One tracked argument: the buffer behind a DeviceSlice / DeviceView, the bytes the view covers, how the
// kernel uses them, and the argument's position in the list (for error messages).
struct TrackedAccess {
    Buffer* buffer = nullptr;
    DevicePtr ptr = 0;
    std::size_t bytes = 0;
    Access access = Access::read;
    unsigned argument = 0;
};

// ---- Classification of one (parameter, argument) pair -------------------------------------------------

template <typename T>
struct element_of {};
template <typename T>
struct element_of<DeviceSlice<T>> {
    using type = T;
};
template <typename T>
struct element_of<DeviceView<T>> {
    using type = T;
};
template <typename T>
struct element_of<BorrowedSlice<T>> {
    using type = T;
};

// Slices (owning or borrowed) pass by lvalue; a const one, or one of const elements, only as const T*.
template <typename T>
inline constexpr bool is_slice_v = false;
template <typename T>
inline constexpr bool is_slice_v<DeviceSlice<T>> = true;
template <typename T>
inline constexpr bool is_slice_v<BorrowedSlice<T>> = true;

// Whether an argument of forwarded type `Arg` (e.g. `DeviceSlice<float>&`) feeds hazard tracking.
template <typename Arg>
inline constexpr bool is_tracked_argument_v = is_slice_or_view_v<std::remove_cvref_t<Arg>>;

enum class ArgumentCheck {
    ok,
    read_only_for_write,  // const slice / DeviceView<const T> where the kernel takes T*
    wrong_element_type,   // DeviceSlice<double> where the kernel takes float*
    temporary_slice,      // a DeviceSlice prvalue/xvalue: its memory would be freed right after the launch
    buffer_for_value,     // a slice or view where the kernel takes a value
    pointer_for_value,    // a pointer where the kernel takes a value
    value_for_pointer,    // a number where the kernel takes a pointer
    pointer_not_convertible,  // e.g. const float* for float*, int* for float*
    value_not_convertible,    // no implicit conversion to the parameter type
};

// The rule for a pointer parameter given a slice or view whose elements are `Element` (maybe const).
template <typename Param, typename Element, bool ReadOnlyArgument>
consteval ArgumentCheck check_buffer_for_pointer() {
    using Pointee = std::remove_pointer_t<Param>;
    constexpr bool kernel_writes = !std::is_const_v<Pointee>;
    constexpr bool any_type = std::is_void_v<Pointee>;  // void* / const void* take any element type
    if constexpr (!any_type && !std::is_same_v<std::remove_cv_t<Pointee>, std::remove_cv_t<Element>>) {
        return ArgumentCheck::wrong_element_type;
    } else if constexpr (kernel_writes && ReadOnlyArgument) {
        return ArgumentCheck::read_only_for_write;
    } else {
        return ArgumentCheck::ok;
    }
}

template <typename Param, typename Arg>
consteval ArgumentCheck check_argument() {
    using A = std::remove_cvref_t<Arg>;
    constexpr bool param_is_pointer = std::is_pointer_v<Param>;
    if constexpr (is_slice_v<A>) {
        if constexpr (!std::is_lvalue_reference_v<Arg>) {
            return ArgumentCheck::temporary_slice;
        } else if constexpr (!param_is_pointer) {
            return ArgumentCheck::buffer_for_value;
        } else {
            using Element = typename element_of<A>::type;
            return check_buffer_for_pointer < Param, Element,
                   std::is_const_v<std::remove_reference_t<Arg>> || std::is_const_v < Element >> ();
        }
    } else if constexpr (is_slice_or_view_v<A>) {
        if constexpr (!param_is_pointer) {
            return ArgumentCheck::buffer_for_value;
        } else {
            // Note: a const DeviceView<float> still writes, like a const std::span<float>: the constness of
            // the elements is what counts.
            using Element = typename element_of<A>::type;
            return check_buffer_for_pointer<Param, Element, std::is_const_v<Element>>();
        }
    } else if constexpr (std::is_pointer_v<A> || std::is_null_pointer_v<A>) {
        if constexpr (!param_is_pointer) {
            return ArgumentCheck::pointer_for_value;
        } else if constexpr (!std::is_convertible_v<A, Param>) {
            return ArgumentCheck::pointer_not_convertible;
        } else {
            return ArgumentCheck::ok;
        }
    } else if constexpr (param_is_pointer) {
        return ArgumentCheck::value_for_pointer;
    } else if constexpr (!std::is_convertible_v<Arg, Param>) {
        return ArgumentCheck::value_not_convertible;
    } else {
        return ArgumentCheck::ok;
    }
}

// Instantiating this for a bad pair prints one readable message. `Index` (0-based) and the two types show
// up in the compiler's "required from" notes.
template <std::size_t Index, typename Param, typename Arg>
consteval bool argument_accepted() {
    constexpr ArgumentCheck result = check_argument<Param, Arg>();
    static_assert(result != ArgumentCheck::read_only_for_write,
                  "cudarc::launch: read-only buffer passed for a parameter the kernel writes: a const "
                  "DeviceSlice<T> or a DeviceView<const T> cannot be passed as T*; pass a non-const slice or "
                  "DeviceView<T>, or declare the parameter const T* if the kernel only reads it");
    static_assert(result != ArgumentCheck::wrong_element_type,
                  "cudarc::launch: element type mismatch: a DeviceSlice<T> / DeviceView<T> passes only as T* "
                  "or const T* (or void*), e.g. DeviceSlice<double> cannot be passed as float*");
    static_assert(result != ArgumentCheck::temporary_slice,
                  "cudarc::launch: temporary DeviceSlice argument: its memory would be freed right after the "
                  "launch; keep the slice in a variable (or pass a DeviceView)");
    static_assert(result != ArgumentCheck::buffer_for_value,
                  "cudarc::launch: a DeviceSlice / DeviceView was passed where the kernel takes a value, not "
                  "a pointer");
    static_assert(result != ArgumentCheck::pointer_for_value,
                  "cudarc::launch: a pointer was passed where the kernel takes a value, not a pointer");
    static_assert(result != ArgumentCheck::value_for_pointer,
                  "cudarc::launch: a value was passed where the kernel takes a pointer; pass a DeviceSlice, "
                  "a DeviceView, a raw pointer or nullptr");
    static_assert(result != ArgumentCheck::pointer_not_convertible,
                  "cudarc::launch: raw pointer type mismatch: the pointer does not convert to the kernel's "
                  "parameter type (wrong pointee type, or const T* where the kernel writes T*)");
    static_assert(result != ArgumentCheck::value_not_convertible,
                  "cudarc::launch: argument type mismatch: the value does not convert to the kernel's "
                  "parameter type");
    return result == ArgumentCheck::ok;
}

template <typename... Ts>
struct TypeList {};

template <typename... Params, typename... Args, std::size_t... Is>
consteval bool arguments_accepted(TypeList<Params...>, TypeList<Args...>, std::index_sequence<Is...>) {
    // Note: a count rather than `&&`, so that every argument is checked and every bad one reported, not only
    // the first.
    return (0 + ... + (argument_accepted<Is, Params, Args>() ? 0 : 1)) == 0;
}

// True when `Args...` (forwarded types) launch a kernel of signature `Signature`, without diagnostics:
// for tests and for constraints.
template <typename... Params, typename... Args>
consteval bool launchable_with(TypeList<Params...>, TypeList<Args...>) {
    if constexpr (sizeof...(Params) != sizeof...(Args)) {
        return false;
    } else {
        return (true && ... && (check_argument<Params, Args>() == ArgumentCheck::ok));
    }
}

template <typename Signature, typename... Args>
inline constexpr bool launchable_with_v = false;
template <typename... Params, typename... Args>
inline constexpr bool launchable_with_v<void(Params...), Args...> = launchable_with(TypeList<Params...>{},
                                                                                    TypeList<Args...>{});

// ---- Packing ----------------------------------------------------------------------------------------

// The view behind a slice or view argument.
template <typename T>
DeviceView<T> as_view(DeviceView<T> view) noexcept {
    return view;
}
template <typename T>
auto as_view(DeviceSlice<T>& slice) noexcept {
    return slice.view();
}
template <typename T>
auto as_view(const DeviceSlice<T>& slice) noexcept {
    return slice.view();
}
template <typename T>
auto as_view(BorrowedSlice<T>& slice) noexcept {
    return slice.view();
}
template <typename T>
auto as_view(const BorrowedSlice<T>& slice) noexcept {
    return slice.view();
}

// The value stored for parameter `Param` from argument `arg`: the exact parameter type.
template <typename Param, typename Arg>
Param to_parameter(Arg&& arg) noexcept {
    using A = std::remove_cvref_t<Arg>;
    if constexpr (is_slice_or_view_v<A>) {
        // Note: the kernel receives the device address; the host never dereferences it.
        return reinterpret_cast<Param>(static_cast<std::uintptr_t>(as_view(arg).device_ptr()));
    } else {
        return static_cast<Param>(std::forward<Arg>(arg));
    }
}

// The kernel's parameter values and the array of their addresses that cuLaunchKernel takes, plus the
// tracked (slice/view) arguments, all on the stack: no allocation. Not copyable or movable, because the
// address array points into the object itself.
template <typename Signature, typename... Args>
class PackedArguments;

template <typename... Params, typename... Args>
class PackedArguments<void(Params...), Args...> {
    static_assert(sizeof...(Params) == sizeof...(Args), "cudarc::launch: argument count mismatch");

  public:
    static constexpr std::size_t kTracked = (std::size_t{0} + ... + (is_tracked_argument_v<Args> ? 1 : 0));

    // Note: not noexcept: a library built with CUDARC_DEBUG_VIEWS throws for a view whose buffer is gone.
    explicit PackedArguments(Args&&... args) : values_(to_parameter<Params>(std::forward<Args>(args))...) {
        point_at_values(std::index_sequence_for<Params...>{});
        if constexpr (kTracked > 0) {
            std::size_t slot = 0;
            unsigned index = 0;
            (note_access<Params>(args, slot, index++), ...);
        }
    }
    PackedArguments(const PackedArguments&) = delete;
    PackedArguments& operator=(const PackedArguments&) = delete;
    ~PackedArguments() = default;

    // The `void* kernelParams[]` of cuLaunchKernel (null for a kernel without parameters).
    [[nodiscard]] void** parameters() noexcept {
        return sizeof...(Params) == 0 ? nullptr : addresses_.data();
    }
    [[nodiscard]] static constexpr std::size_t size() noexcept { return sizeof...(Params); }
    // The bytes of each parameter, as the driver's parameter info reports them.
    static constexpr std::array<std::size_t, sizeof...(Params)> parameter_sizes{sizeof(Params)...};
    [[nodiscard]] const TrackedAccess* accesses() const noexcept {
        return kTracked == 0 ? nullptr : tracked_.data();
    }
    [[nodiscard]] static constexpr std::size_t access_count() noexcept { return kTracked; }

  private:
    template <std::size_t... Is>
    void point_at_values(std::index_sequence<Is...>) noexcept {
        ((addresses_[Is] = static_cast<void*>(&std::get<Is>(values_))), ...);
    }

    template <typename Param, typename Arg>
    void note_access(Arg& arg, std::size_t& slot, unsigned index) {
        if constexpr (is_tracked_argument_v<Arg>) {
            const bool kernel_writes = !std::is_const_v<std::remove_pointer_t<Param>>;
            const auto view = as_view(arg);
            tracked_[slot++] = TrackedAccess{Internals::buffer(view), view.device_ptr(), view.bytes(),
                                             kernel_writes ? Access::write : Access::read, index};
        } else {
            static_cast<void>(arg);
            static_cast<void>(slot);
            static_cast<void>(index);
        }
    }

    std::tuple<Params...> values_;
    std::array<void*, sizeof...(Params)> addresses_{};
    std::array<TrackedAccess, kTracked> tracked_{};
};

// The non-template half of cudarc::launch (src/rtc/launch.cpp): checks devices, orders every tracked
// access on `stream` (hazard tracking), then launches.
CUDARC_API void launch_packed(const Stream& stream, const LaunchConfig& config, const Function& function,
                              void** parameters, const TrackedAccess* accesses, std::size_t access_count);

// Throws cudarc::Error naming the problem when `config` cannot be launched (a zero extent, a cluster that
// does not divide the grid). No driver call.
CUDARC_API void validate_launch_config(const LaunchConfig& config);

}  // namespace cudarc::detail

/// @file
/// cudarc::launch — typed, hazard-aware kernel launches; cudarc::launch_dynamic for signatures known at run
/// time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>

#include "cudarc/detail/launch_args.hpp"
#include "cudarc/export.hpp"
#include "cudarc/kernel.hpp"
#include "cudarc/launch_config.hpp"
#include "cudarc/slice.hpp"
#include "cudarc/stream.hpp"

namespace cudarc {

/// Launches `kernel` on `stream`. Arguments are checked against the kernel's signature at compile time:
///  - a DeviceSlice<T>& or DeviceView<T> passes as T* (the kernel writes it) or as const T* (it reads it);
///    a const DeviceSlice<T> or a DeviceView<const T> passes only as const T*;
///  - a raw pointer or nullptr passes as is, untracked (see DeviceSlice::record_stream);
///  - a value converts to the parameter's exact type.
/// Every slice/view argument feeds hazard tracking: the launch waits for earlier conflicting work on other
/// streams (read after write, write after read or write); on a single stream nothing is recorded or waited
/// for. Throws cudarc::Error for a stream and kernel of different devices, for a buffer of another device
/// unless the stream's device has peer access to it (Device::enable_peer_access; then the use is tracked
/// across the two devices), leaving everything as it was, and for a failing launch.
template <typename... Params, typename... Args>
void launch(Stream& stream, const LaunchConfig& config, const Kernel<void(Params...)>& kernel,
            Args&&... args) {
    static_assert(sizeof...(Args) >= sizeof...(Params),
                  "cudarc::launch: too few arguments for the kernel's signature (Kernel<void(Params...)>)");
    static_assert(sizeof...(Args) <= sizeof...(Params),
                  "cudarc::launch: too many arguments for the kernel's signature (Kernel<void(Params...)>)");
    if constexpr (sizeof...(Args) == sizeof...(Params)) {
        constexpr bool accepted = detail::arguments_accepted(
            detail::TypeList<Params...>{}, detail::TypeList<Args&&...>{}, std::index_sequence_for<Args...>{});
        if constexpr (accepted) {
            detail::PackedArguments<void(Params...), Args&&...> packed(std::forward<Args>(args)...);
            detail::launch_packed(stream, config, kernel.function(), packed.parameters(), packed.accesses(),
                                  packed.access_count());
        }
    }
}

/// Orders work about to be enqueued on `stream` that reaches `view`'s memory through a raw address rather
/// than a slice argument (a kernel that reads buffer addresses from a table in device memory, say) after
/// conflicting earlier work on other streams, exactly as a launch orders its slice arguments: the access
/// covers exactly the view's bytes; a DeviceView<T> counts as written, a DeviceView<const T> as read. Since
/// the library does not see the work, later users on other streams wait for everything `stream` submits
/// until cudarc next sees the bytes written (an event recorded when they need it). IndirectAccess, for
/// several views at once, is exact and cheaper. Throws cudarc::Error for memory of another device, waiting
/// for nothing.
template <typename T>
void prepare_indirect_access(Stream& stream, DeviceView<T> view) {
    detail::prepare_indirect_access(stream, detail::Internals::buffer(view), view.device_ptr(), view.bytes(),
                                    std::is_const_v<T> ? detail::Access::read : detail::Access::write);
}

/// Work that reaches buffers through addresses cudarc does not see (a kernel that reads a table of buffer
/// addresses, say), tracked as one operation, exactly as a launch tracks its slice arguments:
///
/// @code
///   IndirectAccess access(stream);
///   for (auto& t : tensors) { access.add(t.param_view()); access.add(t.grad_view()); }  // bookkeeping
///   access.order();   // the waits: at most one per stream that used the views, none it already has
///   launch(...);      // the work, on `stream`
///   access.done();    // the uses, at most one event
/// @endcode
///
/// A DeviceView<T> counts as written, a DeviceView<const T> as read, each over exactly its bytes. Destroyed
/// after order() without done() (an exception between them, say), it records the uses as done() does, at
/// the stream's position then: they cover whatever work was enqueued by that time. Used by one thread, like
/// its stream.
class CUDARC_API IndirectAccess {
  public:
    /// An empty set of accesses for work on `stream` (one host allocation; no driver call).
    explicit IndirectAccess(Stream& stream);
    IndirectAccess(const IndirectAccess&) = delete;
    IndirectAccess& operator=(const IndirectAccess&) = delete;
    /// Records the uses, as done() does, when order() was called without done().
    ~IndirectAccess();

    /// Declares a view the work uses. Throws cudarc::Error for memory the stream may not use, or after
    /// order().
    template <typename T>
    void add(DeviceView<T> view) {
        add_bytes(detail::Internals::buffer(view), view.device_ptr(), view.bytes(),
                  std::is_const_v<T> ? detail::Access::read : detail::Access::write);
    }
    /// Enqueues the waits. Throws cudarc::Error when one cannot be enqueued.
    void order();
    /// The work is enqueued: records the uses. Never throws.
    void done() noexcept;

  private:
    void add_bytes(detail::Buffer* buffer, DevicePtr ptr, std::size_t bytes, detail::Access access);

    struct State;
    State* state_;
};

/// One argument of a dynamic launch: its bytes, and for a slice or view the buffer it reads or writes.
/// Values up to kInlineBytes are copied in (so `KernelArg::value(3)` is safe); larger ones are referenced
/// and must outlive the launch call.
class KernelArg {
  public:
    /// Values up to this size are copied into the KernelArg.
    static constexpr std::size_t kInlineBytes = 64;

    /// A value parameter (a number, an enum, a trivially copyable struct), passed as its exact bytes.
    template <typename T>
    requires(std::is_trivially_copyable_v<T> && !std::is_pointer_v<T> && !detail::is_slice_or_view_v<T>)
        [[nodiscard]] static KernelArg value(const T& v) noexcept {
        KernelArg arg;
        arg.bytes_ = sizeof(T);
        if constexpr (sizeof(T) <= kInlineBytes) {
            std::memcpy(arg.inline_, &v, sizeof(T));
        } else {
            arg.external_ = &v;
        }
        return arg;
    }
    template <typename T>
    requires(sizeof(T) > kInlineBytes) static KernelArg
        value(const T&& v) = delete;  ///< a large temporary would dangle

    /// A buffer the kernel writes (a T* parameter).
    template <typename T>
    [[nodiscard]] static KernelArg writes(DeviceView<T> view) {
        static_assert(!std::is_const_v<T>,
                      "KernelArg::writes needs a writable view (DeviceView<const T> given)");
        return buffer(detail::Internals::buffer(view), view.device_ptr(), view.bytes(),
                      detail::Access::write);
    }
    /// A slice the kernel writes (a T* parameter).
    template <typename T>
    [[nodiscard]] static KernelArg writes(DeviceSlice<T>& slice) {
        return writes(slice.view());
    }
    /// A buffer the kernel only reads (a const T* parameter).
    template <typename T>
    [[nodiscard]] static KernelArg reads(DeviceView<T> view) {
        return buffer(detail::Internals::buffer(view), view.device_ptr(), view.bytes(), detail::Access::read);
    }
    /// A slice the kernel only reads (a const T* parameter).
    template <typename T>
    [[nodiscard]] static KernelArg reads(const DeviceSlice<T>& slice) {
        return reads(slice.view());
    }
    /// A raw device address, untracked.
    [[nodiscard]] static KernelArg pointer(DevicePtr address) noexcept {
        KernelArg arg;
        arg.bytes_ = sizeof(DevicePtr);
        std::memcpy(arg.inline_, &address, sizeof(address));
        return arg;
    }
    /// A raw typed device pointer, untracked.
    template <typename T>
    [[nodiscard]] static KernelArg pointer(T* address) noexcept {
        return pointer(static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(address)));
    }

    /// The bytes the kernel receives.
    [[nodiscard]] const void* data() const noexcept { return external_ != nullptr ? external_ : inline_; }
    /// The number of bytes the kernel receives.
    [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
    /// True for a slice or view argument (writes() or reads()), which hazard tracking covers.
    [[nodiscard]] bool tracked() const noexcept { return tracked_; }
    /// The buffer of a tracked argument; null otherwise, and for a view of an empty slice.
    [[nodiscard]] detail::Buffer* tracked_buffer() const noexcept { return buffer_; }
    /// The first byte a tracked argument covers; 0 otherwise.
    [[nodiscard]] DevicePtr tracked_ptr() const noexcept { return tracked_ ? address() : 0; }
    /// The bytes a tracked argument covers; 0 otherwise.
    [[nodiscard]] std::size_t tracked_bytes() const noexcept { return tracked_bytes_; }
    /// Whether the kernel reads or writes a tracked argument.
    [[nodiscard]] detail::Access access() const noexcept { return access_; }

  private:
    KernelArg() = default;
    static KernelArg buffer(detail::Buffer* buffer, DevicePtr address, std::size_t bytes,
                            detail::Access access) noexcept {
        KernelArg arg = pointer(address);
        arg.buffer_ = buffer;
        arg.tracked_ = true;
        arg.tracked_bytes_ = bytes;
        arg.access_ = access;
        return arg;
    }
    [[nodiscard]] DevicePtr address() const noexcept {
        DevicePtr address = 0;
        std::memcpy(&address, inline_, sizeof(address));
        return address;
    }

    alignas(16) unsigned char inline_[kInlineBytes] = {};
    const void* external_ = nullptr;
    std::size_t bytes_ = 0;
    detail::Buffer* buffer_ = nullptr;  // null for a view of an empty slice
    bool tracked_ = false;
    std::size_t tracked_bytes_ = 0;
    detail::Access access_ = detail::Access::read;
};

/// Launches `function` with arguments whose types are known only at run time. Where the driver can tell
/// (CUDA 12.4 and newer) the argument count and each argument's size are checked against the kernel's
/// parameters, with an error naming the first mismatch; hazard tracking works as for cudarc::launch.
CUDARC_API void launch_dynamic(Stream& stream, const LaunchConfig& config, const Function& function,
                               std::span<const KernelArg> args);

}  // namespace cudarc

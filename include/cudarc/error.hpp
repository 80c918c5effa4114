/// @file
/// cudarc::Error — every failure the library reports.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "cudarc/export.hpp"

namespace cudarc {

/// Which vendor runtime a device or a call belongs to: `cuda` (the CUDA driver API) or `hip` (AMD's HIP,
/// docs/hip.md).
enum class Backend { cuda, hip };

/// "CUDA" or "HIP".
[[nodiscard]] CUDARC_API const char* to_string(Backend backend) noexcept;

/// Thrown for every failure: a failing driver call, a library that cannot be loaded, bad input.
/// Note: the library never calls abort(); destructors swallow errors and record them for the next
/// call on the same device (see Device::rethrow_deferred_error).
class CUDARC_API Error : public std::runtime_error {
  public:
    /// A failure that is not a driver call (bad input, missing library).
    explicit Error(const std::string& message) : std::runtime_error(message) {}
    /// The same, on a known device.
    Error(const std::string& message, int device, Backend backend)
        : std::runtime_error(message), device_(device), backend_(backend) {}

    /// A failing driver call: `api` is the entry point's CUDA name (maybe followed by context, as in
    /// "cuModuleLoadData (...)"), `result` its raw code. With Backend::hip the CUDA name is replaced by
    /// the HIP function that was called for it ("cuMemAlloc" -> "hipMalloc"); names HIP has no
    /// counterpart for, and names that are not CUDA entry points, are kept.
    Error(std::string api, int result, std::string result_name, std::string result_text, int device,
          Backend backend);

    /// The driver call that failed, as in what(): on HIP the HIP function's name, like result() and
    /// result_name(), which are HIP's too. Empty when not a driver call.
    [[nodiscard]] const std::string& api() const noexcept { return api_; }
    /// The raw result code (CUresult or hipError_t); 0 when not a driver call.
    [[nodiscard]] int result() const noexcept { return result_; }
    /// The result code's name (as in CUDA_ERROR_OUT_OF_MEMORY or hipErrorOutOfMemory); empty when not a
    /// driver call.
    [[nodiscard]] const std::string& result_name() const noexcept { return result_name_; }
    /// The device ordinal the call was made for, or -1 when none applies.
    [[nodiscard]] int device() const noexcept { return device_; }
    /// The backend of the device or call (Backend::cuda when none was given).
    [[nodiscard]] Backend backend() const noexcept { return backend_; }

  protected:
    /// A message of its own over a driver call's details (derived errors that explain more).
    Error(std::string message, const Error& details);

  private:
    std::string api_;
    int result_ = 0;
    std::string result_name_;
    int device_ = -1;
    Backend backend_ = Backend::cuda;
};

/// The allocator could not satisfy a request even after freeing its cache and waiting for pending
/// frees. Carries the figures needed to understand why.
class CUDARC_API OutOfMemory : public Error {
  public:
    /// What the allocator and the device held when the request failed (all in bytes).
    struct Figures {
        std::size_t requested = 0;  ///< bytes asked for (after rounding)
        std::size_t allocated = 0;  ///< bytes handed out to live allocations
        std::size_t reserved = 0;   ///< bytes of device memory the allocator holds from the driver
        /// Free device memory as the driver reported it.
        std::size_t device_free = 0;
        /// The device's total memory.
        std::size_t device_total = 0;
        /// Expandable segments: the device memory mapped into them (all of `reserved`) and the address space
        /// reserved for them; both 0 for other sources.
        std::size_t mapped = 0;
        /// Address space reserved for expandable segments (see `mapped`).
        std::size_t address_space = 0;
        /// The largest free block the allocator caches (a request larger than it needed new memory); unknown
        /// for the driver's pool.
        std::optional<std::size_t> largest_free;
    };
    /// A request the allocator could not satisfy; the message is made from `figures`. `holder` names what
    /// holds the reserved and allocated bytes (default: "the allocator").
    OutOfMemory(int device, const Figures& figures, Backend backend = Backend::cuda,
                std::string_view holder = "the allocator");
    /// A driver call that ran out of memory (`cause` names it and its result), explained by `message`.
    OutOfMemory(std::string message, const Error& cause, const Figures& figures);
    /// The same without figures (all zero).
    OutOfMemory(std::string message, const Error& cause);
    /// The figures the message was made from.
    [[nodiscard]] const Figures& figures() const noexcept { return figures_; }

  private:
    Figures figures_;
};

/// The device's context was lost to a sticky error (an illegal memory access or another fault in a kernel,
/// a launch timeout): the driver refuses all further work on it in this process. Thrown by the call that
/// met the error and by every later call on that device, each naming the first error (api(), result()).
/// Note: nothing but a new process gets the device back; free host resources and exit.
class CUDARC_API DeviceLost : public Error {
  public:
    /// Wraps the first sticky error: the message says the device is lost and names `cause`, whose api(),
    /// result() and device() it keeps.
    explicit DeviceLost(const Error& cause);
};

}  // namespace cudarc

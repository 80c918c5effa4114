#include "cudarc/error.hpp"

#include <fmt/format.h>

#include <limits>
#include <utility>

#include "cudarc/detail/checked_size.hpp"
#include "sys/backend_function_name.hpp"

namespace cudarc {

namespace detail {
void throw_size_overflow(const char* what, std::size_t count, std::size_t element_bytes) {
    throw Error(fmt::format("cudarc: {}: {} elements of {} bytes are more than {} bytes: the size overflows",
                            what, count, element_bytes, std::numeric_limits<std::size_t>::max()));
}
}  // namespace detail

const char* to_string(Backend backend) noexcept {
    return backend == Backend::hip ? "HIP" : "CUDA";
}

namespace {
std::string describe_call(const std::string& api, int result, const std::string& name,
                          const std::string& text, int device, Backend backend) {
    std::string where = device >= 0 ? fmt::format(" on {} device {}", to_string(backend), device)
                                    : fmt::format(" ({})", to_string(backend));
    return fmt::format("{} failed{}: {} ({}): {}", api, where, name, result, text);
}
}  // namespace

Error::Error(std::string api, int result, std::string result_name, std::string result_text, int device,
             Backend backend)
    // On HIP, the HIP function that was called, not the CUDA entry point call sites name
    // (Note [One driver list]); the message and api() agree.
    : std::runtime_error(describe_call(sys::backend_function_name(backend, api), result, result_name,
                                       result_text, device, backend)),
      api_(sys::backend_function_name(backend, api)),
      result_(result),
      result_name_(std::move(result_name)),
      device_(device),
      backend_(backend) {}

Error::Error(std::string message, const Error& details)
    : std::runtime_error(message),
      api_(details.api_),
      result_(details.result_),
      result_name_(details.result_name_),
      device_(details.device_),
      backend_(details.backend_) {}

OutOfMemory::OutOfMemory(std::string message, const Error& cause, const Figures& figures)
    : Error(std::move(message), cause), figures_(figures) {}

OutOfMemory::OutOfMemory(std::string message, const Error& cause)
    : OutOfMemory(std::move(message), cause, Figures{}) {}

DeviceLost::DeviceLost(const Error& cause)
    : Error(fmt::format(
                "cudarc: {} device {} is lost: {}. After such a sticky error the driver refuses all "
                "further work on the device: every later call on it fails, and the process must restart "
                "to use the GPU again",
                to_string(cause.backend()), cause.device(), cause.what()),
            cause) {}

namespace {
// Note: the message names what decides the next step: the reserved and mapped bytes against the allocated
// ones, and the largest free block against the request (a cache holding enough free bytes in no block large
// enough is fragmented).
std::string describe_out_of_memory(int device, const OutOfMemory::Figures& f, std::string_view holder) {
    std::string held = fmt::format("{} holds {} bytes reserved", holder, f.reserved);
    if (f.address_space != 0) {
        held +=
            fmt::format(" ({} bytes mapped into expandable segments of {} bytes of reserved address space)",
                        f.mapped, f.address_space);
    }
    held += fmt::format(", {} allocated", f.allocated);
    if (f.largest_free) held += fmt::format(", its largest free block {} bytes", *f.largest_free);
    std::string hint =
        "Hint: free tensors you no longer need, call empty_cache() to return cached blocks, or lower the "
        "batch "
        "size.";
    if (f.largest_free && f.address_space == 0 && f.reserved > f.allocated &&
        f.reserved - f.allocated >= f.requested) {
        hint += fmt::format(
            " The cache holds {} free bytes, but in no block as large as the request: it is fragmented, "
            "which "
            "MemorySource::expandable (CUDARC_ALLOCATOR=expandable) avoids.",
            f.reserved - f.allocated);
    }
    return fmt::format(
        "cudarc: out of memory on device {}: requested {} bytes; {}; the device has {} of {} "
        "bytes free. {}",
        device, f.requested, held, f.device_free, f.device_total, hint);
}
}  // namespace

OutOfMemory::OutOfMemory(int device, const Figures& f, Backend backend, std::string_view holder)
    : Error(describe_out_of_memory(device, f, holder), device, backend), figures_(f) {}

}  // namespace cudarc

// The non-template half of cudarc::launch, launch_dynamic, and LaunchConfig::for_elements.
//
// Note: launch_packed is the hot path. It takes no lock, allocates nothing and looks nothing up: pointer
// comparisons for the device checks, the hazard fast path (one comparison per buffer on one stream), the
// context scope's one cuCtxGetCurrent (Note [Context scope]), the driver call, one relaxed counter
// increment and one store of the stream's position (Note [Stream timelines]).
#include "cudarc/launch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

#include "core/buffer.hpp"
#include "core/device_state.hpp"
#include "core/operation.hpp"
#include "cudarc/device.hpp"
#include "rtc/module_state.hpp"

namespace cudarc {

using detail::DeviceState;

namespace detail {
namespace {

std::string describe(const Dim3& d) {
    return fmt::format("{}x{}x{}", d.x, d.y, d.z);
}

std::string describe(const LaunchConfig& config) {
    std::string out = fmt::format("grid {}, block {}, {} bytes dynamic shared memory", describe(config.grid),
                                  describe(config.block), config.shared_mem_bytes);
    if (config.cluster) out += fmt::format(", cluster {}", describe(*config.cluster));
    if (config.cooperative == Cooperative::yes) out += ", cooperative";
    if (config.serialization == StreamSerialization::programmatic) out += ", programmatic serialization";
    return out;
}

bool has_zero_extent(const LaunchConfig& c) noexcept {
    return (c.grid.x == 0) | (c.grid.y == 0) | (c.grid.z == 0) | (c.block.x == 0) | (c.block.y == 0) |
           (c.block.z == 0);
}

[[noreturn]] void throw_function_problem(const Function& function, const DeviceState& device) {
    if (function.empty()) {
        throw Error(
            "cudarc::launch: the kernel is empty (a default-constructed Kernel or Function; get one from "
            "Module::kernel or Module::function)");
    }
    throw Error(fmt::format("cudarc::launch: kernel '{}' is loaded on device {}, the stream is on device {}",
                            function.name(), function.device_ordinal(), device.ordinal()));
}

// A buffer that is not on the stream's device: empty (an error), or another device's memory, which the
// kernel may use once the stream's device has peer access to it (Note [Hazard tracking across devices]).
void check_other_device_buffer(const TrackedAccess& access, const Function& function,
                               const DeviceState& device) {
    if (access.buffer == nullptr) {
        throw Error(
            fmt::format("cudarc::launch: argument {} of kernel '{}' is an empty (default-constructed or "
                        "moved-from) DeviceSlice",
                        access.argument, function.name()));
    }
    const DeviceState* owner = &access.buffer->device();
    if (device.can_use_memory_of(*owner)) return;
    throw Error(
        fmt::format("cudarc::launch: argument {} of kernel '{}' is a buffer on device {}, the stream is on "
                    "device {}; a kernel may use another device's memory only after peer access is enabled "
                    "(device{}.enable_peer_access(device{}))",
                    access.argument, function.name(), owner->ordinal(), device.ordinal(), device.ordinal(),
                    owner->ordinal()));
}

// Whether this backend and driver can launch with programmatic serialization; where not, such a launch is
// fully ordered instead (LaunchConfig: a request, never needed for correctness).
bool honours_programmatic_serialization(const sys::DriverApi& api) noexcept {
    return api.backend == Backend::cuda && api.launch_kernel_ex != nullptr;
}

// Whether `config` goes through cuLaunchKernelEx (or its cooperative fallback) here, not cuLaunchKernel.
bool takes_attributes(const sys::DriverApi& api, const LaunchConfig& config) noexcept {
    return config.cluster.has_value() || config.cooperative == Cooperative::yes ||
           (config.serialization == StreamSerialization::programmatic &&
            honours_programmatic_serialization(api));
}

sys::Result launch_with_attributes(const sys::DriverApi& api, const LaunchConfig& config,
                                   sys::Function function, sys::Stream stream, void** parameters) {
    std::array<sys::LaunchAttribute, 3> attributes{};
    unsigned count = 0;
    if (config.cluster) {
        sys::LaunchAttribute& a = attributes[count++];
        a.id = sys::kLaunchAttributeClusterDimension;
        a.value.cluster_dim.x = config.cluster->x;
        a.value.cluster_dim.y = config.cluster->y;
        a.value.cluster_dim.z = config.cluster->z;
    }
    if (config.cooperative == Cooperative::yes) {
        sys::LaunchAttribute& a = attributes[count++];
        a.id = sys::kLaunchAttributeCooperative;
        a.value.cooperative = 1;
    }
    if (config.serialization == StreamSerialization::programmatic &&
        honours_programmatic_serialization(api)) {
        sys::LaunchAttribute& a = attributes[count++];
        a.id = sys::kLaunchAttributeProgrammaticStreamSerialization;
        a.value.programmatic_stream_serialization_allowed = 1;
    }
    if (!takes_attributes(api, config)) {
        return api.launch_kernel(function, config.grid.x, config.grid.y, config.grid.z, config.block.x,
                                 config.block.y, config.block.z, config.shared_mem_bytes, stream, parameters,
                                 nullptr);
    }
    if (api.launch_kernel_ex != nullptr) {
        const sys::LaunchConfig raw{
            config.grid.x,  config.grid.y,           config.grid.z, config.block.x,    config.block.y,
            config.block.z, config.shared_mem_bytes, stream,        attributes.data(), count};
        return api.launch_kernel_ex(&raw, function, parameters, nullptr);
    }
    // Note: a driver without cuLaunchKernelEx (before CUDA 12.0) can still launch cooperatively.
    if (!config.cluster) {
        return sys::require(api, api.launch_cooperative_kernel, sys::Entry::launch_cooperative_kernel)(
            function, config.grid.x, config.grid.y, config.grid.z, config.block.x, config.block.y,
            config.block.z, config.shared_mem_bytes, stream, parameters);
    }
    sys::throw_missing_entry_point(api, sys::Entry::launch_kernel_ex, " (needed for cluster launches)");
}

[[noreturn]] void throw_launch_failure(const DeviceState& device, const LaunchConfig& config,
                                       const Function& function, sys::Result result) {
    const sys::DriverApi& api = device.api();
    if (result == sys::kErrorInvalidValue && config.shared_mem_bytes > 0) {
        // More than a block can have on this device at all: no call can allow it, so say what the maximum is.
        int device_limit = 0;
        int static_bytes = 0;
        if (api.device_get_attribute(&device_limit, sys::attr::kMaxSharedMemoryPerBlockOptin,
                                     device.device()) == sys::kSuccess &&
            device_limit > 0 &&
            api.func_get_attribute(&static_bytes, sys::func_attr::kSharedSizeBytes, function.native()) ==
                sys::kSuccess &&
            static_cast<unsigned long long>(config.shared_mem_bytes) +
                    static_cast<unsigned>(std::max(static_bytes, 0)) >
                static_cast<unsigned>(device_limit)) {
            throw Error(fmt::format(
                "cudarc::launch: kernel '{}' was launched with {} bytes of dynamic shared memory, but a "
                "block on "
                "device {} can have at most {} bytes of shared memory, and the kernel's static shared memory "
                "takes {} of them: use at most {} bytes, or spread the work over more blocks",
                function.name(), config.shared_mem_bytes, device.ordinal(), device_limit, static_bytes,
                device_limit > static_bytes ? device_limit - static_bytes : 0));
        }
        // The most common cause: more dynamic shared memory than the kernel was allowed.
        int allowed = 0;
        if (api.func_get_attribute(&allowed, sys::func_attr::kMaxDynamicSharedSizeBytes, function.native()) ==
                sys::kSuccess &&
            allowed >= 0 && config.shared_mem_bytes > static_cast<unsigned>(allowed)) {
            throw Error(
                fmt::format("cudarc::launch: kernel '{}' was launched with {} bytes of dynamic shared "
                            "memory but is allowed {}; call set_max_dynamic_shared_memory({}) on it first "
                            "(needed above 48 KB)",
                            function.name(), config.shared_mem_bytes, allowed, config.shared_mem_bytes));
        }
    }
    const sys::Entry call =
        takes_attributes(api, config) ? sys::Entry::launch_kernel_ex : sys::Entry::launch_kernel;
    device.throw_error(result, call, fmt::format(" (kernel '{}', {})", function.name(), describe(config)));
}

}  // namespace

void validate_launch_config(const LaunchConfig& config) {
    if (has_zero_extent(config)) {
        throw Error(fmt::format("cudarc::launch: every grid and block extent must be at least 1 ({})",
                                describe(config)));
    }
    if (config.block.volume() > 1024) {
        throw Error(fmt::format("cudarc::launch: a block has at most 1024 threads, {} asked for ({})",
                                config.block.volume(), describe(config)));
    }
    if (config.cluster) {
        const Dim3& c = *config.cluster;
        if (c.x == 0 || c.y == 0 || c.z == 0) {
            throw Error(fmt::format("cudarc::launch: every cluster extent must be at least 1 ({})",
                                    describe(config)));
        }
        if (config.grid.x % c.x != 0 || config.grid.y % c.y != 0 || config.grid.z % c.z != 0) {
            throw Error(fmt::format("cudarc::launch: the grid must be a whole number of clusters ({})",
                                    describe(config)));
        }
    }
}

void launch_packed(const Stream& stream, const LaunchConfig& config, const Function& function,
                   void** parameters, const TrackedAccess* accesses, std::size_t access_count) {
    StreamState& stream_state = detail::Internals::stream_state(stream);
    DeviceState& device = stream_state.device();
    // Everything that can be wrong with the input is checked before any hazard state changes, so a
    // rejected launch leaves every buffer as it was.
    if (detail::Internals::function_device(function) != &device) [[unlikely]]
        throw_function_problem(function, device);
    for (std::size_t i = 0; i < access_count; ++i) {
        if (accesses[i].buffer == nullptr || &accesses[i].buffer->device() != &device) [[unlikely]] {
            check_other_device_buffer(accesses[i], function, device);
        }
    }
    if (has_zero_extent(config) || config.has_attributes()) [[unlikely]]
        validate_launch_config(config);

    // Devices were checked above. Note [Single-stream fast path]: one comparison per buffer on one stream.
    Operation op(stream_state);
    for (std::size_t i = 0; i < access_count; ++i) {
        const TrackedAccess& a = accesses[i];
        op.access(a.buffer->hazards(), static_cast<std::size_t>(a.ptr - a.buffer->ptr()), a.bytes, a.access);
    }
    op.order();

    const auto scope = device.bind();
    const sys::DriverApi& api = device.api();
    sys::Result result = sys::kSuccess;
    if (!config.has_attributes()) [[likely]] {
        result = api.launch_kernel(function.native(), config.grid.x, config.grid.y, config.grid.z,
                                   config.block.x, config.block.y, config.block.z, config.shared_mem_bytes,
                                   stream_state.handle(), parameters, nullptr);
    } else {
        result = launch_with_attributes(api, config, function.native(), stream_state.handle(), parameters);
    }
    if (result != sys::kSuccess) [[unlikely]]
        throw_launch_failure(device, config, function, result);
    AtomicCounters::bump(device.counters().kernel_launches);
    op.complete();
}

}  // namespace detail

void launch_dynamic(Stream& stream, const LaunchConfig& config, const Function& function,
                    std::span<const KernelArg> args) {
    if (function.empty()) {
        throw Error(
            "cudarc::launch_dynamic: the function is empty (a default-constructed Function; get one from "
            "Module::function)");
    }
    if (const auto sizes = function.parameter_sizes()) {
        if (sizes->size() != args.size()) {
            throw Error(
                fmt::format("cudarc::launch_dynamic: kernel '{}' takes {} parameter(s), {} argument(s) given",
                            function.name(), sizes->size(), args.size()));
        }
        for (std::size_t i = 0; i < args.size(); ++i) {
            if ((*sizes)[i] != args[i].size()) {
                throw Error(
                    fmt::format("cudarc::launch_dynamic: argument {} of kernel '{}' has {} bytes, the "
                                "kernel's parameter {} has {}",
                                i, function.name(), args[i].size(), i, (*sizes)[i]));
            }
        }
    }
    std::vector<void*> parameters;
    std::vector<detail::TrackedAccess> accesses;
    parameters.reserve(args.size());
    for (std::size_t i = 0; i < args.size(); ++i) {
        // Note: cuLaunchKernel takes void** but only reads through it.
        parameters.push_back(const_cast<void*>(args[i].data()));
        if (args[i].tracked()) {
            accesses.push_back({args[i].tracked_buffer(), args[i].tracked_ptr(), args[i].tracked_bytes(),
                                args[i].access(), static_cast<unsigned>(i)});
        }
    }
    detail::launch_packed(stream, config, function, parameters.empty() ? nullptr : parameters.data(),
                          accesses.data(), accesses.size());
}

LaunchConfig LaunchConfig::for_elements(std::size_t n, DeviceShape shape, unsigned block_size,
                                        unsigned blocks_per_sm) {
    if (block_size == 0 || block_size > 1024) {
        throw Error(
            fmt::format("cudarc: LaunchConfig::for_elements: block size {} is not in 1..1024", block_size));
    }
    if (shape.multiprocessors == 0)
        throw Error("cudarc: LaunchConfig::for_elements: a device without multiprocessors");
    const unsigned per_multiprocessor =
        blocks_per_sm != 0 ? blocks_per_sm : std::max(1u, shape.max_threads_per_multiprocessor / block_size);
    const unsigned long long resident =
        static_cast<unsigned long long>(shape.multiprocessors) * per_multiprocessor;
    // Note: n / block rounded up without forming n + block - 1, which wraps for n near SIZE_MAX.
    const unsigned long long needed =
        std::max<unsigned long long>(1, n / block_size + (n % block_size != 0 ? 1 : 0));
    const auto blocks = static_cast<unsigned>(std::min({needed, resident, 0x7fffffffull}));
    return LaunchConfig{Dim3(blocks), Dim3(block_size)};
}

LaunchConfig LaunchConfig::for_elements(std::size_t n, const Device& device, unsigned block_size) {
    const int max_block = device.attribute(sys::attr::kMaxThreadsPerBlock);
    if (block_size == 0 || static_cast<long long>(block_size) > max_block) {
        throw Error(
            fmt::format("cudarc: LaunchConfig::for_elements: block size {} is not in 1..{} on device {}",
                        block_size, max_block, device.ordinal()));
    }
    const DeviceShape shape{static_cast<unsigned>(device.multiprocessor_count()),
                            static_cast<unsigned>(device.attribute(sys::attr::kMaxThreadsPerMultiprocessor))};
    return for_elements(n, shape, block_size);
}

LaunchConfig LaunchConfig::for_elements(std::size_t n, const Function& function, unsigned block_size) {
    const int per_sm = function.max_active_blocks_per_multiprocessor(block_size);
    if (per_sm <= 0) {
        throw Error(
            fmt::format("cudarc: LaunchConfig::for_elements: kernel '{}' cannot run blocks of {} threads "
                        "(too many registers or too much shared memory per block)",
                        function.name(), block_size));
    }
    DeviceState& device = *detail::Internals::function_device(function);
    int multiprocessors = 0;
    device.check(
        device.api().device_get_attribute(&multiprocessors, sys::attr::kMultiprocessorCount, device.device()),
        sys::Entry::device_get_attribute);
    return for_elements(n, DeviceShape{static_cast<unsigned>(multiprocessors), 0}, block_size,
                        static_cast<unsigned>(per_sm));
}

}  // namespace cudarc

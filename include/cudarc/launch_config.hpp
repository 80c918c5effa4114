/// @file
/// cudarc::LaunchConfig — the grid, block, dynamic shared memory and launch attributes of one kernel launch.
#pragma once

#include <cstddef>
#include <optional>

#include "cudarc/error.hpp"
#include "cudarc/export.hpp"

namespace cudarc {

class Device;
class Function;

/// Three extents (grid, block or cluster). Not an aggregate on purpose: `LaunchConfig{1024, 256}` must mean
/// "1024 blocks of 256 threads", which brace elision over an aggregate would turn into grid {1024, 256, 1}.
struct Dim3 {
    /// Extents x, y and z; those left out are 1.
    constexpr Dim3(unsigned x_ = 1, unsigned y_ = 1,
                   unsigned z_ = 1) noexcept  // NOLINT(google-explicit-constructor)
        : x(x_), y(y_), z(z_) {}

    /// x * y * z, computed in unsigned long long.
    [[nodiscard]] constexpr unsigned long long volume() const noexcept {
        return static_cast<unsigned long long>(x) * y * z;
    }
    /// Equal when all three extents are.
    friend constexpr bool operator==(const Dim3&, const Dim3&) = default;

    /// The extent in x.
    unsigned x;
    /// The extent in y.
    unsigned y;
    /// The extent in z.
    unsigned z;
};

/// Whether all blocks of a launch are guaranteed to be resident at once (grid-wide synchronization).
enum class Cooperative : bool { no, yes };

/// How a launch is ordered after the kernel ahead of it in its stream. `full`: it starts once that kernel
/// has finished. `programmatic` (programmatic dependent launch, compute capability 9.0 and newer): it may
/// start as soon as every block of that kernel has run griddepcontrol.launch_dependents
/// (cudaTriggerProgrammaticLaunchCompletion) or exited, before that kernel has finished; it must then run
/// griddepcontrol.wait (cudaGridDependencySynchronize) before it touches memory that earlier work in the
/// stream writes. Only the kernel ahead is overlapped: copies, event waits and other streams order the
/// launch as always. It is a request: where the backend or driver has no such launch (HIP, drivers before
/// CUDA 12.0) the launch is fully ordered, which is always correct.
enum class StreamSerialization : bool { full, programmatic };

/// The shape of a device, as far as choosing a grid goes.
struct DeviceShape {
    /// Streaming multiprocessors (Device::multiprocessor_count).
    unsigned multiprocessors = 0;
    /// Resident threads one multiprocessor can hold.
    unsigned max_threads_per_multiprocessor = 0;
};

/// How to launch a kernel. `LaunchConfig{grid, block}` or `LaunchConfig{grid, block, shared_mem_bytes}`;
/// attributes are added with the `with_` calls:
///
///     launch(stream, LaunchConfig{blocks, 256}.with_cluster({2}), kernel, ...);
///
/// Note: without attributes a launch is a plain cuLaunchKernel; only a cluster, a cooperative or a
/// programmatic launch takes the cuLaunchKernelEx path, so the common case stays as cheap as the raw
/// driver call.
struct CUDARC_API LaunchConfig {
    /// Blocks in the grid.
    Dim3 grid = Dim3{};
    /// Threads per block.
    Dim3 block = Dim3{};
    /// Dynamic shared memory per block. Above 48 KB the kernel must first allow it:
    /// Function::set_max_dynamic_shared_memory.
    unsigned shared_mem_bytes = 0;
    /// Thread block cluster dimensions (sm_90 and newer); the grid must be a multiple of them.
    std::optional<Dim3> cluster = std::nullopt;
    /// Whether the launch is cooperative (cuLaunchKernelEx with the cooperative attribute).
    Cooperative cooperative = Cooperative::no;
    /// How the launch is ordered after the kernel ahead of it in its stream.
    StreamSerialization serialization = StreamSerialization::full;

    /// A copy with `bytes` of dynamic shared memory per block.
    [[nodiscard]] constexpr LaunchConfig with_shared_memory(unsigned bytes) const noexcept {
        LaunchConfig copy = *this;
        copy.shared_mem_bytes = bytes;
        return copy;
    }
    /// A copy with thread block clusters of `dims`.
    [[nodiscard]] constexpr LaunchConfig with_cluster(Dim3 dims) const noexcept {
        LaunchConfig copy = *this;
        copy.cluster = dims;
        return copy;
    }
    /// A copy that launches cooperatively (or not, with Cooperative::no).
    [[nodiscard]] constexpr LaunchConfig with_cooperative(
        Cooperative value = Cooperative::yes) const noexcept {
        LaunchConfig copy = *this;
        copy.cooperative = value;
        return copy;
    }
    /// A copy with the given stream serialization.
    [[nodiscard]] constexpr LaunchConfig with_serialization(StreamSerialization value) const noexcept {
        LaunchConfig copy = *this;
        copy.serialization = value;
        return copy;
    }
    /// True when the launch needs cuLaunchKernelEx.
    [[nodiscard]] constexpr bool has_attributes() const noexcept {
        return cluster.has_value() || cooperative == Cooperative::yes ||
               serialization == StreamSerialization::programmatic;
    }

    /// A one-dimensional launch for a grid-stride kernel over `n` elements: blocks of `block_size` threads,
    /// one block per `block_size` elements, but no more blocks than the device runs at once (extra blocks
    /// would only queue; a grid-stride loop covers the rest). At least one block, so n == 0 is a valid
    /// launch. Throws cudarc::Error for a block size the device does not support.
    [[nodiscard]] static LaunchConfig for_elements(std::size_t n, const Device& device,
                                                   unsigned block_size = 256);
    /// The same, with the block limit taken from the kernel's occupancy (registers and static shared memory
    /// can allow fewer resident blocks than the thread count suggests).
    [[nodiscard]] static LaunchConfig for_elements(std::size_t n, const Function& function,
                                                   unsigned block_size = 256);
    /// The arithmetic behind for_elements, for a given device shape (no driver call). `blocks_per_sm` of 0
    /// means "as many as the thread limit allows".
    [[nodiscard]] static LaunchConfig for_elements(std::size_t n, DeviceShape shape, unsigned block_size,
                                                   unsigned blocks_per_sm = 0);
};

}  // namespace cudarc

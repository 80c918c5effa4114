// FakeDriver: the whole sys::DriverApi table implemented on the host, so that tests without a GPU (CI) can
// open Devices and run cudarc's real code paths: streams, events, copies, launches, allocators, graphs.
//
//     fake::FakeDriver gpu;                        // one fake device (sm_90, 8 GiB)
//     fake::DriverOverride installed(gpu.api());   // before the first Device::open
//     auto device = cudarc::Device::open(0);
//
// What it models:
//  - Device memory is host memory: a device pointer is the address of a host allocation, so tests can look
//    at the bytes (bytes()); copies and memsets really copy. Page-locked memory is a host allocation too.
//  - Streams run their work in order. By default work runs as soon as it is enqueued and nothing waits
//    for it; hold(stream) keeps a stream's work queued (a long kernel) until release(stream) or a host wait
//    (any synchronize, a copy into pageable memory, cuMemFree), which lets "time pass" for every stream.
//    cuStreamWaitEvent orders a stream after the event's record as it stood when the wait was enqueued;
//    cuEventQuery reports NOT_READY while the record is still queued.
//  - Contexts: one primary context per device, plus create_context() for another one (what a framework
//    pushes). The current context is per thread. Calls that create objects use the current context; with
//    Options::strict_contexts, calls on a stream, event, module or function of another context than the
//    current one fail with CUDA_ERROR_INVALID_HANDLE (the failures seen on real drivers).
//  - Modules load PTX text or a CUBIN; a kernel exists when the text has `.entry NAME` (a CUBIN: a function
//    of its ELF symbol table) or define_kernel() named it.
//    Launches are recorded (launches()); a defined kernel's body runs when the launch's turn comes.
//  - The default memory pool (cuMemAllocAsync / cuMemFreeAsync / cuMemPoolTrimTo / attributes) with 2 MiB
//    chunks and its release threshold applied at host waits.
//  - Virtual memory with a 2 MiB granularity: cuMemAddressReserve gives an address range without access
//    (mmap'ed), cuMemCreate physical memory counted against the device, cuMemMap maps one whole allocation,
//    cuMemSetAccess (over a fully mapped range) makes it usable, cuMemUnmap discards its bytes without
//    waiting for queued work, and physical memory is freed once released and unmapped.
//  - Stream capture: work enqueued on a capturing stream goes into the graph; a graph launch enqueues it.
//    A stream that waits for an event recorded inside a capture joins it (its work goes into the same
//    graph, in enqueue order) and leaves it when the origin's capture ends; such an event cannot be waited
//    for or queried afterwards. cuGraphExecUpdate updates in place when the operations keep their kinds.
//  - Several devices (Options::devices): peer access between their primary contexts, peer copies, and the
//    pointer attributes and address ranges that borrowed memory is checked with.
//  - A kernel body may fail with a sticky error: from then on every call on that device returns it.
//
// It also checks the library: violations() lists misuse it noticed (work on freed memory, page-locked
// memory freed while a copy into it is queued, a handle used after it was destroyed), and live() counts
// what is still allocated or created, for leak checks after every Device is gone.
//
// One FakeDriver may exist at a time (the table's entries are plain functions that find it globally).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "fake_driver/fault_injector.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::fake {

inline constexpr std::size_t kGiB = std::size_t{1} << 30;

// CUresult values the fake returns, beyond those in sys/driver_api.hpp.
inline constexpr sys::Result kErrorInvalidDevice = 101;
inline constexpr sys::Result kErrorInvalidContext = 201;
inline constexpr sys::Result kErrorInvalidHandle = 400;
inline constexpr sys::Result kErrorIllegalAddress = 700;
inline constexpr sys::Result kErrorLaunchFailed = 719;
inline constexpr sys::Result kErrorStreamCaptureInvalidated = 901;
inline constexpr sys::Result kErrorGraphExecUpdateFailure = 910;

struct DeviceSpec {
    std::string name = "cudarc fake GPU";
    int major = 9;
    int minor = 0;
    int multiprocessors = 132;
    std::size_t memory_bytes = 8 * kGiB;  // capacity; only touched pages cost host memory
    bool memory_pools = true;             // cuMemAllocAsync and the default pool
    bool virtual_memory = true;           // cuMemAddressReserve, cuMemCreate, cuMemMap and the rest
    // Device attributes (CUdevice_attribute number -> value) that differ from the H200-like defaults.
    std::map<int, int> attributes;
};

struct Options {
    std::vector<DeviceSpec> devices{DeviceSpec{}};
    bool strict_contexts = true;
    // Whether every pair of distinct devices has a peer-to-peer path (cuDeviceCanAccessPeer,
    // cuCtxEnablePeerAccess). cuMemcpyPeerAsync works either way, as the driver stages it through the host.
    bool peer_access = true;
};

// What is allocated or created right now, across all devices.
struct LiveCounts {
    std::size_t device_allocations = 0;  // cuMemAlloc / cuMemAllocManaged blocks
    std::size_t device_bytes = 0;
    std::size_t pool_chunks = 0;     // memory pool chunks handed out by cuMemAllocAsync and not yet freed
    std::size_t address_ranges = 0;  // cuMemAddressReserve ranges not yet freed
    std::size_t physical_allocations = 0;  // cuMemCreate memory not yet freed (released and unmapped)
    std::size_t host_allocations = 0;      // cuMemHostAlloc
    std::size_t streams = 0;
    std::size_t events = 0;
    std::size_t modules = 0;
    std::size_t graphs = 0;  // graphs and executable graphs
    std::size_t retained_primary_contexts = 0;
    friend bool operator==(const LiveCounts&, const LiveCounts&) = default;
};

[[nodiscard]] std::string to_string(const LiveCounts& counts);

struct LaunchRecord {
    std::string kernel;
    unsigned grid[3] = {1, 1, 1};
    unsigned block[3] = {1, 1, 1};
    unsigned shared_mem_bytes = 0;
    sys::Stream stream = nullptr;
    std::vector<std::vector<std::byte>> arguments;  // copied when the kernel's parameter sizes are known
};

class KernelCall;

class FakeDriver {
  public:
    // Returns kSuccess, or an error that faults the launch (a sticky one loses the device's context).
    using KernelBody = std::function<sys::Result(const KernelCall&)>;

    explicit FakeDriver(Options options = {});
    FakeDriver(const FakeDriver&) = delete;
    FakeDriver& operator=(const FakeDriver&) = delete;
    // Aborts with a message when a device's primary context is still retained (a Device outlived it).
    ~FakeDriver();

    [[nodiscard]] const sys::DriverApi& api() const noexcept { return api_; }

    // --- Contexts ---------------------------------------------------------------------------------------
    // A new (non-primary) context on device `ordinal`, as cuCtxCreate makes; not made current.
    [[nodiscard]] sys::Context create_context(int ordinal);
    void destroy_context(sys::Context context);
    [[nodiscard]] sys::Context primary_context(int ordinal) const;
    // The calling thread's current context (nullptr when none).
    [[nodiscard]] sys::Context current_context() const;

    // --- Time ------------------------------------------------------------------------------------------
    // Work enqueued on `stream` from now stays queued until release() or a host wait.
    void hold(sys::Stream stream);
    void release(sys::Stream stream);
    // Lets every stream finish its queued work (holds are lifted), as a device synchronize would.
    void finish_all();
    // Operations queued on all streams and not yet run.
    [[nodiscard]] std::size_t queued_operations() const;

    // --- Kernels ---------------------------------------------------------------------------------------
    // Makes `name` loadable from any module, with known parameter sizes (cuFuncGetParamInfo answers, and
    // launches copy their arguments) and, optionally, a body that runs when the launch's turn comes.
    void define_kernel(const std::string& name, std::vector<std::size_t> parameter_sizes,
                       KernelBody body = {});
    [[nodiscard]] std::vector<LaunchRecord> launches() const;
    // Forgets the launches recorded so far (a long fuzzing run would otherwise keep every one).
    void clear_launches();

    // --- Errors ----------------------------------------------------------------------------------------
    // Device `ordinal` behaves as after a sticky error: every later call on it returns `result`.
    void lose_device(int ordinal, sys::Result result = kErrorIllegalAddress);

    // --- Checks ----------------------------------------------------------------------------------------
    [[nodiscard]] LiveCounts live() const;
    [[nodiscard]] std::vector<std::string> violations() const;
    // Host-blocking calls (synchronizes, pageable copies to the host, cuMemFree).
    [[nodiscard]] std::uint64_t host_waits() const;
    // Bytes of a live allocation (device, managed, pool or page-locked); empty when `ptr` is not in one.
    [[nodiscard]] std::span<std::byte> bytes(DevicePtr ptr, std::size_t size) const;
    // The devices that may access the mapping holding `ptr` (bit d: device d, by cuMemSetAccess); 0 when
    // no mapping holds it.
    [[nodiscard]] std::uint32_t access_mask(DevicePtr ptr) const;
    // Bytes of cuMemCreate memory of device `ordinal` not yet freed.
    [[nodiscard]] std::size_t physical_bytes(int ordinal) const;
    // The default pool's reserved and used bytes on device `ordinal`.
    [[nodiscard]] std::size_t pool_reserved_bytes(int ordinal) const;
    [[nodiscard]] std::size_t pool_used_bytes(int ordinal) const;

    // Internal: the implementation behind the table's plain functions.
    struct Impl;
    [[nodiscard]] Impl& impl() noexcept { return *impl_; }

  private:
    std::unique_ptr<Impl> impl_;
    sys::DriverApi api_;
};

// What a defined kernel's body sees: the launch, and the device memory behind its pointer arguments.
// Note: bodies run inside the fake (its lock held): they must not call the driver.
class KernelCall {
  public:
    KernelCall(const LaunchRecord& launch, FakeDriver::Impl& driver) noexcept
        : launch_(launch), driver_(driver) {}
    [[nodiscard]] const LaunchRecord& launch() const noexcept { return launch_; }
    // Argument `index` read as a T (its size must match).
    template <typename T>
    [[nodiscard]] T argument(std::size_t index) const;
    // `bytes` of device memory at `ptr`; empty when that is not inside a live allocation.
    [[nodiscard]] std::span<std::byte> memory(DevicePtr ptr, std::size_t bytes) const;

  private:
    const LaunchRecord& launch_;
    FakeDriver::Impl& driver_;
};

template <typename T>
T KernelCall::argument(std::size_t index) const {
    T value{};
    const auto& bytes = launch_.arguments.at(index);
    if (bytes.size() != sizeof(T)) throw std::runtime_error("fake kernel argument of another size");
    std::memcpy(&value, bytes.data(), sizeof(T));
    return value;
}

}  // namespace cudarc::fake

#include "fake_driver/fake_driver.hpp"

#include <elf.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <set>
#include <utility>

#include <sys/mman.h>

namespace cudarc::fake {
namespace {

constexpr std::size_t kPoolChunk = std::size_t{2} << 20;
constexpr std::size_t kVmmGranularity = std::size_t{2} << 20;  // cuMemGetAllocationGranularity's answer
constexpr std::size_t kAlignment = 256;
constexpr std::uint64_t kFirstHandle = 0x10000;
constexpr std::uint64_t kHandleStep = 0x10;

std::atomic<FakeDriver*> g_driver{nullptr};
std::atomic<std::uint64_t> g_epoch{0};

// The calling thread's current context; valid only while t_epoch matches the installed fake's.
thread_local std::uint64_t t_epoch = 0;
thread_local std::uint64_t t_context = 0;

template <typename Handle>
Handle as_handle(std::uint64_t id) noexcept {
    return reinterpret_cast<Handle>(static_cast<std::uintptr_t>(id));
}
template <typename Handle>
std::uint64_t id_of(Handle handle) noexcept {
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(handle));
}

bool is_sticky(sys::Result result) noexcept {
    return result == 700 || result == 702 || (result >= 714 && result <= 719);
}

std::size_t round_up(std::size_t value, std::size_t multiple) noexcept {
    return (value + multiple - 1) / multiple * multiple;
}

struct ErrorName {
    sys::Result code;
    const char* name;
    const char* text;
};
constexpr ErrorName kErrorNames[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "the operation is not permitted in this state"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
    {910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorName* find_error(sys::Result code) noexcept {
    for (const ErrorName& e : kErrorNames) {
        if (e.code == code) return &e;
    }
    return nullptr;
}

// Attributes of an H200-like device (CUdevice_attribute numbers).
int default_attribute(const DeviceSpec& spec, int ordinal, int attribute, bool& known) {
    known = true;
    if (const auto it = spec.attributes.find(attribute); it != spec.attributes.end()) return it->second;
    switch (attribute) {
        case sys::attr::kMaxThreadsPerBlock:
            return 1024;
        case 2:  // max block dim x
        case 3:  // max block dim y
            return 1024;
        case 4:  // max block dim z
            return 64;
        case 5:  // max grid dim x
            return 0x7fffffff;
        case 6:
        case 7:
            return 65535;
        case sys::attr::kMaxSharedMemoryPerBlock:
            return 49152;
        case sys::attr::kWarpSize:
            return 32;
        case sys::attr::kClockRate:
            return 1980000;
        case sys::attr::kMultiprocessorCount:
            return spec.multiprocessors;
        case sys::attr::kPciBusId:
            return 0x18 + ordinal;
        case sys::attr::kPciDeviceId:
            return 0;
        case sys::attr::kMemoryClockRate:
            return 2619000;
        case sys::attr::kGlobalMemoryBusWidth:
            return 6144;
        case sys::attr::kL2CacheSize:
            return 60 << 20;
        case sys::attr::kMaxThreadsPerMultiprocessor:
            return 2048;
        case sys::attr::kComputeCapabilityMajor:
            return spec.major;
        case sys::attr::kComputeCapabilityMinor:
            return spec.minor;
        case sys::attr::kMaxSharedMemoryPerMultiprocessor:
            return 233472;
        case sys::attr::kManagedMemory:
        case sys::attr::kConcurrentManagedAccess:
        case sys::attr::kCooperativeLaunch:
            return 1;
        case sys::attr::kMaxSharedMemoryPerBlockOptin:
            return 232448;
        case sys::attr::kMemoryPoolsSupported:
            return spec.memory_pools ? 1 : 0;
        case sys::attr::kVirtualMemoryManagementSupported:
            return spec.virtual_memory ? 1 : 0;
        default:
            known = false;
            return 0;
    }
}

}  // namespace

std::string to_string(const LiveCounts& c) {
    return fmt::format(
        "{} device allocations ({} bytes), {} pool chunks, {} address ranges, {} physical allocations, {} "
        "page-locked allocations, {} streams, {} events, {} modules, {} graphs, {} retained primary contexts",
        c.device_allocations, c.device_bytes, c.pool_chunks, c.address_ranges, c.physical_allocations,
        c.host_allocations, c.streams, c.events, c.modules, c.graphs, c.retained_primary_contexts);
}

struct FakeDriver::Impl {
    struct Device {
        DeviceSpec spec;
        std::uint64_t primary = 0;
        int retains = 0;
        std::size_t used = 0;  // bytes of device memory (allocations and pool chunks)
        sys::Result lost = sys::kSuccess;
        std::uint64_t pool = 0;
    };
    struct Context {
        int ordinal = 0;
        bool primary = false;
        bool alive = true;
        std::uint64_t null_stream = 0;
    };
    struct Op {
        enum class Kind { work, record, wait };
        Kind kind = Kind::work;
        std::function<void()> run;  // work: runs with the lock held
        std::uint64_t event = 0;
        std::uint64_t generation = 0;
        std::vector<std::pair<std::uintptr_t, std::size_t>> host_ranges;  // page-locked memory it touches
        std::string what;
    };
    struct Stream {
        std::uint64_t context = 0;
        unsigned flags = 0;
        int priority = 0;
        std::deque<Op> queue;
        bool held = false;
        bool alive = true;
        bool implicit = false;  // a context's NULL stream
        std::uint64_t capture = 0;
        bool capture_invalidated = false;
    };
    struct Event {
        std::uint64_t context = 0;
        unsigned flags = 0;
        std::uint64_t recorded = 0;
        std::uint64_t completed = 0;
        double time_ms = 0.0;
        bool alive = true;
        std::uint64_t capture = 0;  // the capture its last record was made in (0: outside any)
    };
    // `reserved`: an address range of cuMemAddressReserve (mmap'ed without access), usable only where a
    // mapping covers it and its access was set.
    // `registered`: host memory the caller owns, page-locked by cuMemHostRegister (never freed here).
    enum class MemoryKind { device, managed, pool, host, reserved, registered };
    struct Allocation {
        std::size_t size = 0;
        int ordinal = 0;
        MemoryKind kind = MemoryKind::device;
        bool live = true;  // pool chunks: handed out (false: cached in the pool)
        std::byte* storage = nullptr;
        std::uint64_t context = 0;  // the context it was allocated in (pool chunks: the primary context)
    };
    struct Pool {
        int ordinal = 0;
        std::uint64_t threshold = 0;
        std::size_t reserved = 0;
        std::size_t used = 0;
        std::size_t reserved_high = 0;
        std::size_t used_high = 0;
        std::multimap<std::size_t, std::uintptr_t> cached;  // chunk size -> address
    };
    struct Mapping {  // cuMemMap of a whole physical allocation
        std::size_t size = 0;
        std::uint64_t handle = 0;
        std::uint32_t access = 0;  // bit d: device d may access it (cuMemSetAccess)
    };
    struct PhysicalMemory {  // cuMemCreate; freed once released and unmapped
        std::size_t size = 0;
        int ordinal = 0;
        int mappings = 0;
        bool released = false;
    };
    struct Module {
        std::uint64_t context = 0;
        std::string text;
        bool binary = false;
        bool alive = true;
        std::map<std::string, std::uint64_t> functions;
    };
    struct Function {
        std::uint64_t module = 0;
        std::uint64_t context = 0;
        std::string name;
        int max_dynamic_shared = 49152;
    };
    struct KernelDefinition {
        std::vector<std::size_t> parameter_sizes;
        KernelBody body;
    };
    struct Graph {
        std::uint64_t context = 0;
        std::vector<Op> ops;
        bool executable = false;
        bool alive = true;
    };

    explicit Impl(Options o) : options(std::move(o)) {}

    std::mutex mutex;
    Options options;
    std::uint64_t epoch = 0;
    std::uint64_t next_id = kFirstHandle;
    std::vector<Device> devices;
    std::map<std::uint64_t, Context> contexts;
    std::map<std::uint64_t, Stream> streams;
    std::map<std::uint64_t, Event> events;
    std::map<std::uintptr_t, Allocation> memory;
    std::map<std::uint64_t, Pool> pools;
    std::map<std::uintptr_t, Mapping> mappings;
    std::map<std::uint64_t, PhysicalMemory> physical;
    std::map<std::uint64_t, Module> modules;
    std::map<std::uint64_t, Function> functions;
    std::map<std::string, KernelDefinition> kernels;
    std::map<std::uint64_t, Graph> graphs;
    std::vector<LaunchRecord> launches;
    std::set<std::pair<std::uint64_t, std::uint64_t>> peer_access;  // (context, peer context) enabled
    std::vector<std::string> violations;
    std::uint64_t host_waits = 0;
    double clock_ms = 0.0;

    std::uint64_t new_id() { return std::exchange(next_id, next_id + kHandleStep); }

    void violation(std::string text) { violations.push_back(std::move(text)); }

    // --- Contexts ---

    std::uint64_t current() const {
        if (t_epoch != epoch) return 0;
        const auto it = contexts.find(t_context);
        return it != contexts.end() && it->second.alive ? t_context : 0;
    }
    int ordinal_of_context(std::uint64_t context) const { return contexts.at(context).ordinal; }
    // The error a call on `context` gets: its device's sticky error, or, when strict, a handle of another
    // context than the current one.
    sys::Result use(std::uint64_t context, bool must_be_current) const {
        if (const sys::Result lost = devices[static_cast<std::size_t>(ordinal_of_context(context))].lost)
            return lost;
        if (must_be_current && options.strict_contexts && current() != context) return kErrorInvalidHandle;
        return sys::kSuccess;
    }
    // For calls that act on the current context (creation, memory queries).
    sys::Result use_current(std::uint64_t& context) const {
        context = current();
        if (context == 0) return kErrorInvalidContext;
        return devices[static_cast<std::size_t>(ordinal_of_context(context))].lost;
    }

    // --- Handles ---

    Stream* find_stream(sys::Stream handle, sys::Result& error) {
        if (handle == nullptr || handle == sys::legacy_stream()) {
            const std::uint64_t context = current();
            if (context == 0) {
                error = kErrorInvalidContext;
                return nullptr;
            }
            Context& c = contexts.at(context);
            if (c.null_stream == 0) {
                c.null_stream = new_id();
                Stream& s = streams[c.null_stream];
                s.context = context;
                s.implicit = true;
            }
            return &streams.at(c.null_stream);
        }
        const auto it = streams.find(id_of(handle));
        if (it == streams.end() || !it->second.alive) {
            if (it != streams.end())
                violation(fmt::format("stream {} used after cuStreamDestroy", id_of(handle)));
            error = kErrorInvalidHandle;
            return nullptr;
        }
        return &it->second;
    }
    template <typename Map>
    auto* find_live(Map& map, std::uint64_t id, const char* kind, sys::Result& error) {
        const auto it = map.find(id);
        if (it == map.end() || !it->second.alive) {
            if (it != map.end()) violation(fmt::format("{} {:#x} used after it was destroyed", kind, id));
            error = kErrorInvalidHandle;
            return static_cast<typename Map::mapped_type*>(nullptr);
        }
        return &it->second;
    }
    Function* find_function(sys::Function handle, sys::Result& error) {
        const auto it = functions.find(id_of(handle));
        if (it == functions.end()) {
            error = kErrorInvalidHandle;
            return nullptr;
        }
        const auto module = modules.find(it->second.module);
        if (module == modules.end() || !module->second.alive) {
            violation(fmt::format("function '{}' used after its module was unloaded", it->second.name));
            error = kErrorInvalidHandle;
            return nullptr;
        }
        return &it->second;
    }

    // --- Memory ---

    // The allocation holding [ptr, ptr + bytes) entirely, if any (live or cached pool chunk).
    Allocation* find_memory(std::uintptr_t ptr, std::size_t bytes) {
        auto it = memory.upper_bound(ptr);
        if (it == memory.begin()) return nullptr;
        --it;
        const std::uintptr_t start = it->first;
        if (ptr - start >= it->second.size || bytes > it->second.size - (ptr - start)) return nullptr;
        return &it->second;
    }
    std::span<std::byte> span(std::uintptr_t ptr, std::size_t bytes) {
        Allocation* a = find_memory(ptr, bytes);
        if (a == nullptr || !a->live || (a->kind == MemoryKind::reserved && !accessible(ptr, bytes)))
            return {};
        return {reinterpret_cast<std::byte*>(ptr), bytes};
    }
    // Whether mappings whose access was set cover [ptr, ptr + bytes) without a gap.
    bool accessible(std::uintptr_t ptr, std::size_t bytes) const {
        auto it = mappings.upper_bound(ptr);
        if (it == mappings.begin()) return false;
        std::uintptr_t covered = ptr;
        for (--it; it != mappings.end() && covered < ptr + bytes; ++it) {
            if (it->first > covered || it->first + it->second.size <= covered || it->second.access == 0)
                return false;
            covered = it->first + it->second.size;
        }
        return covered >= ptr + bytes;
    }
    bool device_range(std::uintptr_t ptr, std::size_t bytes, const char* call) {
        Allocation* a = find_memory(ptr, bytes);
        if (a != nullptr && a->live && a->kind != MemoryKind::host && a->kind != MemoryKind::registered &&
            (a->kind != MemoryKind::reserved || accessible(ptr, bytes)))
            return true;
        violation(fmt::format("{}: [{:#x}, +{}) is not inside live device memory", call, ptr, bytes));
        return false;
    }
    bool is_page_locked(std::uintptr_t ptr, std::size_t bytes) {
        Allocation* a = find_memory(ptr, bytes);
        return a != nullptr && a->live && (a->kind == MemoryKind::host || a->kind == MemoryKind::registered);
    }
    sys::Result allocate(std::size_t bytes, int ordinal, MemoryKind kind, std::uintptr_t& out) {
        Device& device = devices[static_cast<std::size_t>(ordinal)];
        const std::size_t capacity = kind == MemoryKind::host ? SIZE_MAX : device.spec.memory_bytes;
        const std::size_t used = kind == MemoryKind::host ? 0 : device.used;
        if (bytes > capacity - used || bytes > SIZE_MAX - kAlignment) return sys::kErrorOutOfMemory;
        void* storage = std::aligned_alloc(kAlignment, round_up(bytes, kAlignment));
        if (storage == nullptr) return sys::kErrorOutOfMemory;
        out = reinterpret_cast<std::uintptr_t>(storage);
        memory[out] =
            Allocation{bytes, ordinal, kind, true, static_cast<std::byte*>(storage), device.primary};
        if (kind != MemoryKind::host) device.used += bytes;
        return sys::kSuccess;
    }
    static void free_storage(const Allocation& a) {
        if (a.kind == MemoryKind::reserved) {
            ::munmap(a.storage, a.size);
        } else {
            std::free(a.storage);
        }
    }
    void release_memory(std::map<std::uintptr_t, Allocation>::iterator it) {
        if (it->second.kind != MemoryKind::host && it->second.kind != MemoryKind::reserved &&
            it->second.kind != MemoryKind::registered)
            devices[static_cast<std::size_t>(it->second.ordinal)].used -= it->second.size;
        if (it->second.kind != MemoryKind::registered) free_storage(it->second);
        memory.erase(it);
    }
    // Physical memory of cuMemCreate goes back once it is released and no longer mapped.
    void maybe_free_physical(std::map<std::uint64_t, PhysicalMemory>::iterator it) {
        if (!it->second.released || it->second.mappings != 0) return;
        devices[static_cast<std::size_t>(it->second.ordinal)].used -= it->second.size;
        physical.erase(it);
    }
    void trim(Pool& pool, std::size_t keep) {
        while (pool.reserved > keep && !pool.cached.empty()) {
            auto largest = std::prev(pool.cached.end());
            const auto it = memory.find(largest->second);
            pool.reserved -= largest->first;
            pool.cached.erase(largest);
            if (it != memory.end()) release_memory(it);
        }
    }

    // Whether some stream is still capturing into capture `id`.
    bool capture_active(std::uint64_t id) const {
        for (const auto& [stream_id, stream] : streams) {
            if (stream.capture == id) return true;
        }
        return false;
    }

    // --- Work ---

    void enqueue(Stream& stream, Op op) {
        if (stream.capture != 0) {
            if (op.kind == Op::Kind::work) graphs.at(stream.capture).ops.push_back(std::move(op));
            return;  // records and waits inside a capture are the graph's own edges
        }
        stream.queue.push_back(std::move(op));
        pump();
    }
    void run(Stream& stream, Op& op) {
        clock_ms += 0.001;
        switch (op.kind) {
            case Op::Kind::work:
                if (devices[static_cast<std::size_t>(ordinal_of_context(stream.context))].lost ==
                        sys::kSuccess &&
                    op.run)
                    op.run();
                break;
            case Op::Kind::record: {
                Event& event = events.at(op.event);
                event.completed = std::max(event.completed, op.generation);
                event.time_ms = clock_ms;
                break;
            }
            case Op::Kind::wait:
                break;
        }
    }
    bool runnable(const Op& op) const {
        return op.kind != Op::Kind::wait || events.at(op.event).completed >= op.generation;
    }
    void pump() {
        for (bool progress = true; progress;) {
            progress = false;
            for (auto& [id, stream] : streams) {
                while (!stream.held && !stream.queue.empty() && runnable(stream.queue.front())) {
                    Op op = std::move(stream.queue.front());
                    stream.queue.pop_front();
                    run(stream, op);
                    progress = true;
                }
            }
        }
    }
    // A host wait: time passes until every stream is idle.
    void finish_all() {
        ++host_waits;
        for (auto& [id, stream] : streams) stream.held = false;
        pump();
        for (auto& [id, stream] : streams) {
            if (!stream.queue.empty()) {
                violation(fmt::format("stream {:#x} cannot finish: it waits for work that never comes", id));
                stream.queue.clear();
            }
        }
        for (auto& [id, pool] : pools) {
            if (pool.reserved > pool.threshold) trim(pool, pool.threshold);
        }
    }

    sys::Result launch(sys::Function handle, const unsigned grid[3], const unsigned block[3], unsigned shared,
                       sys::Stream stream_handle, void** params) {
        sys::Result error = sys::kSuccess;
        Function* function = find_function(handle, error);
        if (function == nullptr) return error;
        Stream* stream = find_stream(stream_handle, error);
        if (stream == nullptr) return error;
        if (const sys::Result r = use(stream->context, true)) return r;
        if (stream->context != function->context) return kErrorInvalidHandle;
        for (int i = 0; i < 3; ++i) {
            if (grid[i] == 0 || block[i] == 0) return sys::kErrorInvalidValue;
        }
        if (grid[0] > 0x7fffffffu || grid[1] > 65535 || grid[2] > 65535) return sys::kErrorInvalidValue;
        if (static_cast<unsigned long long>(block[0]) * block[1] * block[2] > 1024)
            return sys::kErrorInvalidValue;
        if (shared > static_cast<unsigned>(function->max_dynamic_shared)) return sys::kErrorInvalidValue;
        LaunchRecord record;
        record.kernel = function->name;
        std::copy(grid, grid + 3, record.grid);
        std::copy(block, block + 3, record.block);
        record.shared_mem_bytes = shared;
        record.stream = stream_handle;
        const auto definition = kernels.find(function->name);
        if (definition != kernels.end() && params != nullptr) {
            for (std::size_t i = 0; i < definition->second.parameter_sizes.size(); ++i) {
                const auto* bytes = static_cast<const std::byte*>(params[i]);
                record.arguments.emplace_back(bytes, bytes + definition->second.parameter_sizes[i]);
            }
        }
        launches.push_back(record);
        Op op;
        op.what = "kernel " + function->name;
        if (definition != kernels.end() && definition->second.body) {
            const int ordinal = ordinal_of_context(stream->context);
            op.run = [this, body = definition->second.body, record, ordinal] {
                const sys::Result result = body(KernelCall(record, *this));
                if (is_sticky(result)) devices[static_cast<std::size_t>(ordinal)].lost = result;
            };
        }
        enqueue(*stream, std::move(op));
        return sys::kSuccess;
    }
};

std::span<std::byte> KernelCall::memory(DevicePtr ptr, std::size_t bytes) const {
    return driver_.span(static_cast<std::uintptr_t>(ptr), bytes);
}

namespace {

FakeDriver::Impl& impl() {
    return g_driver.load(std::memory_order_acquire)->impl();
}

using Lock = std::lock_guard<std::mutex>;
using Impl = FakeDriver::Impl;

// ---- The entries' bodies, in DriverApi's order (Note [Generated fake entries]) ----

namespace bodies {

sys::Result init(Impl&, unsigned) {
    return sys::kSuccess;
}
sys::Result driver_get_version(Impl&, int* version) {
    *version = 13000;
    return sys::kSuccess;
}
sys::Result get_error_name(Impl&, sys::Result result, const char** name) {
    const ErrorName* e = find_error(result);
    if (e == nullptr) return sys::kErrorInvalidValue;
    *name = e->name;
    return sys::kSuccess;
}
sys::Result get_error_string(Impl&, sys::Result result, const char** text) {
    const ErrorName* e = find_error(result);
    if (e == nullptr) return sys::kErrorInvalidValue;
    *text = e->text;
    return sys::kSuccess;
}

sys::Result device_get_count(Impl& d, int* count) {
    *count = static_cast<int>(d.devices.size());
    return sys::kSuccess;
}
sys::Result device_get(Impl& d, sys::Device* device, int ordinal) {
    if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= d.devices.size()) return kErrorInvalidDevice;
    *device = ordinal;
    return sys::kSuccess;
}
bool valid_device(const Impl& d, sys::Device device) {
    return device >= 0 && static_cast<std::size_t>(device) < d.devices.size();
}
sys::Result device_get_name(Impl& d, char* name, int len, sys::Device device) {
    if (!valid_device(d, device) || len <= 0) return kErrorInvalidDevice;
    const std::string& text = d.devices[static_cast<std::size_t>(device)].spec.name;
    const std::size_t n = std::min(text.size(), static_cast<std::size_t>(len - 1));
    std::memcpy(name, text.data(), n);
    name[n] = '\0';
    return sys::kSuccess;
}
sys::Result device_get_uuid(Impl& d, sys::Uuid* uuid, sys::Device device) {
    if (!valid_device(d, device)) return kErrorInvalidDevice;
    for (int i = 0; i < 16; ++i) uuid->bytes[i] = static_cast<char>(0xc0 + i + device);
    return sys::kSuccess;
}
sys::Result device_total_mem(Impl& d, std::size_t* bytes, sys::Device device) {
    if (!valid_device(d, device)) return kErrorInvalidDevice;
    *bytes = d.devices[static_cast<std::size_t>(device)].spec.memory_bytes;
    return sys::kSuccess;
}
sys::Result device_get_attribute(Impl& d, int* value, int attribute, sys::Device device) {
    if (!valid_device(d, device)) return kErrorInvalidDevice;
    bool known = false;
    const int answer =
        default_attribute(d.devices[static_cast<std::size_t>(device)].spec, device, attribute, known);
    if (!known) return sys::kErrorInvalidValue;
    *value = answer;
    return sys::kSuccess;
}
sys::Result device_get_pci_bus_id(Impl& d, char* id, int len, sys::Device device) {
    if (!valid_device(d, device) || len < 13) return sys::kErrorInvalidValue;
    std::snprintf(id, static_cast<std::size_t>(len), "0000:%02x:00.0", 0x18 + device);
    return sys::kSuccess;
}
sys::Result device_primary_ctx_retain(Impl& d, sys::Context* ctx, sys::Device device) {
    if (!valid_device(d, device)) return kErrorInvalidDevice;
    Impl::Device& dev = d.devices[static_cast<std::size_t>(device)];
    ++dev.retains;
    *ctx = as_handle<sys::Context>(dev.primary);
    return sys::kSuccess;
}
sys::Result device_primary_ctx_release(Impl& d, sys::Device device) {
    if (!valid_device(d, device)) return kErrorInvalidDevice;
    Impl::Device& dev = d.devices[static_cast<std::size_t>(device)];
    if (dev.retains == 0) return kErrorInvalidContext;
    --dev.retains;
    return sys::kSuccess;
}
sys::Result device_can_access_peer(Impl& d, int* can_access, sys::Device device, sys::Device peer) {
    if (!valid_device(d, device) || !valid_device(d, peer)) return kErrorInvalidDevice;
    *can_access = device != peer && d.options.peer_access ? 1 : 0;
    return sys::kSuccess;
}

sys::Result ctx_get_current(Impl& d, sys::Context* ctx) {
    *ctx = as_handle<sys::Context>(d.current());
    return sys::kSuccess;
}
sys::Result ctx_set_current(Impl& d, sys::Context ctx) {
    const std::uint64_t id = id_of(ctx);
    if (id != 0) {
        const auto it = d.contexts.find(id);
        if (it == d.contexts.end() || !it->second.alive) return kErrorInvalidContext;
    }
    t_epoch = d.epoch;
    t_context = id;
    return sys::kSuccess;
}
sys::Result ctx_synchronize(Impl& d) {
    std::uint64_t context = 0;
    if (const sys::Result r = d.use_current(context)) return r;
    d.finish_all();
    return sys::kSuccess;
}
sys::Result ctx_get_stream_priority_range(Impl& d, int* least, int* greatest) {
    std::uint64_t context = 0;
    if (const sys::Result r = d.use_current(context)) return r;
    *least = 0;
    *greatest = -5;
    return sys::kSuccess;
}
sys::Result mem_get_info(Impl& d, std::size_t* free_bytes, std::size_t* total_bytes) {
    std::uint64_t context = 0;
    if (const sys::Result r = d.use_current(context)) return r;
    const Impl::Device& dev = d.devices[static_cast<std::size_t>(d.ordinal_of_context(context))];
    *total_bytes = dev.spec.memory_bytes;
    *free_bytes = dev.spec.memory_bytes - dev.used;
    return sys::kSuccess;
}
sys::Result ctx_enable_peer_access(Impl& d, sys::Context peer, unsigned flags) {
    std::uint64_t context = 0;
    if (const sys::Result r = d.use_current(context)) return r;
    if (flags != 0) return sys::kErrorInvalidValue;
    const auto it = d.contexts.find(id_of(peer));
    if (it == d.contexts.end() || !it->second.alive) return kErrorInvalidContext;
    if (it->second.ordinal == d.ordinal_of_context(context)) return kErrorInvalidDevice;
    if (const sys::Result lost = d.devices[static_cast<std::size_t>(it->second.ordinal)].lost) return lost;
    if (!d.options.peer_access) return sys::kErrorPeerAccessUnsupported;
    if (!d.peer_access.emplace(context, id_of(peer)).second) return sys::kErrorPeerAccessAlreadyEnabled;
    return sys::kSuccess;
}

sys::Result stream_create_with_priority(Impl& d, sys::Stream* stream, unsigned flags, int priority) {
    std::uint64_t context = 0;
    if (const sys::Result r = d.use_current(context)) return r;
    const std::uint64_t id = d.new_id();
    Impl::Stream& s = d.streams[id];
    s.context = context;
    s.flags = flags;
    s.priority = std::clamp(priority, -5, 0);
    *stream = as_handle<sys::Stream>(id);
    return sys::kSuccess;
}
sys::Result stream_destroy(Impl& d, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    if (s->implicit) return kErrorInvalidHandle;
    // Note: queued work still runs to completion, as on a real device.
    s->alive = false;
    return d.devices[static_cast<std::size_t>(d.ordinal_of_context(s->context))].lost;
}
sys::Result stream_synchronize(Impl& d, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    if (const sys::Result r = d.use(s->context, false)) return r;
    if (s->capture != 0) {
        s->capture_invalidated = true;
        return sys::kErrorStreamCaptureUnsupported;
    }
    d.finish_all();
    return d.devices[static_cast<std::size_t>(d.ordinal_of_context(s->context))].lost;
}
sys::Result stream_query(Impl& d, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    if (const sys::Result r = d.use(s->context, false)) return r;
    return s->queue.empty() ? sys::kSuccess : sys::kErrorNotReady;
}
sys::Result stream_wait_event(Impl& d, sys::Stream stream, sys::Event event, unsigned) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    if (const sys::Result r = d.use(s->context, true)) return r;
    Impl::Event* e = d.find_live(d.events, id_of(event), "event", error);
    if (e == nullptr) return error;
    if (e->capture != 0) {
        // Recorded inside a capture: a stream that waits for it takes part in that capture (as on a real
        // driver; its later work goes into the same graph); once the capture has ended, it cannot be waited
        // for.
        if (!d.capture_active(e->capture)) return sys::kErrorInvalidValue;
        if (s->capture == 0) s->capture = e->capture;
        if (s->capture != e->capture) return sys::kErrorInvalidValue;
        return sys::kSuccess;
    }
    if (s->capture != 0) return sys::kSuccess;  // an external event: a wait node of the graph
    // Note: the wait captures the event's last record as it stands now (events of other contexts too).
    if (e->recorded > e->completed) {
        Impl::Op op;
        op.kind = Impl::Op::Kind::wait;
        op.event = id_of(event);
        op.generation = e->recorded;
        op.what = "wait";
        d.enqueue(*s, std::move(op));
    }
    return sys::kSuccess;
}
sys::Result stream_get_priority(Impl& d, sys::Stream stream, int* priority) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    *priority = s->priority;
    return sys::kSuccess;
}
sys::Result stream_get_flags(Impl& d, sys::Stream stream, unsigned* flags) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    *flags = s->flags;
    return sys::kSuccess;
}
sys::Result stream_get_ctx(Impl& d, sys::Stream stream, sys::Context* ctx) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    *ctx = as_handle<sys::Context>(s->context);
    return sys::kSuccess;
}
sys::Result stream_is_capturing(Impl& d, sys::Stream stream, int* status) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    if (const sys::Result r = d.use(s->context, false)) return r;
    *status = s->capture != 0 ? sys::kStreamCaptureStatusActive : sys::kStreamCaptureStatusNone;
    return sys::kSuccess;
}
sys::Result stream_begin_capture(Impl& d, sys::Stream stream, int) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    if (const sys::Result r = d.use(s->context, true)) return r;
    if (s->capture != 0 || s->implicit) return 401;  // CUDA_ERROR_ILLEGAL_STATE
    s->capture = d.new_id();
    s->capture_invalidated = false;
    d.graphs[s->capture].context = s->context;
    return sys::kSuccess;
}
sys::Result stream_end_capture(Impl& d, sys::Stream stream, sys::Graph* graph) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    if (s->capture == 0) return 401;
    const std::uint64_t id = std::exchange(s->capture, 0);
    // Streams that joined the capture (by waiting for an event recorded in it) leave it with the origin.
    for (auto& [other_id, other] : d.streams) {
        if (other.capture != id) continue;
        other.capture = 0;
        s->capture_invalidated = s->capture_invalidated || other.capture_invalidated;
        other.capture_invalidated = false;
    }
    if (s->capture_invalidated) {
        d.graphs.erase(id);
        *graph = nullptr;
        return kErrorStreamCaptureInvalidated;
    }
    *graph = as_handle<sys::Graph>(id);
    return sys::kSuccess;
}

sys::Result event_create(Impl& d, sys::Event* event, unsigned flags) {
    std::uint64_t context = 0;
    if (const sys::Result r = d.use_current(context)) return r;
    const std::uint64_t id = d.new_id();
    Impl::Event& e = d.events[id];
    e.context = context;
    e.flags = flags;
    *event = as_handle<sys::Event>(id);
    return sys::kSuccess;
}
sys::Result event_destroy(Impl& d, sys::Event event) {
    sys::Result error = sys::kSuccess;
    Impl::Event* e = d.find_live(d.events, id_of(event), "event", error);
    if (e == nullptr) return error;
    e->alive = false;  // a queued record still completes it for the waits already enqueued
    return sys::kSuccess;
}
sys::Result event_record(Impl& d, sys::Event event, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Event* e = d.find_live(d.events, id_of(event), "event", error);
    if (e == nullptr) return error;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    if (const sys::Result r = d.use(s->context, true)) return r;
    if (e->context != s->context) return kErrorInvalidHandle;  // the driver's own rule
    e->capture = s->capture;
    if (s->capture != 0) return sys::kSuccess;  // an edge of the graph
    Impl::Op op;
    op.kind = Impl::Op::Kind::record;
    op.event = id_of(event);
    op.generation = ++e->recorded;
    op.what = "record";
    d.enqueue(*s, std::move(op));
    return sys::kSuccess;
}
sys::Result event_query(Impl& d, sys::Event event) {
    sys::Result error = sys::kSuccess;
    Impl::Event* e = d.find_live(d.events, id_of(event), "event", error);
    if (e == nullptr) return error;
    if (const sys::Result r = d.use(e->context, false)) return r;
    if (e->capture != 0 && !d.capture_active(e->capture)) return sys::kErrorInvalidValue;
    return e->completed >= e->recorded ? sys::kSuccess : sys::kErrorNotReady;
}
sys::Result event_synchronize(Impl& d, sys::Event event) {
    sys::Result error = sys::kSuccess;
    Impl::Event* e = d.find_live(d.events, id_of(event), "event", error);
    if (e == nullptr) return error;
    if (const sys::Result r = d.use(e->context, false)) return r;
    if (e->capture != 0 && !d.capture_active(e->capture)) return sys::kErrorInvalidValue;
    d.finish_all();
    return d.devices[static_cast<std::size_t>(d.ordinal_of_context(e->context))].lost;
}
sys::Result event_elapsed_time(Impl& d, float* ms, sys::Event start, sys::Event end) {
    sys::Result error = sys::kSuccess;
    Impl::Event* a = d.find_live(d.events, id_of(start), "event", error);
    Impl::Event* b = a != nullptr ? d.find_live(d.events, id_of(end), "event", error) : nullptr;
    if (b == nullptr) return error;
    if (((a->flags | b->flags) & sys::kEventDisableTiming) != 0) return kErrorInvalidHandle;
    if (a->recorded == 0 || b->recorded == 0) return kErrorInvalidHandle;
    if (a->completed < a->recorded || b->completed < b->recorded) return sys::kErrorNotReady;
    *ms = static_cast<float>(b->time_ms - a->time_ms);
    return sys::kSuccess;
}

sys::Result allocate_current(Impl& d, DevicePtr* ptr, std::size_t bytes, Impl::MemoryKind kind) {
    std::uint64_t context = 0;
    if (const sys::Result r = d.use_current(context)) return r;
    if (bytes == 0) return sys::kErrorInvalidValue;
    std::uintptr_t address = 0;
    if (const sys::Result r = d.allocate(bytes, d.ordinal_of_context(context), kind, address)) return r;
    d.memory.at(address).context = context;
    *ptr = static_cast<DevicePtr>(address);
    return sys::kSuccess;
}
sys::Result mem_alloc(Impl& d, DevicePtr* ptr, std::size_t bytes) {
    return allocate_current(d, ptr, bytes, Impl::MemoryKind::device);
}
sys::Result mem_free(Impl& d, DevicePtr ptr) {
    const auto it = d.memory.find(static_cast<std::uintptr_t>(ptr));
    if (it == d.memory.end() ||
        (it->second.kind != Impl::MemoryKind::device && it->second.kind != Impl::MemoryKind::managed)) {
        d.violation(fmt::format("cuMemFree of {:#x}, which cuMemAlloc did not return (or freed twice)", ptr));
        return sys::kErrorInvalidValue;
    }
    const sys::Result lost = d.devices[static_cast<std::size_t>(it->second.ordinal)].lost;
    // Note: cuMemFree waits for the device to be done with the memory (an implicit synchronize).
    d.finish_all();
    d.release_memory(it);
    return lost;
}
sys::Result mem_alloc_async(Impl& d, DevicePtr* ptr, std::size_t bytes, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    if (const sys::Result r = d.use(s->context, true)) return r;
    const int ordinal = d.ordinal_of_context(s->context);
    Impl::Device& device = d.devices[static_cast<std::size_t>(ordinal)];
    if (!device.spec.memory_pools) return sys::kErrorNotSupported;
    if (bytes == 0) return sys::kErrorInvalidValue;
    if (bytes > SIZE_MAX - kPoolChunk) return sys::kErrorOutOfMemory;
    Impl::Pool& pool = d.pools.at(device.pool);
    const std::size_t size = round_up(bytes, kPoolChunk);
    std::uintptr_t address = 0;
    if (const auto cached = pool.cached.lower_bound(size); cached != pool.cached.end()) {
        address = cached->second;
        pool.cached.erase(cached);
        d.memory.at(address).live = true;
    } else {
        if (const sys::Result r = d.allocate(size, ordinal, Impl::MemoryKind::pool, address)) return r;
        pool.reserved += size;
        pool.reserved_high = std::max(pool.reserved_high, pool.reserved);
    }
    pool.used += d.memory.at(address).size;
    pool.used_high = std::max(pool.used_high, pool.used);
    *ptr = static_cast<DevicePtr>(address);
    return sys::kSuccess;
}
sys::Result mem_free_async(Impl& d, DevicePtr ptr, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    if (const sys::Result r = d.use(s->context, true)) return r;
    const auto it = d.memory.find(static_cast<std::uintptr_t>(ptr));
    if (it == d.memory.end() || it->second.kind != Impl::MemoryKind::pool || !it->second.live) {
        d.violation(fmt::format("cuMemFreeAsync of {:#x}, which is not a live pool allocation", ptr));
        return sys::kErrorInvalidValue;
    }
    it->second.live = false;  // no new work may use it from now
    const std::uintptr_t address = it->first;
    const std::uint64_t pool_id = d.devices[static_cast<std::size_t>(it->second.ordinal)].pool;
    Impl::Op op;
    op.what = "cuMemFreeAsync";
    op.run = [&d, address, pool_id] {
        Impl::Pool& pool = d.pools.at(pool_id);
        const std::size_t size = d.memory.at(address).size;
        pool.used -= size;
        pool.cached.emplace(size, address);
    };
    d.enqueue(*s, std::move(op));
    return sys::kSuccess;
}
sys::Result device_get_default_mem_pool(Impl& d, sys::MemoryPool* pool, sys::Device device) {
    if (!valid_device(d, device)) return kErrorInvalidDevice;
    const Impl::Device& dev = d.devices[static_cast<std::size_t>(device)];
    if (!dev.spec.memory_pools) return sys::kErrorNotSupported;
    *pool = as_handle<sys::MemoryPool>(dev.pool);
    return sys::kSuccess;
}
Impl::Pool* find_pool(Impl& d, sys::MemoryPool pool) {
    const auto it = d.pools.find(id_of(pool));
    return it != d.pools.end() ? &it->second : nullptr;
}
sys::Result mem_pool_set_attribute(Impl& d, sys::MemoryPool pool, int attribute, void* value) {
    Impl::Pool* p = find_pool(d, pool);
    if (p == nullptr) return kErrorInvalidHandle;
    const std::uint64_t v = *static_cast<const std::uint64_t*>(value);
    switch (attribute) {
        case sys::kMemPoolAttrReleaseThreshold:
            p->threshold = v;
            return sys::kSuccess;
        case sys::kMemPoolAttrReservedMemHigh:
            if (v != 0) return sys::kErrorInvalidValue;
            p->reserved_high = p->reserved;
            return sys::kSuccess;
        case sys::kMemPoolAttrUsedMemHigh:
            if (v != 0) return sys::kErrorInvalidValue;
            p->used_high = p->used;
            return sys::kSuccess;
        default:
            return sys::kErrorInvalidValue;
    }
}
sys::Result mem_pool_trim_to(Impl& d, sys::MemoryPool pool, std::size_t keep) {
    Impl::Pool* p = find_pool(d, pool);
    if (p == nullptr) return kErrorInvalidHandle;
    if (const sys::Result lost = d.devices[static_cast<std::size_t>(p->ordinal)].lost) return lost;
    d.trim(*p, keep);
    return sys::kSuccess;
}
sys::Result mem_pool_get_attribute(Impl& d, sys::MemoryPool pool, int attribute, void* value) {
    Impl::Pool* p = find_pool(d, pool);
    if (p == nullptr) return kErrorInvalidHandle;
    std::uint64_t v = 0;
    switch (attribute) {
        case sys::kMemPoolAttrReleaseThreshold:
            v = p->threshold;
            break;
        case sys::kMemPoolAttrReservedMemCurrent:
            v = p->reserved;
            break;
        case sys::kMemPoolAttrReservedMemHigh:
            v = p->reserved_high;
            break;
        case sys::kMemPoolAttrUsedMemCurrent:
            v = p->used;
            break;
        case sys::kMemPoolAttrUsedMemHigh:
            v = p->used_high;
            break;
        default:
            return sys::kErrorInvalidValue;
    }
    std::memcpy(value, &v, sizeof v);
    return sys::kSuccess;
}
sys::Result mem_alloc_managed(Impl& d, DevicePtr* ptr, std::size_t bytes, unsigned) {
    return allocate_current(d, ptr, bytes, Impl::MemoryKind::managed);
}
sys::Result mem_prefetch_async(Impl& d, DevicePtr ptr, std::size_t bytes, sys::Device, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    if (const sys::Result r = d.use(s->context, true)) return r;
    Impl::Allocation* a = d.find_memory(static_cast<std::uintptr_t>(ptr), bytes);
    if (a == nullptr || a->kind != Impl::MemoryKind::managed) return sys::kErrorInvalidValue;
    return sys::kSuccess;
}
sys::Result mem_host_alloc(Impl& d, void** ptr, std::size_t bytes, unsigned) {
    std::uint64_t context = 0;
    if (const sys::Result r = d.use_current(context)) return r;
    if (bytes == 0) return sys::kErrorInvalidValue;
    std::uintptr_t address = 0;
    if (const sys::Result r =
            d.allocate(bytes, d.ordinal_of_context(context), Impl::MemoryKind::host, address))
        return r;
    *ptr = reinterpret_cast<void*>(address);
    return sys::kSuccess;
}
sys::Result mem_free_host(Impl& d, void* ptr) {
    const auto it = d.memory.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == d.memory.end() || it->second.kind != Impl::MemoryKind::host) {
        d.violation(fmt::format("cuMemFreeHost of {}, which cuMemHostAlloc did not return", ptr));
        return sys::kErrorInvalidValue;
    }
    const std::uintptr_t start = it->first;
    const std::size_t size = it->second.size;
    for (const auto& [id, stream] : d.streams) {
        for (const Impl::Op& op : stream.queue) {
            for (const auto& [address, bytes] : op.host_ranges) {
                if (address < start + size && start < address + bytes) {
                    d.violation(
                        fmt::format("cuMemFreeHost of {:#x} while a queued {} still uses it (the copy was "
                                    "never waited for)",
                                    start, op.what));
                }
            }
        }
    }
    d.release_memory(it);
    return sys::kSuccess;
}

// A violation for each queued op that still uses host memory [start, start + size) (`call` frees it).
void check_no_queued_host_use(Impl& d, std::uintptr_t start, std::size_t size, const char* call) {
    for (const auto& [id, stream] : d.streams) {
        for (const Impl::Op& op : stream.queue) {
            for (const auto& [address, bytes] : op.host_ranges) {
                if (address < start + size && start < address + bytes) {
                    d.violation(
                        fmt::format("{} of {:#x} while a queued {} still uses it (the copy was never "
                                    "waited for)",
                                    call, start, op.what));
                }
            }
        }
    }
}
sys::Result mem_host_register(Impl& d, void* ptr, std::size_t bytes, unsigned) {
    std::uint64_t context = 0;
    if (const sys::Result r = d.use_current(context)) return r;
    if (ptr == nullptr || bytes == 0) return sys::kErrorInvalidValue;
    const auto start = reinterpret_cast<std::uintptr_t>(ptr);
    auto it = d.memory.upper_bound(start + bytes - 1);
    if (it != d.memory.begin()) {
        --it;
        if (it->first + it->second.size > start) return 712;  // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
    }
    d.memory[start] = Impl::Allocation{bytes, d.ordinal_of_context(context), Impl::MemoryKind::registered,
                                       true,  static_cast<std::byte*>(ptr),  context};
    return sys::kSuccess;
}
sys::Result mem_host_unregister(Impl& d, void* ptr) {
    const auto it = d.memory.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == d.memory.end() || it->second.kind != Impl::MemoryKind::registered)
        return 713;  // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
    check_no_queued_host_use(d, it->first, it->second.size, "cuMemHostUnregister");
    d.release_memory(it);
    return sys::kSuccess;
}
sys::Result mem_alloc_pitch(Impl& d, DevicePtr* ptr, std::size_t* pitch, std::size_t width_bytes,
                            std::size_t height, unsigned element_bytes) {
    if (width_bytes == 0 || height == 0 || (element_bytes != 4 && element_bytes != 8 && element_bytes != 16))
        return sys::kErrorInvalidValue;
    const std::size_t rounded = round_up(width_bytes, 512);  // the fake's pitch alignment
    if (height > SIZE_MAX / rounded) return sys::kErrorOutOfMemory;
    if (const sys::Result r = allocate_current(d, ptr, rounded * height, Impl::MemoryKind::device)) return r;
    *pitch = rounded;
    return sys::kSuccess;
}

// Checks the stream of a copy or memset; returns it or null with `error` set.
Impl::Stream* copy_stream(Impl& d, sys::Stream stream, sys::Result& error) {
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return nullptr;
    if (const sys::Result r = d.use(s->context, true)) {
        error = r;
        return nullptr;
    }
    return s;
}

sys::Result memcpy_htod_async(Impl& d, DevicePtr dst, const void* src, std::size_t bytes,
                              sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = copy_stream(d, stream, error);
    if (s == nullptr) return error;
    if (bytes == 0) return sys::kSuccess;
    const auto to = static_cast<std::uintptr_t>(dst);
    if (!d.device_range(to, bytes, "cuMemcpyHtoDAsync")) return sys::kErrorInvalidValue;
    Impl::Op op;
    op.what = "cuMemcpyHtoDAsync";
    const auto from = reinterpret_cast<std::uintptr_t>(src);
    if (d.is_page_locked(from, bytes)) {
        op.host_ranges.emplace_back(from, bytes);
        op.run = [&d, to, from, bytes] {
            if (d.span(to, bytes).empty() || d.span(from, bytes).empty()) {
                d.violation("cuMemcpyHtoDAsync ran on memory freed after it was enqueued");
                return;
            }
            std::memcpy(reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from), bytes);
        };
    } else {
        // Note: from pageable memory the driver stages the bytes before returning; the caller may reuse it.
        auto staged = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src),
                                                               static_cast<const std::byte*>(src) + bytes);
        op.run = [&d, to, staged] {
            if (d.span(to, staged->size()).empty()) {
                d.violation("cuMemcpyHtoDAsync ran on device memory freed after it was enqueued");
                return;
            }
            std::memcpy(reinterpret_cast<void*>(to), staged->data(), staged->size());
        };
    }
    d.enqueue(*s, std::move(op));
    return sys::kSuccess;
}
sys::Result memcpy_dtoh_async(Impl& d, void* dst, DevicePtr src, std::size_t bytes, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = copy_stream(d, stream, error);
    if (s == nullptr) return error;
    if (bytes == 0) return sys::kSuccess;
    const auto from = static_cast<std::uintptr_t>(src);
    if (!d.device_range(from, bytes, "cuMemcpyDtoHAsync")) return sys::kErrorInvalidValue;
    const auto to = reinterpret_cast<std::uintptr_t>(dst);
    const bool page_locked = d.is_page_locked(to, bytes);
    Impl::Op op;
    op.what = "cuMemcpyDtoHAsync";
    if (page_locked) op.host_ranges.emplace_back(to, bytes);
    op.run = [&d, to, from, bytes, page_locked] {
        if (d.span(from, bytes).empty() || (page_locked && d.span(to, bytes).empty())) {
            d.violation("cuMemcpyDtoHAsync ran on memory freed after it was enqueued");
            return;
        }
        std::memcpy(reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from), bytes);
    };
    d.enqueue(*s, std::move(op));
    // Note: into pageable memory the copy returns only once the data is there.
    if (!page_locked && s->capture == 0) d.finish_all();
    return sys::kSuccess;
}
sys::Result memcpy_dtod_async(Impl& d, DevicePtr dst, DevicePtr src, std::size_t bytes, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = copy_stream(d, stream, error);
    if (s == nullptr) return error;
    if (bytes == 0) return sys::kSuccess;
    const auto to = static_cast<std::uintptr_t>(dst);
    const auto from = static_cast<std::uintptr_t>(src);
    if (!d.device_range(to, bytes, "cuMemcpyDtoDAsync") || !d.device_range(from, bytes, "cuMemcpyDtoDAsync"))
        return sys::kErrorInvalidValue;
    Impl::Op op;
    op.what = "cuMemcpyDtoDAsync";
    op.run = [&d, to, from, bytes] {
        if (d.span(to, bytes).empty() || d.span(from, bytes).empty()) {
            d.violation("cuMemcpyDtoDAsync ran on memory freed after it was enqueued");
            return;
        }
        std::memmove(reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from), bytes);
    };
    d.enqueue(*s, std::move(op));
    return sys::kSuccess;
}
// Rows of `width` bytes, `pitch` apart: host (page-locked or pageable) or device memory, checked row by row.
sys::Result memcpy_2d_async(Impl& d, const sys::Memcpy2D* copy, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = copy_stream(d, stream, error);
    if (s == nullptr) return error;
    const sys::Memcpy2D c = *copy;
    if (c.src_array != nullptr || c.dst_array != nullptr) return sys::kErrorInvalidValue;
    if (c.width_in_bytes == 0 || c.height == 0) return sys::kSuccess;
    if (c.src_pitch < c.width_in_bytes + c.src_x_in_bytes ||
        c.dst_pitch < c.width_in_bytes + c.dst_x_in_bytes)
        return sys::kErrorInvalidValue;
    const auto is_host = [](int type) { return type == static_cast<int>(sys::kMemoryTypeHost); };
    const auto base = [&](int type, const void* host, DevicePtr device, std::size_t x, std::size_t y,
                          std::size_t pitch) {
        return (is_host(type) ? reinterpret_cast<std::uintptr_t>(host)
                              : static_cast<std::uintptr_t>(device)) +
               y * pitch + x;
    };
    const std::uintptr_t from =
        base(c.src_memory_type, c.src_host, c.src_device, c.src_x_in_bytes, c.src_y, c.src_pitch);
    const std::uintptr_t to =
        base(c.dst_memory_type, c.dst_host, c.dst_device, c.dst_x_in_bytes, c.dst_y, c.dst_pitch);
    const std::size_t src_span = (c.height - 1) * c.src_pitch + c.width_in_bytes;
    const std::size_t dst_span = (c.height - 1) * c.dst_pitch + c.width_in_bytes;
    if (!is_host(c.src_memory_type) && !d.device_range(from, src_span, "cuMemcpy2DAsync"))
        return sys::kErrorInvalidValue;
    if (!is_host(c.dst_memory_type) && !d.device_range(to, dst_span, "cuMemcpy2DAsync"))
        return sys::kErrorInvalidValue;
    Impl::Op op;
    op.what = "cuMemcpy2DAsync";
    const bool src_locked = is_host(c.src_memory_type) && d.is_page_locked(from, src_span);
    const bool dst_locked = is_host(c.dst_memory_type) && d.is_page_locked(to, dst_span);
    const bool dst_pageable = is_host(c.dst_memory_type) && !dst_locked;
    if (src_locked) op.host_ranges.emplace_back(from, src_span);
    if (dst_locked) op.host_ranges.emplace_back(to, dst_span);
    std::shared_ptr<std::vector<std::byte>> staged;
    if (is_host(c.src_memory_type) && !src_locked) {
        // Note: from pageable memory the driver stages the rows before returning.
        staged = std::make_shared<std::vector<std::byte>>(c.width_in_bytes * c.height);
        for (std::size_t row = 0; row < c.height; ++row)
            std::memcpy(staged->data() + row * c.width_in_bytes,
                        reinterpret_cast<const void*>(from + row * c.src_pitch), c.width_in_bytes);
    }
    const bool check_src = !is_host(c.src_memory_type) || src_locked;
    const bool check_dst = !dst_pageable;
    op.run = [&d, c, from, to, src_span, dst_span, staged, check_src, check_dst] {
        if ((check_src && !staged && d.span(from, src_span).empty()) ||
            (check_dst && d.span(to, dst_span).empty())) {
            d.violation("cuMemcpy2DAsync ran on memory freed after it was enqueued");
            return;
        }
        for (std::size_t row = 0; row < c.height; ++row) {
            const void* source = staged ? static_cast<const void*>(staged->data() + row * c.width_in_bytes)
                                        : reinterpret_cast<const void*>(from + row * c.src_pitch);
            std::memmove(reinterpret_cast<void*>(to + row * c.dst_pitch), source, c.width_in_bytes);
        }
    };
    d.enqueue(*s, std::move(op));
    if (dst_pageable && s->capture == 0) d.finish_all();  // into pageable memory the copy blocks
    return sys::kSuccess;
}
// Runs fn(data) when the stream's turn comes (on whichever thread pumps the queue, with the lock held: the
// callback must not call the driver, as on a real one).
sys::Result launch_host_func(Impl& d, sys::Stream stream, sys::HostFn fn, void* data) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = copy_stream(d, stream, error);
    if (s == nullptr) return error;
    if (fn == nullptr) return sys::kErrorInvalidValue;
    Impl::Op op;
    op.what = "cuLaunchHostFunc";
    op.run = [fn, data] { fn(data); };
    d.enqueue(*s, std::move(op));
    return sys::kSuccess;
}
sys::Result memcpy_peer_async(Impl& d, DevicePtr dst, sys::Context dst_context, DevicePtr src,
                              sys::Context src_context, std::size_t bytes, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = copy_stream(d, stream, error);
    if (s == nullptr) return error;
    for (const sys::Context context : {dst_context, src_context}) {
        const auto it = d.contexts.find(id_of(context));
        if (it == d.contexts.end() || !it->second.alive) return kErrorInvalidContext;
        if (const sys::Result lost = d.devices[static_cast<std::size_t>(it->second.ordinal)].lost)
            return lost;
    }
    if (bytes == 0) return sys::kSuccess;
    const auto to = static_cast<std::uintptr_t>(dst);
    const auto from = static_cast<std::uintptr_t>(src);
    if (!d.device_range(to, bytes, "cuMemcpyPeerAsync") || !d.device_range(from, bytes, "cuMemcpyPeerAsync"))
        return sys::kErrorInvalidValue;
    // Each address must be memory of the device whose context names it.
    const std::pair<std::uintptr_t, sys::Context> ends[] = {{to, dst_context}, {from, src_context}};
    for (const auto& [address, context] : ends) {
        if (d.find_memory(address, bytes)->ordinal != d.ordinal_of_context(id_of(context))) {
            d.violation(fmt::format("cuMemcpyPeerAsync: {:#x} is not memory of context {:#x}'s device",
                                    address, id_of(context)));
            return sys::kErrorInvalidValue;
        }
    }
    // Note: no peer access needed: without it the driver stages the copy through host memory.
    Impl::Op op;
    op.what = "cuMemcpyPeerAsync";
    op.run = [&d, to, from, bytes] {
        if (d.span(to, bytes).empty() || d.span(from, bytes).empty()) {
            d.violation("cuMemcpyPeerAsync ran on memory freed after it was enqueued");
            return;
        }
        std::memmove(reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from), bytes);
    };
    d.enqueue(*s, std::move(op));
    return sys::kSuccess;
}
template <typename Word>
sys::Result memset_async(Impl& d, DevicePtr dst, Word value, std::size_t count, sys::Stream stream,
                         const char* call) {
    sys::Result error = sys::kSuccess;
    Impl::Stream* s = copy_stream(d, stream, error);
    if (s == nullptr) return error;
    if (count == 0) return sys::kSuccess;
    if (count > SIZE_MAX / sizeof(Word)) return sys::kErrorInvalidValue;
    const auto to = static_cast<std::uintptr_t>(dst);
    if (to % sizeof(Word) != 0 || !d.device_range(to, count * sizeof(Word), call))
        return sys::kErrorInvalidValue;
    Impl::Op op;
    op.what = call;
    op.run = [&d, to, value, count, call] {
        if (d.span(to, count * sizeof(Word)).empty()) {
            d.violation(fmt::format("{} ran on device memory freed after it was enqueued", call));
            return;
        }
        Word* words = reinterpret_cast<Word*>(to);
        std::fill(words, words + count, value);
    };
    d.enqueue(*s, std::move(op));
    return sys::kSuccess;
}
sys::Result memset_d8_async(Impl& d, DevicePtr dst, unsigned char value, std::size_t count,
                            sys::Stream stream) {
    return memset_async<unsigned char>(d, dst, value, count, stream, "cuMemsetD8Async");
}
sys::Result memset_d32_async(Impl& d, DevicePtr dst, unsigned value, std::size_t count, sys::Stream stream) {
    return memset_async<std::uint32_t>(d, dst, value, count, stream, "cuMemsetD32Async");
}
sys::Result pointer_get_attributes(Impl& d, unsigned count, int* attributes, void** data, DevicePtr ptr) {
    // Note: like the real driver, memory no context knows (here: not a live allocation) is success with
    // zeroed values.
    const Impl::Allocation* a = d.find_memory(static_cast<std::uintptr_t>(ptr), 1);
    if (a != nullptr && !a->live) a = nullptr;
    if (a != nullptr) {
        if (const sys::Result lost = d.devices[static_cast<std::size_t>(a->ordinal)].lost) return lost;
    }
    for (unsigned i = 0; i < count; ++i) {
        switch (attributes[i]) {
            case sys::kPointerAttributeMemoryType: {
                unsigned type = 0;
                if (a != nullptr)
                    type = a->kind == Impl::MemoryKind::host || a->kind == Impl::MemoryKind::registered
                               ? sys::kMemoryTypeHost
                               : sys::kMemoryTypeDevice;
                std::memcpy(data[i], &type, sizeof type);
                break;
            }
            case sys::kPointerAttributeContext: {
                const auto context = as_handle<sys::Context>(a != nullptr ? a->context : 0);
                std::memcpy(data[i], &context, sizeof context);
                break;
            }
            case sys::kPointerAttributeIsManaged: {
                const int managed = a != nullptr && a->kind == Impl::MemoryKind::managed ? 1 : 0;
                std::memcpy(data[i], &managed, sizeof managed);
                break;
            }
            case sys::kPointerAttributeDeviceOrdinal: {
                const int ordinal = a != nullptr ? a->ordinal : -2;
                std::memcpy(data[i], &ordinal, sizeof ordinal);
                break;
            }
            case sys::kPointerAttributeRangeStart: {
                DevicePtr base = 0;
                if (a != nullptr)
                    base = static_cast<DevicePtr>(
                        std::prev(d.memory.upper_bound(static_cast<std::uintptr_t>(ptr)))->first);
                std::memcpy(data[i], &base, sizeof base);
                break;
            }
            case sys::kPointerAttributeRangeSize: {
                const std::size_t size = a != nullptr ? a->size : 0;
                std::memcpy(data[i], &size, sizeof size);
                break;
            }
            default:
                return sys::kErrorInvalidValue;
        }
    }
    return sys::kSuccess;
}
sys::Result mem_get_address_range(Impl& d, DevicePtr* base, std::size_t* size, DevicePtr ptr) {
    std::uint64_t context = 0;
    if (const sys::Result r = d.use_current(context)) return r;
    const Impl::Allocation* a = d.find_memory(static_cast<std::uintptr_t>(ptr), 1);
    if (a == nullptr || !a->live || a->kind == Impl::MemoryKind::host) return sys::kErrorNotFound;
    const auto it = d.memory.upper_bound(static_cast<std::uintptr_t>(ptr));
    *base = static_cast<DevicePtr>(std::prev(it)->first);
    *size = a->size;
    return sys::kSuccess;
}

// Virtual memory: an address range is mmap'ed without access; a mapping's pages become readable and
// writable once its access is set, and cuMemUnmap discards them.
bool valid_prop(const Impl& d, const sys::MemAllocationProp* prop) {
    return prop != nullptr && prop->type == sys::kMemAllocationTypePinned &&
           prop->location.type == sys::kMemLocationTypeDevice && valid_device(d, prop->location.id);
}
sys::Result vmm_support(const Impl& d, int ordinal) {
    const Impl::Device& device = d.devices[static_cast<std::size_t>(ordinal)];
    if (device.lost != sys::kSuccess) return device.lost;
    return device.spec.virtual_memory ? sys::kSuccess : sys::kErrorNotSupported;
}
sys::Result mem_address_reserve(Impl& d, DevicePtr* ptr, std::size_t bytes, std::size_t alignment, DevicePtr,
                                unsigned long long flags) {
    std::uint64_t context = 0;
    if (const sys::Result r = d.use_current(context)) return r;
    const int ordinal = d.ordinal_of_context(context);
    if (const sys::Result r = vmm_support(d, ordinal)) return r;
    alignment = std::max(alignment, kVmmGranularity);
    if (bytes == 0 || bytes % kVmmGranularity != 0 || flags != 0 || (alignment & (alignment - 1)) != 0)
        return sys::kErrorInvalidValue;
    void* region =
        ::mmap(nullptr, bytes + alignment, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED) return sys::kErrorOutOfMemory;
    const auto first = reinterpret_cast<std::uintptr_t>(region);
    const std::uintptr_t start = round_up(first, alignment);
    if (start > first) ::munmap(region, start - first);
    if (const std::uintptr_t tail = first + bytes + alignment - (start + bytes); tail > 0)
        ::munmap(reinterpret_cast<void*>(start + bytes), tail);
    d.memory[start] = Impl::Allocation{
        bytes, ordinal, Impl::MemoryKind::reserved, true, reinterpret_cast<std::byte*>(start), context};
    *ptr = static_cast<DevicePtr>(start);
    return sys::kSuccess;
}
sys::Result mem_address_free(Impl& d, DevicePtr ptr, std::size_t bytes) {
    const auto it = d.memory.find(static_cast<std::uintptr_t>(ptr));
    if (it == d.memory.end() || it->second.kind != Impl::MemoryKind::reserved || it->second.size != bytes) {
        d.violation(fmt::format("cuMemAddressFree of [{:#x}, +{}), which cuMemAddressReserve did not return",
                                ptr, bytes));
        return sys::kErrorInvalidValue;
    }
    const auto mapped = d.mappings.lower_bound(it->first);
    if (mapped != d.mappings.end() && mapped->first < it->first + bytes) {
        d.violation(fmt::format("cuMemAddressFree of [{:#x}, +{}) while {:#x} is still mapped", ptr, bytes,
                                mapped->first));
        return sys::kErrorInvalidValue;
    }
    d.release_memory(it);
    return sys::kSuccess;
}
sys::Result mem_create(Impl& d, sys::MemHandle* handle, std::size_t bytes, const sys::MemAllocationProp* prop,
                       unsigned long long flags) {
    if (!valid_prop(d, prop) || flags != 0 || bytes == 0 || bytes % kVmmGranularity != 0)
        return sys::kErrorInvalidValue;
    if (const sys::Result r = vmm_support(d, prop->location.id)) return r;
    Impl::Device& device = d.devices[static_cast<std::size_t>(prop->location.id)];
    if (bytes > device.spec.memory_bytes - device.used) return sys::kErrorOutOfMemory;
    device.used += bytes;
    const std::uint64_t id = d.new_id();
    d.physical[id] = Impl::PhysicalMemory{bytes, prop->location.id, 0, false};
    *handle = id;
    return sys::kSuccess;
}
sys::Result mem_release(Impl& d, sys::MemHandle handle) {
    const auto it = d.physical.find(handle);
    if (it == d.physical.end() || it->second.released) {
        d.violation(fmt::format("cuMemRelease of handle {:#x}, unknown or released already", handle));
        return sys::kErrorInvalidValue;
    }
    it->second.released = true;
    d.maybe_free_physical(it);
    return sys::kSuccess;
}
sys::Result mem_map(Impl& d, DevicePtr ptr, std::size_t bytes, std::size_t offset, sys::MemHandle handle,
                    unsigned long long flags) {
    const auto it = d.physical.find(handle);
    const auto address = static_cast<std::uintptr_t>(ptr);
    const Impl::Allocation* range = d.find_memory(address, bytes);
    // Note: only whole allocations are mapped here (offset 0), as the expandable source does.
    if (it == d.physical.end() || it->second.released || offset != 0 || flags != 0 ||
        bytes != it->second.size || range == nullptr || range->kind != Impl::MemoryKind::reserved ||
        address % kVmmGranularity != 0)
        return sys::kErrorInvalidValue;
    if (const sys::Result r = vmm_support(d, it->second.ordinal)) return r;
    const auto next = d.mappings.lower_bound(address);
    if ((next != d.mappings.end() && next->first < address + bytes) ||
        (next != d.mappings.begin() && std::prev(next)->first + std::prev(next)->second.size > address))
        return sys::kErrorInvalidValue;  // overlaps a mapping
    d.mappings[address] = Impl::Mapping{bytes, handle, 0};
    ++it->second.mappings;
    return sys::kSuccess;
}
sys::Result mem_unmap(Impl& d, DevicePtr ptr, std::size_t bytes) {
    const auto it = d.mappings.find(static_cast<std::uintptr_t>(ptr));
    if (it == d.mappings.end() || it->second.size != bytes) {
        d.violation(fmt::format("cuMemUnmap of [{:#x}, +{}), which is not one whole mapping", ptr, bytes));
        return sys::kErrorInvalidValue;
    }
    // Note: unlike cuMemFree, cuMemUnmap does not wait for the device: work still queued on these bytes
    // finds them gone when it runs (a violation).
    void* pages = reinterpret_cast<void*>(it->first);
    ::madvise(pages, bytes, MADV_DONTNEED);
    ::mprotect(pages, bytes, PROT_NONE);
    const auto memory = d.physical.find(it->second.handle);
    d.mappings.erase(it);
    if (memory != d.physical.end()) {
        --memory->second.mappings;
        d.maybe_free_physical(memory);
    }
    return sys::kSuccess;
}
sys::Result mem_set_access(Impl& d, DevicePtr ptr, std::size_t bytes, const sys::MemAccessDesc* desc,
                           std::size_t count) {
    const auto start = static_cast<std::uintptr_t>(ptr);
    std::uint32_t grant = 0;
    for (std::size_t i = 0; i < count; ++i) {
        if (desc[i].location.type != sys::kMemLocationTypeDevice || !valid_device(d, desc[i].location.id) ||
            desc[i].flags != sys::kMemAccessFlagsProtReadWrite)
            return sys::kErrorInvalidValue;
        grant |= 1u << desc[i].location.id;
    }
    // The range must be fully mapped: every byte by a mapping, without gaps.
    std::uintptr_t covered = start;
    for (auto it = d.mappings.find(start); it != d.mappings.end() && covered < start + bytes; ++it) {
        if (it->first != covered) break;
        covered += it->second.size;
    }
    if (bytes == 0 || count == 0 || covered < start + bytes) return sys::kErrorInvalidValue;
    for (auto it = d.mappings.find(start); it != d.mappings.end() && it->first < start + bytes; ++it)
        it->second.access |= grant;
    ::mprotect(reinterpret_cast<void*>(start), bytes, PROT_READ | PROT_WRITE);
    return sys::kSuccess;
}
sys::Result mem_get_allocation_granularity(Impl& d, std::size_t* granularity,
                                           const sys::MemAllocationProp* prop, int) {
    if (!valid_prop(d, prop)) return sys::kErrorInvalidValue;
    if (const sys::Result r = vmm_support(d, prop->location.id)) return r;
    *granularity = kVmmGranularity;
    return sys::kSuccess;
}

bool text_has_entry(const std::string& text, const std::string& name) {
    const std::string marker = ".entry " + name;
    for (std::size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + 1)) {
        const std::size_t end = at + marker.size();
        if (end == text.size()) return true;
        const char next = text[end];
        if (!(std::isalnum(static_cast<unsigned char>(next)) || next == '_' || next == '$')) return true;
    }
    return false;
}

// A CUBIN's kernels, as the PTX text the fake looks entries up in (".entry NAME" lines): the functions of
// its ELF symbol table. Note: cuModuleLoadData takes no size; the section headers (at the end of a CUBIN)
// bound what is read.
std::string cubin_entries(const char* image) {
    Elf64_Ehdr header;
    std::memcpy(&header, image, sizeof header);
    if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_shentsize != sizeof(Elf64_Shdr)) return {};
    const auto section = [&](std::size_t i) {
        Elf64_Shdr out;
        std::memcpy(&out, image + header.e_shoff + i * sizeof(Elf64_Shdr), sizeof out);
        return out;
    };
    std::string text;
    for (std::size_t i = 0; i < header.e_shnum; ++i) {
        const Elf64_Shdr symbols = section(i);
        if (symbols.sh_type != SHT_SYMTAB || symbols.sh_link >= header.e_shnum) continue;
        const Elf64_Shdr names = section(symbols.sh_link);
        for (std::size_t at = 0; at + sizeof(Elf64_Sym) <= symbols.sh_size; at += sizeof(Elf64_Sym)) {
            Elf64_Sym symbol;
            std::memcpy(&symbol, image + symbols.sh_offset + at, sizeof symbol);
            if (ELF64_ST_TYPE(symbol.st_info) != STT_FUNC || symbol.st_name >= names.sh_size) continue;
            text += ".entry ";
            text += image + names.sh_offset + symbol.st_name;
            text += "\n";
        }
    }
    return text;
}

sys::Result module_load_data(Impl& d, sys::Module* module, const void* image) {
    std::uint64_t context = 0;
    if (const sys::Result r = d.use_current(context)) return r;
    if (image == nullptr) return sys::kErrorInvalidValue;
    const auto* text = static_cast<const char*>(image);
    const std::uint64_t id = d.new_id();
    Impl::Module& m = d.modules[id];
    m.context = context;
    m.binary = std::memcmp(text,
                           "\x7f"
                           "ELF",
                           4) == 0;
    m.text = m.binary ? cubin_entries(text) : text;
    *module = as_handle<sys::Module>(id);
    return sys::kSuccess;
}
sys::Result module_unload(Impl& d, sys::Module module) {
    sys::Result error = sys::kSuccess;
    Impl::Module* m = d.find_live(d.modules, id_of(module), "module", error);
    if (m == nullptr) return error;
    if (const sys::Result r = d.use(m->context, false)) return r;
    m->alive = false;
    return sys::kSuccess;
}
sys::Result module_get_function(Impl& d, sys::Function* function, sys::Module module, const char* name) {
    sys::Result error = sys::kSuccess;
    Impl::Module* m = d.find_live(d.modules, id_of(module), "module", error);
    if (m == nullptr) return error;
    if (const sys::Result r = d.use(m->context, true)) return r;
    const std::string wanted(name);
    if (d.kernels.find(wanted) == d.kernels.end() && !text_has_entry(m->text, wanted))
        return sys::kErrorNotFound;
    std::uint64_t& id = m->functions[wanted];
    if (id == 0) {
        id = d.new_id();
        d.functions[id] = Impl::Function{id_of(module), m->context, wanted, 49152};
    }
    *function = as_handle<sys::Function>(id);
    return sys::kSuccess;
}
sys::Result module_get_global(Impl& d, DevicePtr*, std::size_t*, sys::Module module, const char*) {
    sys::Result error = sys::kSuccess;
    if (d.find_live(d.modules, id_of(module), "module", error) == nullptr) return error;
    return sys::kErrorNotFound;
}
sys::Result func_get_attribute(Impl& d, int* value, int attribute, sys::Function function) {
    sys::Result error = sys::kSuccess;
    Impl::Function* f = d.find_function(function, error);
    if (f == nullptr) return error;
    if (const sys::Result r = d.use(f->context, true)) return r;
    namespace fa = sys::func_attr;
    switch (attribute) {
        case fa::kMaxThreadsPerBlock:
            *value = 1024;
            break;
        case fa::kNumRegs:
            *value = 32;
            break;
        case fa::kPtxVersion:
        case fa::kBinaryVersion:
            *value = 90;
            break;
        case fa::kMaxDynamicSharedSizeBytes:
            *value = f->max_dynamic_shared;
            break;
        default:
            *value = 0;
            break;
    }
    return sys::kSuccess;
}
sys::Result func_set_attribute(Impl& d, sys::Function function, int attribute, int value) {
    sys::Result error = sys::kSuccess;
    Impl::Function* f = d.find_function(function, error);
    if (f == nullptr) return error;
    if (const sys::Result r = d.use(f->context, true)) return r;
    if (attribute != sys::func_attr::kMaxDynamicSharedSizeBytes) return sys::kErrorInvalidValue;
    bool known = false;
    const int ordinal = d.ordinal_of_context(f->context);
    const int limit = default_attribute(d.devices[static_cast<std::size_t>(ordinal)].spec, ordinal,
                                        sys::attr::kMaxSharedMemoryPerBlockOptin, known);
    if (value < 0 || value > limit) return sys::kErrorInvalidValue;
    f->max_dynamic_shared = value;
    return sys::kSuccess;
}
sys::Result func_get_param_info(Impl& d, sys::Function function, std::size_t index, std::size_t* offset,
                                std::size_t* size) {
    sys::Result error = sys::kSuccess;
    Impl::Function* f = d.find_function(function, error);
    if (f == nullptr) return error;
    if (const sys::Result r = d.use(f->context, true)) return r;
    const auto definition = d.kernels.find(f->name);
    if (definition == d.kernels.end()) return sys::kErrorNotSupported;
    const auto& sizes = definition->second.parameter_sizes;
    if (index >= sizes.size()) return sys::kErrorInvalidValue;
    std::size_t at = 0;
    for (std::size_t i = 0; i <= index; ++i) {
        at = round_up(at, std::min<std::size_t>(sizes[i], 8));
        if (i < index) at += sizes[i];
    }
    *offset = at;
    *size = sizes[index];
    return sys::kSuccess;
}
sys::Result launch_kernel(Impl& d, sys::Function function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shared, sys::Stream stream, void** params,
                          void** extra) {
    if (extra != nullptr) return sys::kErrorNotSupported;
    const unsigned grid[3] = {gx, gy, gz};
    const unsigned block[3] = {bx, by, bz};
    return d.launch(function, grid, block, shared, stream, params);
}
sys::Result launch_kernel_ex(Impl& d, const sys::LaunchConfig* config, sys::Function function, void** params,
                             void** extra) {
    if (extra != nullptr || config == nullptr) return sys::kErrorInvalidValue;
    const unsigned grid[3] = {config->grid_x, config->grid_y, config->grid_z};
    const unsigned block[3] = {config->block_x, config->block_y, config->block_z};
    // Note: programmatic serialization only lets the next kernel start early, so running each launch whole
    // and in order, as the fake does, honours it.
    for (unsigned i = 0; i < config->num_attrs; ++i) {
        const sys::LaunchAttribute& a = config->attrs[i];
        if (a.id == sys::kLaunchAttributeClusterDimension) {
            const auto& c = a.value.cluster_dim;
            if (c.x == 0 || c.y == 0 || c.z == 0 || grid[0] % c.x != 0 || grid[1] % c.y != 0 ||
                grid[2] % c.z != 0)
                return sys::kErrorInvalidValue;
        } else if (a.id != sys::kLaunchAttributeCooperative &&
                   a.id != sys::kLaunchAttributeProgrammaticStreamSerialization) {
            return sys::kErrorNotSupported;
        }
    }
    return d.launch(function, grid, block, config->shared_mem_bytes, config->stream, params);
}
sys::Result launch_cooperative_kernel(Impl& d, sys::Function function, unsigned gx, unsigned gy, unsigned gz,
                                      unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                      sys::Stream stream, void** params) {
    const unsigned grid[3] = {gx, gy, gz};
    const unsigned block[3] = {bx, by, bz};
    return d.launch(function, grid, block, shared, stream, params);
}
sys::Result occupancy_max_active_blocks_per_multiprocessor(Impl& d, int* blocks, sys::Function function,
                                                           int block_size, std::size_t) {
    sys::Result error = sys::kSuccess;
    Impl::Function* f = d.find_function(function, error);
    if (f == nullptr) return error;
    if (const sys::Result r = d.use(f->context, true)) return r;
    if (block_size <= 0 || block_size > 1024) return sys::kErrorInvalidValue;
    *blocks = std::min(32, 2048 / block_size);
    return sys::kSuccess;
}

sys::Result graph_instantiate(Impl& d, sys::GraphExec* exec, sys::Graph graph, unsigned long long) {
    sys::Result error = sys::kSuccess;
    Impl::Graph* g = d.find_live(d.graphs, id_of(graph), "graph", error);
    if (g == nullptr) return error;
    if (const sys::Result r = d.use(g->context, true)) return r;
    const std::uint64_t id = d.new_id();
    Impl::Graph copy = *g;
    copy.executable = true;
    d.graphs[id] = std::move(copy);
    *exec = as_handle<sys::GraphExec>(id);
    return sys::kSuccess;
}
sys::Result graph_launch(Impl& d, sys::GraphExec exec, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Graph* g = d.find_live(d.graphs, id_of(exec), "graph", error);
    if (g == nullptr) return error;
    if (!g->executable) return kErrorInvalidHandle;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    if (const sys::Result r = d.use(s->context, true)) return r;
    const std::vector<Impl::Op> ops = g->ops;
    for (const Impl::Op& op : ops) d.enqueue(*s, op);
    return sys::kSuccess;
}
sys::Result destroy_graph(Impl& d, std::uint64_t id, bool executable) {
    sys::Result error = sys::kSuccess;
    Impl::Graph* g = d.find_live(d.graphs, id, "graph", error);
    if (g == nullptr) return error;
    if (g->executable != executable) return kErrorInvalidHandle;
    g->alive = false;
    g->ops.clear();
    return sys::kSuccess;
}
sys::Result graph_destroy(Impl& d, sys::Graph graph) {
    return destroy_graph(d, id_of(graph), false);
}
sys::Result graph_exec_destroy(Impl& d, sys::GraphExec exec) {
    return destroy_graph(d, id_of(exec), true);
}
// In place when the new graph has as many operations, each of the same kind (a stand-in for the driver's
// topology and node-type rules); otherwise CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, the executable unchanged.
sys::Result graph_exec_update(Impl& d, sys::GraphExec exec, sys::Graph graph,
                              sys::GraphExecUpdateResultInfo* info) {
    sys::Result error = sys::kSuccess;
    Impl::Graph* x = d.find_live(d.graphs, id_of(exec), "graph", error);
    Impl::Graph* g = x != nullptr ? d.find_live(d.graphs, id_of(graph), "graph", error) : nullptr;
    if (g == nullptr) return error;
    if (!x->executable || g->executable || info == nullptr) return kErrorInvalidHandle;
    if (const sys::Result r = d.use(x->context, true)) return r;
    bool same_shape = x->ops.size() == g->ops.size();
    for (std::size_t i = 0; same_shape && i < x->ops.size(); ++i)
        same_shape = x->ops[i].kind == g->ops[i].kind;
    if (!same_shape) {
        info->result = sys::kGraphExecUpdateTopologyChanged;
        return kErrorGraphExecUpdateFailure;
    }
    x->ops = g->ops;
    info->result = sys::kGraphExecUpdateSuccess;
    return sys::kSuccess;
}
sys::Result graph_upload(Impl& d, sys::GraphExec exec, sys::Stream stream) {
    sys::Result error = sys::kSuccess;
    Impl::Graph* g = d.find_live(d.graphs, id_of(exec), "graph", error);
    if (g == nullptr) return error;
    if (!g->executable) return kErrorInvalidHandle;
    Impl::Stream* s = d.find_stream(stream, error);
    if (s == nullptr) return error;
    return d.use(s->context, true);  // nothing to upload: the fake's graphs live on the host
}

}  // namespace bodies

// Note [Generated fake entries]
// The fake's table is generated from the driver list (Note [One driver list]): for each entry X, the
// table's function finds the installed fake, takes its lock and calls bodies::X(Impl&, the entry's own
// arguments). So a body holds only what the entry does, and a new entry in the list needs only its body:
// without one, or with a signature that differs from the list's, the fake does not compile. Bodies run
// with the lock held and must not call the table (a kernel body neither: see KernelCall).
template <auto Member, auto Body>
struct Generated;

template <typename... Args, sys::Result (*sys::DriverApi::*Member)(Args...),
          sys::Result (*Body)(Impl&, Args...)>
struct Generated<Member, Body> {
    static sys::Result call(Args... args) {
        Impl& d = impl();
        Lock lock(d.mutex);
        return Body(d, args...);
    }
};

}  // namespace

FakeDriver::FakeDriver(Options options) : impl_(std::make_unique<Impl>(std::move(options))) {
    FakeDriver* expected = nullptr;
    if (!g_driver.compare_exchange_strong(expected, this)) {
        std::fputs("cudarc::fake::FakeDriver: only one may exist at a time\n", stderr);
        std::abort();
    }
    Impl& d = *impl_;
    d.epoch = g_epoch.fetch_add(1) + 1;
    for (std::size_t i = 0; i < d.options.devices.size(); ++i) {
        Impl::Device device;
        device.spec = d.options.devices[i];
        device.primary = d.new_id();
        d.contexts[device.primary] = Impl::Context{static_cast<int>(i), true, true, 0};
        device.pool = d.new_id();
        d.pools[device.pool].ordinal = static_cast<int>(i);
        d.devices.push_back(std::move(device));
    }

    api_.backend = Backend::cuda;
#define CUDARC_FAKE_FILL(member, name, ...) \
    api_.member = &Generated<&sys::DriverApi::member, &bodies::member>::call;
    CUDARC_DRIVER_ENTRIES(CUDARC_FAKE_FILL)
#undef CUDARC_FAKE_FILL
}

FakeDriver::~FakeDriver() {
    for (std::size_t i = 0; i < impl_->devices.size(); ++i) {
        if (impl_->devices[i].retains != 0) {
            std::fprintf(
                stderr,
                "cudarc::fake::FakeDriver destroyed while device %zu's primary context is still retained "
                "(a Device, Stream, buffer or module outlived the fake driver)\n",
                i);
            std::abort();
        }
    }
    for (auto& [address, allocation] : impl_->memory) Impl::free_storage(allocation);
    g_driver.store(nullptr, std::memory_order_release);
}

sys::Context FakeDriver::create_context(int ordinal) {
    Lock lock(impl_->mutex);
    const std::uint64_t id = impl_->new_id();
    impl_->contexts[id] = Impl::Context{ordinal, false, true, 0};
    return as_handle<sys::Context>(id);
}

void FakeDriver::destroy_context(sys::Context context) {
    Lock lock(impl_->mutex);
    const auto it = impl_->contexts.find(id_of(context));
    if (it != impl_->contexts.end() && !it->second.primary) it->second.alive = false;
}

sys::Context FakeDriver::primary_context(int ordinal) const {
    Lock lock(impl_->mutex);
    return as_handle<sys::Context>(impl_->devices.at(static_cast<std::size_t>(ordinal)).primary);
}

sys::Context FakeDriver::current_context() const {
    Lock lock(impl_->mutex);
    return as_handle<sys::Context>(impl_->current());
}

void FakeDriver::hold(sys::Stream stream) {
    Lock lock(impl_->mutex);
    impl_->streams.at(id_of(stream)).held = true;
}

void FakeDriver::release(sys::Stream stream) {
    Lock lock(impl_->mutex);
    impl_->streams.at(id_of(stream)).held = false;
    impl_->pump();
}

void FakeDriver::finish_all() {
    Lock lock(impl_->mutex);
    impl_->finish_all();
}

std::size_t FakeDriver::queued_operations() const {
    Lock lock(impl_->mutex);
    std::size_t n = 0;
    for (const auto& [id, stream] : impl_->streams) n += stream.queue.size();
    return n;
}

void FakeDriver::define_kernel(const std::string& name, std::vector<std::size_t> parameter_sizes,
                               KernelBody body) {
    Lock lock(impl_->mutex);
    impl_->kernels[name] = Impl::KernelDefinition{std::move(parameter_sizes), std::move(body)};
}

std::vector<LaunchRecord> FakeDriver::launches() const {
    Lock lock(impl_->mutex);
    return impl_->launches;
}

void FakeDriver::clear_launches() {
    Lock lock(impl_->mutex);
    impl_->launches.clear();
}

void FakeDriver::lose_device(int ordinal, sys::Result result) {
    Lock lock(impl_->mutex);
    impl_->devices.at(static_cast<std::size_t>(ordinal)).lost = result;
}

LiveCounts FakeDriver::live() const {
    Lock lock(impl_->mutex);
    LiveCounts c;
    for (const auto& [address, a] : impl_->memory) {
        switch (a.kind) {
            case Impl::MemoryKind::device:
            case Impl::MemoryKind::managed:
                ++c.device_allocations;
                c.device_bytes += a.size;
                break;
            case Impl::MemoryKind::pool:
                if (a.live) ++c.pool_chunks;
                break;
            case Impl::MemoryKind::host:
            case Impl::MemoryKind::registered:
                ++c.host_allocations;
                break;
            case Impl::MemoryKind::reserved:
                ++c.address_ranges;
                break;
        }
    }
    c.physical_allocations = impl_->physical.size();
    for (const auto& [id, s] : impl_->streams) c.streams += s.alive && !s.implicit ? 1 : 0;
    for (const auto& [id, e] : impl_->events) c.events += e.alive ? 1 : 0;
    for (const auto& [id, m] : impl_->modules) c.modules += m.alive ? 1 : 0;
    for (const auto& [id, g] : impl_->graphs) c.graphs += g.alive ? 1 : 0;
    for (const auto& device : impl_->devices)
        c.retained_primary_contexts += static_cast<std::size_t>(device.retains);
    return c;
}

std::vector<std::string> FakeDriver::violations() const {
    Lock lock(impl_->mutex);
    return impl_->violations;
}

std::uint64_t FakeDriver::host_waits() const {
    Lock lock(impl_->mutex);
    return impl_->host_waits;
}

std::span<std::byte> FakeDriver::bytes(DevicePtr ptr, std::size_t size) const {
    Lock lock(impl_->mutex);
    return impl_->span(static_cast<std::uintptr_t>(ptr), size);
}

std::uint32_t FakeDriver::access_mask(DevicePtr ptr) const {
    Lock lock(impl_->mutex);
    const auto address = static_cast<std::uintptr_t>(ptr);
    auto it = impl_->mappings.upper_bound(address);
    if (it == impl_->mappings.begin()) return 0;
    --it;
    return address - it->first < it->second.size ? it->second.access : 0;
}

std::size_t FakeDriver::physical_bytes(int ordinal) const {
    Lock lock(impl_->mutex);
    std::size_t bytes = 0;
    for (const auto& [id, memory] : impl_->physical) bytes += memory.ordinal == ordinal ? memory.size : 0;
    return bytes;
}

std::size_t FakeDriver::pool_reserved_bytes(int ordinal) const {
    Lock lock(impl_->mutex);
    return impl_->pools.at(impl_->devices.at(static_cast<std::size_t>(ordinal)).pool).reserved;
}

std::size_t FakeDriver::pool_used_bytes(int ordinal) const {
    Lock lock(impl_->mutex);
    return impl_->pools.at(impl_->devices.at(static_cast<std::size_t>(ordinal)).pool).used;
}

}  // namespace cudarc::fake

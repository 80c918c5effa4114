#include "fake_driver/fake_nccl.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sys/nccl/nccl_override.hpp"

namespace cudarc::fake {

struct FakeNccl::Impl {
    struct Communicator {
        int ordinal = -1;
        sys::Context context = nullptr;
        DevicePtr scratch = 0;  // NCCL's own device memory, from init to destroy
    };
    struct Plan {
        std::string function;
        std::uint64_t call = 0;  // absolute call number
        sys::NcclResult result = sys::kNcclSuccess;
    };

    explicit Impl(const sys::DriverApi& driver) : cuda(driver) {}

    const sys::DriverApi& cuda;
    mutable std::mutex mutex;
    std::map<std::uintptr_t, Communicator> communicators;
    std::uintptr_t next_handle = 0x5000;
    std::map<std::string, std::uint64_t> calls;
    std::vector<Plan> plans;
    std::string last_error;
    std::uint64_t next_id = 1;
    int group_depth = 0;

    // Counts the call; a planned failure's result, or success to go on.
    sys::NcclResult enter(const char* function) {
        const std::uint64_t call = ++calls[function];
        for (const Plan& plan : plans) {
            if (plan.function == function && plan.call == call) {
                last_error = fmt::format("fake: {} call {} failed as planned", function, call);
                return plan.result;
            }
        }
        return sys::kNcclSuccess;
    }
    // A CUDA call of the fake's own that failed: what NCCL reports for it.
    sys::NcclResult cuda_failure(const char* call, sys::Result result) {
        last_error = fmt::format("fake: Cuda failure {} in {}", result, call);
        return sys::kNcclUnhandledCudaError;
    }
    Communicator* find(sys::NcclComm comm) {
        const auto it = communicators.find(reinterpret_cast<std::uintptr_t>(comm));
        return it != communicators.end() ? &it->second : nullptr;
    }
    // A communicator on the current context's device; its memory comes from that context.
    sys::NcclResult make(sys::NcclComm* out) {
        Communicator c;
        if (const sys::Result r = cuda.ctx_get_current(&c.context)) return cuda_failure("cuCtxGetCurrent", r);
        if (c.context == nullptr) return cuda_failure("cuCtxGetCurrent", 201);
        if (const sys::Result r = cuda.mem_alloc(&c.scratch, 4096)) return cuda_failure("cuMemAlloc", r);
        int attribute = sys::kPointerAttributeDeviceOrdinal;
        void* data = &c.ordinal;
        if (const sys::Result r = cuda.pointer_get_attributes(1, &attribute, &data, c.scratch)) {
            static_cast<void>(cuda.mem_free(c.scratch));
            return cuda_failure("cuPointerGetAttributes", r);
        }
        const std::uintptr_t handle = next_handle;
        next_handle += 0x10;
        communicators[handle] = c;
        *out = reinterpret_cast<sys::NcclComm>(handle);
        return sys::kNcclSuccess;
    }
    // Destroy and abort: the communicator's memory goes back, in its own context.
    sys::NcclResult remove(sys::NcclComm comm) {
        Communicator* c = find(comm);
        if (c == nullptr) return sys::kNcclInvalidArgument;
        sys::Context previous = nullptr;
        static_cast<void>(cuda.ctx_get_current(&previous));
        static_cast<void>(cuda.ctx_set_current(c->context));
        const sys::Result freed = cuda.mem_free(c->scratch);
        static_cast<void>(cuda.ctx_set_current(previous));
        communicators.erase(reinterpret_cast<std::uintptr_t>(comm));
        // Note: a lost device's memory cannot be freed; the communicator is gone all the same.
        return freed == sys::kSuccess || sys::is_sticky_error(freed) ? sys::kNcclSuccess
                                                                     : cuda_failure("cuMemFree", freed);
    }
    // A collective of one rank: the receive buffer gets the send buffer's bytes, on `stream`.
    sys::NcclResult copy(const char* function, const void* send, void* recv, std::size_t count, int type,
                         sys::NcclComm comm, sys::Stream stream) {
        if (const sys::NcclResult r = enter(function)) return r;
        Communicator* c = find(comm);
        if (c == nullptr) return sys::kNcclInvalidArgument;
        std::size_t size = 0;
        switch (type) {
            case sys::nccl_type::kInt8:
            case sys::nccl_type::kUint8:
                size = 1;
                break;
            case sys::nccl_type::kFloat16:
            case sys::nccl_type::kBfloat16:
                size = 2;
                break;
            case sys::nccl_type::kInt32:
            case sys::nccl_type::kUint32:
            case sys::nccl_type::kFloat32:
                size = 4;
                break;
            case sys::nccl_type::kInt64:
            case sys::nccl_type::kUint64:
            case sys::nccl_type::kFloat64:
                size = 8;
                break;
            default:
                return sys::kNcclInvalidArgument;
        }
        sys::Context context = nullptr;
        if (const sys::Result r = cuda.stream_get_ctx(stream, &context))
            return cuda_failure("cuStreamGetCtx", r);
        if (context != c->context) {
            last_error = "fake: the stream is not on the communicator's device";
            return sys::kNcclInvalidArgument;
        }
        // Note: in place there is nothing to copy, but NCCL still launches on the stream: a zero-byte copy
        // meets the stream's and the device's errors as that launch would.
        const std::size_t bytes = send == recv ? 0 : count * size;
        const auto to = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(recv));
        const auto from = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(send));
        if (const sys::Result r = cuda.memcpy_dtod_async(to, from, bytes, stream))
            return cuda_failure("cuMemcpyDtoDAsync", r);
        return sys::kNcclSuccess;
    }
};

namespace {

std::atomic<FakeNccl*> g_nccl{nullptr};

FakeNccl::Impl& state() {
    return g_nccl.load(std::memory_order_acquire)->impl();
}

using Lock = std::lock_guard<std::mutex>;

constexpr int kVersion = 22807;  // 2.28.7

// ---- The table's functions ----

sys::NcclResult get_version(int* version) {
    *version = kVersion;
    return sys::kNcclSuccess;
}
const char* get_error_string(sys::NcclResult result) {
    switch (result) {
        case sys::kNcclSuccess:
            return "no error";
        case sys::kNcclUnhandledCudaError:
            return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
        case sys::kNcclInvalidArgument:
            return "invalid argument (run with NCCL_DEBUG=WARN for details)";
        case sys::kNcclInvalidUsage:
            return "invalid usage (run with NCCL_DEBUG=WARN for details)";
        default:
            return "fake: some NCCL error";
    }
}
const char* get_last_error(sys::NcclComm) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    // Note: NCCL's text lives until the next failing call; the fake's until it is replaced.
    return n.last_error.c_str();
}
sys::NcclResult get_unique_id(sys::NcclUniqueId* id) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (const sys::NcclResult r = n.enter("ncclGetUniqueId")) return r;
    std::memset(id->internal, 0, sizeof id->internal);
    const std::uint64_t value = n.next_id++;
    std::memcpy(id->internal, &value, sizeof value);
    return sys::kNcclSuccess;
}
sys::NcclResult comm_init_rank(sys::NcclComm* comm, int nranks, sys::NcclUniqueId, int rank) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (const sys::NcclResult r = n.enter("ncclCommInitRank")) return r;
    if (nranks != 1 || rank != 0) {
        n.last_error = "fake: only communicators of one rank are modelled";
        return sys::kNcclInvalidUsage;
    }
    return n.make(comm);
}
sys::NcclResult comm_init_all(sys::NcclComm* comms, int ndev, const int* devlist) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (const sys::NcclResult r = n.enter("ncclCommInitAll")) return r;
    if (ndev != 1) {
        n.last_error = "fake: only communicators of one rank are modelled";
        return sys::kNcclInvalidUsage;
    }
    // Note [NCCL and the current context]: NCCL sets each device itself (cudaSetDevice) and puts the
    // caller's context back.
    sys::Context previous = nullptr;
    sys::Context context = nullptr;
    if (const sys::Result r = n.cuda.ctx_get_current(&previous)) return n.cuda_failure("cuCtxGetCurrent", r);
    if (const sys::Result r = n.cuda.device_primary_ctx_retain(&context, devlist[0]))
        return n.cuda_failure("cuDevicePrimaryCtxRetain", r);
    sys::NcclResult result = sys::kNcclSuccess;
    if (const sys::Result r = n.cuda.ctx_set_current(context)) {
        result = n.cuda_failure("cuCtxSetCurrent", r);
    } else {
        result = n.make(&comms[0]);
    }
    static_cast<void>(n.cuda.ctx_set_current(previous));
    static_cast<void>(n.cuda.device_primary_ctx_release(devlist[0]));
    return result;
}
sys::NcclResult comm_finalize(sys::NcclComm comm) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (const sys::NcclResult r = n.enter("ncclCommFinalize")) return r;
    return n.find(comm) != nullptr ? sys::kNcclSuccess : sys::kNcclInvalidArgument;
}
sys::NcclResult comm_destroy(sys::NcclComm comm) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (const sys::NcclResult r = n.enter("ncclCommDestroy")) {
        // Note: a failed destroy still frees the communicator, as NCCL does.
        static_cast<void>(n.remove(comm));
        return r;
    }
    return n.remove(comm);
}
sys::NcclResult comm_abort(sys::NcclComm comm) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (const sys::NcclResult r = n.enter("ncclCommAbort")) {
        static_cast<void>(n.remove(comm));
        return r;
    }
    return n.remove(comm);
}
sys::NcclResult comm_get_async_error(sys::NcclComm comm, sys::NcclResult* async_error) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (const sys::NcclResult r = n.enter("ncclCommGetAsyncError")) return r;
    if (n.find(comm) == nullptr) return sys::kNcclInvalidArgument;
    *async_error = sys::kNcclSuccess;
    return sys::kNcclSuccess;
}
sys::NcclResult comm_count(sys::NcclComm comm, int* count) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (n.find(comm) == nullptr) return sys::kNcclInvalidArgument;
    *count = 1;
    return sys::kNcclSuccess;
}
sys::NcclResult comm_cu_device(sys::NcclComm comm, int* device) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (const sys::NcclResult r = n.enter("ncclCommCuDevice")) return r;
    const FakeNccl::Impl::Communicator* c = n.find(comm);
    if (c == nullptr) return sys::kNcclInvalidArgument;
    *device = c->ordinal;
    return sys::kNcclSuccess;
}
sys::NcclResult comm_user_rank(sys::NcclComm comm, int* rank) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (n.find(comm) == nullptr) return sys::kNcclInvalidArgument;
    *rank = 0;
    return sys::kNcclSuccess;
}
sys::NcclResult all_reduce(const void* send, void* recv, std::size_t count, int type, int, sys::NcclComm comm,
                           sys::Stream stream) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    return n.copy("ncclAllReduce", send, recv, count, type, comm, stream);
}
sys::NcclResult broadcast(const void* send, void* recv, std::size_t count, int type, int root,
                          sys::NcclComm comm, sys::Stream stream) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (root != 0) return sys::kNcclInvalidArgument;
    return n.copy("ncclBroadcast", send, recv, count, type, comm, stream);
}
sys::NcclResult reduce(const void* send, void* recv, std::size_t count, int type, int, int root,
                       sys::NcclComm comm, sys::Stream stream) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (root != 0) return sys::kNcclInvalidArgument;
    return n.copy("ncclReduce", send, recv, count, type, comm, stream);
}
sys::NcclResult all_gather(const void* send, void* recv, std::size_t send_count, int type, sys::NcclComm comm,
                           sys::Stream stream) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    return n.copy("ncclAllGather", send, recv, send_count, type, comm, stream);
}
sys::NcclResult reduce_scatter(const void* send, void* recv, std::size_t recv_count, int type, int,
                               sys::NcclComm comm, sys::Stream stream) {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    return n.copy("ncclReduceScatter", send, recv, recv_count, type, comm, stream);
}
sys::NcclResult send(const void*, std::size_t, int, int, sys::NcclComm, sys::Stream) {
    return sys::kNcclInvalidUsage;  // point to point is not modelled
}
sys::NcclResult recv(void*, std::size_t, int, int, sys::NcclComm, sys::Stream) {
    return sys::kNcclInvalidUsage;
}
sys::NcclResult group_start() {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (const sys::NcclResult r = n.enter("ncclGroupStart")) return r;
    ++n.group_depth;
    return sys::kNcclSuccess;
}
sys::NcclResult group_end() {
    FakeNccl::Impl& n = state();
    Lock lock(n.mutex);
    if (n.group_depth == 0) return sys::kNcclInvalidUsage;
    --n.group_depth;  // Note: a failing ncclGroupEnd still ends the group, as NCCL's does
    return n.enter("ncclGroupEnd");
}

}  // namespace

FakeNccl::FakeNccl(const sys::DriverApi& cuda) : impl_(std::make_unique<Impl>(cuda)) {
    FakeNccl* expected = nullptr;
    if (!g_nccl.compare_exchange_strong(expected, this)) {
        std::fputs("cudarc::fake::FakeNccl: only one may exist at a time\n", stderr);
        std::abort();
    }
    api_.library_path = "(cudarc's fake NCCL)";
    api_.version = kVersion;
    api_.get_version = &get_version;
    api_.get_error_string = &get_error_string;
    api_.get_last_error = &get_last_error;
    api_.get_unique_id = &get_unique_id;
    api_.comm_init_rank = &comm_init_rank;
    api_.comm_init_all = &comm_init_all;
    api_.comm_finalize = &comm_finalize;
    api_.comm_destroy = &comm_destroy;
    api_.comm_abort = &comm_abort;
    api_.comm_get_async_error = &comm_get_async_error;
    api_.comm_count = &comm_count;
    api_.comm_cu_device = &comm_cu_device;
    api_.comm_user_rank = &comm_user_rank;
    api_.all_reduce = &all_reduce;
    api_.broadcast = &broadcast;
    api_.reduce = &reduce;
    api_.all_gather = &all_gather;
    api_.reduce_scatter = &reduce_scatter;
    api_.send = &send;
    api_.recv = &recv;
    api_.group_start = &group_start;
    api_.group_end = &group_end;
}

FakeNccl::~FakeNccl() {
    g_nccl.store(nullptr, std::memory_order_release);
}

void FakeNccl::fail_nth(const std::string& function, std::uint64_t nth, sys::NcclResult result) {
    Lock lock(impl_->mutex);
    impl_->plans.push_back(Impl::Plan{function, impl_->calls[function] + nth, result});
}

std::uint64_t FakeNccl::calls(const std::string& function) const {
    Lock lock(impl_->mutex);
    const auto it = impl_->calls.find(function);
    return it != impl_->calls.end() ? it->second : 0;
}

std::size_t FakeNccl::live_communicators() const {
    Lock lock(impl_->mutex);
    return impl_->communicators.size();
}

NcclOverride::NcclOverride(const sys::NcclApi& api) noexcept : previous_(sys::set_nccl_override(&api)) {}

NcclOverride::~NcclOverride() {
    static_cast<void>(sys::set_nccl_override(previous_));
}

}  // namespace cudarc::fake

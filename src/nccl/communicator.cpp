// cudarc::nccl: communicators, their operations and groups, on top of the NCCL table (sys/nccl).
//
// Note [NCCL and the current context]: NCCL goes through the CUDA runtime, which takes "the current device"
// from the context current on the calling thread and, around its own calls, switches devices (cudaSetDevice)
// and back. cudarc holds a context scope of the communicator's device across each NCCL call, so that NCCL
// sees the device the communicator belongs to. Nothing needs forgetting afterwards: every later scope asks
// the driver which context is current (Note [Context scope] in core/device_state.hpp), and work after an
// NCCL call (the event an operation records after it) binds again in a scope of its own.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>

#include "core/buffer.hpp"
#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/operation.hpp"
#include "cudarc/nccl.hpp"
#include "nccl/validation.hpp"
#include "sys/nccl/nccl_api.hpp"

namespace cudarc::nccl {

using cudarc::detail::Access;
using cudarc::detail::DeviceState;

namespace {

const sys::NcclApi& api() {
    return sys::nccl();
}

// Note [Capture overlay]: NCCL work is not captured. Creating a communicator allocates device memory (which
// invalidates a capture from this thread), and an operation's group may span devices while a capture records
// the streams of one. `what` starts with "cudarc::".
void refuse_in_capture(const char* what) {
    cudarc::detail::refuse_in_capture(
        what + std::strlen("cudarc::"),
        "cudarc does not capture NCCL communicators or operations into graphs (communicator creation "
        "allocates device memory, and a group may span devices while a capture records one device's "
        "streams); enqueue it outside capture()");
}

// The error for a failing NCCL call: NCCL's name for the result, ncclGetErrorString and ncclGetLastError.
Error nccl_error(const sys::NcclApi& nccl, const std::string& call, sys::NcclResult result,
                 sys::NcclComm comm, int device) {
    std::string text = nccl.get_error_string != nullptr && nccl.get_error_string(result) != nullptr
                           ? nccl.get_error_string(result)
                           : "unknown NCCL error";
    if (nccl.get_last_error != nullptr) {
        const char* last = nccl.get_last_error(comm);
        if (last != nullptr && *last != '\0') text += fmt::format(" (ncclGetLastError: {})", last);
    }
    return Error(call, result, sys::nccl_result_name(result), text, device, Backend::cuda);
}

// Note [NCCL errors and lost devices]
// NCCL reports a CUDA call that failed inside it as ncclUnhandledCudaError, without the CUDA error. When
// that error was sticky the device's context is broken, and the device must be marked lost (Note [Lost
// devices]): else every later call would meet the driver's errors one by one, each its own, instead of
// DeviceLost. So after ncclUnhandledCudaError cudarc asks the driver about the context: cuStreamQuery of the
// device's default stream (it never blocks) returns the context's sticky error if it has one. That error,
// naming the NCCL call, marks the device lost; the caller then throws DeviceLost (or, in a destructor,
// defers it). Any other answer leaves the NCCL error as it is.
std::optional<Error> sticky_cause(DeviceState& device, sys::NcclResult result, const Error& error) noexcept {
    if (result != sys::kNcclUnhandledCudaError || device.lost()) return std::nullopt;
    try {
        const auto scope = device.bind_or_defer();
        const sys::Result probe = device.api().stream_query(device.default_stream().native());
        if (!sys::is_sticky_error(probe)) return std::nullopt;
        return sys::make_error(device.api(), sys::Entry::stream_query, probe, device.ordinal(),
                               fmt::format(" (asked after NCCL failed: {})", error.what()));
    } catch (...) {
        return std::nullopt;  // out of memory while describing it: the NCCL error stands
    }
}

// Throws `error`, NCCL's `result` on `device`: DeviceLost once the device is lost, the sticky error NCCL
// met included (Note [NCCL errors and lost devices]).
[[noreturn]] void throw_on_device(DeviceState& device, sys::NcclResult result, const Error& error) {
    if (const std::optional<Error> cause = sticky_cause(device, result, error)) device.throw_error(*cause);
    device.throw_error(error);
}

// The same for destructors: the error is deferred (a sticky cause loses the device).
void defer_on_device(DeviceState& device, sys::NcclResult result, const Error& error) noexcept {
    if (const std::optional<Error> cause = sticky_cause(device, result, error)) device.defer(*cause);
    device.defer(error);
}

void require_cuda(const Device& device, const char* what) {
    if (device.backend() != Backend::cuda) {
        throw Error(
            fmt::format("{}: device {} is a {} device; NCCL needs the CUDA backend (RCCL is not supported)",
                        what, device.ordinal(), to_string(device.backend())));
    }
}

void* address(const detail::CollectiveBuffer& buffer) noexcept {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(buffer.ptr));
}

// Runs an NCCL call with `device`'s context current (Note [NCCL and the current context]).
template <typename Call>
sys::NcclResult with_device(const DeviceState& device, Call&& call) {
    const auto scope = device.bind();
    return call();
}

// The innermost Group of this thread.
thread_local Group* innermost_group = nullptr;

}  // namespace

bool available() noexcept {
    return sys::nccl_if_loaded() != nullptr;
}

std::string load_failure() {
    return sys::nccl_load_failure();
}

Version version() {
    const sys::NcclVersion v = sys::decode_nccl_version(api().version);
    return {v.major, v.minor, v.patch};
}

std::string library_path() {
    return api().library_path;
}

// ---- UniqueId ----

UniqueId UniqueId::create() {
    const sys::NcclApi& nccl = api();
    sys::NcclUniqueId raw{};
    const sys::NcclResult result = nccl.get_unique_id(&raw);
    if (result != sys::kNcclSuccess) throw nccl_error(nccl, "ncclGetUniqueId", result, nullptr, -1);
    UniqueId id;
    std::memcpy(id.bytes_.data(), raw.internal, kBytes);
    return id;
}

UniqueId UniqueId::from_bytes(std::span<const std::byte> bytes) {
    if (bytes.size() != kBytes) {
        throw Error(fmt::format("cudarc::nccl::UniqueId::from_bytes: a NCCL unique id has {} bytes, {} given",
                                kBytes, bytes.size()));
    }
    UniqueId id;
    std::copy(bytes.begin(), bytes.end(), id.bytes_.begin());
    return id;
}

// ---- Communicator: creation and destruction ----

Communicator::Communicator(std::shared_ptr<DeviceState> device, ::ncclComm* comm) noexcept
    : device_(std::move(device)), comm_(comm) {}

Communicator::Communicator(Communicator&& other) noexcept
    : device_(std::move(other.device_)),
      comm_(std::exchange(other.comm_, nullptr)),
      rank_(other.rank_),
      world_size_(other.world_size_),
      failed_(other.failed_) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
    if (this != &other) {
        release();
        device_ = std::move(other.device_);
        comm_ = std::exchange(other.comm_, nullptr);
        rank_ = other.rank_;
        world_size_ = other.world_size_;
        failed_ = other.failed_;
    }
    return *this;
}

Communicator::~Communicator() {
    release();
}

std::vector<Communicator> Communicator::init_all(std::span<const Device> devices) {
    constexpr const char* what = "cudarc::nccl::Communicator::init_all";
    refuse_in_capture(what);
    std::vector<int> ordinals;
    ordinals.reserve(devices.size());
    for (const Device& device : devices) {
        require_cuda(device, what);
        ordinals.push_back(device.ordinal());
    }
    detail::check_devices_for_init_all(ordinals);
    const sys::NcclApi& nccl = api();
    const int count = static_cast<int>(ordinals.size());
    std::vector<sys::NcclComm> raw(ordinals.size(), nullptr);
    std::vector<Communicator> out;
    out.reserve(ordinals.size());
    // Note [NCCL and the current context]: it sets each device in turn; nothing of cudarc's is bound here.
    const sys::NcclResult result = nccl.comm_init_all(raw.data(), count, ordinals.data());
    // From here every communicator NCCL made is owned (and released on an exception).
    for (std::size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] != nullptr)
            out.push_back(Communicator(cudarc::detail::Internals::device_state(devices[i]), raw[i]));
    }
    if (result != sys::kNcclSuccess) {
        for (Communicator& comm : out) comm.failed_ = true;  // aborted, not finalized
        const Error error = nccl_error(nccl, "ncclCommInitAll", result, nullptr, -1);
        // Note [NCCL errors and lost devices]: any of the devices may be the one that failed.
        for (const Device& device : devices) {
            DeviceState& state = *cudarc::detail::Internals::device_state(device);
            if (const std::optional<Error> cause = sticky_cause(state, result, error))
                state.throw_error(*cause);
        }
        throw error;
    }
    for (int i = 0; i < count; ++i) {
        Communicator& comm = out[static_cast<std::size_t>(i)];
        comm.rank_ = i;
        comm.world_size_ = count;
        int device = -1;
        comm.check_result(nccl.comm_cu_device(comm.comm_, &device), "ncclCommCuDevice");
        if (device != ordinals[static_cast<std::size_t>(i)]) {
            throw Error(fmt::format("{}: NCCL put rank {} on device {}, device {} was asked for", what, i,
                                    device, ordinals[static_cast<std::size_t>(i)]));
        }
    }
    return out;
}

Communicator Communicator::init_rank(const Device& device, const UniqueId& id, int rank, int count) {
    constexpr const char* what = "cudarc::nccl::Communicator::init_rank";
    refuse_in_capture(what);
    require_cuda(device, what);
    detail::check_rank(what, rank, count);
    const sys::NcclApi& nccl = api();
    sys::NcclUniqueId raw_id{};
    std::memcpy(raw_id.internal, id.bytes().data(), UniqueId::kBytes);
    sys::NcclComm raw = nullptr;
    const sys::NcclResult result = with_device(*cudarc::detail::Internals::device_state(device), [&] {
        return nccl.comm_init_rank(&raw, count, raw_id, rank);  // NCCL takes its device from the context
    });
    Communicator comm(cudarc::detail::Internals::device_state(device), raw);
    comm.rank_ = rank;
    comm.world_size_ = count;
    if (result != sys::kNcclSuccess) {
        comm.failed_ = true;
        throw_on_device(*comm.device_, result,
                        nccl_error(nccl, "ncclCommInitRank", result, raw, device.ordinal()));
    }
    int nccl_device = -1;
    comm.check_result(nccl.comm_cu_device(raw, &nccl_device), "ncclCommCuDevice");
    if (nccl_device != device.ordinal()) {
        throw Error(
            fmt::format("{}: NCCL put rank {} on device {}, device {} was asked for (was another device's "
                        "context current on this thread?)",
                        what, rank, nccl_device, device.ordinal()));
    }
    return comm;
}

void Communicator::release() noexcept {
    if (comm_ == nullptr) return;
    const sys::NcclApi* nccl = sys::nccl_if_loaded();  // loaded: a communicator exists
    ::ncclComm* comm = std::exchange(comm_, nullptr);
    if (nccl == nullptr) return;
    // Note [NCCL and the current context]. A failure to bind is deferred; NCCL's calls then report theirs.
    const auto scope = device_->bind_or_defer();
    // Note: on a lost device (Note [Lost devices]) no finalize can flush anything: abort.
    bool abort = failed_ || device_->lost();
    if (!abort) {
        sys::NcclResult async = sys::kNcclSuccess;
        const sys::NcclResult polled = nccl->comm_get_async_error(comm, &async);
        abort = polled != sys::kNcclSuccess || (async != sys::kNcclSuccess && async != sys::kNcclInProgress);
    }
    if (!abort && nccl->comm_finalize != nullptr) {
        // Finalize flushes the communicator's work and stops its proxy; destroy then frees it without
        // blocking.
        const sys::NcclResult finalized = nccl->comm_finalize(comm);
        if (finalized != sys::kNcclSuccess) {
            try {
                defer_on_device(*device_, finalized,
                                nccl_error(*nccl, "ncclCommFinalize", finalized, comm, device_->ordinal()));
            } catch (...) {
            }
            abort = true;
        }
    }
    const sys::NcclResult result = abort ? nccl->comm_abort(comm) : nccl->comm_destroy(comm);
    if (result != sys::kNcclSuccess) {
        const char* call = abort ? "ncclCommAbort" : "ncclCommDestroy";
        try {
            defer_on_device(*device_, result, nccl_error(*nccl, call, result, nullptr, device_->ordinal()));
        } catch (...) {
        }
    }
}

void Communicator::abort() noexcept {
    failed_ = true;
    release();
}

int Communicator::device_ordinal() const noexcept {
    return device_ ? device_->ordinal() : -1;
}

Device Communicator::device() const {
    if (!device_) throw Error("cudarc::nccl::Communicator::device: the communicator is empty (moved from)");
    return cudarc::detail::Internals::make_device(device_);
}

// ---- Communicator: checks ----

void Communicator::check_result(int result, const char* call) {
    if (result == sys::kNcclSuccess || result == sys::kNcclInProgress) return;
    // Note: NCCL leaves a communicator usable after it rejected the arguments; anything else (a CUDA,
    // system, internal or remote error) may have left it halfway through an operation.
    if (result != sys::kNcclInvalidArgument && result != sys::kNcclInvalidUsage) failed_ = true;
    throw_on_device(*device_, result, nccl_error(api(), call, result, comm_, device_ordinal()));
}

void Communicator::check_async_error() {
    if (comm_ == nullptr) return;
    const sys::NcclApi& nccl = api();
    sys::NcclResult async = sys::kNcclSuccess;
    check_result(nccl.comm_get_async_error(comm_, &async), "ncclCommGetAsyncError");
    if (async == sys::kNcclSuccess || async == sys::kNcclInProgress) return;
    failed_ = true;
    throw_on_device(*device_, async,
                    nccl_error(nccl,
                               fmt::format("ncclCommGetAsyncError (rank {} of {}: an asynchronous error; the "
                                           "communicator is unusable and is aborted when destroyed)",
                                           rank_, world_size_),
                               async, comm_, device_ordinal()));
}

void Communicator::prepare(Stream& stream, const char* what, const detail::CollectiveBuffer* send,
                           const detail::CollectiveBuffer* recv) {
    refuse_in_capture(what);
    if (comm_ == nullptr)
        throw Error(fmt::format("{}: the communicator is empty (moved from or aborted)", what));
    if (device_->lost()) device_->throw_lost();  // Note [Lost devices]: before anything is enqueued
    if (failed_) {
        throw Error(
            fmt::format("{}: the communicator (rank {} of {}, device {}) failed earlier; destroy it (it is "
                        "aborted) and make a new one",
                        what, rank_, world_size_, device_->ordinal()));
    }
    if (&cudarc::detail::Internals::stream_state(stream).device() != device_.get()) {
        throw Error(fmt::format("{}: the stream is on device {}, the communicator on device {}", what,
                                stream.device_ordinal(), device_->ordinal()));
    }
    check_async_error();
    if (Group* group = Group::innermost()) group->note(device_);
    if (send != nullptr) check_buffer(*send, what, "send buffer");
    if (recv != nullptr) check_buffer(*recv, what, "receive buffer");
}

void Communicator::check_buffer(const detail::CollectiveBuffer& buffer, const char* what,
                                const char* role) const {
    if (buffer.buffer == nullptr) {
        throw Error(fmt::format("{}: the {} is an empty (default-constructed or moved-from) DeviceSlice",
                                what, role));
    }
    const cudarc::detail::DeviceState& owner = buffer.buffer->device();
    if (&owner != device_.get()) {
        throw Error(
            fmt::format("{}: the {} is on device {}, the communicator on device {} (each rank's buffers "
                        "live on its own device)",
                        what, role, owner.ordinal(), device_->ordinal()));
    }
}

bool Communicator::enqueued_at_group_end(bool point_to_point) const noexcept {
    // Note [Hazard tracking inside a group]: NCCL runs a collective of a one-rank communicator at the call,
    // group or not (a copy on the stream); everything else waits for the outermost ncclGroupEnd.
    return Group::innermost() != nullptr && (point_to_point || world_size_ > 1);
}

namespace {
// Calls f(buffer, access) for each operand, each covering its own bytes, as a launch's arguments do. An
// operation in place (or an all_gather whose send is a part of recv) reads bytes it also writes: the write
// alone orders them (a separate read would only wait for the same writer twice).
template <typename F>
void for_each_operand(const detail::CollectiveBuffer* send, const detail::CollectiveBuffer* recv, F&& f) {
    const bool read_is_written = send != nullptr && recv != nullptr && send->buffer == recv->buffer &&
                                 send->ptr >= recv->ptr && send->ptr + send->bytes <= recv->ptr + recv->bytes;
    if (send != nullptr && !read_is_written) f(*send, Access::read);
    if (recv != nullptr) f(*recv, Access::write);
}

void add_access(cudarc::detail::Operation& op, cudarc::detail::Buffer& buffer, DevicePtr ptr,
                std::size_t bytes, Access access) {
    op.access(buffer.hazards(), static_cast<std::size_t>(ptr - buffer.ptr()), bytes, access);
}
}  // namespace

// Every operation, once prepare() and its own checks passed: hazard tracking (one operation: Note
// [Cross-stream ordering]), the NCCL call under the communicator's device, the accesses recorded, the result
// checked. A null operand is absent (send and recv have one buffer each); with one absent the operation is
// point to point. Inside a group the tracking waits for the group's end (Note [Hazard tracking inside a
// group]).
template <typename Call>
void Communicator::enqueue(Stream& stream, const char* call_name, const detail::CollectiveBuffer* send,
                           const detail::CollectiveBuffer* recv, Call&& call) {
    if (enqueued_at_group_end(send == nullptr || recv == nullptr)) {
        Group* group = Group::innermost();
        for_each_operand(send, recv, [&](const detail::CollectiveBuffer& b, Access access) {
            group->pending_.push_back({&stream, b.buffer, b.ptr, b.bytes, access});
        });
        check_result(with_device(*device_, std::forward<Call>(call)), call_name);
        return;
    }
    cudarc::detail::Operation op(cudarc::detail::Internals::stream_state(stream));
    for_each_operand(send, recv, [&](const detail::CollectiveBuffer& b, Access access) {
        add_access(op, *b.buffer, b.ptr, b.bytes, access);
    });
    op.order();
    const sys::NcclResult result = with_device(*device_, std::forward<Call>(call));
    {
        // Note [NCCL and the current context]: the event after it is recorded in a scope of its own.
        const auto scope = cudarc::detail::Internals::stream_state(stream).device().bind_or_defer();
        op.complete();
    }
    check_result(result, call_name);
}

// ---- Communicator: operations ----

void Communicator::run_all_reduce(Stream& stream, const detail::CollectiveBuffer& send,
                                  const detail::CollectiveBuffer& recv, ReduceOp op) {
    constexpr const char* what = "cudarc::nccl::Communicator::all_reduce";
    prepare(stream, what, &send, &recv);
    detail::check_same_count(what, send.count, recv.count);
    enqueue(stream, "ncclAllReduce", &send, &recv, [&] {
        return api().all_reduce(address(send), address(recv), recv.count, detail::nccl_data_type(recv.type),
                                detail::nccl_reduce_op(op), comm_, stream.native());
    });
}

void Communicator::run_broadcast(Stream& stream, const detail::CollectiveBuffer& send,
                                 const detail::CollectiveBuffer& recv, int root) {
    constexpr const char* what = "cudarc::nccl::Communicator::broadcast";
    prepare(stream, what, &send, &recv);
    detail::check_same_count(what, send.count, recv.count);
    detail::check_root(what, root, world_size_);
    // Note: only the root reads its send buffer; tracking it on every rank only adds ordering.
    enqueue(stream, "ncclBroadcast", &send, &recv, [&] {
        return api().broadcast(address(send), address(recv), recv.count, detail::nccl_data_type(recv.type),
                               root, comm_, stream.native());
    });
}

void Communicator::run_reduce(Stream& stream, const detail::CollectiveBuffer& send,
                              const detail::CollectiveBuffer& recv, int root, ReduceOp op) {
    constexpr const char* what = "cudarc::nccl::Communicator::reduce";
    prepare(stream, what, &send, &recv);
    detail::check_same_count(what, send.count, recv.count);
    detail::check_root(what, root, world_size_);
    enqueue(stream, "ncclReduce", &send, &recv, [&] {
        return api().reduce(address(send), address(recv), recv.count, detail::nccl_data_type(recv.type),
                            detail::nccl_reduce_op(op), root, comm_, stream.native());
    });
}

void Communicator::run_all_gather(Stream& stream, const detail::CollectiveBuffer& send,
                                  const detail::CollectiveBuffer& recv) {
    constexpr const char* what = "cudarc::nccl::Communicator::all_gather";
    prepare(stream, what, &send, &recv);
    detail::check_gather_counts(what, send.count, recv.count, world_size_);
    enqueue(stream, "ncclAllGather", &send, &recv, [&] {
        return api().all_gather(address(send), address(recv), send.count, detail::nccl_data_type(recv.type),
                                comm_, stream.native());
    });
}

void Communicator::run_reduce_scatter(Stream& stream, const detail::CollectiveBuffer& send,
                                      const detail::CollectiveBuffer& recv, ReduceOp op) {
    constexpr const char* what = "cudarc::nccl::Communicator::reduce_scatter";
    prepare(stream, what, &send, &recv);
    detail::check_scatter_counts(what, send.count, recv.count, world_size_);
    enqueue(stream, "ncclReduceScatter", &send, &recv, [&] {
        return api().reduce_scatter(address(send), address(recv), recv.count,
                                    detail::nccl_data_type(recv.type), detail::nccl_reduce_op(op), comm_,
                                    stream.native());
    });
}

void Communicator::run_send(Stream& stream, const detail::CollectiveBuffer& data, int peer) {
    constexpr const char* what = "cudarc::nccl::Communicator::send";
    prepare(stream, what, &data, nullptr);
    detail::check_peer(what, peer, world_size_);
    enqueue(stream, "ncclSend", &data, nullptr, [&] {
        return api().send(address(data), data.count, detail::nccl_data_type(data.type), peer, comm_,
                          stream.native());
    });
}

void Communicator::run_recv(Stream& stream, const detail::CollectiveBuffer& data, int peer) {
    constexpr const char* what = "cudarc::nccl::Communicator::recv";
    prepare(stream, what, nullptr, &data);
    detail::check_peer(what, peer, world_size_);
    enqueue(stream, "ncclRecv", nullptr, &data, [&] {
        return api().recv(address(data), data.count, detail::nccl_data_type(data.type), peer, comm_,
                          stream.native());
    });
}

// ---- Group ----

Group* Group::innermost() noexcept {
    return innermost_group;
}

Group::Group() : outer_(innermost_group) {
    const sys::NcclApi& nccl = api();
    const sys::NcclResult result = nccl.group_start();
    if (result != sys::kNcclSuccess) throw nccl_error(nccl, "ncclGroupStart", result, nullptr, -1);
    innermost_group = this;
}

Group::~Group() {
    if (ended_) return;
    try {
        end();
    } catch (const Error& error) {
        for (const auto& device : devices_) device->defer(error);
    } catch (...) {
    }
}

void Group::note(const std::shared_ptr<DeviceState>& device) {
    if (std::find(devices_.begin(), devices_.end(), device) == devices_.end()) devices_.push_back(device);
}

void Group::end() {
    if (ended_) throw Error("cudarc::nccl::Group::end: the group has ended already");
    ended_ = true;
    innermost_group = outer_;
    if (outer_ != nullptr) {
        // Note: NCCL ends a nested group with the outermost one: so do its devices and its tracking.
        for (const auto& device : devices_) outer_->note(device);
        outer_->pending_.insert(outer_->pending_.end(), pending_.begin(), pending_.end());
        pending_.clear();
    }
    // Note [Hazard tracking inside a group]: the waits go on the streams before NCCL enqueues the operations:
    // one operation per stream (at most one wait per source stream each).
    std::vector<std::pair<cudarc::detail::StreamState*, std::unique_ptr<cudarc::detail::Operation>>>
        operations;
    std::exception_ptr tracking_failure;
    try {
        for (const PendingAccess& access : pending_) {
            cudarc::detail::StreamState& s = cudarc::detail::Internals::stream_state(*access.stream);
            auto it = std::find_if(operations.begin(), operations.end(),
                                   [&](const auto& entry) { return entry.first == &s; });
            if (it == operations.end()) {
                operations.emplace_back(&s, std::make_unique<cudarc::detail::Operation>(s));
                it = operations.end() - 1;
            }
            add_access(*it->second, *access.buffer, access.ptr, access.bytes, access.access);
        }
        for (auto& [stream, op] : operations) op->order();
    } catch (...) {
        tracking_failure = std::current_exception();
    }
    // Note: the group must end whatever happened above: ncclGroupStart and ncclGroupEnd pair up per thread.
    const sys::NcclApi& nccl = api();
    // Note [NCCL and the current context]: it launches on each communicator's device.
    const sys::NcclResult result = nccl.group_end();
    // The operations are on their streams now: record their uses (Note [Stream timelines]).
    for (auto& [stream, op] : operations) {
        const auto scope = stream->device().bind_or_defer();
        op->complete();
    }
    pending_.clear();
    if (tracking_failure) std::rethrow_exception(tracking_failure);
    if (result != sys::kNcclSuccess && result != sys::kNcclInProgress) {
        const int device = devices_.size() == 1 ? devices_.front()->ordinal() : -1;
        const Error error = nccl_error(nccl, "ncclGroupEnd", result, nullptr, device);
        // Note [NCCL errors and lost devices]: any device of the group may be the one that failed.
        for (const auto& state : devices_) {
            if (const std::optional<Error> cause = sticky_cause(*state, result, error))
                state->throw_error(*cause);
        }
        throw error;
    }
}

}  // namespace cudarc::nccl

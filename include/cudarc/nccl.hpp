/// @file
/// cudarc::nccl — collectives and point-to-point transfers between GPUs through NCCL, on cudarc streams and
/// hazard-tracked buffers. NCCL is loaded at run time (never linked): see docs/multi-gpu.md.
///
/// @code
///     auto devices = ...;                                      // one Device per GPU
///     auto comms = cudarc::nccl::Communicator::init_all(devices);
///     {
///         cudarc::nccl::Group group;                           // one thread drives every device
///         for (std::size_t i = 0; i < comms.size(); ++i)
///             comms[i].all_reduce(streams[i], grads[i], cudarc::nccl::ReduceOp::avg);   // in place
///     }                                                        // enqueued here (ncclGroupEnd)
/// @endcode
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cudarc/device.hpp"
#include "cudarc/export.hpp"
#include "cudarc/optim/element_type.hpp"
#include "cudarc/slice.hpp"
#include "cudarc/stream.hpp"

struct ncclComm;  // NCCL's opaque communicator: native() returns a ncclComm_t

namespace cudarc {
namespace detail {
class DeviceState;
}

namespace nccl {

/// Whether NCCL can be loaded in this process (it is looked for once, on first use). Never throws.
[[nodiscard]] CUDARC_API bool available() noexcept;
/// Why NCCL could not be loaded: every place looked at and why each failed (empty when it loaded).
[[nodiscard]] CUDARC_API std::string load_failure();

/// A NCCL version, as in 2.21.5.
struct Version {
    /// The major version.
    int major = 0;
    /// The minor version.
    int minor = 0;
    /// The patch level.
    int patch = 0;
};
/// The loaded NCCL's version. Throws cudarc::Error (saying where NCCL was looked for) without one.
[[nodiscard]] CUDARC_API Version version();
/// The path of the NCCL library that was loaded. Throws like version().
[[nodiscard]] CUDARC_API std::string library_path();

/// The element types NCCL reduces and moves.
enum class DataType { int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, float64 };

/// Maps an element type to its DataType. Specialize it for a 16-bit float type of your own, e.g. __half:
/// @code
///     template <>
///     struct cudarc::nccl::DataTypeOf<__half> { static constexpr DataType value = DataType::float16; };
/// @endcode
template <typename T>
struct DataTypeOf {};
/// The NCCL type of float: DataType::float32.
template <>
struct DataTypeOf<float> {
    /// The NCCL type.
    static constexpr DataType value = DataType::float32;
};
/// The NCCL type of double: DataType::float64.
template <>
struct DataTypeOf<double> {
    /// The NCCL type.
    static constexpr DataType value = DataType::float64;
};
/// The NCCL type of optim::half_bits: DataType::float16.
template <>
struct DataTypeOf<optim::half_bits> {
    /// The NCCL type.
    static constexpr DataType value = DataType::float16;
};
/// The NCCL type of optim::bf16_bits: DataType::bfloat16.
template <>
struct DataTypeOf<optim::bf16_bits> {
    /// The NCCL type.
    static constexpr DataType value = DataType::bfloat16;
};
/// Integers of 8, 32 and 64 bits (NCCL has no 16-bit integers).
template <typename T>
requires(std::is_integral_v<T> && !std::is_same_v<T, bool> &&
         (sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8)) struct DataTypeOf<T> {
    /// The NCCL type: signed or unsigned of the same size.
    static constexpr DataType value =
        sizeof(T) == 1   ? (std::is_signed_v<T> ? DataType::int8 : DataType::uint8)
        : sizeof(T) == 4 ? (std::is_signed_v<T> ? DataType::int32 : DataType::uint32)
                         : (std::is_signed_v<T> ? DataType::int64 : DataType::uint64);
};

/// An element type NCCL can move: float, double, optim::half_bits (fp16), optim::bf16_bits, 8/32/64-bit
/// integers, or a type with a DataTypeOf specialization.
template <typename T>
concept Element = requires {
    { DataTypeOf<std::remove_const_t<T>>::value } -> std::convertible_to<DataType>;
};

/// How a reduction combines the ranks' elements: sum, product, maximum, minimum, or average (the sum divided
/// by the number of ranks, ncclAvg).
enum class ReduceOp { sum, prod, max, min, avg };

/// The rendezvous token of a communicator made of one process (or thread) per GPU: one rank creates it,
/// every rank receives its bytes (over MPI, a socket, a file...), and all pass it to Communicator::init_rank.
class CUDARC_API UniqueId {
  public:
    static constexpr std::size_t kBytes = 128;  ///< NCCL_UNIQUE_ID_BYTES

    /// A new id (ncclGetUniqueId). Throws cudarc::Error when NCCL cannot be loaded or fails.
    [[nodiscard]] static UniqueId create();
    /// An id from the bytes another rank created. Throws cudarc::Error unless exactly kBytes are given.
    [[nodiscard]] static UniqueId from_bytes(std::span<const std::byte> bytes);

    /// The id's bytes, to send to the other ranks.
    [[nodiscard]] const std::array<std::byte, kBytes>& bytes() const noexcept { return bytes_; }
    /// Equal when the bytes are equal.
    friend bool operator==(const UniqueId&, const UniqueId&) = default;

  private:
    UniqueId() = default;
    std::array<std::byte, kBytes> bytes_{};
};

namespace detail {

template <typename A>
struct is_device_view : std::false_type {};
template <typename T>
struct is_device_view<DeviceView<T>> : std::true_type {};
/// An owning slice: a temporary one would be freed at the end of the call.
template <typename A>
struct is_device_slice : std::false_type {};
template <typename T>
struct is_device_slice<DeviceSlice<T>> : std::true_type {};

/// What a collective accepts as a buffer: a DeviceView, or anything with view() that gives one (DeviceSlice,
/// BorrowedSlice).
template <typename A>
concept Viewable = is_device_view<std::remove_cvref_t<A>>::value || requires(std::remove_reference_t<A>& a) {
    {a.view()};
};

template <typename A>
auto view_of(A& a) {
    if constexpr (is_device_view<std::remove_cv_t<A>>::value) {
        return DeviceView<typename std::remove_cv_t<A>::element_type>(a);
    } else {
        return a.view();
    }
}

/// One buffer of a collective, its type erased for the non-template implementation.
struct CollectiveBuffer {
    cudarc::detail::Buffer* buffer = nullptr;
    DevicePtr ptr = 0;
    std::size_t count = 0;
    std::size_t bytes = 0;  ///< the view's bytes: what hazard tracking covers
    DataType type = DataType::float32;
};

template <typename A>
CollectiveBuffer collective_buffer(A&& a) {
    static_assert(Viewable<A>,
                  "cudarc::nccl: a buffer must be a DeviceView, a DeviceSlice or a BorrowedSlice");
    static_assert(
        !is_device_slice<std::remove_cvref_t<A>>::value || std::is_lvalue_reference_v<A>,
        "cudarc::nccl: a temporary slice would be freed before the collective runs; pass a named one");
    const auto view = view_of(a);
    using T = typename decltype(view)::value_type;
    static_assert(Element<T>, "cudarc::nccl: NCCL cannot move this element type (see nccl::DataTypeOf)");
    if constexpr (Element<T>) {
        return {cudarc::detail::Internals::buffer(view), view.device_ptr(), view.size(), view.bytes(),
                DataTypeOf<T>::value};
    } else {
        return {};
    }
}

template <typename A>
inline constexpr bool writable_v =
    !std::is_const_v<typename decltype(view_of(std::declval<A&>()))::element_type>;

template <typename A>
using element_of = typename decltype(view_of(std::declval<std::remove_reference_t<A>&>()))::value_type;

}  // namespace detail

/// One rank of a NCCL communicator: one GPU's seat in a collective. Move-only. Every operation is enqueued on
/// the given stream (a stream of the communicator's device), after the conflicting earlier work on the
/// buffers on other streams, as for a launch: send buffers are read, receive buffers written, each covering
/// exactly its view's bytes (hazard tracking, across devices too: docs/multi-gpu.md). No operation blocks the
/// host.
///
/// Collectives must be called on every rank of the communicator, in the same order. One thread driving
/// several ranks (init_all) must call them inside a Group; one thread per rank may call them directly.
/// Inside a group, an operation is ordered when the group ends (Note [Hazard tracking inside a group]).
/// A communicator is used by one thread at a time, like a stream. NCCL work is not captured into graphs:
/// while the calling thread captures (cudarc::capture), creating a communicator and every operation throw,
/// and the capture goes on (docs/multi-gpu.md).
///
/// Errors: a failing call throws cudarc::Error with NCCL's result, ncclGetErrorString and ncclGetLastError.
/// Asynchronous errors (a peer died, a network failure) are polled with ncclCommGetAsyncError before each
/// operation and by check_async_error(); after one, the communicator is marked failed. Destruction runs
/// ncclCommFinalize then ncclCommDestroy, or ncclCommAbort for a failed communicator.
class CUDARC_API Communicator {
  public:
    /// One communicator per device, all in this process (ncclCommInitAll): ranks 0..n-1 in the order given.
    /// Throws for no device, a device given twice, a HIP device, or a NCCL failure.
    [[nodiscard]] static std::vector<Communicator> init_all(std::span<const Device> devices);
    /// This process's (or thread's) rank of a communicator of `count` ranks, on `device` (ncclCommInitRank).
    /// Blocks until every rank has joined. Throws for a rank outside 0..count-1 or a NCCL failure.
    [[nodiscard]] static Communicator init_rank(const Device& device, const UniqueId& id, int rank,
                                                int count);

    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;
    /// Takes over `other`'s communicator; `other` is left empty.
    Communicator(Communicator&& other) noexcept;
    /// Releases this communicator (as on destruction) and takes over `other`'s.
    Communicator& operator=(Communicator&& other) noexcept;
    /// ncclCommFinalize then ncclCommDestroy; ncclCommAbort for a failed communicator (see above). Never
    /// throws.
    ~Communicator();

    /// This communicator's rank, in 0..world_size()-1.
    [[nodiscard]] int rank() const noexcept { return rank_; }
    /// The number of ranks in the communicator.
    [[nodiscard]] int world_size() const noexcept { return world_size_; }
    /// The ordinal of the communicator's device (-1 once moved from).
    [[nodiscard]] int device_ordinal() const noexcept;
    /// The communicator's device. Throws cudarc::Error once moved from.
    [[nodiscard]] Device device() const;
    /// The raw ncclComm_t (null once moved from or aborted). Calls made through it bypass hazard tracking.
    [[nodiscard]] ::ncclComm* native() const noexcept { return comm_; }

    /// recv = op over every rank's send (same sizes). In place when both are the same view.
    template <typename Send, typename Recv>
    requires detail::Viewable<Recv>
    void all_reduce(Stream& stream, Send&& send, Recv&& recv, ReduceOp op = ReduceOp::sum) {
        check_pair<Send, Recv>();
        run_all_reduce(stream, detail::collective_buffer(std::forward<Send>(send)),
                       detail::collective_buffer(std::forward<Recv>(recv)), op);
    }
    /// In place: buffer = op over every rank's buffer.
    template <typename Buffer>
    void all_reduce(Stream& stream, Buffer&& buffer, ReduceOp op = ReduceOp::sum) {
        static_assert(detail::writable_v<std::remove_reference_t<Buffer>>,
                      "all_reduce in place needs a writable buffer");
        const auto b = detail::collective_buffer(std::forward<Buffer>(buffer));
        run_all_reduce(stream, b, b, op);
    }

    /// recv = root's send on every rank (send is read on the root only; same sizes).
    template <typename Send, typename Recv>
    void broadcast(Stream& stream, Send&& send, Recv&& recv, int root) {
        check_pair<Send, Recv>();
        run_broadcast(stream, detail::collective_buffer(std::forward<Send>(send)),
                      detail::collective_buffer(std::forward<Recv>(recv)), root);
    }
    /// In place: buffer = root's buffer on every rank.
    template <typename Buffer>
    void broadcast(Stream& stream, Buffer&& buffer, int root) {
        static_assert(detail::writable_v<std::remove_reference_t<Buffer>>,
                      "broadcast in place needs a writable buffer");
        const auto b = detail::collective_buffer(std::forward<Buffer>(buffer));
        run_broadcast(stream, b, b, root);
    }

    /// recv on the root = op over every rank's send (same sizes); recv is written on the root only.
    template <typename Send, typename Recv>
    void reduce(Stream& stream, Send&& send, Recv&& recv, int root, ReduceOp op = ReduceOp::sum) {
        check_pair<Send, Recv>();
        run_reduce(stream, detail::collective_buffer(std::forward<Send>(send)),
                   detail::collective_buffer(std::forward<Recv>(recv)), root, op);
    }

    /// recv = every rank's send, in rank order: recv has world_size() times send's elements.
    template <typename Send, typename Recv>
    void all_gather(Stream& stream, Send&& send, Recv&& recv) {
        check_pair<Send, Recv>();
        run_all_gather(stream, detail::collective_buffer(std::forward<Send>(send)),
                       detail::collective_buffer(std::forward<Recv>(recv)));
    }

    /// recv = this rank's block of op over every rank's send: send has world_size() times recv's elements.
    template <typename Send, typename Recv>
    void reduce_scatter(Stream& stream, Send&& send, Recv&& recv, ReduceOp op = ReduceOp::sum) {
        check_pair<Send, Recv>();
        run_reduce_scatter(stream, detail::collective_buffer(std::forward<Send>(send)),
                           detail::collective_buffer(std::forward<Recv>(recv)), op);
    }

    /// Point to point: `peer` must make the matching recv / send (same size and type). Several sends and
    /// receives that must progress together (a ring, an exchange) go inside one Group.
    template <typename Data>
    void send(Stream& stream, Data&& data, int peer) {
        run_send(stream, detail::collective_buffer(std::forward<Data>(data)), peer);
    }
    /// Receives into `data` what `peer` sends (see send).
    template <typename Data>
    void recv(Stream& stream, Data&& data, int peer) {
        static_assert(detail::writable_v<std::remove_reference_t<Data>>, "recv needs a writable buffer");
        run_recv(stream, detail::collective_buffer(std::forward<Data>(data)), peer);
    }

    /// Throws cudarc::Error (and marks the communicator failed) when NCCL reports an asynchronous error.
    void check_async_error();
    /// True after an asynchronous error or a failing call that leaves the communicator unusable.
    [[nodiscard]] bool failed() const noexcept { return failed_; }
    /// Aborts now (ncclCommAbort): operations in flight are stopped, and the communicator becomes empty.
    void abort() noexcept;

  private:
    Communicator(std::shared_ptr<cudarc::detail::DeviceState> device, ::ncclComm* comm) noexcept;

    template <typename Send, typename Recv>
    static void check_pair() {
        static_assert(detail::Viewable<Send> && detail::Viewable<Recv>,
                      "cudarc::nccl: a buffer must be a DeviceView, a DeviceSlice or a BorrowedSlice");
        static_assert(detail::writable_v<std::remove_reference_t<Recv>>,
                      "cudarc::nccl: the receive buffer must be writable (a DeviceView<const T> was given)");
        static_assert(std::is_same_v<detail::element_of<Send>, detail::element_of<Recv>>,
                      "cudarc::nccl: the send and receive buffers must have the same element type");
    }

    void run_all_reduce(Stream& stream, const detail::CollectiveBuffer& send,
                        const detail::CollectiveBuffer& recv, ReduceOp op);
    void run_broadcast(Stream& stream, const detail::CollectiveBuffer& send,
                       const detail::CollectiveBuffer& recv, int root);
    void run_reduce(Stream& stream, const detail::CollectiveBuffer& send,
                    const detail::CollectiveBuffer& recv, int root, ReduceOp op);
    void run_all_gather(Stream& stream, const detail::CollectiveBuffer& send,
                        const detail::CollectiveBuffer& recv);
    void run_reduce_scatter(Stream& stream, const detail::CollectiveBuffer& send,
                            const detail::CollectiveBuffer& recv, ReduceOp op);
    void run_send(Stream& stream, const detail::CollectiveBuffer& data, int peer);
    void run_recv(Stream& stream, const detail::CollectiveBuffer& data, int peer);

    // Checks common to every operation, its operands' devices included (before anything changes). A null
    // operand is absent (send and recv have one buffer each).
    void prepare(Stream& stream, const char* what, const detail::CollectiveBuffer* send,
                 const detail::CollectiveBuffer* recv);
    void check_buffer(const detail::CollectiveBuffer& buffer, const char* what, const char* role) const;
    // Orders the operation after earlier conflicting work (hazard tracking: each operand covers exactly its
    // view's bytes, send read, recv written), at once or, inside a group, when the group ends (Note [Hazard
    // tracking inside a group]).
    [[nodiscard]] bool enqueued_at_group_end(bool point_to_point) const noexcept;
    // What every operation does once its arguments are checked (defined in communicator.cpp).
    template <typename Call>
    void enqueue(Stream& stream, const char* call_name, const detail::CollectiveBuffer* send,
                 const detail::CollectiveBuffer* recv, Call&& call);
    // Throws the NCCL error (marking the communicator failed unless it blamed the arguments).
    void check_result(int result, const char* call);
    void release() noexcept;

    std::shared_ptr<cudarc::detail::DeviceState> device_;
    ::ncclComm* comm_ = nullptr;
    int rank_ = 0;
    int world_size_ = 0;
    bool failed_ = false;
};

/// A NCCL group (ncclGroupStart on construction, ncclGroupEnd on end() or destruction): the operations issued
/// inside run as one, which one thread needs to drive several ranks and point-to-point exchanges need to
/// progress. Groups nest; NCCL enqueues the operations on their streams when the outermost group ends.
///
/// Note [Hazard tracking inside a group]: since the operations reach their streams only at the end, that is
/// where they are ordered: when the outermost group ends, each operation first waits for the conflicting work
/// enqueued on other streams until then (inside the group too), and work enqueued afterwards waits for it
/// (the events it waits on are recorded after ncclGroupEnd). So the streams and buffers given to operations
/// inside a group must stay alive, and in place, until it ends. One exception, NCCL's own: a collective of a
/// one-rank communicator runs at the call, group or not (NCCL enqueues a copy at once), so it is ordered
/// there, like any operation outside a group.
class CUDARC_API Group {
  public:
    /// Starts a group (ncclGroupStart). Throws cudarc::Error when NCCL cannot be loaded or fails.
    Group();
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;
    /// Ends the group if end() was not called. Never throws: an error is deferred to the devices of the
    /// communicators used in the group (Device::rethrow_deferred_error).
    ~Group();
    /// Ends the group now (ncclGroupEnd); throws cudarc::Error for a failure NCCL reports at the end.
    void end();

  private:
    friend class Communicator;
    // A buffer access of an operation issued inside the group (bytes [ptr, ptr + bytes) of `buffer`),
    // applied to hazard tracking at the end.
    struct PendingAccess {
        Stream* stream = nullptr;
        cudarc::detail::Buffer* buffer = nullptr;
        DevicePtr ptr = 0;
        std::size_t bytes = 0;
        cudarc::detail::Access access = cudarc::detail::Access::read;
    };
    // The innermost group of the calling thread, or null.
    static Group* innermost() noexcept;
    void note(const std::shared_ptr<cudarc::detail::DeviceState>& device);

    std::vector<std::shared_ptr<cudarc::detail::DeviceState>> devices_;
    std::vector<PendingAccess> pending_;
    Group* outer_ = nullptr;
    bool ended_ = false;
};

}  // namespace nccl
}  // namespace cudarc

#include "nccl/validation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "sys/nccl/nccl_api.hpp"

namespace cudarc::nccl::detail {

void check_rank(const char* what, int rank, int count) {
    if (count < 1)
        throw Error(fmt::format("{}: a communicator needs at least one rank ({} asked for)", what, count));
    if (rank < 0 || rank >= count) {
        throw Error(fmt::format("{}: rank {} is not in 0..{} (a communicator of {} ranks)", what, rank,
                                count - 1, count));
    }
}

void check_root(const char* what, int root, int world_size) {
    if (root < 0 || root >= world_size) {
        throw Error(fmt::format("{}: root {} is not a rank of this communicator (0..{})", what, root,
                                world_size - 1));
    }
}

void check_peer(const char* what, int peer, int world_size) {
    if (peer < 0 || peer >= world_size) {
        throw Error(fmt::format("{}: peer {} is not a rank of this communicator (0..{})", what, peer,
                                world_size - 1));
    }
}

void check_same_count(const char* what, std::size_t send, std::size_t recv) {
    if (send != recv) {
        throw Error(fmt::format("{}: size mismatch: the send buffer has {} elements, the receive buffer {}",
                                what, send, recv));
    }
}

namespace {
// `count` * `world_size`, or nothing when it overflows.
bool times_ranks(std::size_t count, int world_size, std::size_t& out) {
    const auto ranks = static_cast<std::size_t>(world_size);
    if (ranks != 0 && count > std::numeric_limits<std::size_t>::max() / ranks) return false;
    out = count * ranks;
    return true;
}
}  // namespace

void check_gather_counts(const char* what, std::size_t send, std::size_t recv, int world_size) {
    std::size_t want = 0;
    if (!times_ranks(send, world_size, want) || want != recv) {
        throw Error(
            fmt::format("{}: the receive buffer must hold world_size ({}) times the send buffer's {} "
                        "elements; it holds {}",
                        what, world_size, send, recv));
    }
}

void check_scatter_counts(const char* what, std::size_t send, std::size_t recv, int world_size) {
    std::size_t want = 0;
    if (!times_ranks(recv, world_size, want) || want != send) {
        throw Error(
            fmt::format("{}: the send buffer must hold world_size ({}) times the receive buffer's {} "
                        "elements; it holds {}",
                        what, world_size, recv, send));
    }
}

void check_devices_for_init_all(std::span<const int> ordinals) {
    constexpr const char* what = "cudarc::nccl::Communicator::init_all";
    if (ordinals.empty()) throw Error(fmt::format("{}: no device given", what));
    std::vector<int> sorted(ordinals.begin(), ordinals.end());
    std::sort(sorted.begin(), sorted.end());
    const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
    if (twice != sorted.end()) {
        throw Error(
            fmt::format("{}: device {} is given twice (NCCL runs one rank per device)", what, *twice));
    }
    if (ordinals.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
        throw Error(fmt::format("{}: too many devices", what));
}

int nccl_data_type(DataType type) noexcept {
    switch (type) {
        case DataType::int8:
            return sys::nccl_type::kInt8;
        case DataType::uint8:
            return sys::nccl_type::kUint8;
        case DataType::int32:
            return sys::nccl_type::kInt32;
        case DataType::uint32:
            return sys::nccl_type::kUint32;
        case DataType::int64:
            return sys::nccl_type::kInt64;
        case DataType::uint64:
            return sys::nccl_type::kUint64;
        case DataType::float16:
            return sys::nccl_type::kFloat16;
        case DataType::bfloat16:
            return sys::nccl_type::kBfloat16;
        case DataType::float32:
            return sys::nccl_type::kFloat32;
        case DataType::float64:
            return sys::nccl_type::kFloat64;
    }
    return sys::nccl_type::kFloat32;
}

int nccl_reduce_op(ReduceOp op) noexcept {
    switch (op) {
        case ReduceOp::sum:
            return sys::nccl_op::kSum;
        case ReduceOp::prod:
            return sys::nccl_op::kProd;
        case ReduceOp::max:
            return sys::nccl_op::kMax;
        case ReduceOp::min:
            return sys::nccl_op::kMin;
        case ReduceOp::avg:
            return sys::nccl_op::kAvg;
    }
    return sys::nccl_op::kSum;
}

std::size_t element_size(DataType type) noexcept {
    switch (type) {
        case DataType::int8:
        case DataType::uint8:
            return 1;
        case DataType::float16:
        case DataType::bfloat16:
            return 2;
        case DataType::int32:
        case DataType::uint32:
        case DataType::float32:
            return 4;
        case DataType::int64:
        case DataType::uint64:
        case DataType::float64:
            return 8;
    }
    return 1;
}

}  // namespace cudarc::nccl::detail

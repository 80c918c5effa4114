// Argument checks of cudarc::nccl that need no GPU (host tests call them directly), and the mapping of
// cudarc's enumerations to NCCL's numbers.
#pragma once

#include <cstddef>
#include <span>

#include "cudarc/nccl.hpp"

namespace cudarc::nccl::detail {

// Each throws cudarc::Error naming `what` and the problem.
void check_rank(const char* what, int rank, int count);       // 0 <= rank < count, count >= 1
void check_root(const char* what, int root, int world_size);  // a rank of the communicator
void check_peer(const char* what, int peer, int world_size);  // a rank of the communicator
void check_same_count(const char* what, std::size_t send, std::size_t recv);
void check_gather_counts(const char* what, std::size_t send, std::size_t recv,
                         int world_size);  // recv = n send
void check_scatter_counts(const char* what, std::size_t send, std::size_t recv,
                          int world_size);                       // send = n recv
void check_devices_for_init_all(std::span<const int> ordinals);  // at least one, none twice

// NCCL's ncclDataType_t and ncclRedOp_t numbers.
[[nodiscard]] int nccl_data_type(DataType type) noexcept;
[[nodiscard]] int nccl_reduce_op(ReduceOp op) noexcept;
[[nodiscard]] std::size_t element_size(DataType type) noexcept;

}  // namespace cudarc::nccl::detail

/// @file
/// cudarc — the umbrella header. (cudarc/fmt.hpp, the fmt formatters, is opt-in and not included here.)
#pragma once

#include "cudarc/borrowed.hpp"
#include "cudarc/completion_queue.hpp"
#include "cudarc/copy.hpp"
#include "cudarc/counters.hpp"
#include "cudarc/device.hpp"
#include "cudarc/dlpack.hpp"
#include "cudarc/error.hpp"
#include "cudarc/event.hpp"
#include "cudarc/graph.hpp"
#include "cudarc/kernel.hpp"
#include "cudarc/launch.hpp"
#include "cudarc/launch_config.hpp"
#include "cudarc/module.hpp"
#include "cudarc/nccl.hpp"
#include "cudarc/optim/optimizer.hpp"
#include "cudarc/pinned.hpp"
#include "cudarc/pitched.hpp"
#include "cudarc/slice.hpp"
#include "cudarc/stream.hpp"
#include "cudarc/version.hpp"

/// \namespace cudarc
/// @brief cudarc's public API: devices, streams, events, device memory, copies, kernels (NVRTC and modules),
/// launches and graphs, with hazards between streams tracked for you (docs/architecture.md).

/// \namespace cudarc::nccl
/// @brief Collectives over NCCL, loaded at run time: communicators, groups and the collective calls
/// (docs/multi-gpu.md).

/// \namespace cudarc::dlpack
/// @brief The DLPack ABI (cudarc/detail/dlpack_abi.hpp): the structs from_dlpack reads and to_dlpack writes.

/// \namespace cudarc::optim
/// @brief Optimizers (Adam, AdamW, SGD, Lion, ...) that step parameter tensors on the caller's stream with
/// multi-tensor kernels (docs/optimizers.md).

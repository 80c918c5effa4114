// The legacy pattern, kept only as the benchmark's baseline: every update on the legacy NULL stream,
// followed by a device-wide synchronize (cuCtxSynchronize) per parameter tensor. This is what cudarc's
// stream-aware steps replace; it is deliberately not part of the public API.
#pragma once

#include <cstddef>

#include "cudarc/optim/optimizer.hpp"

namespace cudarc::optim::detail {

// Tensor `index` of `group`, on the legacy stream, then cuCtxSynchronize (counted). The same kernel and
// grid as Optimizer::step(stream, group, index, tensor), so the results are bitwise identical.
// Note: cudarc's streams are non-blocking, so the legacy stream does not wait for them: the tensors' and
// the state's earlier work must be complete (e.g. Device::synchronize() before a round of legacy steps).
void legacy_step(Optimizer& optimizer, GroupId group, std::size_t index, const ParamTensor& tensor);

}  // namespace cudarc::optim::detail

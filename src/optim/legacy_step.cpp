#include "optim/legacy_step.hpp"

#include "optim/optimizer_state.hpp"

namespace cudarc::optim::detail {

void legacy_step(Optimizer& optimizer, GroupId group, std::size_t index, const ParamTensor& tensor) {
    optimizer.state().step_tensor(nullptr, LaunchPath::legacy, group, index, tensor);
}

}  // namespace cudarc::optim::detail

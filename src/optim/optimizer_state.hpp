// The state behind cudarc::optim::Optimizer: groups, their state arenas and tables, the kernels, and the
// per-tensor and multi-tensor launch paths (also the legacy baseline's).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cudarc/device.hpp"
#include "cudarc/kernel.hpp"
#include "cudarc/optim/optimizer.hpp"
#include "cudarc/pinned.hpp"
#include "cudarc/slice.hpp"
#include "optim/group_layout.hpp"
#include "optim/kernel_abi.hpp"
#include "optim/state_arena.hpp"

namespace cudarc::optim::detail {

using TensorKernel =
    Kernel<void(abi::TensorDesc, abi::KernelParams, const void*, const void*, int*, unsigned*)>;
using MultiKernel = Kernel<void(const abi::TensorDesc*, const abi::Chunk*, int, int, abi::KernelParams,
                                const void*, const void*, int*, unsigned*)>;

// The four kernels of one (rule, element type, state precision).
struct KernelSet {
    TensorKernel tensor_update;
    TensorKernel tensor_unorm;
    MultiKernel multi_update;
    MultiKernel multi_unorm;
    int resident_per_multiprocessor = 1;  // blocks of these kernels that fit on one multiprocessor
    unsigned update_shared_bytes = 0;  // dynamic shared memory of the update pass (abi::dynamic_shared_bytes)
    unsigned update_block_threads = abi::kBlockThreads;  // its block size (abi::update_block_threads)
};

// Page-locked staging for table uploads. Note: a buffer is reused only when its last copy has completed
// (a non-blocking query), else another one is taken, so an upload never blocks the host.
class UploadStaging {
  public:
    void upload(Stream& stream, const Device& device, cudarc::detail::Buffer& dst, DevicePtr dst_ptr,
                const void* src, std::size_t bytes);

  private:
    struct Slot {
        cudarc::detail::PinnedAllocation memory;
        std::size_t bytes = 0;
    };
    std::vector<Slot> slots_;
};

struct Group {
    GroupOptions options;
    int state_count = 0;  // state arrays allocated per tensor (fixed at add_group)
    GroupLayout layout;
    std::vector<std::int64_t> steps;         // steps taken, per tensor
    std::vector<TensorAddresses> addresses;  // what the device's descriptor tables hold
    StateArena arena;
    DeviceSlice<std::byte> tables;  // per bucket: TensorDesc[] then Chunk[]
};

// How a step reaches the device: the caller's stream, or the legacy baseline (NULL stream + device sync).
enum class LaunchPath { stream, legacy };

class OptimizerState {
  public:
    OptimizerState(Stream& stream, const OptimizerOptions& options);

    [[nodiscard]] Group& group(GroupId id, std::string_view where);
    [[nodiscard]] const Group& group(GroupId id, std::string_view where) const;

    GroupId add_group(Stream& stream, const GroupOptions& options, std::span<const ParamTensor> tensors);
    void step_group(Stream& stream, GroupId id, std::span<const ParamTensor> tensors);
    // `stream` is null on the legacy path.
    void step_tensor(Stream* stream, LaunchPath path, GroupId id, std::size_t index,
                     const ParamTensor& tensor);

    Device device;
    OptimizerOptions options;
    StatePlacement placement = StatePlacement::device;
    double grad_scale = 1.0;
    unsigned multiprocessors = 1;
    DeviceSlice<std::uint8_t> maps;                   // 8-bit: the two code map images, back to back
    std::array<std::optional<KernelSet>, 3> kernels;  // by ElementType
    std::vector<std::unique_ptr<Group>> groups;
    UploadStaging staging;

  private:
    const KernelSet& kernels_for(ElementType type);
    [[nodiscard]] DevicePtr map_ptr(int state) const noexcept;
    void upload_descriptors(Stream& stream, Group& group, std::size_t bucket);
};

// Checks that `tensors` match the registered layout (count, element types, sizes). Throws cudarc::Error
// prefixed by `where`.
void check_tensors(std::string_view where, const GroupLayout& layout, std::span<const ParamTensor> tensors);
void check_tensor(std::string_view where, const GroupLayout& layout, std::size_t index,
                  const ParamTensor& tensor);

}  // namespace cudarc::optim::detail

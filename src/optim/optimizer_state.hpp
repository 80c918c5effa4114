// The state behind cudarc::optim::Optimizer: groups, their state and tables, the kernels, and the
// per-tensor and multi-tensor steps. A client of the public API like any other: launches, slices
// (device or managed memory), page-locked staging, hazard tracking through IndirectAccess.
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
#include "cudarc/launch.hpp"
#include "cudarc/optim/optimizer.hpp"
#include "cudarc/pinned.hpp"
#include "cudarc/slice.hpp"
#include "optim/group_layout.hpp"
#include "optim/kernel_abi.hpp"

namespace cudarc::optim::detail {

using TensorKernel = Kernel<void(abi::TensorDesc, abi::KernelParams, const abi::MapImage*,
                                 const abi::MapImage*, int*, unsigned*)>;
using MultiKernel = Kernel<void(const abi::TensorDesc*, const abi::Chunk*, int, int, abi::KernelParams,
                                const abi::MapImage*, const abi::MapImage*, int*, unsigned*)>;
using CapturableKernel = Kernel<void(const abi::TensorDesc*, const abi::Chunk*, int, int, abi::StepState*,
                                     int, const abi::MapImage*, const abi::MapImage*, int*, unsigned*)>;
using StoreKernel = Kernel<void(abi::StepState*, abi::KernelParams, abi::StepSchedule, long long)>;

// The kernels of one (rule, element type, state precision): the tensor and multi layouts, or for a
// capturable optimizer the capturable layout and store_step (abi::kernel_names).
struct KernelSet {
    TensorKernel tensor_update;
    TensorKernel tensor_unorm;
    MultiKernel multi_update;
    MultiKernel multi_unorm;
    CapturableKernel capturable_update;
    CapturableKernel capturable_unorm;
    StoreKernel store;
    int resident_per_multiprocessor = 1;  // blocks of these kernels that fit on one multiprocessor
    unsigned update_shared_bytes = 0;  // dynamic shared memory of the update pass (abi::dynamic_shared_bytes)
    unsigned update_block_threads = abi::kBlockThreads;  // its block size (abi::update_block_threads)
    // The passes' ordering after the kernel ahead of them (abi::pass_serialization).
    StreamSerialization serialization = StreamSerialization::full;
};

// Page-locked staging for table uploads. Note: a buffer is reused only when its last copy has completed
// (a non-blocking query), else another one is taken, so an upload never blocks the host.
class UploadStaging {
  public:
    // Copies dst.size() bytes from `src` into `dst`, asynchronously on `stream`; `src` may be reused at once.
    void upload(Stream& stream, const Device& device, DeviceView<std::byte> dst, const void* src);

  private:
    std::vector<PinnedBuffer<std::byte>> slots_;
};

// Note [One state allocation per group]: a group's state, of all its tensors, is one slice (device
// memory from the device's memory source, or managed memory for paged state): a 256-byte header (the
// non-finite flag, the max_unorm launch counter, a capturable group's step state), then each tensor's
// regions (GroupLayout). So a step of
// 1000 tensors checks one hazard state for all their state and prefetches paged state with one call.
struct Group {
    GroupOptions options;
    int state_count = 0;  // state arrays allocated per tensor (fixed at add_group)
    GroupLayout layout;
    std::vector<std::int64_t> steps;         // steps taken, per tensor
    std::vector<TensorAddresses> addresses;  // what the device's descriptor tables hold
    DeviceSlice<std::byte> state;
    DeviceSlice<std::byte> tables;  // per bucket: TensorDesc[] then Chunk[]
};

class OptimizerState {
  public:
    OptimizerState(Stream& stream, const OptimizerOptions& options);

    [[nodiscard]] Group& group(GroupId id, std::string_view where);
    [[nodiscard]] const Group& group(GroupId id, std::string_view where) const;

    GroupId add_group(Stream& stream, const GroupOptions& options, std::span<const ParamTensor> tensors);
    void step_group(Stream& stream, GroupId id, std::span<const ParamTensor> tensors);
    void step_tensor(Stream& stream, GroupId id, std::size_t index, const ParamTensor& tensor);
    // A capturable group's step state: writes `options` and the optimizer's grad scale (validated by
    // abi::make_step_settings), and the step count when `count` >= 0, on `stream`.
    void store_step(Stream& stream, Group& group, const GroupOptions& options, double scale,
                    std::int64_t count);
    [[nodiscard]] std::int64_t device_step_count(Stream& stream, Group& group);
    void check_stream(std::string_view where, const Stream& stream) const;
    // Throws, naming `where` and the overload to use instead, for a capturable optimizer.
    void require_not_capturable(std::string_view where, std::string_view instead) const;

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
    [[nodiscard]] const abi::MapImage* map(int state) const noexcept;
    void upload_descriptors(Stream& stream, Group& group, std::size_t bucket);
    // The launches of a capturable group step, once its tables are up to date.
    void launch_capturable_step(Stream& stream, Group& group);
    // Declares what the step's kernels reach through addresses: the tensors, the code maps and the state
    // (one operation: at most one wait per stream that used them, one event after).
    void declare(IndirectAccess& access, Group& group, std::span<const ParamTensor> tensors) const;
};

// Checks that `tensors` match the registered layout (count, element types, sizes). Throws cudarc::Error
// prefixed by `where`.
// The layout of tensor `index` of a group; throws naming `where` when the group has no such tensor.
[[nodiscard]] const TensorLayout& tensor_at(std::string_view where, const GroupLayout& layout,
                                            std::size_t index);
void check_tensors(std::string_view where, const GroupLayout& layout, std::span<const ParamTensor> tensors);
void check_tensor(std::string_view where, const GroupLayout& layout, std::size_t index,
                  const ParamTensor& tensor);

}  // namespace cudarc::optim::detail

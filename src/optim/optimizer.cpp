#include "cudarc/optim/optimizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "core/device_state.hpp"
#include "cudarc/error.hpp"
#include "cudarc/launch.hpp"
#include "cudarc/module.hpp"
#include "optim/optimizer_state.hpp"
#include "optim/options_bridge.hpp"
#include "optim/quantization.hpp"

namespace cudarc::optim {

void ParamTensor::throw_size_mismatch(std::size_t param, std::size_t grad) {
    throw Error(fmt::format(
        "cudarc::optim::ParamTensor: the parameter has {} elements but its gradient has {}", param, grad));
}

}  // namespace cudarc::optim

namespace cudarc::optim::detail {
namespace {

using cudarc::detail::Access;
using cudarc::detail::AtomicCounters;
using cudarc::detail::DeviceState;
using cudarc::detail::prepare_access;

constexpr unsigned kBlockThreads = abi::kBlockThreads;

// The launch of an update pass: `config`'s grid, with the block size and dynamic shared memory the
// set's update kernels take (the 8-bit tile copies' producer warp and buffers).
LaunchConfig update_config(const LaunchConfig& config, const KernelSet& set) {
    return LaunchConfig{config.grid, set.update_block_threads, set.update_shared_bytes};
}

const void* as_pointer(DevicePtr address) noexcept {
    return reinterpret_cast<const void*>(static_cast<std::uintptr_t>(address));
}
template <typename T>
T* as_mutable(DevicePtr address) noexcept {
    return reinterpret_cast<T*>(static_cast<std::uintptr_t>(address));
}

bool is_capturing(Stream& stream) {
    DeviceState& device = stream.state().device();
    const sys::DriverApi& api = device.api();
    if (api.stream_is_capturing == nullptr) return false;
    const auto scope = device.bind();
    int status = sys::kStreamCaptureStatusNone;
    device.check(api.stream_is_capturing(stream.native(), &status), "cuStreamIsCapturing");
    return status != sys::kStreamCaptureStatusNone;
}

void check_same_device(std::string_view where, const Stream& stream, const ParamTensor& tensor,
                       std::size_t index) {
    const DeviceState* device = &stream.state().device();
    if (tensor.param_buffer().device().get() != device || tensor.grad_buffer().device().get() != device) {
        throw Error(fmt::format("{}: tensor {} is not in device {}'s memory (the stream's device)", where,
                                index, stream.device_ordinal()));
    }
}

unsigned grid_for(const TensorLayout& t, StateFormat format, unsigned multiprocessors, const KernelSet& set) {
    return abi::recommended_grid(t.numel, format, static_cast<int>(multiprocessors),
                                 set.resident_per_multiprocessor);
}

}  // namespace

void check_tensor(std::string_view where, const GroupLayout& layout, std::size_t index,
                  const ParamTensor& tensor) {
    if (index >= layout.tensors.size()) {
        throw Error(fmt::format("{}: tensor index {} is out of range (the group has {} tensors)", where,
                                index, layout.tensors.size()));
    }
    const TensorLayout& t = layout.tensors[index];
    if (tensor.element_type() != t.type) {
        throw Error(fmt::format("{}: tensor {} holds {} elements but was registered as {}", where, index,
                                to_string(tensor.element_type()), to_string(t.type)));
    }
    if (tensor.numel() != static_cast<std::size_t>(t.numel)) {
        throw Error(fmt::format("{}: tensor {} has {} elements but was registered with {}", where, index,
                                tensor.numel(), t.numel));
    }
}

void check_tensors(std::string_view where, const GroupLayout& layout, std::span<const ParamTensor> tensors) {
    if (tensors.size() != layout.tensors.size()) {
        throw Error(fmt::format("{}: {} tensors given, the group was registered with {}", where,
                                tensors.size(), layout.tensors.size()));
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) check_tensor(where, layout, i, tensors[i]);
}

// --- UploadStaging ---

void UploadStaging::upload(Stream& stream, const Device& device, cudarc::detail::Buffer& dst,
                           DevicePtr dst_ptr, const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    Slot* slot = nullptr;
    for (Slot& candidate : slots_) {
        if (candidate.bytes >= bytes && candidate.memory.ready()) {
            slot = &candidate;
            break;
        }
    }
    if (slot == nullptr) {
        slots_.push_back(Slot{cudarc::detail::PinnedAllocation(device, std::max<std::size_t>(bytes, 4096)),
                              std::max<std::size_t>(bytes, 4096)});
        slot = &slots_.back();
    }
    std::memcpy(slot->memory.data(), src, bytes);
    slot->memory.copy_to_device_async(stream, dst, dst_ptr, slot->memory.data(), bytes);
}

// --- OptimizerState ---

OptimizerState::OptimizerState(Stream& stream, const OptimizerOptions& opts)
    : device(stream.device()), options(opts) {
    validate_optimizer_options(opts);
    multiprocessors = static_cast<unsigned>(std::max(1, device.multiprocessor_count()));
    if (opts.placement == StatePlacement::managed && StateArena::managed_supported(device)) {
        placement = StatePlacement::managed;
    }
    if (opts.precision == StatePrecision::blockwise8) {
        const Algorithm algorithm = to_algorithm(opts.rule);
        std::vector<std::uint8_t> images(2 * kQuantMapImageBytes);
        for (int state = 1; state <= 2; ++state) {
            const MapSign sign = abi::state_map(algorithm, state);
            const QuantMapImage image = make_map_image(dynamic_map(sign), sign);
            std::memcpy(images.data() + static_cast<std::size_t>(state - 1) * kQuantMapImageBytes,
                        image.data(), image.size());
        }
        maps = DeviceSlice<std::uint8_t>::from_host(stream, images);
    }
}

Group& OptimizerState::group(GroupId id, std::string_view where) {
    const auto index = static_cast<std::size_t>(id);
    if (index >= groups.size()) {
        throw Error(fmt::format("{}: group {} does not exist (the optimizer has {} groups)", where, index,
                                groups.size()));
    }
    return *groups[index];
}

const Group& OptimizerState::group(GroupId id, std::string_view where) const {
    return const_cast<OptimizerState*>(this)->group(id, where);
}

DevicePtr OptimizerState::map_ptr(int state) const noexcept {
    if (maps.empty()) return 0;
    return maps.device_ptr() + static_cast<DevicePtr>(state - 1) * kQuantMapImageBytes;
}

const KernelSet& OptimizerState::kernels_for(ElementType type) {
    auto& slot = kernels[static_cast<std::size_t>(type)];
    if (slot) return *slot;
    const Algorithm algorithm = to_algorithm(options.rule);
    const DType dtype = to_dtype(type);
    const StateFormat format = to_format(options.precision);
    CompileOptions compile;
    compile.defines = abi::compile_defines(algorithm, dtype);
    const Module& module = Module::shipped(device, abi::kernel_source(format), {}, compile);
    auto name = [&](KernelLayout layout, KernelPass pass) {
        return abi::kernel_name(algorithm, dtype, format, layout, pass);
    };
    KernelSet set;
    set.tensor_update =
        module.kernel<TensorKernel::signature>(name(KernelLayout::tensor, KernelPass::update));
    set.tensor_unorm =
        module.kernel<TensorKernel::signature>(name(KernelLayout::tensor, KernelPass::update_norm));
    set.multi_update =
        module.kernel<MultiKernel::signature>(name(KernelLayout::multi_tensor, KernelPass::update));
    set.multi_unorm =
        module.kernel<MultiKernel::signature>(name(KernelLayout::multi_tensor, KernelPass::update_norm));
    if (format == StateFormat::blockwise8) {
        const int major = device.backend() == Backend::cuda ? device.compute_capability().major : 0;
        set.update_shared_bytes = static_cast<unsigned>(abi::dynamic_shared_bytes(format, dtype, major));
        set.update_block_threads = abi::update_block_threads(format, major);
        if (set.update_shared_bytes > 0) {
            set.tensor_update.set_max_dynamic_shared_memory(set.update_shared_bytes);
            set.multi_update.set_max_dynamic_shared_memory(set.update_shared_bytes);
        }
        // 8-bit launches use one wave of resident blocks, so each stages its code maps once.
        int resident = INT_MAX;
        for (const Function* f : {&set.tensor_update.function(), &set.multi_update.function()}) {
            resident = std::min(resident, f->max_active_blocks_per_multiprocessor(set.update_block_threads,
                                                                                  set.update_shared_bytes));
        }
        for (const Function* f : {&set.tensor_unorm.function(), &set.multi_unorm.function()}) {
            resident = std::min(resident, f->max_active_blocks_per_multiprocessor(kBlockThreads, 0));
        }
        set.resident_per_multiprocessor = std::max(1, resident);
    }
    slot = std::move(set);
    return *slot;
}

GroupId OptimizerState::add_group(Stream& stream, const GroupOptions& group_options,
                                  std::span<const ParamTensor> tensors) {
    constexpr std::string_view where = "cudarc::optim::Optimizer::add_group";
    validate_group_options(where, options.rule, group_options);
    if (tensors.empty()) throw Error(fmt::format("{}: a parameter group needs at least one tensor", where));
    if (&stream.state().device() != device.state().get()) {
        throw Error(fmt::format("{}: the stream is on device {}, the optimizer on device {}", where,
                                stream.device_ordinal(), device.ordinal()));
    }
    std::vector<ElementType> types;
    std::vector<std::int64_t> numels;
    std::vector<TensorAddresses> addresses;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        check_same_device(where, stream, tensors[i], i);
        types.push_back(tensors[i].element_type());
        numels.push_back(static_cast<std::int64_t>(tensors[i].numel()));
        addresses.push_back(TensorAddresses{tensors[i].param_ptr(), tensors[i].grad_ptr()});
    }
    auto group = std::make_unique<Group>();
    group->options = group_options;
    group->state_count = state_arrays(options.rule, group_options.momentum);
    group->layout =
        plan_group(options.precision, group->state_count, types, numels, options.max_chunk_elements);
    // Compile (or load from the caches) before anything is allocated, so a failure leaves nothing behind.
    for (const BucketLayout& bucket : group->layout.buckets) static_cast<void>(kernels_for(bucket.type));

    group->steps.assign(tensors.size(), 0);
    group->addresses = addresses;
    group->arena = StateArena(stream, group->layout.arena_bytes, placement == StatePlacement::managed);
    group->tables = DeviceSlice<std::byte>::uninitialized(stream, group->layout.table_bytes);
    // One upload for all tables of the group.
    std::vector<std::byte> image(group->layout.table_bytes);
    for (std::size_t b = 0; b < group->layout.buckets.size(); ++b) {
        const BucketLayout& bucket = group->layout.buckets[b];
        const auto descs = bucket_descriptors(group->layout, b, group->arena.base(), group->addresses);
        std::memcpy(image.data() + bucket.descs_offset, descs.data(), descs.size() * sizeof(abi::TensorDesc));
        if (!bucket.chunks.empty()) {
            std::memcpy(image.data() + bucket.chunks_offset, bucket.chunks.data(),
                        bucket.chunks.size() * sizeof(abi::Chunk));
        }
    }
    staging.upload(stream, device, group->tables.buffer(), group->tables.device_ptr(), image.data(),
                   image.size());
    groups.push_back(std::move(group));
    return GroupId{groups.size() - 1};
}

void OptimizerState::upload_descriptors(Stream& stream, Group& g, std::size_t bucket) {
    const BucketLayout& b = g.layout.buckets[bucket];
    const auto descs = bucket_descriptors(g.layout, bucket, g.arena.base(), g.addresses);
    staging.upload(stream, device, g.tables.buffer(), g.tables.device_ptr() + b.descs_offset, descs.data(),
                   descs.size() * sizeof(abi::TensorDesc));
}

void OptimizerState::step_tensor(Stream* stream, LaunchPath path, GroupId id, std::size_t index,
                                 const ParamTensor& tensor) {
    const std::string_view where =
        path == LaunchPath::legacy ? "cudarc::optim::legacy_step" : "cudarc::optim::Optimizer::step";
    Group& g = group(id, where);
    check_tensor(where, g.layout, index, tensor);
    DeviceState& device_state = *device.state();
    if (stream != nullptr) {
        if (&stream->state().device() != &device_state) {
            throw Error(fmt::format("{}: the stream is on device {}, the optimizer on device {}", where,
                                    stream->device_ordinal(), device.ordinal()));
        }
        check_same_device(where, *stream, tensor, index);
    } else if (tensor.param_buffer().device().get() != &device_state ||
               tensor.grad_buffer().device().get() != &device_state) {
        throw Error(
            fmt::format("{}: tensor {} is not in device {}'s memory", where, index, device.ordinal()));
    }
    const abi::KernelParams params =
        kernel_params(where, options.rule, g.options, grad_scale, g.steps[index] + 1);
    const TensorLayout& t = g.layout.tensors[index];
    const StateFormat format = to_format(options.precision);
    const KernelSet& set = kernels_for(t.type);
    const abi::TensorDesc desc =
        describe(g.layout, index, g.arena.base(), TensorAddresses{tensor.param_ptr(), tensor.grad_ptr()});
    const void* qmap1 = as_pointer(map_ptr(1));
    const void* qmap2 = as_pointer(map_ptr(2));
    int* flag = as_mutable<int>(g.arena.base() + g.layout.flag_offset);
    unsigned* blocks_done = as_mutable<unsigned>(g.arena.base() + g.layout.counter_offset);
    const bool clip = params.max_unorm > 0.0f;
    const unsigned grid = grid_for(t, format, multiprocessors, set);

    if (t.numel == 0) {
        ++g.steps[index];
        return;
    }
    if (path == LaunchPath::stream) {
        Stream& s = *stream;
        prepare_access(s, tensor.param_buffer(), Access::write);
        prepare_access(s, tensor.grad_buffer(), Access::read);
        if (!maps.empty()) prepare_access(s, maps.buffer(), Access::read);
        g.arena.prepare(s);
        g.arena.prefetch(s, t.begin, t.end - t.begin);
        const LaunchConfig config{grid, kBlockThreads};
        if (clip) launch(s, config, set.tensor_unorm, desc, params, qmap1, qmap2, flag, blocks_done);
        launch(s, update_config(config, set), set.tensor_update, desc, params, qmap1, qmap2, flag,
               blocks_done);
    } else {
        // The pattern cudarc replaces: the legacy NULL stream, then a device-wide synchronize.
        const auto scope = device_state.bind();
        const sys::DriverApi& api = device_state.api();
        g.arena.prefetch_raw(sys::legacy_stream(), t.begin, t.end - t.begin);
        abi::TensorDesc desc_arg = desc;
        abi::KernelParams params_arg = params;
        void* args[] = {&desc_arg, &params_arg, &qmap1, &qmap2, &flag, &blocks_done};
        auto raw_launch = [&](const TensorKernel& kernel, unsigned threads, unsigned shared_bytes) {
            device_state.check(api.launch_kernel(kernel.native(), grid, 1, 1, threads, 1, 1, shared_bytes,
                                                 sys::legacy_stream(), args, nullptr),
                               "cuLaunchKernel");
            AtomicCounters::bump(device_state.counters().kernel_launches);
        };
        if (clip) raw_launch(set.tensor_unorm, kBlockThreads, 0);
        raw_launch(set.tensor_update, set.update_block_threads, set.update_shared_bytes);
        device_state.check(api.ctx_synchronize(), "cuCtxSynchronize");
        AtomicCounters::bump(device_state.counters().context_synchronizes);
    }
    ++g.steps[index];
}

void OptimizerState::step_group(Stream& stream, GroupId id, std::span<const ParamTensor> tensors) {
    constexpr std::string_view where = "cudarc::optim::Optimizer::step";
    Group& g = group(id, where);
    check_tensors(where, g.layout, tensors);
    if (&stream.state().device() != device.state().get()) {
        throw Error(fmt::format("{}: the stream is on device {}, the optimizer on device {}", where,
                                stream.device_ordinal(), device.ordinal()));
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) check_same_device(where, stream, tensors[i], i);

    // Everything that can throw for bad input is decided before any work is enqueued.
    struct BucketPlan {
        bool uniform = true;  // one step number for all its tensors: one launch per pass
        abi::KernelParams params{};
        bool addresses_changed = false;
    };
    std::vector<BucketPlan> plans(g.layout.buckets.size());
    bool any_change = false;
    for (std::size_t b = 0; b < g.layout.buckets.size(); ++b) {
        const BucketLayout& bucket = g.layout.buckets[b];
        BucketPlan& plan = plans[b];
        const std::int64_t first = g.steps[bucket.tensors.front()];
        for (const std::size_t i : bucket.tensors) {
            plan.uniform = plan.uniform && g.steps[i] == first;
            const TensorAddresses now{tensors[i].param_ptr(), tensors[i].grad_ptr()};
            plan.addresses_changed = plan.addresses_changed || !(now == g.addresses[i]);
        }
        if (plan.uniform) plan.params = kernel_params(where, options.rule, g.options, grad_scale, first + 1);
        any_change = any_change || plan.addresses_changed;
    }
    for (std::size_t b = 0; b < g.layout.buckets.size(); ++b) {
        if (plans[b].uniform) continue;  // validated above, once for the bucket
        for (const std::size_t i : g.layout.buckets[b].tensors) {
            static_cast<void>(kernel_params(where, options.rule, g.options, grad_scale, g.steps[i] + 1));
        }
    }
    if (any_change && is_capturing(stream)) {
        throw Error(fmt::format(
            "{}: the tensors' buffers differ from the ones the group's tables hold, and the stream is being "
            "captured: step once outside the capture with these buffers first",
            where));
    }

    for (std::size_t i = 0; i < tensors.size(); ++i) {
        prepare_access(stream, tensors[i].param_buffer(), Access::write);
        prepare_access(stream, tensors[i].grad_buffer(), Access::read);
    }
    if (!maps.empty()) prepare_access(stream, maps.buffer(), Access::read);
    g.arena.prepare(stream);
    g.arena.prefetch(stream, 0, g.arena.bytes());

    const void* qmap1 = as_pointer(map_ptr(1));
    const void* qmap2 = as_pointer(map_ptr(2));
    int* flag = as_mutable<int>(g.arena.base() + g.layout.flag_offset);
    unsigned* blocks_done = as_mutable<unsigned>(g.arena.base() + g.layout.counter_offset);
    for (std::size_t b = 0; b < g.layout.buckets.size(); ++b) {
        const BucketLayout& bucket = g.layout.buckets[b];
        BucketPlan& plan = plans[b];
        if (plan.addresses_changed) {
            for (const std::size_t i : bucket.tensors) {
                g.addresses[i] = TensorAddresses{tensors[i].param_ptr(), tensors[i].grad_ptr()};
            }
            upload_descriptors(stream, g, b);
        }
        if (!plan.uniform) {
            // Tensors stepped one by one before: their step numbers differ, so each gets its own launch.
            for (const std::size_t i : bucket.tensors)
                step_tensor(&stream, LaunchPath::stream, id, i, tensors[i]);
            continue;
        }
        if (!bucket.chunks.empty()) {
            prepare_access(stream, g.tables.buffer(), Access::read);
            const KernelSet& set = kernels_for(bucket.type);
            const auto* descs =
                as_mutable<const abi::TensorDesc>(g.tables.device_ptr() + bucket.descs_offset);
            const auto* chunks = as_mutable<const abi::Chunk>(g.tables.device_ptr() + bucket.chunks_offset);
            const int count = static_cast<int>(bucket.tensors.size());
            const int chunk_count = static_cast<int>(bucket.chunks.size());
            const LaunchConfig config{abi::recommended_multi_grid(
                                          bucket.chunks.size(), to_format(options.precision),
                                          static_cast<int>(multiprocessors), set.resident_per_multiprocessor),
                                      kBlockThreads};
            if (plan.params.max_unorm > 0.0f) {
                launch(stream, config, set.multi_unorm, descs, chunks, chunk_count, count, plan.params, qmap1,
                       qmap2, flag, blocks_done);
            }
            launch(stream, update_config(config, set), set.multi_update, descs, chunks, chunk_count, count,
                   plan.params, qmap1, qmap2, flag, blocks_done);
        }
        for (const std::size_t i : bucket.tensors) ++g.steps[i];
    }
}

}  // namespace cudarc::optim::detail

namespace cudarc::optim {

using detail::OptimizerState;

namespace {
[[noreturn]] void throw_moved_from() {
    throw Error("cudarc::optim::Optimizer: this optimizer was moved from");
}
}  // namespace

Optimizer::Optimizer(Stream& stream, const OptimizerOptions& options)
    : state_(std::make_unique<OptimizerState>(stream, options)) {}
Optimizer::Optimizer(Optimizer&&) noexcept = default;
Optimizer& Optimizer::operator=(Optimizer&&) noexcept = default;
Optimizer::~Optimizer() = default;

#define CUDARC_OPTIM_SELF()          \
    if (!state_) throw_moved_from(); \
    OptimizerState& self = *state_

GroupId Optimizer::add_group(Stream& stream, const GroupOptions& options,
                             std::span<const ParamTensor> tensors) {
    CUDARC_OPTIM_SELF();
    return self.add_group(stream, options, tensors);
}

void Optimizer::step(Stream& stream, GroupId group, std::span<const ParamTensor> tensors) {
    CUDARC_OPTIM_SELF();
    self.step_group(stream, group, tensors);
}

void Optimizer::step(Stream& stream, GroupId group, std::size_t index, const ParamTensor& tensor) {
    CUDARC_OPTIM_SELF();
    self.step_tensor(&stream, detail::LaunchPath::stream, group, index, tensor);
}

std::size_t Optimizer::group_count() const noexcept {
    return state_ ? state_->groups.size() : 0;
}

std::size_t Optimizer::tensor_count(GroupId group) const {
    CUDARC_OPTIM_SELF();
    return self.group(group, "cudarc::optim::Optimizer::tensor_count").layout.tensors.size();
}

const GroupOptions& Optimizer::options(GroupId group) const {
    CUDARC_OPTIM_SELF();
    return self.group(group, "cudarc::optim::Optimizer::options").options;
}

void Optimizer::set_options(GroupId group, const GroupOptions& options) {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::set_options";
    detail::Group& g = self.group(group, where);
    detail::validate_group_options(where, self.options.rule, options);
    if (detail::state_arrays(self.options.rule, options.momentum) > g.state_count) {
        throw Error(
            fmt::format("{}: momentum {} needs a momentum buffer, but the group was added with momentum 0 "
                        "and keeps none (add the group with momentum != 0)",
                        where, options.momentum));
    }
    g.options = options;
}

std::int64_t Optimizer::step_count(GroupId group, std::size_t index) const {
    CUDARC_OPTIM_SELF();
    const detail::Group& g = self.group(group, "cudarc::optim::Optimizer::step_count");
    if (index >= g.steps.size()) {
        throw Error(
            fmt::format("cudarc::optim::Optimizer::step_count: tensor index {} is out of range (the group "
                        "has {} tensors)",
                        index, g.steps.size()));
    }
    return g.steps[index];
}

std::int64_t Optimizer::step_count(GroupId group) const {
    CUDARC_OPTIM_SELF();
    const detail::Group& g = self.group(group, "cudarc::optim::Optimizer::step_count");
    return *std::max_element(g.steps.begin(), g.steps.end());
}

void Optimizer::set_step_count(GroupId group, std::int64_t count) {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::set_step_count";
    detail::Group& g = self.group(group, where);
    // The next step's number must be valid for the kernels.
    static_cast<void>(detail::kernel_params(where, self.options.rule, g.options, self.grad_scale, count + 1));
    std::fill(g.steps.begin(), g.steps.end(), count);
}

void Optimizer::set_grad_scale(double scale) {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::set_grad_scale";
    for (const auto& g : self.groups) {
        static_cast<void>(detail::kernel_params(where, self.options.rule, g->options, scale, 1));
    }
    static_cast<void>(
        detail::kernel_params(where, UpdateRule::sgd, default_options(UpdateRule::sgd), scale, 1));
    self.grad_scale = scale;
}

double Optimizer::grad_scale() const noexcept {
    return state_ ? state_->grad_scale : 1.0;
}

bool Optimizer::nonfinite_seen(Stream& stream) const {
    CUDARC_OPTIM_SELF();
    bool seen = false;
    for (std::size_t i = 0; i < self.groups.size(); ++i) seen = nonfinite_seen(stream, GroupId{i}) || seen;
    return seen;
}

bool Optimizer::nonfinite_seen(Stream& stream, GroupId group) const {
    CUDARC_OPTIM_SELF();
    detail::Group& g = self.group(group, "cudarc::optim::Optimizer::nonfinite_seen");
    int flag = 0;
    g.arena.copy_to_host(stream, g.layout.flag_offset, &flag, sizeof(flag));
    return flag != 0;
}

void Optimizer::reset_nonfinite(Stream& stream) {
    CUDARC_OPTIM_SELF();
    for (auto& g : self.groups) g->arena.zero(stream, g->layout.flag_offset, sizeof(int));
}

namespace {

// The host arrays of one tensor's state, with the sizes read_state gives them.
struct StateRegion {
    std::size_t offset;
    std::size_t bytes;
    void* host;
};

std::vector<StateRegion> state_regions(const detail::TensorLayout& t, StatePrecision precision,
                                       TensorState& s, bool resize) {
    const auto n = static_cast<std::size_t>(t.numel);
    const auto blocks = static_cast<std::size_t>(abi::absmax_count(t.numel));
    std::vector<StateRegion> regions;
    auto add = [&](std::size_t offset, auto& vector, std::size_t count) {
        if (resize) vector.assign(offset == detail::kNoRegion ? 0 : count, {});
        if (offset != detail::kNoRegion) {
            regions.push_back(StateRegion{offset, count * sizeof(vector[0]), vector.data()});
        }
    };
    if (precision == StatePrecision::fp32) {
        add(t.state1, s.state1, n);
        add(t.state2, s.state2, n);
    } else {
        add(t.state1, s.codes1, n);
        add(t.state2, s.codes2, n);
        add(t.absmax1, s.absmax1, blocks);
        add(t.absmax2, s.absmax2, blocks);
    }
    return regions;
}

}  // namespace

TensorState Optimizer::read_state(Stream& stream, GroupId group, std::size_t index) const {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::read_state";
    detail::Group& g = self.group(group, where);
    if (index >= g.layout.tensors.size()) {
        throw Error(fmt::format("{}: tensor index {} is out of range (the group has {} tensors)", where,
                                index, g.layout.tensors.size()));
    }
    TensorState state;
    for (const auto& region : state_regions(g.layout.tensors[index], self.options.precision, state, true)) {
        g.arena.copy_to_host(stream, region.offset, region.host, region.bytes);
    }
    return state;
}

void Optimizer::write_state(Stream& stream, GroupId group, std::size_t index, const TensorState& state) {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::write_state";
    detail::Group& g = self.group(group, where);
    if (index >= g.layout.tensors.size()) {
        throw Error(fmt::format("{}: tensor index {} is out of range (the group has {} tensors)", where,
                                index, g.layout.tensors.size()));
    }
    TensorState expected;
    const auto regions = state_regions(g.layout.tensors[index], self.options.precision, expected, true);
    const std::pair<std::size_t, std::size_t> sizes[] = {
        {state.state1.size(), expected.state1.size()},   {state.state2.size(), expected.state2.size()},
        {state.codes1.size(), expected.codes1.size()},   {state.codes2.size(), expected.codes2.size()},
        {state.absmax1.size(), expected.absmax1.size()}, {state.absmax2.size(), expected.absmax2.size()}};
    const char* names[] = {"state1", "state2", "codes1", "codes2", "absmax1", "absmax2"};
    for (std::size_t k = 0; k < 6; ++k) {
        if (sizes[k].first != sizes[k].second) {
            throw Error(fmt::format("{}: {} has {} elements, this tensor's state needs {}", where, names[k],
                                    sizes[k].first, sizes[k].second));
        }
    }
    TensorState source = state;
    for (const auto& region : state_regions(g.layout.tensors[index], self.options.precision, source, false)) {
        g.arena.copy_from_host(stream, region.offset, region.host, region.bytes);
    }
}

const OptimizerOptions& Optimizer::optimizer_options() const noexcept {
    static const OptimizerOptions moved_from{};
    return state_ ? state_->options : moved_from;
}

StatePlacement Optimizer::state_placement() const noexcept {
    return state_ ? state_->placement : StatePlacement::device;
}

std::size_t Optimizer::state_bytes() const noexcept {
    if (!state_) return 0;
    std::size_t total = 0;
    for (const auto& g : state_->groups) total += g->arena.bytes();
    return total;
}

#undef CUDARC_OPTIM_SELF

}  // namespace cudarc::optim

#include "cudarc/optim/optimizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <utility>

#include "cudarc/copy.hpp"
#include "cudarc/error.hpp"
#include "cudarc/launch.hpp"
#include "cudarc/module.hpp"
#include "optim/optimizer_state.hpp"
#include "optim/quantization.hpp"
#include "optim/validation.hpp"

namespace cudarc::optim {

void ParamTensor::throw_size_mismatch(std::size_t param, std::size_t grad) {
    throw Error(fmt::format(
        "cudarc::optim::ParamTensor: the parameter has {} elements but its gradient has {}", param, grad));
}

}  // namespace cudarc::optim

namespace cudarc::optim::detail {
namespace {

constexpr unsigned kBlockThreads = abi::kBlockThreads;

// The launch of a unorm pass: `grid` blocks of kBlockThreads, ordered as the set's passes are.
LaunchConfig unorm_config(unsigned grid, const KernelSet& set) {
    return LaunchConfig{grid, kBlockThreads}.with_serialization(set.serialization);
}

// The launch of an update pass: the block size and dynamic shared memory the set's update kernels take
// (the 8-bit tile copies' producer warp and buffers).
LaunchConfig update_config(const LaunchConfig& unorm, const KernelSet& set) {
    return LaunchConfig{unorm.grid, set.update_block_threads, set.update_shared_bytes}.with_serialization(
        set.serialization);
}

// A device address as the kernels' pointer parameters take it. Note: the kernels reach the memory behind
// these through their arguments or tables; hazard tracking knows of it through IndirectAccess.
template <typename T>
T* device_pointer(DevicePtr address) noexcept {
    return reinterpret_cast<T*>(static_cast<std::uintptr_t>(address));
}

// `device`: the stream's ordinal.
void check_same_device(std::string_view where, int device, const ParamTensor& tensor, std::size_t index) {
    if (tensor.device_ordinal() != device) {
        throw Error(fmt::format("{}: tensor {} is not in device {}'s memory (the stream's device)", where,
                                index, device));
    }
}

// Note: a step of an ordinary optimizer passes its step number and hyper-parameters as kernel arguments,
// which a captured graph would repeat at every replay (Note [Capturable steps]).
void check_not_captured(std::string_view where, const Stream& stream) {
    if (stream.is_capturing()) {
        throw Error(fmt::format(
            "{}: the stream is being captured, but this optimizer is not capturable: its step number and "
            "hyper-parameters are kernel arguments, so every replay would repeat this step. Create it with "
            "OptimizerOptions::capturable = true",
            where));
    }
}

// A table upload goes through page-locked staging whose reuse is decided by an event query, which a
// capture does not allow (and the upload would be replayed with the staged bytes of the capture).
void refuse_table_upload_while_captured(std::string_view where, const Stream& stream) {
    if (stream.is_capturing()) {
        throw Error(fmt::format(
            "{}: the tensors' buffers differ from the ones the group's tables hold, and the stream is being "
            "captured: step once outside the capture with these buffers first",
            where));
    }
}

}  // namespace

const TensorLayout& tensor_at(std::string_view where, const GroupLayout& layout, std::size_t index) {
    if (index >= layout.tensors.size()) {
        throw Error(fmt::format("{}: tensor index {} is out of range (the group has {} tensors)", where,
                                index, layout.tensors.size()));
    }
    return layout.tensors[index];
}

void check_tensor(std::string_view where, const GroupLayout& layout, std::size_t index,
                  const ParamTensor& tensor) {
    const TensorLayout& t = tensor_at(where, layout, index);
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

void UploadStaging::upload(Stream& stream, const Device& device, DeviceView<std::byte> dst, const void* src) {
    const std::size_t bytes = dst.size();
    if (bytes == 0) return;
    PinnedBuffer<std::byte>* slot = nullptr;
    for (PinnedBuffer<std::byte>& candidate : slots_) {
        if (candidate.size() == bytes && candidate.ready()) {
            slot = &candidate;
            break;
        }
    }
    if (slot == nullptr) slot = &slots_.emplace_back(device, bytes);
    std::memcpy(slot->data(), src, bytes);
    slot->copy_to_device_async(stream, dst);
}

// --- OptimizerState ---

OptimizerState::OptimizerState(Stream& stream, const OptimizerOptions& opts)
    : device(stream.device()), options(opts) {
    validate_optimizer_options(opts);
    multiprocessors = static_cast<unsigned>(std::max(1, device.multiprocessor_count()));
    if (opts.placement == StatePlacement::managed && device.supports_managed_memory()) {
        placement = StatePlacement::managed;
    }
    if (opts.precision == StatePrecision::blockwise8) {
        std::vector<std::uint8_t> images(2 * kQuantMapImageBytes);
        for (int state = 1; state <= 2; ++state) {
            const MapSign sign = abi::state_map(opts.rule, state);
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

const abi::MapImage* OptimizerState::map(int state) const noexcept {
    if (maps.empty()) return nullptr;
    return device_pointer<const abi::MapImage>(maps.device_ptr() +
                                               static_cast<DevicePtr>(state - 1) * kQuantMapImageBytes);
}

void OptimizerState::check_stream(std::string_view where, const Stream& stream) const {
    if (stream.device_ordinal() != device.ordinal()) {
        throw Error(fmt::format("{}: the stream is on device {}, the optimizer on device {}", where,
                                stream.device_ordinal(), device.ordinal()));
    }
}

const KernelSet& OptimizerState::kernels_for(ElementType type) {
    auto& slot = kernels[static_cast<std::size_t>(type)];
    if (slot) return *slot;
    const StatePrecision precision = options.precision;
    const bool capturable = options.capturable;
    const Module& module = Module::shipped(device, abi::kKernelSource,
                                           abi::kernel_names(options.rule, type, precision, capturable));
    auto name = [&](abi::KernelLayout layout, abi::KernelPass pass) {
        return abi::kernel_name(options.rule, type, precision, layout, pass);
    };
    using abi::KernelLayout;
    using abi::KernelPass;
    KernelSet set;
    // The update and update-norm passes this optimizer launches.
    std::vector<const Function*> updates;
    std::vector<const Function*> norms;
    if (capturable) {
        set.capturable_update = module.kernel<CapturableKernel::signature>(
            name(KernelLayout::multi_tensor_capturable, KernelPass::update));
        set.capturable_unorm = module.kernel<CapturableKernel::signature>(
            name(KernelLayout::multi_tensor_capturable, KernelPass::update_norm));
        set.store = module.kernel<StoreKernel::signature>(abi::store_step_name(options.rule));
        updates = {&set.capturable_update.function()};
        norms = {&set.capturable_unorm.function()};
    } else {
        set.tensor_update =
            module.kernel<TensorKernel::signature>(name(KernelLayout::tensor, KernelPass::update));
        set.tensor_unorm =
            module.kernel<TensorKernel::signature>(name(KernelLayout::tensor, KernelPass::update_norm));
        set.multi_update =
            module.kernel<MultiKernel::signature>(name(KernelLayout::multi_tensor, KernelPass::update));
        set.multi_unorm =
            module.kernel<MultiKernel::signature>(name(KernelLayout::multi_tensor, KernelPass::update_norm));
        updates = {&set.tensor_update.function(), &set.multi_update.function()};
        norms = {&set.tensor_unorm.function(), &set.multi_unorm.function()};
    }
    const int major = device.backend() == Backend::cuda ? device.compute_capability().major : 0;
    set.serialization = abi::pass_serialization(major);
    if (precision == StatePrecision::blockwise8) {
        set.update_shared_bytes =
            static_cast<unsigned>(abi::dynamic_shared_bytes(options.rule, precision, type, major));
        set.update_block_threads = abi::update_block_threads(precision, major);
        if (set.update_shared_bytes > 0) {
            for (const Function* f : updates) f->set_max_dynamic_shared_memory(set.update_shared_bytes);
        }
        // 8-bit launches use one wave of resident blocks, so each stages its code maps once.
        int resident = INT_MAX;
        for (const Function* f : updates) {
            resident = std::min(resident, f->max_active_blocks_per_multiprocessor(set.update_block_threads,
                                                                                  set.update_shared_bytes));
        }
        for (const Function* f : norms) {
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
    check_stream(where, stream);
    if (options.capturable) {
        // The step state moves on in the step's last launch; a group of empty tensors launches nothing.
        const bool any_element =
            std::any_of(tensors.begin(), tensors.end(), [](const ParamTensor& t) { return t.numel() > 0; });
        if (!any_element) {
            throw Error(fmt::format(
                "{}: a capturable optimizer's group needs a tensor with at least one element (its kernels "
                "advance the step count)",
                where));
        }
        static_cast<void>(abi::make_step_settings(options.rule, group_options, grad_scale));
    }
    std::vector<ElementType> types;
    std::vector<std::int64_t> numels;
    std::vector<TensorAddresses> addresses;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        check_same_device(where, device.ordinal(), tensors[i], i);
        types.push_back(tensors[i].element_type());
        numels.push_back(static_cast<std::int64_t>(tensors[i].numel()));
        addresses.push_back(TensorAddresses{tensors[i].param_ptr(), tensors[i].grad_ptr()});
    }
    auto group = std::make_unique<Group>();
    group->options = group_options;
    const StateShape shape = state_shape(options.rule, group_options.momentum);
    group->state_count = shape.arrays;
    group->layout = plan_group(options.precision, shape, types, numels, options.max_chunk_elements);
    // Compile (or load from the caches) before anything is allocated, so a failure leaves nothing behind.
    for (const BucketLayout& bucket : group->layout.buckets) static_cast<void>(kernels_for(bucket.type));

    group->steps.assign(tensors.size(), 0);
    group->addresses = addresses;
    const std::size_t state_bytes = group->layout.arena_bytes;
    if (placement == StatePlacement::managed) {
        group->state = DeviceSlice<std::byte>::managed(stream, state_bytes);
        group->state.fill_zero(stream);
        prefetch(stream, group->state.view());
    } else {
        group->state = DeviceSlice<std::byte>::zeros(stream, state_bytes);
    }
    group->tables = DeviceSlice<std::byte>::uninitialized(stream, group->layout.table_bytes);
    // One upload for all tables of the group.
    std::vector<std::byte> image(group->layout.table_bytes);
    for (std::size_t b = 0; b < group->layout.buckets.size(); ++b) {
        const BucketLayout& bucket = group->layout.buckets[b];
        const auto descs = bucket_descriptors(group->layout, b, group->state.device_ptr(), group->addresses);
        std::memcpy(image.data() + bucket.descs_offset, descs.data(), descs.size() * sizeof(abi::TensorDesc));
        if (!bucket.chunks.empty()) {
            std::memcpy(image.data() + bucket.chunks_offset, bucket.chunks.data(),
                        bucket.chunks.size() * sizeof(abi::Chunk));
        }
    }
    staging.upload(stream, device, group->tables.view(), image.data());
    if (options.capturable) store_step(stream, *group, group_options, grad_scale, 0);
    groups.push_back(std::move(group));
    return GroupId{groups.size() - 1};
}

void OptimizerState::store_step(Stream& stream, Group& g, const GroupOptions& group_options, double scale,
                                std::int64_t count) {
    const abi::StepSettings settings = abi::make_step_settings(options.rule, group_options, scale);
    const KernelSet& set = kernels_for(g.layout.buckets.front().type);
    IndirectAccess access(stream);
    access.add(g.state.view());
    access.order();
    auto* state = device_pointer<abi::StepState>(g.state.device_ptr() + g.layout.step_offset);
    launch(stream, LaunchConfig{1, 1}, set.store, state, settings.params, settings.schedule,
           static_cast<long long>(count));
    access.done();
}

std::int64_t OptimizerState::device_step_count(Stream& stream, Group& g) {
    std::int64_t count = 0;
    copy(stream, std::as_writable_bytes(std::span<std::int64_t>(&count, 1)),
         std::as_const(g.state).view(g.layout.step_offset + offsetof(abi::StepState, count), sizeof(count)));
    return count;
}

void OptimizerState::require_not_capturable(std::string_view where, std::string_view instead) const {
    if (!options.capturable) return;
    throw Error(fmt::format(
        "{}: this optimizer is capturable: its step counts and hyper-parameters live in device memory; use "
        "{}",
        where, instead));
}

void OptimizerState::upload_descriptors(Stream& stream, Group& g, std::size_t bucket) {
    const BucketLayout& b = g.layout.buckets[bucket];
    const auto descs = bucket_descriptors(g.layout, bucket, g.state.device_ptr(), g.addresses);
    staging.upload(stream, device, g.tables.view(b.descs_offset, descs.size() * sizeof(abi::TensorDesc)),
                   descs.data());
}

void OptimizerState::declare(IndirectAccess& access, Group& g, std::span<const ParamTensor> tensors) const {
    for (const ParamTensor& tensor : tensors) {
        access.add(tensor.param_bytes());
        access.add(tensor.grad_bytes());
    }
    if (!maps.empty()) access.add(maps.view());
    access.add(g.state.view());
}

void OptimizerState::step_tensor(Stream& stream, GroupId id, std::size_t index, const ParamTensor& tensor) {
    constexpr std::string_view where = "cudarc::optim::Optimizer::step";
    Group& g = group(id, where);
    if (options.capturable) {
        throw Error(
            fmt::format("{}: a capturable optimizer steps whole groups (its step count is the group's): "
                        "use step(stream, group, tensors)",
                        where));
    }
    check_tensor(where, g.layout, index, tensor);
    check_stream(where, stream);
    check_same_device(where, device.ordinal(), tensor, index);
    check_not_captured(where, stream);
    const abi::KernelParams params =
        kernel_params(where, options.rule, g.options, grad_scale, g.steps[index] + 1);
    const TensorLayout& t = g.layout.tensors[index];
    const KernelSet& set = kernels_for(t.type);
    if (t.numel == 0) {
        ++g.steps[index];
        return;
    }
    const abi::TensorDesc desc = describe(g.layout, index, g.state.device_ptr(),
                                          TensorAddresses{tensor.param_ptr(), tensor.grad_ptr()});
    int* flag = device_pointer<int>(g.state.device_ptr() + g.layout.flag_offset);
    auto* blocks_done = device_pointer<unsigned>(g.state.device_ptr() + g.layout.counter_offset);
    const LaunchConfig config =
        unorm_config(abi::recommended_grid(t.numel, options.precision, static_cast<int>(multiprocessors),
                                           set.resident_per_multiprocessor),
                     set);

    IndirectAccess access(stream);
    declare(access, g, std::span<const ParamTensor>(&tensor, 1));
    access.order();
    if (placement == StatePlacement::managed) prefetch(stream, g.state.view(t.begin, t.end - t.begin));
    if (params.max_unorm > 0.0f || abi::always_two_passes(options.rule)) {
        launch(stream, config, set.tensor_unorm, desc, params, map(1), map(2), flag, blocks_done);
    }
    launch(stream, update_config(config, set), set.tensor_update, desc, params, map(1), map(2), flag,
           blocks_done);
    access.done();
    ++g.steps[index];
}

void OptimizerState::step_group(Stream& stream, GroupId id, std::span<const ParamTensor> tensors) {
    constexpr std::string_view where = "cudarc::optim::Optimizer::step";
    Group& g = group(id, where);
    check_tensors(where, g.layout, tensors);
    check_stream(where, stream);
    const int ordinal = device.ordinal();
    for (std::size_t i = 0; i < tensors.size(); ++i) check_same_device(where, ordinal, tensors[i], i);

    // Everything that can throw for bad input is decided before any work is enqueued.
    if (options.capturable) {
        bool any_change = false;
        for (std::size_t i = 0; i < tensors.size(); ++i) {
            any_change = any_change ||
                         !(TensorAddresses{tensors[i].param_ptr(), tensors[i].grad_ptr()} == g.addresses[i]);
        }
        if (any_change) refuse_table_upload_while_captured(where, stream);
        IndirectAccess access(stream);
        declare(access, g, tensors);
        access.add(std::as_const(g.tables).view());
        access.order();
        if (placement == StatePlacement::managed) prefetch(stream, g.state.view());
        if (any_change) {
            for (std::size_t b = 0; b < g.layout.buckets.size(); ++b) {
                for (const std::size_t i : g.layout.buckets[b].tensors) {
                    g.addresses[i] = TensorAddresses{tensors[i].param_ptr(), tensors[i].grad_ptr()};
                }
                upload_descriptors(stream, g, b);
            }
        }
        launch_capturable_step(stream, g);
        access.done();
        return;
    }
    check_not_captured(where, stream);
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
    if (any_change) refuse_table_upload_while_captured(where, stream);
    for (std::size_t b = 0; b < g.layout.buckets.size(); ++b) {
        if (plans[b].uniform) continue;  // validated above, once for the bucket
        for (const std::size_t i : g.layout.buckets[b].tensors) {
            static_cast<void>(kernel_params(where, options.rule, g.options, grad_scale, g.steps[i] + 1));
        }
    }
    IndirectAccess access(stream);
    declare(access, g, tensors);
    const bool any_multi = std::any_of(g.layout.buckets.begin(), g.layout.buckets.end(),
                                       [](const BucketLayout& b) { return !b.chunks.empty(); });
    if (any_multi) access.add(std::as_const(g.tables).view());
    access.order();
    if (placement == StatePlacement::managed) prefetch(stream, g.state.view());

    int* flag = device_pointer<int>(g.state.device_ptr() + g.layout.flag_offset);
    auto* blocks_done = device_pointer<unsigned>(g.state.device_ptr() + g.layout.counter_offset);
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
            for (const std::size_t i : bucket.tensors) step_tensor(stream, id, i, tensors[i]);
            continue;
        }
        if (!bucket.chunks.empty()) {
            const KernelSet& set = kernels_for(bucket.type);
            const auto* descs =
                device_pointer<const abi::TensorDesc>(g.tables.device_ptr() + bucket.descs_offset);
            const auto* chunks =
                device_pointer<const abi::Chunk>(g.tables.device_ptr() + bucket.chunks_offset);
            const int count = static_cast<int>(bucket.tensors.size());
            const int chunk_count = static_cast<int>(bucket.chunks.size());
            const LaunchConfig config =
                unorm_config(abi::recommended_multi_grid(bucket.chunks.size(), options.precision,
                                                         static_cast<int>(multiprocessors),
                                                         set.resident_per_multiprocessor),
                             set);
            if (plan.params.max_unorm > 0.0f || abi::always_two_passes(options.rule)) {
                launch(stream, config, set.multi_unorm, descs, chunks, chunk_count, count, plan.params,
                       map(1), map(2), flag, blocks_done);
            }
            launch(stream, update_config(config, set), set.multi_update, descs, chunks, chunk_count, count,
                   plan.params, map(1), map(2), flag, blocks_done);
        }
        for (const std::size_t i : bucket.tensors) ++g.steps[i];
    }
    access.done();
}

void OptimizerState::launch_capturable_step(Stream& stream, Group& g) {
    int* flag = device_pointer<int>(g.state.device_ptr() + g.layout.flag_offset);
    auto* blocks_done = device_pointer<unsigned>(g.state.device_ptr() + g.layout.counter_offset);
    auto* step = device_pointer<abi::StepState>(g.state.device_ptr() + g.layout.step_offset);
    // Note: the group's max_unorm stays on or off as it was added (set_options), so every step of it, and
    // every replay of a captured one, has the same launches.
    const bool norm_pass = g.options.max_unorm > 0.0 || abi::always_two_passes(options.rule);
    std::size_t last = 0;  // the bucket of the step's last launch, which advances the step
    for (std::size_t b = 0; b < g.layout.buckets.size(); ++b) {
        if (!g.layout.buckets[b].chunks.empty()) last = b;
    }
    for (std::size_t b = 0; b < g.layout.buckets.size(); ++b) {
        const BucketLayout& bucket = g.layout.buckets[b];
        if (bucket.chunks.empty()) continue;
        const KernelSet& set = kernels_for(bucket.type);
        const auto* descs =
            device_pointer<const abi::TensorDesc>(g.tables.device_ptr() + bucket.descs_offset);
        const auto* chunks = device_pointer<const abi::Chunk>(g.tables.device_ptr() + bucket.chunks_offset);
        const int count = static_cast<int>(bucket.tensors.size());
        const int chunk_count = static_cast<int>(bucket.chunks.size());
        const LaunchConfig config = unorm_config(
            abi::recommended_multi_grid(bucket.chunks.size(), options.precision,
                                        static_cast<int>(multiprocessors), set.resident_per_multiprocessor),
            set);
        if (norm_pass) {
            launch(stream, config, set.capturable_unorm, descs, chunks, chunk_count, count, step, 0, map(1),
                   map(2), flag, blocks_done);
        }
        launch(stream, update_config(config, set), set.capturable_update, descs, chunks, chunk_count, count,
               step, b == last ? 1 : 0, map(1), map(2), flag, blocks_done);
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
    self.step_tensor(stream, group, index, tensor);
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

namespace {

// Validates a group's new options (set_options); throws naming `where`.
void check_new_options(std::string_view where, const detail::OptimizerState& self, const detail::Group& g,
                       const GroupOptions& options) {
    detail::validate_group_options(where, self.options.rule, options);
    if (detail::state_arrays(self.options.rule, options.momentum) > g.state_count) {
        throw Error(
            fmt::format("{}: momentum {} needs a momentum buffer, but the group was added with momentum 0 "
                        "and keeps none (add the group with momentum != 0)",
                        where, options.momentum));
    }
    if (self.options.capturable && (options.max_unorm > 0.0) != (g.options.max_unorm > 0.0)) {
        throw Error(fmt::format(
            "{}: max_unorm {} would turn update-norm clipping {} for a capturable group added with max_unorm "
            "{}: a capturable group's steps keep the launches they were added with (captured steps cannot "
            "follow); add a new group for that",
            where, options.max_unorm, options.max_unorm > 0.0 ? "on" : "off", g.options.max_unorm));
    }
}

}  // namespace

void Optimizer::set_options(GroupId group, const GroupOptions& options) {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::set_options";
    detail::Group& g = self.group(group, where);
    self.require_not_capturable(where, "set_options(stream, group, options)");
    check_new_options(where, self, g, options);
    g.options = options;
}

void Optimizer::set_options(Stream& stream, GroupId group, const GroupOptions& options) {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::set_options";
    detail::Group& g = self.group(group, where);
    check_new_options(where, self, g, options);
    if (self.options.capturable) {
        self.check_stream(where, stream);
        self.store_step(stream, g, options, self.grad_scale, -1);
    }
    g.options = options;
}

std::int64_t Optimizer::step_count(GroupId group, std::size_t index) const {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::step_count";
    const detail::Group& g = self.group(group, where);
    self.require_not_capturable(where, "step_count(stream, group)");
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
    constexpr std::string_view where = "cudarc::optim::Optimizer::step_count";
    const detail::Group& g = self.group(group, where);
    self.require_not_capturable(where, "step_count(stream, group)");
    return *std::max_element(g.steps.begin(), g.steps.end());
}

std::int64_t Optimizer::step_count(Stream& stream, GroupId group) const {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::step_count";
    detail::Group& g = self.group(group, where);
    if (!self.options.capturable) return *std::max_element(g.steps.begin(), g.steps.end());
    self.check_stream(where, stream);
    return self.device_step_count(stream, g);
}

void Optimizer::set_step_count(GroupId group, std::int64_t count) {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::set_step_count";
    detail::Group& g = self.group(group, where);
    self.require_not_capturable(where, "set_step_count(stream, group, count)");
    // The next step's number must be valid for the kernels.
    static_cast<void>(detail::kernel_params(where, self.options.rule, g.options, self.grad_scale, count + 1));
    std::fill(g.steps.begin(), g.steps.end(), count);
}

void Optimizer::set_step_count(Stream& stream, GroupId group, std::int64_t count) {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::set_step_count";
    detail::Group& g = self.group(group, where);
    static_cast<void>(detail::kernel_params(where, self.options.rule, g.options, self.grad_scale, count + 1));
    if (self.options.capturable) {
        self.check_stream(where, stream);
        self.store_step(stream, g, g.options, self.grad_scale, count);
    }
    std::fill(g.steps.begin(), g.steps.end(), count);
}

namespace {

void check_grad_scale(std::string_view where, const detail::OptimizerState& self, double scale) {
    for (const auto& g : self.groups) {
        static_cast<void>(detail::kernel_params(where, self.options.rule, g->options, scale, 1));
    }
    static_cast<void>(
        detail::kernel_params(where, UpdateRule::sgd, default_options(UpdateRule::sgd), scale, 1));
}

}  // namespace

void Optimizer::set_grad_scale(double scale) {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::set_grad_scale";
    self.require_not_capturable(where, "set_grad_scale(stream, scale)");
    check_grad_scale(where, self, scale);
    self.grad_scale = scale;
}

void Optimizer::set_grad_scale(Stream& stream, double scale) {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::set_grad_scale";
    check_grad_scale(where, self, scale);
    if (self.options.capturable) {
        self.check_stream(where, stream);
        for (const auto& g : self.groups) self.store_step(stream, *g, g->options, scale, -1);
    }
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
    copy(stream, std::as_writable_bytes(std::span<int>(&flag, 1)),
         g.state.view(g.layout.flag_offset, sizeof(flag)));
    return flag != 0;
}

void Optimizer::reset_nonfinite(Stream& stream) {
    CUDARC_OPTIM_SELF();
    for (auto& g : self.groups) memset(stream, g->state.view(g->layout.flag_offset, sizeof(int)), 0);
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
    // `second`: where the host array's second half lives (AdEMAMix's slow EMA, after its fast one, as
    // bitsandbytes stacks them), or kNoRegion for an array of `count` values.
    auto add = [&](std::size_t offset, auto& vector, std::size_t count,
                   std::size_t second = detail::kNoRegion) {
        const std::size_t halves = second == detail::kNoRegion ? 1 : 2;
        if (resize) vector.assign(offset == detail::kNoRegion ? 0 : halves * count, {});
        if (offset == detail::kNoRegion) return;
        const std::size_t bytes = count * sizeof(vector[0]);
        regions.push_back(StateRegion{offset, bytes, vector.data()});
        if (halves == 2) regions.push_back(StateRegion{second, bytes, vector.data() + count});
    };
    if (precision == StatePrecision::fp32) {
        add(t.state1, s.state1, n, t.state3);
        add(t.state2, s.state2, n);
    } else {
        add(t.state1, s.codes1, n, t.state3);
        add(t.state2, s.codes2, n);
        add(t.absmax1, s.absmax1, blocks, t.absmax3);
        add(t.absmax2, s.absmax2, blocks);
    }
    return regions;
}

}  // namespace

TensorState Optimizer::read_state(Stream& stream, GroupId group, std::size_t index) const {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::read_state";
    detail::Group& g = self.group(group, where);
    const detail::TensorLayout& tensor = detail::tensor_at(where, g.layout, index);
    TensorState state;
    for (const auto& region : state_regions(tensor, self.options.precision, state, true)) {
        copy(stream, std::span<std::byte>(static_cast<std::byte*>(region.host), region.bytes),
             g.state.view(region.offset, region.bytes));
    }
    return state;
}

void Optimizer::write_state(Stream& stream, GroupId group, std::size_t index, const TensorState& state) {
    CUDARC_OPTIM_SELF();
    constexpr std::string_view where = "cudarc::optim::Optimizer::write_state";
    detail::Group& g = self.group(group, where);
    const detail::TensorLayout& tensor = detail::tensor_at(where, g.layout, index);
    TensorState expected;
    const auto regions = state_regions(tensor, self.options.precision, expected, true);
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
    for (const auto& region : state_regions(tensor, self.options.precision, source, false)) {
        copy(stream, g.state.view(region.offset, region.bytes),
             std::span<const std::byte>(static_cast<const std::byte*>(region.host), region.bytes));
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
    for (const auto& g : state_->groups) total += g->state.bytes();
    return total;
}

#undef CUDARC_OPTIM_SELF

}  // namespace cudarc::optim

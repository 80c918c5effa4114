/// @file
/// cudarc::optim::Optimizer — stream-aware optimizer steps (Adam, AdamW, SGD, Lion, RMSprop, Adagrad,
/// AdEMAMix, LAMB, LARS) with 32-bit or 8-bit blockwise state, on the caller's stream, with no host
/// synchronization.
///
/// @code
///     namespace optim = cudarc::optim;
///     optim::Optimizer opt(stream, {.rule = optim::UpdateRule::adamw,
///                                   .precision = optim::StatePrecision::blockwise8});
///     const std::vector<optim::ParamTensor> tensors = {{w, grad_w}, {b, grad_b}};
///     const auto group = opt.add_group(stream, optim::default_options(optim::UpdateRule::adamw), tensors);
///     for (...) {
///         compute_gradients(stream);         // any work, on any stream: hazard tracking orders it
///         opt.step(stream, group, tensors);  // one launch per (element type, pass) for the whole group
///     }
///     if (opt.nonfinite_seen(stream)) ...    // the caller's explicit choice to read the flag back
/// @endcode
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cudarc/export.hpp"
#include "cudarc/optim/element_type.hpp"
#include "cudarc/optim/options.hpp"
#include "cudarc/optim/param_tensor.hpp"
#include "cudarc/stream.hpp"

namespace cudarc::optim {

namespace detail {
class OptimizerState;
}

/// Names one parameter group of an optimizer (the order of add_group calls: 0, 1, ...).
enum class GroupId : std::size_t {};

/// One tensor's optimizer state on the host, as stored (for checkpoints and tests). Arrays the rule does
/// not keep are empty; fp32 state fills state1/state2, 8-bit state fills codes and absmax.
/// AdEMAMix keeps its fast and its slow EMA in state1 (codes1, absmax1), the fast one first, each as long
/// as it would be alone (bitsandbytes' stacked layout).
struct TensorState {
    std::vector<float> state1;  ///< first moment / momentum / square average / sum of squares
    std::vector<float> state2;  ///< Adam's, AdamW's, AdEMAMix's and LAMB's second moment
    /// 8-bit codes of state1 (blockwise8 state).
    std::vector<std::uint8_t> codes1;
    /// 8-bit codes of state2 (blockwise8 state).
    std::vector<std::uint8_t> codes2;
    std::vector<float> absmax1;  ///< one per block of 256 elements
    /// The block maxima of codes2, one per block of 256 elements.
    std::vector<float> absmax2;
};

/// An optimizer: one update rule and state format for all its groups; each group has its own
/// hyper-parameters and its own tensors, whose state the optimizer owns (zero-initialized at add_group,
/// from the caching allocator or from managed memory).
///
/// Every step enqueues its work on the given stream only — a created, forked or wrapped foreign stream —
/// waits for earlier work on the tensors and the state on other streams through hazard tracking, and never
/// blocks the host. Results are bitwise identical whether a group is stepped tensor by tensor or at once,
/// on any stream, or replayed from a captured graph.
///
/// Graphs: an optimizer created with OptimizerOptions::capturable keeps each group's step count and
/// hyper-parameters in device memory, and its kernels advance the count, so a group step captured with
/// cudarc::capture is a new step at every replay, bitwise the same as a direct step; set_options(stream, ...)
/// and set_grad_scale(stream, ...) between replays take effect at the next one. Capturing a step of an
/// ordinary optimizer throws (its step number and hyper-parameters are kernel arguments, which every replay
/// would repeat).
///
/// Not thread-safe: use one optimizer from one host thread at a time (like a stream).
class CUDARC_API Optimizer {
  public:
    /// Uploads the 8-bit code maps (if any) on `stream`. Throws for an invalid option.
    Optimizer(Stream& stream, const OptimizerOptions& options);
    Optimizer(const Optimizer&) = delete;
    Optimizer& operator=(const Optimizer&) = delete;
    /// Takes over another optimizer's groups and state; a moved-from Optimizer throws when used.
    Optimizer(Optimizer&&) noexcept;
    /// Frees this optimizer's state (ordered after its uses, like any DeviceSlice) and takes over another's.
    Optimizer& operator=(Optimizer&&) noexcept;
    /// Frees the state, ordered after its last uses on every stream (like any DeviceSlice).
    ~Optimizer();

    /// Registers a group of tensors (sizes and element types as given; any mix) with its hyper-parameters.
    /// Allocates and zeroes their state and uploads the group's chunk tables on `stream`, and compiles the
    /// kernels the group needs (once per process; from the disk cache after the first run). The tensors'
    /// addresses are remembered only to skip re-uploading the tables when later steps use the same buffers.
    /// Throws cudarc::Error for an empty group or invalid options, leaving the optimizer as it was.
    [[nodiscard]] GroupId add_group(Stream& stream, const GroupOptions& options,
                                    std::span<const ParamTensor> tensors);

    /// One step of every tensor of `group`: `tensors` in the order registered, with the registered sizes and
    /// element types (the buffers may differ from step to step; a change costs one small asynchronous table
    /// upload, refused while `stream` is being captured). One multi-tensor launch per element type (two with
    /// max_unorm).
    void step(Stream& stream, GroupId group, std::span<const ParamTensor> tensors);
    /// One step of tensor `index` of `group` alone. Not for a capturable optimizer, whose step count is the
    /// group's.
    void step(Stream& stream, GroupId group, std::size_t index, const ParamTensor& tensor);

    /// The number of groups added so far.
    [[nodiscard]] std::size_t group_count() const noexcept;
    /// The number of tensors of `group`. Throws cudarc::Error for an unknown group.
    [[nodiscard]] std::size_t tensor_count(GroupId group) const;
    /// The hyper-parameters of `group`, as last set. Throws cudarc::Error for an unknown group.
    [[nodiscard]] const GroupOptions& options(GroupId group) const;
    /// Replaces a group's hyper-parameters from the next step on (validated first).
    void set_options(GroupId group, const GroupOptions& options);
    /// Steps taken by tensor `index` of `group` (torch's state['step']); the next step uses this + 1.
    [[nodiscard]] std::int64_t step_count(GroupId group, std::size_t index) const;
    /// The group's step count: the largest of its tensors' (equal unless tensors were stepped one by one).
    [[nodiscard]] std::int64_t step_count(GroupId group) const;
    /// Sets every tensor of `group` to `count` steps taken (for example when resuming from a checkpoint).
    void set_step_count(GroupId group, std::int64_t count);

    /// Gradients arrive multiplied by this (loss scaling); the update uses grad / scale. Default 1.
    void set_grad_scale(double scale);
    /// The gradient scale set last (1 by default).
    [[nodiscard]] double grad_scale() const noexcept;

    /// The same for any optimizer, capturable ones included, whose values live in device memory: the new
    /// values are validated first, then written there asynchronously on `stream` (one small kernel per
    /// group, ordered like any step on `stream`; the host never waits), so they take effect at the next
    /// step or graph replay ordered after it. A capturable group that was added with max_unorm 0 keeps it 0,
    /// and one added with max_unorm > 0 keeps it above 0 (a captured step has its max_unorm pass or not).
    /// For an ordinary optimizer `stream` is not used. The setters above, without a stream, throw for a
    /// capturable optimizer, as do step_count(group) and step_count(group, index).
    void set_options(Stream& stream, GroupId group, const GroupOptions& options);
    /// set_grad_scale for any optimizer: written on `stream` for a capturable one (see above).
    void set_grad_scale(Stream& stream, double scale);
    /// set_step_count for any optimizer: written on `stream` for a capturable one (see above).
    void set_step_count(Stream& stream, GroupId group, std::int64_t count);
    /// The group's step count; for a capturable optimizer read back from the device (a blocking 8-byte copy
    /// on `stream`, ordered after the steps and replays enqueued there).
    [[nodiscard]] std::int64_t step_count(Stream& stream, GroupId group) const;

    /// Whether any step since the last reset met a NaN or infinite (unscaled) gradient. Such an element's
    /// parameter and state are left unchanged and a device-side flag is set; reading it back here is the
    /// caller's choice (a blocking 4-byte copy per group on `stream`, ordered after the steps).
    [[nodiscard]] bool nonfinite_seen(Stream& stream) const;
    /// The same for one group (one blocking 4-byte copy).
    [[nodiscard]] bool nonfinite_seen(Stream& stream, GroupId group) const;
    /// Clears the flag, asynchronously on `stream`.
    void reset_nonfinite(Stream& stream);

    /// A tensor's state, copied to the host (blocking) / from the host (asynchronous, on `stream`). The
    /// arrays must have the sizes read_state gives. Values written must be finite (8-bit: codes and
    /// absmax as the quantizer produces them).
    [[nodiscard]] TensorState read_state(Stream& stream, GroupId group, std::size_t index) const;
    /// Writes a tensor's state from the host, asynchronously on `stream`. Throws cudarc::Error when an
    /// array's size differs from read_state's.
    void write_state(Stream& stream, GroupId group, std::size_t index, const TensorState& state);

    /// The options the optimizer was made with.
    [[nodiscard]] const OptimizerOptions& optimizer_options() const noexcept;
    /// Where the state actually lives: device memory when managed memory was asked for but the device
    /// lacks concurrent managed access (or the driver lacks managed memory).
    [[nodiscard]] StatePlacement state_placement() const noexcept;
    /// Bytes of state (and workspace) held for all groups.
    [[nodiscard]] std::size_t state_bytes() const noexcept;

  private:
    std::unique_ptr<detail::OptimizerState> state_;
};

}  // namespace cudarc::optim

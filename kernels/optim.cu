// Optimizer updates with fp32 or 8-bit blockwise state, compiled at run time by NVRTC or hiprtc.
//
// Two kernel templates, each instantiated through a name expression for one (rule, element type, state
// precision, pass):
//
//     cudarc_optim::tensor_step<RULE, ELEMENT, PRECISION, NORM_PASS>   one tensor
//     cudarc_optim::multi_step<RULE, ELEMENT, PRECISION, NORM_PASS>    many tensors, through chunk tables
//
// RULE, ELEMENT and PRECISION are the values of cudarc::optim::UpdateRule, ElementType and StatePrecision
// (kAdam..., kFp32..., kStateFp32... in optim_common.cuh); NORM_PASS is false for the update and true for
// the max_unorm pass before it. src/optim/kernel_abi.hpp spells the expressions (abi::kernel_name) and
// holds the parameter lists, launch shapes and workspace rules; docs/optimizers.md has the formulas.
#include "optim_device.cuh"

// Adding a rule needs no kernel list here: a value of UpdateRule (optim_common.cuh and the public enum)
// and its arithmetic in update_element / update_8bit (and derive_step for values that follow the step).
//
// A capturable optimizer's steps (Note [Capturable steps], optim_device.cuh) launch the multi layout's
// third entry, multi_step_capturable, which reads the step's parameters from an OptimStepState in device
// memory, once per block, and advances it in the step's last launch; store_step writes that state.
//
// Note: __launch_bounds__ is a macro on HIP: its template arguments go in parentheses, or their comma
// would split them.

namespace cudarc_optim {

template <int kElement>
struct ElementOf;
template <>
struct ElementOf<kFp32> {
    typedef Fp32 type;
};
template <>
struct ElementOf<kFp16> {
    typedef Fp16 type;
};
template <>
struct ElementOf<kBf16> {
    typedef Bf16 type;
};

template <int kRule, int kElement, int kPrecision, bool kNormPass>
__global__ void __launch_bounds__((LaunchBounds<kPrecision == kStateBlockwise8, kNormPass>::threads),
                                  (LaunchBounds<kPrecision == kStateBlockwise8, kNormPass>::min_blocks))
    tensor_step(OptimTensor tensor, OptimParams params, const QuantMapImage* qmap1,
                const QuantMapImage* qmap2, int* nonfinite_flag, unsigned* blocks_done) {
    tensor_kernel<kRule, typename ElementOf<kElement>::type, kPrecision == kStateBlockwise8, kNormPass>(
        tensor, params, qmap1, qmap2, nonfinite_flag, blocks_done);
}

template <int kRule, int kElement, int kPrecision, bool kNormPass>
__global__ void __launch_bounds__((LaunchBounds<kPrecision == kStateBlockwise8, kNormPass>::threads),
                                  (LaunchBounds<kPrecision == kStateBlockwise8, kNormPass>::min_blocks))
    multi_step(const OptimTensor* tensors, const OptimChunk* chunks, int num_chunks, int num_tensors,
               OptimParams params, const QuantMapImage* qmap1, const QuantMapImage* qmap2,
               int* nonfinite_flag, unsigned* blocks_done) {
    multi_tensor_kernel<kRule, typename ElementOf<kElement>::type, kPrecision == kStateBlockwise8, kNormPass>(
        tensors, chunks, num_chunks, num_tensors, params, qmap1, qmap2, nonfinite_flag, blocks_done);
}

// The multi layout with the step's parameters in device memory: `step` instead of `params`, and `advance`
// (nonzero in the step's last launch) to move the step on once every block has read it.
template <int kRule, int kElement, int kPrecision, bool kNormPass>
__global__ void __launch_bounds__((LaunchBounds<kPrecision == kStateBlockwise8, kNormPass>::threads),
                                  (LaunchBounds<kPrecision == kStateBlockwise8, kNormPass>::min_blocks))
    multi_step_capturable(const OptimTensor* tensors, const OptimChunk* chunks, int num_chunks,
                          int num_tensors, OptimStepState* step, int advance, const QuantMapImage* qmap1,
                          const QuantMapImage* qmap2, int* nonfinite_flag, unsigned* blocks_done) {
    let_later_kernels_start();
    wait_for_earlier_kernels();  // the step state is written by the kernels ahead (Note [Early launch])
    const OptimParams params = read_step<kRule>(step, advance != 0);
    multi_tensor_kernel<kRule, typename ElementOf<kElement>::type, kPrecision == kStateBlockwise8, kNormPass>(
        tensors, chunks, num_chunks, num_tensors, params, qmap1, qmap2, nonfinite_flag, blocks_done);
}

// Writes a capturable group's step state (one thread): `params`' option fields and `schedule` as given,
// the step count when `count` >= 0 (else it stays), and the pending step's derived fields from them.
template <int kRule>
__global__ void store_step(OptimStepState* state, OptimParams params, StepSchedule schedule, i64 count) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    if (count >= 0) state->count = count;
    derive_step(kRule, schedule, state->count + 1, params);
    state->schedule = schedule;
    state->params = params;
    state->readers = 0u;
}

}  // namespace cudarc_optim

// Optimizer updates with 8-bit blockwise state (256 elements per absmax), compiled at run time by
// NVRTC or hiprtc.
//
// 72 extern "C" kernels: cudarc_optim_<algorithm>_<dtype>_8bit_<layout>_<pass>, with algorithm one of
// adam adamw sgd lion rmsprop adagrad, dtype f32 f16 bf16, layout tensor multi, pass update unorm.
// Parameter lists, launch shapes, code maps and the workspace rules are in src/optim/kernel_abi.hpp;
// the formulas and the quantization order in docs/optimizers.md. Blocks must have 256 threads.
// CUDARC_OPTIM_ALGORITHM and CUDARC_OPTIM_DTYPE, when defined, select a subset (optim_device.cuh).
#include "optim_device.cuh"

#if CUDARC_OPTIM_WANT_DTYPE(0)
#if CUDARC_OPTIM_WANT_ALGORITHM(0)
CUDARC_OPTIM_DEFINE_KERNELS(adam, kAdam, f32, F32, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(1)
CUDARC_OPTIM_DEFINE_KERNELS(adamw, kAdamW, f32, F32, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(2)
CUDARC_OPTIM_DEFINE_KERNELS(sgd, kSgd, f32, F32, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(3)
CUDARC_OPTIM_DEFINE_KERNELS(lion, kLion, f32, F32, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(4)
CUDARC_OPTIM_DEFINE_KERNELS(rmsprop, kRmsprop, f32, F32, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(5)
CUDARC_OPTIM_DEFINE_KERNELS(adagrad, kAdagrad, f32, F32, 8bit, true)
#endif
#endif
#if CUDARC_OPTIM_WANT_DTYPE(1)
#if CUDARC_OPTIM_WANT_ALGORITHM(0)
CUDARC_OPTIM_DEFINE_KERNELS(adam, kAdam, f16, F16, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(1)
CUDARC_OPTIM_DEFINE_KERNELS(adamw, kAdamW, f16, F16, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(2)
CUDARC_OPTIM_DEFINE_KERNELS(sgd, kSgd, f16, F16, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(3)
CUDARC_OPTIM_DEFINE_KERNELS(lion, kLion, f16, F16, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(4)
CUDARC_OPTIM_DEFINE_KERNELS(rmsprop, kRmsprop, f16, F16, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(5)
CUDARC_OPTIM_DEFINE_KERNELS(adagrad, kAdagrad, f16, F16, 8bit, true)
#endif
#endif
#if CUDARC_OPTIM_WANT_DTYPE(2)
#if CUDARC_OPTIM_WANT_ALGORITHM(0)
CUDARC_OPTIM_DEFINE_KERNELS(adam, kAdam, bf16, BF16, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(1)
CUDARC_OPTIM_DEFINE_KERNELS(adamw, kAdamW, bf16, BF16, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(2)
CUDARC_OPTIM_DEFINE_KERNELS(sgd, kSgd, bf16, BF16, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(3)
CUDARC_OPTIM_DEFINE_KERNELS(lion, kLion, bf16, BF16, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(4)
CUDARC_OPTIM_DEFINE_KERNELS(rmsprop, kRmsprop, bf16, BF16, 8bit, true)
#endif
#if CUDARC_OPTIM_WANT_ALGORITHM(5)
CUDARC_OPTIM_DEFINE_KERNELS(adagrad, kAdagrad, bf16, BF16, 8bit, true)
#endif
#endif

// Allocation traces that cudarc-bench alloc replays on every memory source, and that host tests replay on
// the caching allocator over a fake backend: the same sequence of requests, from a seed, whatever runs it.
// Host-only; no kernels, no data: what is measured is how much memory a source holds for what is in use.
//
// - training: long-lived weights, gradients (made in the first backward pass) and two fp32 optimizer
//   moments (made at the first step); per step, a batch whose sequence length is drawn from 512..1024 in
//   steps of 128, activations saved layer by layer and freed in reverse order in the backward pass, logits,
//   and short-lived workspaces.
// - variable (decode): the weights, then batches of sequences of random length, one after the other: each
//   batch's prompt (padded to its longest sequence) is prefilled layer by layer, then it generates a random
//   number of tokens, one step each, and every step grows each layer's key and value cache by a token
//   (a new, larger buffer, the old one freed after the copy, as concatenation does), with short-lived
//   attention scores, MLP activations and logits. A finished batch frees its cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cudarc::testing {

struct TraceOp {
    enum class Kind : std::uint8_t {
        allocate,  // slot `id` gets `bytes`
        free,      // slot `id` is freed
        step,      // a step begins (the executor may time steps and read figures here)
    };
    Kind kind = Kind::allocate;
    std::uint32_t id = 0;
    std::size_t bytes = 0;
};

struct AllocationTrace {
    std::vector<TraceOp> ops;
    std::uint32_t slots = 0;         // ids run from 0 to slots - 1 (a slot is reused once freed)
    std::size_t peak_requested = 0;  // the most bytes live at once, as requested
    std::uint64_t allocations = 0;   // allocate ops
    int steps = 0;                   // step ops
};

struct ModelShape {
    int layers = 12;
    std::size_t hidden = 1024;
    std::size_t heads = 16;
    std::size_t vocabulary = 8192;
};

// `steps` training steps of batch 8 (cudarc-bench alloc's training-like replay).
[[nodiscard]] AllocationTrace training_trace(const ModelShape& shape, int steps, std::uint64_t seed);

// `steps` decode steps (tokens generated) over batches of 1 to 8 sequences of 32 to 512 prompt tokens, each
// batch generating 32 to 128 tokens (cudarc-bench alloc's variable-shape replay). A batch still running
// when the steps are done frees its cache at the end; the weights stay allocated.
[[nodiscard]] AllocationTrace decode_trace(const ModelShape& shape, int steps, std::uint64_t seed);

}  // namespace cudarc::testing

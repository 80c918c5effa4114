#include "cudarc_testing/alloc/replays.hpp"

#include <algorithm>
#include <iterator>
#include <random>
#include <stdexcept>

namespace cudarc::testing {
namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;
constexpr std::size_t kHalf = 2;   // bf16 parameters and activations
constexpr std::size_t kFloat = 4;  // fp32 optimizer state and statistics

// Hands out slot ids (reusing freed ones) and follows the live bytes.
class TraceBuilder {
  public:
    std::uint32_t allocate(std::size_t bytes) {
        std::uint32_t id = 0;
        if (!free_ids_.empty()) {
            id = free_ids_.back();
            free_ids_.pop_back();
        } else {
            id = trace_.slots++;
            sizes_.push_back(0);
        }
        sizes_[id] = bytes;
        live_ += bytes;
        trace_.peak_requested = std::max(trace_.peak_requested, live_);
        ++trace_.allocations;
        trace_.ops.push_back({TraceOp::Kind::allocate, id, bytes});
        return id;
    }
    void free(std::uint32_t id) {
        live_ -= sizes_.at(id);
        trace_.ops.push_back({TraceOp::Kind::free, id, sizes_[id]});
        free_ids_.push_back(id);
    }
    void temporary(std::size_t bytes) { free(allocate(bytes)); }
    void step() {
        ++trace_.steps;
        trace_.ops.push_back({TraceOp::Kind::step, 0, 0});
    }
    [[nodiscard]] AllocationTrace finish() { return std::move(trace_); }

  private:
    AllocationTrace trace_;
    std::vector<std::uint32_t> free_ids_;
    std::vector<std::size_t> sizes_;
    std::size_t live_ = 0;
};

// Per layer: fused qkv, output projection, MLP up and down, two layer norms (weight and bias), biases; and
// the embedding (tied with the output).
std::vector<std::size_t> weight_sizes(const ModelShape& shape) {
    const std::size_t h = shape.hidden;
    const std::vector<std::size_t> layer = {
        3 * h * h * kHalf, h * h * kHalf, 4 * h * h * kHalf, 4 * h * h * kHalf, h * kHalf,
        h * kHalf,         h * kHalf,     h * kHalf,         3 * h * kHalf,     4 * h * kHalf};
    std::vector<std::size_t> sizes = {shape.vocabulary * h * kHalf};
    for (int l = 0; l < shape.layers; ++l) sizes.insert(sizes.end(), layer.begin(), layer.end());
    return sizes;
}

void check(const ModelShape& shape, int steps) {
    if (shape.layers < 1 || shape.hidden == 0 || shape.heads == 0 || shape.vocabulary == 0 || steps < 0)
        throw std::invalid_argument(
            "allocation trace: layers, hidden, heads and vocabulary must be positive");
}

}  // namespace

// Note: the same requests, in the same order and from the same draws, as the replay cudarc-bench alloc ran
// on DeviceSlices before it replayed traces (the figures of docs/benchmarks.md stay comparable).
AllocationTrace training_trace(const ModelShape& shape, int steps, std::uint64_t seed) {
    check(shape, steps);
    std::mt19937_64 rng(seed);
    TraceBuilder t;
    const std::size_t h = shape.hidden;
    constexpr std::size_t kBatch = 8;
    const std::vector<std::size_t> weights = weight_sizes(shape);
    for (const std::size_t bytes : weights) (void)t.allocate(bytes);
    bool have_grads = false;
    bool have_state = false;

    const std::size_t sequence_lengths[] = {512, 640, 768, 896, 1024};
    std::uniform_int_distribution<std::size_t> workspace(64 * kKiB, 8 * kMiB);
    std::uniform_int_distribution<std::size_t> small(512, 64 * kKiB);
    for (int step = 0; step < steps; ++step) {
        t.step();
        const std::size_t tokens = kBatch * sequence_lengths[rng() % std::size(sequence_lengths)];
        std::vector<std::uint32_t> saved;                 // activations kept for the backward pass, in order
        saved.push_back(t.allocate(tokens * h * kHalf));  // embedding output
        for (int l = 0; l < shape.layers; ++l) {
            saved.push_back(t.allocate(tokens * h * kHalf));             // layer norm 1 output
            saved.push_back(t.allocate(tokens * 3 * h * kHalf));         // qkv
            t.temporary(tokens * h * kFloat);                            // attention accumulator
            t.temporary(workspace(rng));                                 // library workspace
            saved.push_back(t.allocate(tokens * shape.heads * kFloat));  // softmax statistics
            saved.push_back(t.allocate(tokens * h * kHalf));             // attention output
            saved.push_back(t.allocate(tokens * h * kHalf));             // layer norm 2 output
            saved.push_back(t.allocate(tokens * 4 * h * kHalf));         // MLP up
            saved.push_back(t.allocate(tokens * 4 * h * kHalf));         // activation function
            t.temporary(small(rng));                                     // a reduction's partials
        }
        // Logits and the loss: large, short-lived.
        const std::uint32_t logits = t.allocate(tokens * shape.vocabulary * kHalf);
        t.temporary(tokens * kFloat);
        const std::uint32_t logits_grad = t.allocate(tokens * shape.vocabulary * kHalf);
        t.free(logits_grad);
        t.free(logits);
        // Backward: per layer (last first) gradient temporaries, then that layer's activations are freed in
        // reverse order of their allocation.
        std::uint32_t upstream = t.allocate(tokens * h * kHalf);
        constexpr std::size_t kSavedPerLayer = 7;
        for (int l = shape.layers - 1; l >= 0; --l) {
            const std::uint32_t d_mlp = t.allocate(tokens * 4 * h * kHalf);
            t.temporary(workspace(rng));
            const std::uint32_t d_attention = t.allocate(tokens * 3 * h * kHalf);
            t.temporary(small(rng));
            t.free(d_mlp);
            t.free(d_attention);
            for (std::size_t i = 0; i < kSavedPerLayer; ++i) {
                t.free(saved.back());
                saved.pop_back();
            }
            const std::uint32_t next = t.allocate(tokens * h * kHalf);
            t.free(upstream);
            upstream = next;
        }
        t.free(upstream);
        t.free(saved.back());  // the embedding output
        saved.pop_back();
        if (!have_grads) {
            for (const std::size_t bytes : weights) (void)t.allocate(bytes);
            have_grads = true;
        }
        // Optimizer step: the state appears at the first step; a small temporary per tensor (a norm).
        if (!have_state) {
            for (const std::size_t bytes : weights) {
                (void)t.allocate(bytes / kHalf * kFloat);
                (void)t.allocate(bytes / kHalf * kFloat);
            }
            have_state = true;
        }
        for (std::size_t i = 0; i < weights.size(); ++i) t.temporary(512);
    }
    return t.finish();
}

AllocationTrace decode_trace(const ModelShape& shape, int steps, std::uint64_t seed) {
    check(shape, steps);
    std::mt19937_64 rng(seed);
    TraceBuilder t;
    const std::size_t h = shape.hidden;
    const auto layers = static_cast<std::size_t>(shape.layers);
    for (const std::size_t bytes : weight_sizes(shape)) (void)t.allocate(bytes);

    std::uniform_int_distribution<std::size_t> batch_size(1, 16);
    std::uniform_int_distribution<std::size_t> prompt_length(32, 1024);
    std::uniform_int_distribution<int> generated(32, 128);
    int done = 0;
    while (done < steps) {
        const std::size_t batch = batch_size(rng);
        std::size_t length = 0;  // the batch's prompts are padded to the longest
        for (std::size_t i = 0; i < batch; ++i) length = std::max(length, prompt_length(rng));
        const int tokens_to_generate = std::min(generated(rng), steps - done);

        // Prefill: the whole prompt through every layer; each layer keeps its keys and values.
        const std::size_t tokens = batch * length;
        std::vector<std::uint32_t> keys(layers);
        std::vector<std::uint32_t> values(layers);
        std::uint32_t x = t.allocate(tokens * h * kHalf);
        for (std::size_t l = 0; l < layers; ++l) {
            const std::uint32_t normed = t.allocate(tokens * h * kHalf);
            const std::uint32_t qkv = t.allocate(tokens * 3 * h * kHalf);
            const std::uint32_t scores = t.allocate(batch * shape.heads * length * length * kHalf);
            keys[l] = t.allocate(tokens * h * kHalf);
            values[l] = t.allocate(tokens * h * kHalf);
            const std::uint32_t attention = t.allocate(tokens * h * kHalf);
            t.free(scores);
            t.free(qkv);
            t.free(normed);
            t.temporary(tokens * 4 * h * kHalf);  // MLP activation
            const std::uint32_t next = t.allocate(tokens * h * kHalf);
            t.free(x);
            x = next;
            t.free(attention);
        }
        t.temporary(batch * shape.vocabulary * kFloat);  // the last position's logits
        t.free(x);

        // Decode: one token per step; every layer's cache grows by it (a larger buffer, then the old freed).
        for (int g = 0; g < tokens_to_generate; ++g, ++done) {
            t.step();
            x = t.allocate(batch * h * kHalf);
            for (std::size_t l = 0; l < layers; ++l) {
                const std::uint32_t qkv = t.allocate(batch * 3 * h * kHalf);
                const std::uint32_t grown_keys = t.allocate(batch * (length + 1) * h * kHalf);
                t.free(keys[l]);
                keys[l] = grown_keys;
                const std::uint32_t grown_values = t.allocate(batch * (length + 1) * h * kHalf);
                t.free(values[l]);
                values[l] = grown_values;
                t.temporary(batch * shape.heads * (length + 1) * kFloat);  // attention scores
                const std::uint32_t attention = t.allocate(batch * h * kHalf);
                t.free(qkv);
                t.temporary(batch * 4 * h * kHalf);  // MLP activation
                const std::uint32_t next = t.allocate(batch * h * kHalf);
                t.free(x);
                x = next;
                t.free(attention);
            }
            t.temporary(batch * shape.vocabulary * kFloat);  // logits
            t.free(x);
            ++length;
        }
        for (std::size_t l = 0; l < layers; ++l) {
            t.free(keys[l]);
            t.free(values[l]);
        }
    }
    return t.finish();
}

}  // namespace cudarc::testing

// cudarc::CompletionQueue — lets a host thread pick up finished batches without blocking any stream.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "cudarc/stream.hpp"

namespace cudarc {

/// Tokens that streams hand to the host as their work completes. `notify(stream, token)` enqueues a host
/// function (Stream::host_function) that pushes `token` once the work submitted to `stream` before it has
/// completed, and a host thread pops tokens with wait() or try_pop(): a pipeline learns which batch's
/// download has landed without synchronizing any stream. A popped token means that the work before it on
/// its stream (copies into pinned memory included) has completed; hazard tracking does not learn it, so
/// PinnedBuffer::wait on that data still returns at once but counts its event synchronize.
/// The queue is shared with the pending host functions, so it may be destroyed before they run. Safe to
/// use from several threads.
class CompletionQueue {
  public:
    CompletionQueue() : state_(std::make_shared<State>()) {}

    /// Enqueues on `stream` the push of `token`, in stream order. Throws as Stream::host_function does.
    void notify(Stream& stream, std::uint64_t token) {
        stream.host_function([state = state_, token] {
            {
                const std::lock_guard lock(state->mutex);
                state->done.push_back(token);
            }
            state->ready.notify_one();
        });
    }
    /// The oldest completed token, blocking until one arrives (a condition variable, never a CUDA call).
    [[nodiscard]] std::uint64_t wait() {
        std::unique_lock lock(state_->mutex);
        state_->ready.wait(lock, [&] { return !state_->done.empty(); });
        return pop_locked();
    }
    /// The oldest completed token, or nothing after `timeout`.
    template <typename Rep, typename Period>
    [[nodiscard]] std::optional<std::uint64_t> wait_for(std::chrono::duration<Rep, Period> timeout) {
        std::unique_lock lock(state_->mutex);
        if (!state_->ready.wait_for(lock, timeout, [&] { return !state_->done.empty(); }))
            return std::nullopt;
        return pop_locked();
    }
    /// The oldest completed token, if any. Never blocks.
    [[nodiscard]] std::optional<std::uint64_t> try_pop() {
        const std::lock_guard lock(state_->mutex);
        if (state_->done.empty()) return std::nullopt;
        return pop_locked();
    }

  private:
    struct State {
        std::mutex mutex;
        std::condition_variable ready;
        std::deque<std::uint64_t> done;
    };
    std::uint64_t pop_locked() {
        const std::uint64_t token = state_->done.front();
        state_->done.pop_front();
        return token;
    }

    std::shared_ptr<State> state_;
};

}  // namespace cudarc

// cudarc::Graph — work captured from a stream once and replayed with one launch.
#pragma once

#include <memory>
#include <utility>

#include "cudarc/stream.hpp"

namespace cudarc {

namespace detail {
class DeviceState;
class GraphState;
}  // namespace detail

// An instantiated graph. Move-only. Memory the caching allocator handed out or took back during the
// capture stays reserved for the graph until it is destroyed (a replay may touch it), then is reused only
// after the graph's last replay has completed.
//
// Note: capture what runs on one stream. Buffers the captured work uses should have been last used on the
// capturing stream (or be fresh), so hazard tracking adds no wait on another stream inside the capture.
class Graph {
  public:
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    Graph(Graph&&) noexcept;
    Graph& operator=(Graph&&) noexcept;
    ~Graph();

    // Replays the captured work on `stream` (asynchronously).
    void launch(Stream& stream);

    // Internal.
    explicit Graph(std::unique_ptr<detail::GraphState> state) noexcept;

  private:
    std::unique_ptr<detail::GraphState> state_;
};

namespace detail {
void begin_capture(Stream& stream);
Graph end_capture(Stream& stream);
void abandon_capture(Stream& stream) noexcept;
}  // namespace detail

// Captures what `body(stream)` enqueues on `stream` (thread-local capture mode) and instantiates it.
// Nothing runs during the capture. On an exception the capture is abandoned and the exception rethrown.
template <typename Body>
[[nodiscard]] Graph capture(Stream& stream, Body&& body) {
    detail::begin_capture(stream);
    try {
        std::forward<Body>(body)(stream);
    } catch (...) {
        detail::abandon_capture(stream);
        throw;
    }
    return detail::end_capture(stream);
}

}  // namespace cudarc

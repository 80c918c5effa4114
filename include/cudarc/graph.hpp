/// @file
/// cudarc::Graph — work captured from streams once and replayed with one launch (docs/graphs.md).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "cudarc/detail/internals.hpp"
#include "cudarc/detail/native_handles.hpp"
#include "cudarc/export.hpp"
#include "cudarc/stream.hpp"

namespace cudarc {

namespace detail {
class DeviceState;
class GraphState;
}  // namespace detail

/// What Graph::update did.
enum class GraphUpdate {
    in_place,        ///< the new capture has the same shape: the executable graph was updated and kept
    reinstantiated,  ///< the shape differed (or the driver cannot update): a new executable graph replaced it
};
/// "updated in place" or "reinstantiated".
[[nodiscard]] CUDARC_API const char* to_string(GraphUpdate update) noexcept;

/// One byte range that a graph's work reads or writes (Graph::accesses).
struct GraphAccess {
    /// The range's first byte.
    DevicePtr address = 0;
    /// The range's length in bytes.
    std::size_t bytes = 0;
    bool writes = false;  ///< written (perhaps also read); otherwise only read
};

/// An instantiated graph. Move-only; used by one host thread at a time.
///
/// Every launch counts, for hazard tracking, as the accesses the captured work makes: the launch stream
/// first waits for conflicting earlier work on other streams (including work from before the capture), and
/// later work and frees on other streams wait for the replay. Memory allocated inside the capture belongs to
/// the graph: it is reused only after the graph is destroyed and its last replay has completed. Any other
/// buffer the graph uses must stay alive while the graph may be launched: a launch after one was destroyed
/// throws, naming it, and enqueues nothing.
class CUDARC_API Graph {
  public:
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    /// Takes over another graph; a moved-from graph throws when launched, uploaded or updated.
    Graph(Graph&&) noexcept;
    /// Destroys this graph's state and takes over another's.
    Graph& operator=(Graph&&) noexcept;
    /// Destroys the graph; memory allocated inside its capture is reused once its last replay has completed.
    ~Graph();

    /// Replays the captured work on `stream` (asynchronously). One graph may be launched on several streams;
    /// the driver runs its launches one after another.
    void launch(Stream& stream);
    /// Prepares the graph on the device ahead of its first launch (cuGraphUpload), on `stream`.
    void upload(Stream& stream);
    /// Takes over the work of a newer capture (of the same device). When the captures have the same shape
    /// (kernels may differ in their arguments, copies in their addresses), the executable graph is updated
    /// in place (cuGraphExecUpdate); otherwise the new capture is instantiated and replaces it. Launches
    /// already enqueued run the old work. Throws (changing nothing) when instantiating fails.
    GraphUpdate update(Graph captured);
    /// The same with a capture of `body` made for the purpose (instantiated only when needed).
    template <typename Body>
    GraphUpdate update(Stream& stream, Body&& body);

    /// The byte ranges the captured work reads and writes, in address order (memory allocated and freed
    /// inside the capture excluded: it belongs to the graph alone).
    [[nodiscard]] std::vector<GraphAccess> accesses() const;

  private:
    friend struct detail::Internals;  // Note [Internal access]
    explicit Graph(std::unique_ptr<detail::GraphState> state) noexcept;

    std::unique_ptr<detail::GraphState> state_;
};

namespace detail {
enum class Instantiate { yes, no };
CUDARC_API void begin_capture(Stream& stream);
CUDARC_API Graph end_capture(Stream& stream, Instantiate instantiate);
CUDARC_API void abandon_capture(Stream& stream) noexcept;

/// Begins a capture on `stream` and runs `body` in it; a body that throws abandons the capture.
template <typename Body>
void capture_body(Stream& stream, Body&& body) {
    begin_capture(stream);
    try {
        std::forward<Body>(body)(stream);
    } catch (...) {
        abandon_capture(stream);
        throw;
    }
}
}  // namespace detail

/// Captures what `body(stream)` enqueues (thread-local capture mode) and instantiates it. Nothing runs
/// during the capture. Streams forked from `stream` inside the body take part (their forks and joins become
/// graph dependencies, and so do hazard waits between them); they must be destroyed inside the body. On an
/// exception the capture is abandoned, the streams are usable again, and the exception is rethrown.
/// Blocking work (synchronize, queries, copies to host memory) and allocations that need new driver memory
/// throw inside the body without doing anything. docs/graphs.md has the rules.
template <typename Body>
[[nodiscard]] Graph capture(Stream& stream, Body&& body) {
    detail::capture_body(stream, std::forward<Body>(body));
    return detail::end_capture(stream, detail::Instantiate::yes);
}

template <typename Body>
GraphUpdate Graph::update(Stream& stream, Body&& body) {
    detail::capture_body(stream, std::forward<Body>(body));
    return update(detail::end_capture(stream, detail::Instantiate::no));
}

}  // namespace cudarc

#include "cudarc/graph.hpp"

#include <optional>

#include "core/caching_source.hpp"
#include "core/device_state.hpp"

namespace cudarc {
namespace detail {

namespace {
alloc::CachingAllocator* caching_allocator_of(DeviceState& device) {
    auto* caching = dynamic_cast<CachingResource*>(&device.memory());
    return caching != nullptr ? &caching->allocator() : nullptr;
}
// Note [Stream identity]: the allocator knows streams by their state's key.
alloc::StreamKey key_of(const Stream& stream) noexcept {
    return stream.state().key();
}

// Captures under way on this thread, by stream: the allocator's capture id to hand to the graph.
thread_local std::optional<std::pair<sys::Stream, alloc::CaptureId>> current_capture;
}  // namespace

class GraphState {
  public:
    GraphState(DeviceState& device, sys::Graph graph, sys::GraphExec exec,
               std::optional<alloc::CaptureId> capture)
        : device_(device.shared_from_this()), graph_(graph), exec_(exec), capture_(capture) {}
    GraphState(const GraphState&) = delete;
    GraphState& operator=(const GraphState&) = delete;

    ~GraphState() {
        const sys::DriverApi& api = device_->api();
        const auto scope = device_->bind_or_defer();
        try {
            if (capture_) {
                // Blocks the capture kept are reused only after the last replay completed.
                std::vector<alloc::PendingUse> after;
                // Note [Stream identity]: mark() works after the stream's wrapper is gone, too.
                if (last_stream_) after.push_back({last_stream_->event_key(), last_stream_->mark()});
                if (auto* allocator = caching_allocator_of(*device_))
                    allocator->release_capture(*capture_, after);
            }
        } catch (const Error& error) {
            device_->defer(error);
        } catch (...) {
        }
        device_->defer(api.graph_exec_destroy(exec_), "cuGraphExecDestroy");
        device_->defer(api.graph_destroy(graph_), "cuGraphDestroy");
    }

    void launch(Stream& stream) {
        if (&stream.state().device() != device_.get())
            throw Error("cudarc: Graph::launch: a stream of another device");
        const auto scope = device_->bind();
        device_->check(device_->api().graph_launch(exec_, stream.native()), "cuGraphLaunch");
        last_stream_ = stream.shared_state();
    }

  private:
    std::shared_ptr<DeviceState> device_;
    sys::Graph graph_;
    sys::GraphExec exec_;
    std::optional<alloc::CaptureId> capture_;
    std::shared_ptr<StreamState> last_stream_;
};

void begin_capture(Stream& stream) {
    DeviceState& device = stream.state().device();
    const sys::DriverApi& api = device.api();
    if (current_capture) throw Error("cudarc: capture: a capture is already under way on this thread");
    const auto scope = device.bind();
    std::optional<alloc::CaptureId> id;
    if (auto* allocator = caching_allocator_of(device)) id = allocator->notify_capture_begin(key_of(stream));
    const sys::Result r = sys::require(api, api.stream_begin_capture, "cuStreamBeginCapture")(
        stream.native(), sys::kStreamCaptureModeThreadLocal);
    if (r != sys::kSuccess) {
        if (id) {
            caching_allocator_of(device)->notify_capture_end(key_of(stream));
            caching_allocator_of(device)->release_capture(*id);
        }
        device.check(r, "cuStreamBeginCapture");
    }
    current_capture.emplace(stream.native(), id.value_or(0));
}

Graph end_capture(Stream& stream) {
    DeviceState& device = stream.state().device();
    const sys::DriverApi& api = device.api();
    // Note: the capture must end here whatever fails (the driver's capture mode, the allocator's record and
    // this thread's mark), so a failure to bind is deferred rather than thrown before anything is undone.
    const auto scope = device.bind_or_defer();
    sys::Graph graph = nullptr;
    const sys::Result ended =
        sys::require(api, api.stream_end_capture, "cuStreamEndCapture")(stream.native(), &graph);
    std::optional<alloc::CaptureId> id;
    if (current_capture && caching_allocator_of(device) != nullptr) id = current_capture->second;
    current_capture.reset();
    if (auto* allocator = caching_allocator_of(device)) allocator->notify_capture_end(key_of(stream));
    sys::GraphExec exec = nullptr;
    sys::Result r = ended;
    if (r == sys::kSuccess)
        r = sys::require(api, api.graph_instantiate, "cuGraphInstantiateWithFlags")(&exec, graph, 0);
    if (r != sys::kSuccess) {
        if (graph != nullptr) api.graph_destroy(graph);
        if (id) caching_allocator_of(device)->release_capture(*id);
        device.check(r, ended != sys::kSuccess ? "cuStreamEndCapture" : "cuGraphInstantiateWithFlags");
    }
    return Graph(std::make_unique<GraphState>(device, graph, exec, id));
}

void abandon_capture(Stream& stream) noexcept {
    DeviceState& device = stream.state().device();
    const sys::DriverApi& api = device.api();
    const auto scope = device.bind_or_defer();
    sys::Graph graph = nullptr;
    if (api.stream_end_capture != nullptr &&
        api.stream_end_capture(stream.native(), &graph) == sys::kSuccess && graph != nullptr) {
        api.graph_destroy(graph);
    }
    try {
        if (auto* allocator = caching_allocator_of(device)) {
            allocator->notify_capture_end(key_of(stream));
            if (current_capture) allocator->release_capture(current_capture->second);
        }
    } catch (...) {
    }
    current_capture.reset();
}

}  // namespace detail

Graph::Graph(std::unique_ptr<detail::GraphState> state) noexcept : state_(std::move(state)) {}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
Graph::~Graph() = default;

void Graph::launch(Stream& stream) {
    state_->launch(stream);
}

}  // namespace cudarc

#include "cudarc/graph.hpp"

#include <fmt/format.h>

#include <optional>

#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/operation.hpp"
#include "core/profiler.hpp"

namespace cudarc {
namespace detail {

namespace {
// The memory source's capture is over (MemorySource::release_capture).
void release_capture(DeviceState& device, std::optional<SourceCaptureId> capture,
                     const std::shared_ptr<StreamState>& last_stream) noexcept {
    if (capture) device.memory().release_capture(*capture, last_stream);
}
}  // namespace

class GraphState {
  public:
    GraphState(DeviceState& device, sys::Graph graph, sys::GraphExec exec,
               std::optional<SourceCaptureId> capture, std::vector<GraphBufferUse> uses,
               std::vector<GraphPrerequisite> prerequisites)
        : device_(device.shared_from_this()),
          graph_(graph),
          exec_(exec),
          capture_(capture),
          uses_(std::move(uses)),
          replay_(flatten(uses_)),
          prerequisites_(std::move(prerequisites)) {}
    GraphState(const GraphState&) = delete;
    GraphState& operator=(const GraphState&) = delete;

    ~GraphState() {
        const auto scope = device_->bind_or_defer();
        release_prerequisites();
        release_capture(*device_, capture_, last_stream_);
        const sys::DriverApi& api = device_->api();
        // Note: an executable graph still running is freed by the driver once it completes.
        if (exec_ != nullptr) device_->defer(api.graph_exec_destroy(exec_), sys::Entry::graph_exec_destroy);
        if (graph_ != nullptr) device_->defer(api.graph_destroy(graph_), sys::Entry::graph_destroy);
    }

    void launch(Stream& stream) {
        StreamState& s = checked_stream(stream, "Graph::launch");
        if (s.capture() != nullptr) {
            throw Error(
                "cudarc: Graph::launch on a stream that is being captured: replaying a graph inside another "
                "capture is not supported (the memory the inner graph owns would not live as long as the "
                "outer graph)");
        }
        // The replay is one operation on `stream` with the captured work's accesses: at most one wait per
        // source stream before it and one event after it (Note [Stream timelines]).
        // Note: a buffer found released throws here, before anything is enqueued (an operation never
        // ordered changes nothing).
        Operation op(s);
        for (const ReplayAccess& a : replay_) {
            HazardState* state = a.link->state;
            if (state == nullptr) throw_released(*a.link, "Graph::launch");
            op.access(*state, a.begin, a.bytes, a.access);
        }
        // Note [Capture overlay]: memory the capture took from the cache was last used by work before the
        // capture; the first launch waits for it (later ones follow the first).
        for (const GraphPrerequisite& p : prerequisites_) {
            if (p.stream.get() == &s || !p.event) continue;
            {
                const auto scope = device_->bind();
                device_->wait_event(s.handle(), p.event->handle());
            }
            s.timeline().note_waited(p.stream->timeline(), *p.event);
        }
        op.order();
        {
            const auto scope = device_->bind();
            device_->check(device_->api().graph_launch(exec_, s.handle()), sys::Entry::graph_launch);
            op.complete();
        }
        last_stream_ = detail::Internals::shared_stream_state(stream);
        release_prerequisites();
    }
    void upload(Stream& stream) {
        StreamState& s = checked_stream(stream, "Graph::upload");
        const sys::DriverApi& api = device_->api();
        const auto scope = device_->bind();
        device_->check(sys::require(api, api.graph_upload, sys::Entry::graph_upload)(exec_, s.handle()),
                       sys::Entry::graph_upload);
    }

    GraphUpdate update(GraphState& newer) {
        if (newer.device_ != device_)
            throw Error("cudarc: Graph::update: the new capture was made on another device");
        const sys::DriverApi& api = device_->api();
        const auto scope = device_->bind();
        bool in_place = false;
        if (exec_ != nullptr && api.graph_exec_update != nullptr) {
            // Note: whatever the reason update refuses (the shape, a node type, a kernel that changed
            // function), the answer is the same: instantiate the new graph.
            sys::GraphExecUpdateResultInfo info{};
            in_place = api.graph_exec_update(exec_, newer.graph_, &info) == sys::kSuccess;
        }
        if (!in_place) newer.instantiate();  // may throw: nothing has changed yet
        // From here nothing throws. What the old capture allocated may still be used by enqueued replays:
        // it is reused once the last of them has completed.
        release_capture(*device_, capture_, last_stream_);
        capture_ = std::exchange(newer.capture_, std::nullopt);
        uses_ = std::move(newer.uses_);
        replay_ = std::move(newer.replay_);
        release_prerequisites();
        prerequisites_ = std::move(newer.prerequisites_);
        std::swap(graph_, newer.graph_);  // `newer` destroys what it now holds
        if (in_place) return GraphUpdate::in_place;
        std::swap(exec_, newer.exec_);
        // Note: launches of the new executable are not ordered after the old one's by the driver, and need
        // not be: their own memory is separate, and hazard tracking orders them on the buffers they share.
        last_stream_.reset();
        return GraphUpdate::reinstantiated;
    }

    void instantiate() {
        if (exec_ != nullptr) return;
        const sys::DriverApi& api = device_->api();
        const auto scope = device_->bind();
        device_->check(
            sys::require(api, api.graph_instantiate, sys::Entry::graph_instantiate)(&exec_, graph_, 0),
            sys::Entry::graph_instantiate);
    }

    [[nodiscard]] std::vector<GraphAccess> accesses() const {
        std::vector<GraphAccess> out;
        for (const GraphBufferUse& use : uses_) {
            for (const GraphRange& r : use.ranges)
                out.push_back(
                    GraphAccess{use.link->address + r.begin, r.end - r.begin, r.access == Access::write});
        }
        return out;
    }

  private:
    void release_prerequisites() noexcept { prerequisites_.clear(); }

    StreamState& checked_stream(Stream& stream, const char* what) const {
        if (&detail::Internals::stream_state(stream).device() != device_.get()) {
            throw Error(fmt::format("cudarc: {}: the stream is on device {}, the graph on device {}", what,
                                    stream.device_ordinal(), device_->ordinal()));
        }
        if (exec_ == nullptr) throw Error(fmt::format("cudarc: {}: the graph is not instantiated", what));
        return detail::Internals::stream_state(stream);
    }

    // One range of uses_, as a replay reads them: in one array, so that a replay over thousands of buffers
    // reads one entry each, not a buffer's entry and then its list of ranges.
    struct ReplayAccess {
        const BufferLink* link;  // uses_ holds it
        std::size_t begin;
        std::size_t bytes;
        Access access;
    };
    static std::vector<ReplayAccess> flatten(const std::vector<GraphBufferUse>& uses) {
        std::vector<ReplayAccess> out;
        for (const GraphBufferUse& use : uses) {
            for (const GraphRange& r : use.ranges)
                out.push_back(ReplayAccess{use.link.get(), r.begin, r.end - r.begin, r.access});
        }
        return out;
    }

    [[noreturn]] static void throw_released(const BufferLink& link, const char* what) {
        throw Error(
            fmt::format("cudarc: {}: the graph's work uses the buffer at {:#x} ({} bytes), which has been "
                        "destroyed. A graph "
                        "keeps alive only the memory allocated inside its capture: keep the buffers it uses "
                        "alive while it "
                        "may be launched, or capture again (nothing was enqueued)",
                        what, link.address, link.bytes));
    }

    std::shared_ptr<DeviceState> device_;
    sys::Graph graph_;
    sys::GraphExec exec_;
    std::optional<SourceCaptureId> capture_;
    std::vector<GraphBufferUse> uses_;
    std::vector<ReplayAccess> replay_;
    std::vector<GraphPrerequisite> prerequisites_;
    std::shared_ptr<StreamState> last_stream_;
};

void begin_capture(Stream& stream) {
    if (CaptureSession::current() != nullptr) {
        throw Error(
            "cudarc: capture: a capture is already under way on this thread (captures do not nest; end the "
            "first before beginning another)");
    }
    StreamState& origin = detail::Internals::stream_state(stream);
    if (origin.capture() != nullptr) throw Error("cudarc: capture: the stream is already being captured");
    DeviceState& device = origin.device();
    const sys::DriverApi& api = device.api();
    const auto scope = device.bind();
    MemorySource& source = device.memory();
    const std::optional<SourceCaptureId> id = source.begin_capture(origin);
    std::unique_ptr<CaptureSession> session;
    try {
        session = std::make_unique<CaptureSession>(origin, id);  // records the pre-capture mark
        device.check(sys::require(api, api.stream_begin_capture, sys::Entry::stream_begin_capture)(
                         origin.handle(), sys::kStreamCaptureModeThreadLocal),
                     sys::Entry::stream_begin_capture);
    } catch (...) {
        session.reset();  // leaves the capture it never began
        if (id) {
            source.end_capture(origin);
            source.release_capture(*id, nullptr);
        }
        throw;
    }
    CaptureSession::set_current(std::move(session));
    profiler_push("cudarc: capture", "cudarc: capture");  // Note [Profiler ranges]: popped in end_session
}

namespace {
// Ends the driver's capture and this thread's session, whatever happened; returns the captured graph (null
// when the capture failed) and the driver's result.
std::pair<sys::Graph, sys::Result> end_session(Stream& stream, std::unique_ptr<CaptureSession>& session,
                                               std::vector<GraphBufferUse>* uses,
                                               std::vector<GraphPrerequisite>* prerequisites) noexcept {
    DeviceState& device = detail::Internals::stream_state(stream).device();
    const sys::DriverApi& api = device.api();
    // Note: the capture must end here whatever fails (the driver's capture mode, the allocator's record and
    // this thread's session), so a failure to bind is deferred rather than thrown before anything is undone.
    const auto scope = device.bind_or_defer();
    sys::Graph graph = nullptr;
    sys::Result ended = sys::kErrorNotSupported;
    if (api.stream_end_capture != nullptr) ended = api.stream_end_capture(stream.native(), &graph);
    if (ended != sys::kSuccess && graph != nullptr) {
        api.graph_destroy(graph);
        graph = nullptr;
    }
    if (ended != sys::kSuccess && ended != sys::kErrorNotSupported) {
        // Note: a failed cuStreamEndCapture may leave the stream capturing; then everything enqueued on it
        // later would silently go into a graph nobody launches. End it again (a few times, and also when
        // the driver cannot say whether it still captures) until it says the capture is over; the first
        // error is the one reported.
        for (int attempt = 0; attempt < 3; ++attempt) {
            int status = sys::kStreamCaptureStatusActive;
            if (api.stream_is_capturing(stream.native(), &status) == sys::kSuccess &&
                status == sys::kStreamCaptureStatusNone)
                break;
            sys::Graph again = nullptr;
            static_cast<void>(api.stream_end_capture(stream.native(), &again));
            if (again != nullptr) api.graph_destroy(again);
        }
    }
    if (uses != nullptr && ended == sys::kSuccess) {
        try {
            *uses = CaptureSession::current()->take_uses();
        } catch (...) {
            ended = sys::kErrorOutOfMemory;
            api.graph_destroy(graph);
            graph = nullptr;
        }
    }
    if (prerequisites != nullptr && ended == sys::kSuccess)
        *prerequisites = CaptureSession::current()->take_prerequisites();
    session = CaptureSession::take_current();
    profiler_pop();
    // Note: before the deferred releases run (in finish), so that the allocator sees them as ordinary frees.
    if (session->source_capture()) {
        try {
            device.memory().end_capture(detail::Internals::stream_state(stream));
        } catch (const Error& error) {
            device.defer(error);
        }
    }
    session->finish();
    return {graph, ended};
}
}  // namespace

Graph end_capture(Stream& stream, Instantiate instantiate) {
    CaptureSession* current = CaptureSession::current();
    if (current == nullptr || &current->origin() != &detail::Internals::stream_state(stream)) {
        throw Error("cudarc: end of a graph capture that is not under way on this stream and thread");
    }
    try {
        current->check_forks_joined();
        current->join_members_into_origin();
    } catch (...) {
        abandon_capture(stream);
        throw;
    }
    std::unique_ptr<CaptureSession> session;
    std::vector<GraphBufferUse> uses;
    std::vector<GraphPrerequisite> prerequisites;
    auto [graph, result] = end_session(stream, session, &uses, &prerequisites);
    DeviceState& device = detail::Internals::stream_state(stream).device();
    const auto scope = device.bind_or_defer();  // as in end_session: the failure paths below must run
    const std::optional<SourceCaptureId> id = session->source_capture();
    sys::GraphExec exec = nullptr;
    sys::Entry failed = sys::Entry::stream_end_capture;
    if (result == sys::kSuccess && instantiate == Instantiate::yes) {
        const sys::DriverApi& api = device.api();
        failed = sys::Entry::graph_instantiate;
        result = api.graph_instantiate != nullptr ? api.graph_instantiate(&exec, graph, 0)
                                                  : sys::kErrorNotSupported;
    }
    if (result != sys::kSuccess) {
        if (graph != nullptr) device.api().graph_destroy(graph);
        prerequisites.clear();
        release_capture(device, id, nullptr);
        device.check(result, failed);
    }
    return Internals::make_graph(
        std::make_unique<GraphState>(device, graph, exec, id, std::move(uses), std::move(prerequisites)));
}

void abandon_capture(Stream& stream) noexcept {
    if (CaptureSession::current() == nullptr) return;
    std::unique_ptr<CaptureSession> session;
    const sys::Graph graph = end_session(stream, session, nullptr, nullptr).first;
    DeviceState& device = detail::Internals::stream_state(stream).device();
    if (graph != nullptr) {
        // The driver ended the capture with a graph that nothing will launch.
        const auto scope = device.bind_or_defer();
        device.defer(device.api().graph_destroy(graph), sys::Entry::graph_destroy);
    }
    release_capture(device, session->source_capture(), nullptr);
}

}  // namespace detail

const char* to_string(GraphUpdate update) noexcept {
    switch (update) {
        case GraphUpdate::in_place:
            return "updated in place";
        case GraphUpdate::reinstantiated:
            return "reinstantiated";
    }
    return "unknown";
}

Graph::Graph(std::unique_ptr<detail::GraphState> state) noexcept : state_(std::move(state)) {}
Graph detail::Internals::make_graph(std::unique_ptr<GraphState> state) noexcept {
    return Graph(std::move(state));
}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
Graph::~Graph() = default;

namespace {
[[noreturn]] void throw_moved_from(const char* what) {
    throw Error(fmt::format("cudarc: {}: the graph was moved from", what));
}
}  // namespace

void Graph::launch(Stream& stream) {
    if (!state_) throw_moved_from("Graph::launch");
    const detail::ProfilerRange range("cudarc: replay");  // Note [Profiler ranges]
    state_->launch(stream);
}

void Graph::upload(Stream& stream) {
    if (!state_) throw_moved_from("Graph::upload");
    state_->upload(stream);
}

GraphUpdate Graph::update(Graph captured) {
    if (!state_) throw_moved_from("Graph::update");
    if (!captured.state_) throw Error("cudarc: Graph::update: the new graph was moved from");
    return state_->update(*captured.state_);
}

std::vector<GraphAccess> Graph::accesses() const {
    return state_ ? state_->accesses() : std::vector<GraphAccess>{};
}

}  // namespace cudarc

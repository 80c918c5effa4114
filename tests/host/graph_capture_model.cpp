#include "graph_capture_model.hpp"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace cudarc::test::capture_model {
namespace {

// CUresult values the model returns.
constexpr sys::Result kInvalidValue = 1;
constexpr sys::Result kNotReady = 600;
constexpr sys::Result kIllegalState = 401;
constexpr sys::Result kCaptureUnsupported = 900;
constexpr sys::Result kCaptureInvalidated = 901;
constexpr sys::Result kCaptureUnjoined = 904;
constexpr sys::Result kCaptureIsolation = 905;
constexpr sys::Result kCapturedEvent = 907;
constexpr sys::Result kGraphExecUpdateFailure = 910;

struct Capture;

struct StreamObj {
    int id = 0;
    Capture* capture = nullptr;
    std::set<int> deps;  // inside a capture: what the stream's next node depends on
};

struct EventObj {
    enum class State { never, eager, captured } state = State::never;
    Capture* capture = nullptr;
    std::set<int> deps;
    bool pending = false;
};

struct Capture {
    StreamObj* origin = nullptr;
    std::thread::id thread;
    bool invalidated = false;
    bool ended = false;
    std::vector<Node> nodes;
    std::set<StreamObj*> members;
};

struct GraphObj {
    std::vector<Node> nodes;
};

struct State {
    std::recursive_mutex mutex;
    int next_stream = 1;
    std::vector<std::unique_ptr<Capture>> captures;
    std::vector<std::string> violations;
    std::vector<Node> last_graph;
    std::map<std::string, int> calls;
    std::set<void*> pinned;
    std::map<DevicePtr, std::size_t> device_memory;
    bool hold = false;
    std::vector<EventObj*> held;
};

State& state() {
    static State s;
    return s;
}

thread_local sys::Context current_context = nullptr;
sys::Context const kContext = reinterpret_cast<sys::Context>(std::uintptr_t{0x1000});

StreamObj* stream_of(sys::Stream s) {
    return reinterpret_cast<StreamObj*>(s);
}
EventObj* event_of(sys::Event e) {
    return reinterpret_cast<EventObj*>(e);
}

void count(const char* name) {
    std::lock_guard lock(state().mutex);
    ++state().calls[name];
}

// The capture under way on this thread, if any (thread-local mode).
Capture* capture_of_this_thread() {
    for (auto& c : state().captures) {
        if (!c->ended && c->thread == std::this_thread::get_id()) return c.get();
    }
    return nullptr;
}

// A call the driver refuses from a capturing thread: logged, and the capture is invalidated.
bool refused_while_capturing(const char* what) {
    Capture* c = capture_of_this_thread();
    if (c == nullptr) return false;
    state().violations.push_back(std::string(what) + " from the capturing thread");
    c->invalidated = true;
    return true;
}

// A stream operation: a node inside a capture, else it runs now.
sys::Result operation(sys::Stream stream, const char* kind, std::function<void()> action) {
    std::lock_guard lock(state().mutex);
    StreamObj* s = stream_of(stream);
    if (s->capture == nullptr) {
        action();
        return sys::kSuccess;
    }
    Capture& c = *s->capture;
    Node node;
    node.id = static_cast<int>(c.nodes.size());
    node.stream = s->id;
    node.kind = kind;
    node.deps = s->deps;
    node.action = std::move(action);
    s->deps = {node.id};
    c.nodes.push_back(std::move(node));
    return sys::kSuccess;
}

std::set<int> ancestors(const std::vector<Node>& nodes, const std::set<int>& from) {
    std::set<int> seen;
    std::vector<int> work(from.begin(), from.end());
    while (!work.empty()) {
        const int n = work.back();
        work.pop_back();
        if (!seen.insert(n).second) continue;
        for (int d : nodes[static_cast<std::size_t>(n)].deps) work.push_back(d);
    }
    return seen;
}

void leave(Capture& c) {
    for (StreamObj* m : c.members) {
        m->capture = nullptr;
        m->deps.clear();
    }
    c.ended = true;
}

// ---- the entry points ---------------------------------------------------------------------------------

sys::Result init(unsigned) {
    return sys::kSuccess;
}
sys::Result driver_get_version(int* v) {
    *v = 13000;
    return sys::kSuccess;
}
sys::Result get_error_name(sys::Result r, const char** name) {
    switch (r) {
        case kInvalidValue:
            *name = "CUDA_ERROR_INVALID_VALUE";
            return sys::kSuccess;
        case kNotReady:
            *name = "CUDA_ERROR_NOT_READY";
            return sys::kSuccess;
        case kCaptureUnsupported:
            *name = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
            return sys::kSuccess;
        case kCaptureInvalidated:
            *name = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
            return sys::kSuccess;
        case kCaptureUnjoined:
            *name = "CUDA_ERROR_STREAM_CAPTURE_UNJOINED";
            return sys::kSuccess;
        case kCaptureIsolation:
            *name = "CUDA_ERROR_STREAM_CAPTURE_ISOLATION";
            return sys::kSuccess;
        default:
            *name = "CUDA_ERROR_MODEL";
            return sys::kSuccess;
    }
}
sys::Result get_error_string(sys::Result, const char** text) {
    *text = "refused by the capture model";
    return sys::kSuccess;
}
sys::Result device_get_count(int* n) {
    *n = 1;
    return sys::kSuccess;
}
sys::Result device_get(sys::Device* d, int ordinal) {
    *d = ordinal;
    // Two devices (one context, one set of streams): enough for work between devices to be refused.
    return ordinal == 0 || ordinal == 1 ? sys::kSuccess : kInvalidValue;
}
sys::Result device_get_attribute(int* value, int, sys::Device) {
    *value = 0;
    return sys::kSuccess;
}
sys::Result primary_ctx_retain(sys::Context* ctx, sys::Device) {
    *ctx = kContext;
    return sys::kSuccess;
}
sys::Result primary_ctx_release(sys::Device) {
    return sys::kSuccess;
}
sys::Result ctx_get_current(sys::Context* ctx) {
    *ctx = current_context;
    return sys::kSuccess;
}
sys::Result ctx_set_current(sys::Context ctx) {
    current_context = ctx;
    return sys::kSuccess;
}
sys::Result ctx_synchronize() {
    std::lock_guard lock(state().mutex);
    count("cuCtxSynchronize");
    if (refused_while_capturing("cuCtxSynchronize")) return kCaptureUnsupported;
    return sys::kSuccess;
}
sys::Result ctx_priority_range(int* least, int* greatest) {
    *least = 0;
    *greatest = -5;
    return sys::kSuccess;
}
sys::Result mem_get_info(std::size_t* free_bytes, std::size_t* total) {
    *free_bytes = std::size_t{64} << 30;
    *total = std::size_t{80} << 30;
    return sys::kSuccess;
}

sys::Result stream_create(sys::Stream* stream, unsigned, int) {
    std::lock_guard lock(state().mutex);
    auto* s = new StreamObj;
    s->id = state().next_stream++;
    *stream = reinterpret_cast<sys::Stream>(s);
    return sys::kSuccess;
}
sys::Result stream_destroy(sys::Stream stream) {
    std::lock_guard lock(state().mutex);
    StreamObj* s = stream_of(stream);
    if (s->capture != nullptr) state().violations.push_back("cuStreamDestroy of a capturing stream");
    delete s;
    return sys::kSuccess;
}
sys::Result stream_synchronize(sys::Stream stream) {
    std::lock_guard lock(state().mutex);
    count("cuStreamSynchronize");
    if (refused_while_capturing("cuStreamSynchronize")) return kCaptureUnsupported;
    if (stream_of(stream)->capture != nullptr) {
        state().violations.push_back("cuStreamSynchronize of a capturing stream");
        return kCaptureUnsupported;
    }
    return sys::kSuccess;
}
sys::Result stream_query(sys::Stream) {
    std::lock_guard lock(state().mutex);
    count("cuStreamQuery");
    if (refused_while_capturing("cuStreamQuery")) return kCaptureUnsupported;
    return sys::kSuccess;
}
sys::Result stream_wait_event(sys::Stream stream, sys::Event event, unsigned flags) {
    std::lock_guard lock(state().mutex);
    count("cuStreamWaitEvent");
    StreamObj* s = stream_of(stream);
    EventObj* e = event_of(event);
    if (e->state == EventObj::State::captured) {
        if (e->capture->ended) {
            state().violations.push_back("cuStreamWaitEvent on an event recorded inside an ended capture");
            return kInvalidValue;
        }
        if (s->capture == nullptr) {
            // The waiter joins the capture.
            s->capture = e->capture;
            s->deps = e->deps;
            e->capture->members.insert(s);
            return sys::kSuccess;
        }
        if (s->capture != e->capture) {
            state().violations.push_back("cuStreamWaitEvent across two captures");
            return kCaptureIsolation;
        }
        s->deps.insert(e->deps.begin(), e->deps.end());
        return sys::kSuccess;
    }
    if (s->capture != nullptr && e->state == EventObj::State::eager) {
        if ((flags & sys::kEventWaitExternal) == 0) {
            state().violations.push_back(
                "a captured stream waited for an event recorded outside the capture");
            s->capture->invalidated = true;
            return kCaptureIsolation;
        }
        return operation(stream, "wait_external", [] {});
    }
    return sys::kSuccess;
}
sys::Result stream_get_priority(sys::Stream, int* priority) {
    *priority = 0;
    return sys::kSuccess;
}
sys::Result stream_get_ctx(sys::Stream, sys::Context* ctx) {
    *ctx = kContext;
    return sys::kSuccess;
}
sys::Result stream_is_capturing(sys::Stream stream, int* status) {
    std::lock_guard lock(state().mutex);
    const Capture* c = stream_of(stream)->capture;
    *status = c == nullptr ? 0 : (c->invalidated ? 2 : 1);
    return sys::kSuccess;
}
sys::Result stream_begin_capture(sys::Stream stream, int) {
    std::lock_guard lock(state().mutex);
    count("cuStreamBeginCapture");
    StreamObj* s = stream_of(stream);
    if (s->capture != nullptr) return kIllegalState;
    auto c = std::make_unique<Capture>();
    c->origin = s;
    c->thread = std::this_thread::get_id();
    c->members.insert(s);
    s->capture = c.get();
    s->deps.clear();
    state().captures.push_back(std::move(c));
    return sys::kSuccess;
}
sys::Result stream_end_capture(sys::Stream stream, sys::Graph* graph) {
    std::lock_guard lock(state().mutex);
    count("cuStreamEndCapture");
    *graph = nullptr;
    StreamObj* s = stream_of(stream);
    if (s->capture == nullptr || s->capture->origin != s) return kIllegalState;
    Capture& c = *s->capture;
    const std::set<int> joined = ancestors(c.nodes, s->deps);
    bool unjoined = false;
    for (StreamObj* m : c.members) {
        for (int d : m->deps) unjoined = unjoined || joined.count(d) == 0;
    }
    leave(c);
    if (c.invalidated) return kCaptureInvalidated;
    // Note: not a violation: abandoning a capture with a fork still alive ends it this way on purpose.
    if (unjoined) return kCaptureUnjoined;
    auto* g = new GraphObj{c.nodes};
    state().last_graph = c.nodes;
    *graph = reinterpret_cast<sys::Graph>(g);
    return sys::kSuccess;
}

sys::Result event_create(sys::Event* event, unsigned) {
    *event = reinterpret_cast<sys::Event>(new EventObj);
    return sys::kSuccess;
}
sys::Result event_destroy(sys::Event event) {
    std::lock_guard lock(state().mutex);
    std::erase(state().held, event_of(event));
    delete event_of(event);
    return sys::kSuccess;
}
sys::Result event_record(sys::Event event, sys::Stream stream) {
    std::lock_guard lock(state().mutex);
    count("cuEventRecord");
    EventObj* e = event_of(event);
    StreamObj* s = stream_of(stream);
    if (s->capture != nullptr) {
        e->state = EventObj::State::captured;
        e->capture = s->capture;
        e->deps = s->deps;
        e->pending = false;
        return sys::kSuccess;
    }
    e->state = EventObj::State::eager;
    e->capture = nullptr;
    e->deps.clear();
    e->pending = state().hold;
    if (e->pending) state().held.push_back(e);
    return sys::kSuccess;
}
sys::Result event_check(EventObj* e, const char* what) {
    if (refused_while_capturing(what)) return kCaptureUnsupported;
    if (e->state == EventObj::State::captured) {
        if (e->capture->ended) {
            state().violations.push_back(std::string(what) + " on an event recorded inside an ended capture");
            return kInvalidValue;
        }
        state().violations.push_back(std::string(what) + " on an event recorded inside the capture");
        e->capture->invalidated = true;
        return kCapturedEvent;
    }
    return sys::kSuccess;
}
sys::Result event_query(sys::Event event) {
    std::lock_guard lock(state().mutex);
    count("cuEventQuery");
    EventObj* e = event_of(event);
    if (const sys::Result r = event_check(e, "cuEventQuery"); r != sys::kSuccess) return r;
    return e->pending ? kNotReady : sys::kSuccess;
}
sys::Result event_synchronize(sys::Event event) {
    std::lock_guard lock(state().mutex);
    count("cuEventSynchronize");
    EventObj* e = event_of(event);
    if (const sys::Result r = event_check(e, "cuEventSynchronize"); r != sys::kSuccess) return r;
    e->pending = false;
    return sys::kSuccess;
}

sys::Result mem_alloc(DevicePtr* ptr, std::size_t bytes) {
    std::lock_guard lock(state().mutex);
    count("cuMemAlloc");
    if (refused_while_capturing("cuMemAlloc")) return kCaptureUnsupported;
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (p == nullptr) return 2;
    *ptr = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(p));
    state().device_memory[*ptr] = bytes;
    return sys::kSuccess;
}
sys::Result mem_free(DevicePtr ptr) {
    std::lock_guard lock(state().mutex);
    count("cuMemFree");
    if (refused_while_capturing("cuMemFree")) return kCaptureUnsupported;
    state().device_memory.erase(ptr);
    std::free(reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr)));
    return sys::kSuccess;
}
sys::Result mem_host_alloc(void** ptr, std::size_t bytes, unsigned) {
    std::lock_guard lock(state().mutex);
    *ptr = std::malloc(bytes);
    state().pinned.insert(*ptr);
    return sys::kSuccess;
}
sys::Result mem_free_host(void* ptr) {
    std::lock_guard lock(state().mutex);
    state().pinned.erase(ptr);
    std::free(ptr);
    return sys::kSuccess;
}
void* host(DevicePtr p) {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}
sys::Result memcpy_htod(DevicePtr dst, const void* src, std::size_t bytes, sys::Stream s) {
    count("cuMemcpyHtoDAsync");
    return operation(s, "memcpy_htod", [=] { std::memcpy(host(dst), src, bytes); });
}
sys::Result memcpy_dtoh(void* dst, DevicePtr src, std::size_t bytes, sys::Stream s) {
    count("cuMemcpyDtoHAsync");
    return operation(s, "memcpy_dtoh", [=] { std::memcpy(dst, host(src), bytes); });
}
sys::Result memcpy_dtod(DevicePtr dst, DevicePtr src, std::size_t bytes, sys::Stream s) {
    count("cuMemcpyDtoDAsync");
    return operation(s, "memcpy_dtod", [=] { std::memmove(host(dst), host(src), bytes); });
}
sys::Result memset_d8(DevicePtr dst, unsigned char value, std::size_t n, sys::Stream s) {
    count("cuMemsetD8Async");
    return operation(s, "memset", [=] { std::memset(host(dst), value, n); });
}
sys::Result memset_d32(DevicePtr dst, unsigned value, std::size_t n, sys::Stream s) {
    count("cuMemsetD32Async");
    return operation(s, "memset", [=] {
        auto* p = static_cast<unsigned*>(host(dst));
        for (std::size_t i = 0; i < n; ++i) p[i] = value;
    });
}
sys::Result pointer_get_attributes(unsigned count_, int* attributes, void** data, DevicePtr ptr) {
    std::lock_guard lock(state().mutex);
    for (unsigned i = 0; i < count_; ++i) {
        if (attributes[i] != sys::kPointerAttributeMemoryType) continue;
        unsigned type = 0;
        if (state().pinned.count(host(ptr)) != 0) type = sys::kMemoryTypeHost;
        *static_cast<unsigned*>(data[i]) = type;
    }
    return sys::kSuccess;
}

sys::Result graph_instantiate(sys::GraphExec* exec, sys::Graph graph, unsigned long long) {
    count("cuGraphInstantiateWithFlags");
    auto* g = reinterpret_cast<GraphObj*>(graph);
    *exec = reinterpret_cast<sys::GraphExec>(new GraphObj{g->nodes});
    return sys::kSuccess;
}
sys::Result graph_launch(sys::GraphExec exec, sys::Stream stream) {
    count("cuGraphLaunch");
    auto* g = reinterpret_cast<GraphObj*>(exec);
    return operation(stream, "graph", [nodes = g->nodes] {
        for (const Node& n : nodes) n.action();
    });
}
sys::Result graph_destroy(sys::Graph graph) {
    delete reinterpret_cast<GraphObj*>(graph);
    return sys::kSuccess;
}
sys::Result graph_exec_destroy(sys::GraphExec exec) {
    delete reinterpret_cast<GraphObj*>(exec);
    return sys::kSuccess;
}
sys::Result graph_exec_update(sys::GraphExec exec, sys::Graph graph, sys::GraphExecUpdateResultInfo* info) {
    count("cuGraphExecUpdate");
    auto* e = reinterpret_cast<GraphObj*>(exec);
    auto* g = reinterpret_cast<GraphObj*>(graph);
    bool same = e->nodes.size() == g->nodes.size();
    for (std::size_t i = 0; same && i < e->nodes.size(); ++i)
        same = e->nodes[i].kind == g->nodes[i].kind && e->nodes[i].deps == g->nodes[i].deps;
    if (!same) {
        info->result = sys::kGraphExecUpdateTopologyChanged;
        return kGraphExecUpdateFailure;
    }
    e->nodes = g->nodes;
    info->result = sys::kGraphExecUpdateSuccess;
    return sys::kSuccess;
}
sys::Result graph_upload(sys::GraphExec, sys::Stream) {
    count("cuGraphUpload");
    return sys::kSuccess;
}

sys::DriverApi make_api() {
    sys::DriverApi a;
    a.backend = Backend::cuda;
    a.init = init;
    a.driver_get_version = driver_get_version;
    a.get_error_name = get_error_name;
    a.get_error_string = get_error_string;
    a.device_get_count = device_get_count;
    a.device_get = device_get;
    a.device_get_attribute = device_get_attribute;
    a.device_primary_ctx_retain = primary_ctx_retain;
    a.device_primary_ctx_release = primary_ctx_release;
    a.ctx_get_current = ctx_get_current;
    a.ctx_set_current = ctx_set_current;
    a.ctx_synchronize = ctx_synchronize;
    a.ctx_get_stream_priority_range = ctx_priority_range;
    a.mem_get_info = mem_get_info;
    a.stream_create_with_priority = stream_create;
    a.stream_destroy = stream_destroy;
    a.stream_synchronize = stream_synchronize;
    a.stream_query = stream_query;
    a.stream_wait_event = stream_wait_event;
    a.stream_get_priority = stream_get_priority;
    a.stream_get_ctx = stream_get_ctx;
    a.stream_is_capturing = stream_is_capturing;
    a.stream_begin_capture = stream_begin_capture;
    a.stream_end_capture = stream_end_capture;
    a.event_create = event_create;
    a.event_destroy = event_destroy;
    a.event_record = event_record;
    a.event_query = event_query;
    a.event_synchronize = event_synchronize;
    a.mem_alloc = mem_alloc;
    a.mem_free = mem_free;
    a.mem_host_alloc = mem_host_alloc;
    a.mem_free_host = mem_free_host;
    a.memcpy_htod_async = memcpy_htod;
    a.memcpy_dtoh_async = memcpy_dtoh;
    a.memcpy_dtod_async = memcpy_dtod;
    a.memset_d8_async = memset_d8;
    a.memset_d32_async = memset_d32;
    a.pointer_get_attributes = pointer_get_attributes;
    a.graph_instantiate = graph_instantiate;
    a.graph_launch = graph_launch;
    a.graph_destroy = graph_destroy;
    a.graph_exec_destroy = graph_exec_destroy;
    a.graph_exec_update = graph_exec_update;
    a.graph_upload = graph_upload;
    return a;
}

}  // namespace

const sys::DriverApi& api() {
    static const sys::DriverApi table = make_api();
    return table;
}

void reset() {
    std::lock_guard lock(state().mutex);
    state().violations.clear();
    state().calls.clear();
    state().last_graph.clear();
    for (EventObj* e : state().held) e->pending = false;
    state().held.clear();
    state().hold = false;
}

std::vector<std::string> violations() {
    std::lock_guard lock(state().mutex);
    return state().violations;
}

std::vector<Node> last_graph() {
    std::lock_guard lock(state().mutex);
    return state().last_graph;
}

bool precedes(const std::vector<Node>& graph, int ancestor, int node) {
    const std::set<int> all = ancestors(graph, graph[static_cast<std::size_t>(node)].deps);
    return all.count(ancestor) != 0;
}

int stream_id(sys::Stream stream) {
    return stream_of(stream)->id;
}

bool capturing(sys::Stream stream) {
    std::lock_guard lock(state().mutex);
    return stream_of(stream)->capture != nullptr;
}

void hold_events() {
    std::lock_guard lock(state().mutex);
    state().hold = true;
}

void release_events() {
    std::lock_guard lock(state().mutex);
    for (EventObj* e : state().held) e->pending = false;
    state().held.clear();
    state().hold = false;
}

int calls(const std::string& entry_point) {
    std::lock_guard lock(state().mutex);
    const auto it = state().calls.find(entry_point);
    return it == state().calls.end() ? 0 : it->second;
}

}  // namespace cudarc::test::capture_model

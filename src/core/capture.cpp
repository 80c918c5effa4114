#include "core/capture.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "core/buffer.hpp"

namespace cudarc::detail {

namespace {
std::atomic<std::uint64_t> next_serial{1};
thread_local std::unique_ptr<CaptureSession> this_thread_capture;

// CU_EVENT_WAIT_EXTERNAL: a captured wait for an event recorded outside the capture becomes an event-wait
// node (without it the driver refuses the wait and invalidates the capture).
constexpr unsigned kEventWaitExternal = 0x1;

[[noreturn]] void throw_isolation(const char* what) {
    throw Error(
        fmt::format("cudarc: {}: a stream being captured into a graph cannot wait for work outside the "
                    "capture (the driver "
                    "would invalidate it). Each replay of the graph already waits for the earlier uses of "
                    "the buffers its "
                    "work touches; order other work before the capture begins",
                    what));
}
}  // namespace

bool capture_on_this_thread() noexcept {
    return captures_underway.load(std::memory_order_relaxed) != 0 && this_thread_capture != nullptr;
}

void refuse_in_capture(const char* what, const char* why) {
    if (!capture_on_this_thread()) return;
    throw Error(
        fmt::format("cudarc: {} inside a graph capture: {}; do it after capture() returns (nothing was "
                    "done, and the capture goes on)",
                    what, why));
}

void refuse_across_devices_in_capture(const char* what, const StreamState& stream, int from_device,
                                      int to_device, bool conflicts_with_captured_work) {
    CaptureSession* session = capture_on_this_thread() ? CaptureSession::current() : nullptr;
    if (session == nullptr) return;
    if (stream.capture() != session && !conflicts_with_captured_work) return;  // runs at once, as usual
    throw Error(fmt::format(
        "cudarc: {} between device {} and device {} inside a graph capture (on device {}): a capture records "
        "the work of one device, and cudarc does not capture work across devices; do it before or after "
        "capture() (nothing was done, and the capture goes on)",
        what, from_device, to_device, session->device().ordinal()));
}

void AccessSet::add(std::size_t begin, std::size_t end, Access access) {
    if (begin >= end) return;
    // The new list: what lies outside [begin, end) as it was; inside, the stronger access (a write wins)
    // over the old pieces and `access` over the gaps.
    std::vector<GraphRange> out;
    out.reserve(ranges_.size() + 3);
    const auto push = [&](GraphRange r) {
        if (r.begin >= r.end) return;
        if (!out.empty() && out.back().end == r.begin && out.back().access == r.access) {
            out.back().end = r.end;
        } else {
            out.push_back(r);
        }
    };
    std::size_t cursor = begin;  // inside [begin, end): covered up to here
    for (const GraphRange& r : ranges_) {
        if (r.end <= begin || r.begin >= end) {
            if (r.begin >= end && cursor < end) {
                push(GraphRange{cursor, end, access});
                cursor = end;
            }
            push(r);
            continue;
        }
        push(GraphRange{r.begin, begin, r.access});  // the part before `begin`, if any
        const std::size_t lo = std::max(r.begin, begin);
        const std::size_t hi = std::min(r.end, end);
        push(GraphRange{cursor, lo, access});  // a gap before this piece
        push(GraphRange{lo, hi, r.access == Access::write ? Access::write : access});
        cursor = hi;
        push(GraphRange{end, r.end, r.access});  // the part after `end`, if any
    }
    if (cursor < end) push(GraphRange{cursor, end, access});
    ranges_ = std::move(out);
}

// ---- CaptureSession ---------------------------------------------------------------------------------

CaptureSession::CaptureSession(StreamState& origin, std::optional<SourceCaptureId> source_capture)
    : origin_(origin.shared_from_this()),
      source_capture_(source_capture),
      serial_(next_serial.fetch_add(1, std::memory_order_relaxed)) {
    members_.reserve(4);
    // Eager: the capture has not begun, so this event covers the origin's work outside it.
    EventRef mark = origin.timeline().event_covering(kEverythingSoFar);
    members_.push_back(Member{origin_, CaptureRole::origin, false, std::make_unique<Timeline>(origin, this)});
    origin.enter_capture(this, std::move(mark));
}

CaptureSession::~CaptureSession() {
    finish();
}

CaptureSession* CaptureSession::current() noexcept {
    return this_thread_capture.get();
}

void CaptureSession::set_current(std::unique_ptr<CaptureSession> session) noexcept {
    if (session) captures_underway.fetch_add(1, std::memory_order_relaxed);
    this_thread_capture = std::move(session);
}

std::unique_ptr<CaptureSession> CaptureSession::take_current() noexcept {
    std::unique_ptr<CaptureSession> session = std::move(this_thread_capture);
    if (session) captures_underway.fetch_sub(1, std::memory_order_relaxed);
    return session;
}

void CaptureSession::join(StreamState& stream, CaptureRole role) {
    if (stream.capture() == this) return;
    if (stream.capture() != nullptr) {
        throw Error(
            "cudarc: a stream that another graph capture is recording cannot take part in this one (each "
            "stream and buffer of a capture belongs to the capturing thread until the capture ends)");
    }
    if (&stream.device() != &device()) {
        throw Error(
            fmt::format("cudarc: a stream of device {} cannot take part in a graph capture on device {}",
                        stream.device().ordinal(), device().ordinal()));
    }
    if (!stream.alive()) throw Error("cudarc: a retired stream cannot take part in a graph capture");
    members_.reserve(members_.size() + 1);
    auto timeline = std::make_unique<Timeline>(stream, this);
    if (source_capture_) device().memory().join_capture(*source_capture_, stream);
    // Eager: `stream` is not capturing yet, so this event covers its work outside the capture.
    EventRef mark = stream.timeline().event_covering(kEverythingSoFar);
    members_.push_back(Member{stream.shared_from_this(), role, false, std::move(timeline)});
    stream.enter_capture(this, std::move(mark));
}

void CaptureSession::note_joined(const StreamState& forked) noexcept {
    for (Member& m : members_) {
        if (m.state.get() == &forked) m.joined = true;
    }
}

StreamState* CaptureSession::member_with_handle(sys::Stream handle) const noexcept {
    for (const Member& m : members_) {
        if (m.state->handle() == handle) return m.state.get();
    }
    return nullptr;
}

Timeline& CaptureSession::timeline_of(StreamState& member) {
    for (Member& m : members_) {
        if (m.state.get() == &member) return *m.timeline;
    }
    throw Error("cudarc: internal error: a stream that takes no part in the capture used its timeline");
}

bool CaptureSession::keep_until_end(std::shared_ptr<StreamState>& state) noexcept {
    try {
        kept_streams_.reserve(kept_streams_.size() + 1);
    } catch (...) {
        return false;
    }
    kept_streams_.push_back(std::move(state));
    return true;
}

bool CaptureSession::defer_join(StreamState& child, StreamState& parent) noexcept {
    try {
        deferred_joins_.push_back(DeferredJoin{child.shared_from_this(), parent.shared_from_this()});
        return true;
    } catch (...) {
        return false;
    }
}

bool CaptureSession::defer_release(Buffer* buffer) noexcept {
    if (allocated_inside(buffer->hazards())) return false;  // the memory source keeps it for the graph
    try {
        deferred_releases_.reserve(deferred_releases_.size() + 1);
    } catch (...) {
        return false;
    }
    deferred_releases_.emplace_back(buffer);
    return true;
}

bool CaptureSession::keep_event(sys::Event event) noexcept {
    try {
        kept_events_.push_back(event);
        return true;
    } catch (...) {
        return false;
    }
}

CaptureSession::Overlay* CaptureSession::overlay_of(const HazardState& real) const noexcept {
    const BufferLink* link = real.link_if_any();
    if (link == nullptr) return nullptr;
    const auto it = overlays_.find(link);
    return it == overlays_.end() ? nullptr : it->second.get();
}

CaptureSession::Overlay& CaptureSession::overlay_for(HazardState& real, Timeline* first_writer,
                                                     bool allocated_inside) {
    if (Overlay* existing = overlay_of(real)) return *existing;
    auto overlay = std::make_unique<Overlay>(real.link(), real.bytes(), first_writer, allocated_inside);
    Overlay& out = *overlay;
    overlays_.emplace(out.link.get(), std::move(overlay));
    return out;
}

HazardState& CaptureSession::overlay_for(HazardState& real) {
    return overlay_for(real, nullptr, false).hazards;
}

void CaptureSession::note_touched(HazardState& real, std::size_t offset, std::size_t bytes,
                                  Access access) noexcept {
    Overlay* overlay = overlay_of(real);
    try {
        if (overlay == nullptr) throw std::bad_alloc();
        overlay->touched.add(offset, offset + bytes, access);
    } catch (...) {
        touched_lost_ = true;  // the graph could not be ordered: take_uses() fails the capture
    }
}

bool CaptureSession::conflicts_with_captured_work(const HazardState& real, std::size_t offset,
                                                  std::size_t bytes, Access access) const noexcept {
    // The overlay's state, seen by a stream that never used it.
    const Overlay* overlay = overlay_of(real);
    return overlay != nullptr && overlay->hazards.would_wait(offset, bytes, access);
}

bool CaptureSession::allocated_inside(const HazardState& real) const noexcept {
    const Overlay* overlay = overlay_of(real);
    return overlay != nullptr && overlay->allocated_inside;
}

void CaptureSession::record_use(HazardState& real, StreamState& member) {
    Overlay& overlay = overlay_for(real, nullptr, false);
    overlay.hazards.record_use(timeline_of(member));
    overlay.touched.add(0, real.bytes(), Access::read);
}

void CaptureSession::note_allocation(HazardState& real, StreamState& home) {
    // The allocation counts as a write by `home` among members, as it does outside a capture.
    overlay_for(real, &timeline_of(home), true);
    allocated_ = true;
}

std::vector<GraphPrerequisite> CaptureSession::take_prerequisites() noexcept {
    std::vector<GraphPrerequisite> out;
    if (!allocated_) return out;
    try {
        out.reserve(members_.size());
    } catch (...) {
        // Without the list the graph's first launch could not wait: keep nothing from the cache.
        device().synchronize_noexcept();
        return out;
    }
    for (Member& m : members_) {
        if (m.state->precapture_mark()) out.push_back(GraphPrerequisite{m.state, m.state->precapture_mark()});
    }
    return out;
}

void CaptureSession::check_forks_joined() const {
    std::size_t alive = 0;
    for (const Member& m : members_) {
        if (m.role == CaptureRole::forked && !m.joined) ++alive;
    }
    if (alive == 0) return;
    throw Error(fmt::format(
        "cudarc: capture: {} stream(s) forked inside the capture were still alive when the body returned; a "
        "forked stream joins its parent when it is destroyed, so destroy it inside the body. The capture was "
        "abandoned",
        alive));
}

void CaptureSession::join_members_into_origin() {
    for (const Member& m : members_) {
        if (m.role == CaptureRole::joined) m.state->order_before(*origin_);  // a graph edge
    }
}

std::vector<GraphBufferUse> CaptureSession::take_uses() {
    if (touched_lost_) throw std::bad_alloc();
    std::vector<GraphBufferUse> uses;
    uses.reserve(overlays_.size());
    for (auto& [link, overlay] : overlays_) {
        // Memory allocated and released inside the capture belongs to the graph alone.
        if (overlay->link->state == nullptr) continue;
        if (overlay->touched.ranges().empty()) continue;
        uses.push_back(GraphBufferUse{overlay->link, overlay->touched.ranges()});
    }
    // Note: a stable order, so that replays wait in the same order every time (the map's is arbitrary).
    std::sort(uses.begin(), uses.end(), [](const GraphBufferUse& a, const GraphBufferUse& b) {
        return a.link->address < b.link->address;
    });
    return uses;
}

void CaptureSession::finish() noexcept {
    if (finished_) return;
    finished_ = true;
    DeviceState& d = device();
    // Note [Context scope]: this runs on the way out of a capture (and in a destructor), so a failure to bind
    // is deferred; the calls below then fail and are deferred too.
    const auto scope = d.bind_or_defer();
    // The overlays name the members' capture timelines: they go first. Those timelines' events were
    // recorded inside the capture; recorded again outside it (on the origin, which no longer captures),
    // they can go back to the pool.
    overlays_.clear();
    for (Member& m : members_) {
        if (m.timeline) m.timeline->rerecord_kept(origin_->handle());
    }
    for (Member& m : members_) m.timeline.reset();
    for (sys::Event event : kept_events_) {
        if (d.api().event_record(event, origin_->handle()) == sys::kSuccess) {
            d.events().release(event);
        } else {
            d.defer(d.api().event_destroy(event), sys::Entry::event_destroy);
        }
    }
    kept_events_.clear();
    for (Member& m : members_) m.state->leave_capture();
    for (auto& state : kept_streams_) d.streams().release(std::move(state));
    kept_streams_.clear();
    for (DeferredJoin& join : deferred_joins_) {
        try {
            join.child->order_before(*join.parent);
        } catch (const Error& error) {
            d.defer(error);
            d.synchronize_noexcept();
        } catch (...) {
            d.synchronize_noexcept();
        }
    }
    deferred_joins_.clear();
    deferred_releases_.clear();  // their releases run now, ordered after their uses outside the capture
    members_.clear();
}

// ---- Hooks ------------------------------------------------------------------------------------------

bool capture_would_take(const HazardState& real, const StreamState& stream, std::size_t offset,
                        std::size_t bytes, Access access) {
    CaptureSession* session = CaptureSession::current();
    if (session == nullptr) return false;
    if (stream.capture() == session) return true;
    return session->conflicts_with_captured_work(real, offset, bytes, access);
}

bool capture_record_use(HazardState& real, StreamState& stream) {
    CaptureSession* session = CaptureSession::current();
    if (session == nullptr || stream.capture() != session) return false;
    session->record_use(real, stream);
    return true;
}

void capture_note_allocation(Buffer& buffer, StreamState& home) {
    CaptureSession* session = CaptureSession::current();
    if (session == nullptr || home.capture() != session) return;
    session->note_allocation(buffer.hazards(), home);
}

bool capture_defer_release(Buffer* buffer) noexcept {
    CaptureSession* session = CaptureSession::current();
    return session != nullptr && session->defer_release(buffer);
}

bool capture_keep_event(DeviceState& device, sys::Event event) noexcept {
    CaptureSession* session = CaptureSession::current();
    return session != nullptr && &session->device() == &device && session->keep_event(event);
}

bool capture_join_parent(StreamState& child, StreamState& parent) noexcept {
    CaptureSession* session = CaptureSession::current();
    if (session == nullptr) return false;
    if (child.capture() == session && parent.capture() == session) {
        // Both captured: a graph edge, enqueued the ordinary way.
        try {
            child.order_before(parent);
        } catch (const Error& error) {
            // The capture is most likely broken now; ending it reports the driver's error.
            child.device().defer(error);
        } catch (...) {
        }
        session->note_joined(child);
        return true;
    }
    // A stream forked before the capture, joining a captured parent: the parent cannot wait for work outside
    // the capture, so the join happens when the capture ends (eagerly, outside the graph).
    if (child.capture() == nullptr && parent.capture() == session) return session->defer_join(child, parent);
    return false;
}

void capture_prepare_join(StreamState& waiter, StreamState& user) {
    CaptureSession* session = CaptureSession::current();
    if (session == nullptr) return;
    if (user.capture() == session && waiter.capture() != session) {
        session->join(waiter, CaptureRole::joined);  // it waits for captured work: it is captured from now on
    } else if (user.capture() != session && waiter.capture() == session) {
        throw_isolation("Stream::join");
    }
}

unsigned capture_prepare_wait(StreamState& waiter, std::uint64_t recorded_in) {
    CaptureSession* session = CaptureSession::current();
    if (recorded_in != 0) {
        if (session == nullptr || session->serial() != recorded_in) {
            throw Error(
                "cudarc: Stream::wait: the event was last recorded inside another graph capture (one that "
                "has ended, or another thread's), where it marks a point of captured work, not of work "
                "that runs; record it again outside the capture first");
        }
        if (waiter.capture() != session) session->join(waiter, CaptureRole::joined);
        return 0;
    }
    // An event recorded outside the capture, waited for inside it: an event-wait node of the graph.
    if (session != nullptr && waiter.capture() == session) return kEventWaitExternal;
    return 0;
}

bool order_before_in_capture(StreamState& user, StreamState& waiter) {
    if (CaptureSession* session = user.capture()) {
        if (waiter.capture() == session) return false;  // a graph edge, the ordinary way
        // The waiter is outside the capture: it waits for the member's work outside it.
        DeviceState& device = user.device();
        if (!user.precapture_mark()) return true;  // Note: a member always has one (join records it)
        const auto scope = device.bind();
        device.wait_event(waiter.handle(), user.precapture_mark()->handle());
        waiter.timeline().note_waited(user.timeline(), *user.precapture_mark());
        return true;
    }
    CaptureSession* session = CaptureSession::current();
    if (session != nullptr && waiter.capture() == session) throw_isolation("a join");
    return false;
}

}  // namespace cudarc::detail

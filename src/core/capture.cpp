#include "core/capture.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "core/hazard_tracker.hpp"

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

std::vector<GraphRange> ranges_touched(const RangeTable& touched) {
    std::vector<GraphRange> out;
    for (const RangeTable::Range& r : touched.ranges()) {
        if (r.writers == 0 && r.readers == 0) continue;
        const Access access = r.writers != 0 ? Access::write : Access::read;
        if (!out.empty() && out.back().end == r.begin && out.back().access == access) {
            out.back().end = r.end;
        } else {
            out.push_back(GraphRange{r.begin, r.end, access});
        }
    }
    return out;
}

// ---- CaptureSession ---------------------------------------------------------------------------------

CaptureSession::CaptureSession(StreamState& origin, std::optional<SourceCaptureId> source_capture)
    : origin_(origin.shared_from_this()),
      source_capture_(source_capture),
      serial_(next_serial.fetch_add(1, std::memory_order_relaxed)) {
    members_.reserve(4);
    DeviceState& device = origin.device();
    const auto scope = device.bind();
    sys::Event mark = device.record_event(origin.handle());  // eager: the capture has not begun
    members_.push_back(Member{origin_, CaptureRole::origin, false});
    origin.enter_capture(this, mark);
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
    if (source_capture_) device().memory().join_capture(*source_capture_, stream);
    DeviceState& d = device();
    const auto scope = d.bind();
    // Eager: `stream` is not capturing yet, so this event covers its work outside the capture.
    sys::Event mark = d.record_event(stream.handle());
    members_.push_back(Member{stream.shared_from_this(), role, false});
    stream.enter_capture(this, mark);
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

bool CaptureSession::keep_until_end(std::shared_ptr<StreamState>& state) noexcept {
    try {
        kept_streams_.reserve(kept_streams_.size() + 1);
    } catch (...) {
        return false;
    }
    kept_streams_.push_back(std::move(state));
    return true;
}

sys::Event CaptureSession::mark_outside(StreamState& member) {
    DeviceState& d = device();
    if (!helper_) helper_ = d.streams().acquire(0);
    const auto scope = d.bind();
    d.wait_event(helper_->handle(), member.precapture_mark());
    return d.record_event(helper_->handle());
}

std::uintptr_t CaptureSession::outside_key() const noexcept {
    return helper_ ? helper_->key() : device().default_stream_state()->key();
}

bool CaptureSession::defer_join(StreamState& child, StreamState& parent) noexcept {
    try {
        deferred_joins_.push_back(DeferredJoin{child.shared_from_this(), parent.shared_from_this()});
        return true;
    } catch (...) {
        return false;
    }
}

bool CaptureSession::defer_release(Buffer& buffer) noexcept {
    if (allocated_inside(buffer.hazards())) return false;  // the memory source keeps it for the graph
    try {
        deferred_releases_.reserve(deferred_releases_.size() + 1);
    } catch (...) {
        return false;
    }
    deferred_releases_.push_back(std::move(buffer));
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

CaptureSession::Overlay& CaptureSession::overlay_for(HazardState& real, StreamState* first_writer,
                                                     bool allocated_inside) {
    if (Overlay* existing = overlay_of(real)) return *existing;
    auto overlay = std::make_unique<Overlay>(Overlay{real.link(), HazardState(real.bytes(), first_writer),
                                                     RangeTable(real.bytes()), allocated_inside});
    Overlay& out = *overlay;
    overlays_.emplace(out.link.get(), std::move(overlay));
    return out;
}

bool CaptureSession::conflicts_with_captured_work(const HazardState& real, std::size_t offset,
                                                  std::size_t bytes, Access access) const noexcept {
    // The overlay's state, seen by a stream that has no slot in it.
    const Overlay* overlay = overlay_of(real);
    return overlay != nullptr && overlay->hazards.would_wait(offset, bytes, access);
}

bool CaptureSession::allocated_inside(const HazardState& real) const noexcept {
    const Overlay* overlay = overlay_of(real);
    return overlay != nullptr && overlay->allocated_inside;
}

bool CaptureSession::before_access(HazardState& real, StreamState& stream, std::size_t offset,
                                   std::size_t bytes, Access access) {
    if (bytes == 0) return true;
    Overlay& overlay = overlay_for(real, nullptr, false);
    overlay.hazards.order_access(stream, offset, bytes, access);
    overlay.touched.apply(offset, offset + bytes, 0, access);
    return true;
}

bool CaptureSession::after_access(HazardState& real, StreamState& stream) noexcept {
    if (Overlay* overlay = overlay_of(real)) overlay->hazards.order_after_access(stream);
    return true;
}

bool CaptureSession::record_use(HazardState& real, StreamState& stream) {
    Overlay& overlay = overlay_for(real, nullptr, false);
    overlay.hazards.order_use(stream);
    overlay.touched.add_reader_everywhere(0);
    return true;
}

void CaptureSession::note_allocation(HazardState& real, StreamState& home) {
    // The allocation counts as a write by `home` among members, as it does outside a capture.
    overlay_for(real, &home, true);
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
        if (sys::Event mark = m.state->take_precapture_mark())
            out.push_back(GraphPrerequisite{m.state, mark});
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
        if (m.role == CaptureRole::joined) m.state->order_before(origin_->handle());  // a graph edge
    }
}

std::vector<GraphBufferUse> CaptureSession::take_uses() {
    std::vector<GraphBufferUse> uses;
    uses.reserve(overlays_.size());
    for (auto& [link, overlay] : overlays_) {
        // Memory allocated and released inside the capture belongs to the graph alone.
        if (overlay->link->state == nullptr) continue;
        std::vector<GraphRange> ranges = ranges_touched(overlay->touched);
        if (ranges.empty()) continue;
        uses.push_back(GraphBufferUse{overlay->link, std::move(ranges)});
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
    // The overlays' events were recorded inside the capture; recorded again outside it (on the origin, which
    // no longer captures), they can go back to the pool.
    for (auto& [link, overlay] : overlays_) overlay->hazards.rerecord_events(origin_->handle());
    overlays_.clear();
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
    if (helper_) d.streams().release(std::move(helper_));
    for (DeferredJoin& join : deferred_joins_) {
        try {
            join.child->order_before(join.parent->handle());
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

bool capture_before_access(HazardState& real, StreamState& stream, std::size_t offset, std::size_t bytes,
                           Access access) {
    CaptureSession* session = CaptureSession::current();
    if (session == nullptr) return false;
    if (stream.capture() == session) return session->before_access(real, stream, offset, bytes, access);
    if (stream.capture() != nullptr) {
        throw Error(
            "cudarc: a stream that another thread's graph capture is recording was used on this thread");
    }
    // An outsider whose access conflicts with captured work waits for it: it joins the capture.
    if (capture_would_take(real, stream, offset, bytes, access)) {
        session->join(stream, CaptureRole::joined);
        return session->before_access(real, stream, offset, bytes, access);
    }
    return false;
}

bool capture_would_take(const HazardState& real, const StreamState& stream, std::size_t offset,
                        std::size_t bytes, Access access) {
    CaptureSession* session = CaptureSession::current();
    if (session == nullptr) return false;
    if (stream.capture() == session) return true;
    return session->conflicts_with_captured_work(real, offset, bytes, access);
}

bool capture_after_access(HazardState& real, StreamState& stream) noexcept {
    CaptureSession* session = CaptureSession::current();
    if (session == nullptr || stream.capture() != session) return false;
    return session->after_access(real, stream);
}

bool capture_record_use(HazardState& real, StreamState& stream) {
    CaptureSession* session = CaptureSession::current();
    if (session == nullptr || stream.capture() != session) return false;
    return session->record_use(real, stream);
}

void capture_note_allocation(Buffer& buffer, StreamState& home) {
    CaptureSession* session = CaptureSession::current();
    if (session == nullptr || home.capture() != session) return;
    session->note_allocation(buffer.hazards(), home);
}

bool capture_defer_release(Buffer& buffer) noexcept {
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
            child.order_before(parent.handle());
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
                "has "
                "ended, or another thread's), where it marks a point of captured work, not of work that "
                "runs; "
                "record it again outside the capture first");
        }
        if (waiter.capture() != session) session->join(waiter, CaptureRole::joined);
        return 0;
    }
    // An event recorded outside the capture, waited for inside it: an event-wait node of the graph.
    if (session != nullptr && waiter.capture() == session) return kEventWaitExternal;
    return 0;
}

bool order_before_in_capture(StreamState& user, sys::Stream waiter) {
    if (CaptureSession* session = user.capture()) {
        if (session->member_with_handle(waiter) != nullptr) return false;  // a graph edge, the ordinary way
        // The waiter is outside the capture: it waits for the member's work outside it.
        DeviceState& device = user.device();
        const auto scope = device.bind();
        device.wait_event(waiter, user.precapture_mark());
        return true;
    }
    CaptureSession* session = CaptureSession::current();
    if (session != nullptr && session->member_with_handle(waiter) != nullptr) throw_isolation("a join");
    return false;
}

void wait_in_capture(StreamState& waiter, StreamState& user, sys::Event& event) {
    DeviceState& device = waiter.device();
    if (user.capture() == waiter.capture()) {
        // Both take part in one capture: an event recorded inside it, waited for inside it.
        const auto scope = device.bind();  // one device: a capture records one device's streams
        if (event == nullptr) event = user.device().record_event(user.handle());
        device.wait_event(waiter.handle(), event);
        return;
    }
    if (waiter.capture() == nullptr) {
        // Note: `event`, when set, was recorded outside the capture (members never touch the buffers' own
        // states during it); otherwise the member's work from before the capture is what there is to wait
        // for.
        const auto scope = device.bind();
        device.wait_event(waiter.handle(), event != nullptr ? event : user.precapture_mark());
        return;
    }
    throw_isolation("hazard tracking");
}

}  // namespace cudarc::detail

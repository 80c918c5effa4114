// detail::CaptureSession — one graph capture under way on this thread: the streams taking part, what the
// captured work reads and writes, and what waits for the capture to end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/device_state.hpp"
#include "core/hazard_state.hpp"
#include "core/timeline.hpp"
#include "cudarc/detail/buffer.hpp"

namespace cudarc::detail {

// Note [Capture overlay]
// ~~~~~~~~~~~~~~~~~~~~~~
// Rationale: nothing runs during a capture, and the driver turns an event the capture recorded into one
// that cannot be waited for or queried afterwards (CUDA_ERROR_INVALID_VALUE); a captured stream that
// waits for an event recorded before the capture kills the capture (CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
// and in thread-local mode an event or stream query, a synchronize or a cuMemAlloc from the capturing
// thread kills it too. So captured work must not be recorded in the buffers' hazard state as if it had run.
//
// Approach, during a capture (one per thread):
//  - Members. The capturing stream, every stream forked from a member, and every stream that waits for
//    captured work (through a hazard wait, Stream::join or Stream::wait) take part in the capture
//    (StreamState::capture()). Joining, a stream first records an event eagerly: its work outside the
//    capture (the pre-capture mark). Whatever outside the capture waits for a member waits for that event
//    (Timeline::event_covering, order_before_in_capture).
//  - Overlay. Accesses by members go to a second HazardState per buffer, kept by the session and starting
//    empty (for memory allocated inside the capture: written by its stream), and are ordered by a timeline
//    of the capture's own per member (Note [Stream timelines]): its positions count captured operations,
//    and its events, recorded and waited for inside the capture, are graph edges. The buffers' own states
//    and the members' own timelines are left as they were.
//  - Earlier uses. Captured work does not wait for uses from before the capture. The overlay also records
//    the union of the byte ranges members read and wrote, which the graph keeps, and every Graph::launch
//    counts as those accesses on the launch stream: it waits for conflicting earlier work on other streams,
//    and later work and frees wait for the replay. This orders every replay, not only the first, after the
//    uses before it, which no wait recorded into the graph could do.
//  - Outsiders. A stream that is not a member and whose access conflicts with captured work joins the
//    capture (its access is captured, as the driver does when such a stream waits for a captured event).
//    Any other access by it runs at once and is tracked as usual.
//  - Releases. A buffer released during the capture is released when the capture ends (its memory must not
//    be freed on a captured stream, nor its uses' events recorded there), except memory allocated inside
//    the capture on a member: the memory source keeps it for the graph (caching allocator) or the graph
//    frees it itself (stream-ordered pool). A graph whose buffer was released fails to launch, naming it.
//  - Memory from the cache. A block the capture allocates was last used by earlier work on the stream
//    whose pool it comes from, and the graph may be launched on any stream: its first launch waits for
//    the work every member ran before taking part (their pre-capture marks, kept by the graph). Later
//    launches follow the first (the driver orders launches of one executable graph).
//  - Streams. A pooled stream released by a member goes back to the pool only when the capture ends. A
//    fork of a stream from before the capture that joins into a member is carried out when the capture
//    ends. At the end, members that joined by waiting are joined into the capturing stream; a forked
//    stream still alive is an error, and the capture is abandoned.
//  - The single-stream fast path is off while any capture is under way (`captures_underway`), so that
//    accesses by the capturing stream are seen.
//  - A replay is one operation on its stream (core/operation.hpp): at most one wait per source stream
//    before it and one event after it, however many buffers the graph touches.
//
// Limits: a capture records the streams of one device: work between devices that would take part in it
// (Stream::join across devices, a copy between devices) throws, and so do NCCL operations and communicator
// creation on the capturing thread. A stream or buffer the capture uses is used by the capturing thread alone
// until the capture ends; an Event recorded outside the capture and waited for inside it must outlive the
// graph (its wait is an external event node); destroying a wrapped foreign stream or the device's default
// stream inside the body is not supported.

enum class CaptureRole {
    origin,  // the stream capture() was called with
    forked,  // forked from a member: must be destroyed (joined) inside the body
    joined,  // waited for captured work: joined into the origin at the end
};

// One byte range of a buffer that a graph's work reads or writes.
struct GraphRange {
    std::size_t begin = 0;
    std::size_t end = 0;
    Access access = Access::read;
};

// What a graph's work does to one buffer.
struct GraphBufferUse {
    std::shared_ptr<BufferLink> link;
    std::vector<GraphRange> ranges;
};

// An event that the first launch of a graph waits for, unless launched on `stream` itself.
struct GraphPrerequisite {
    std::shared_ptr<StreamState> stream;
    EventRef event;
};

// The byte ranges a capture's work read and wrote in one buffer: written where any write happened, read
// where only reads did; sorted, with neighbours of the same access merged.
class AccessSet {
  public:
    void add(std::size_t begin, std::size_t end, Access access);
    [[nodiscard]] const std::vector<GraphRange>& ranges() const noexcept { return ranges_; }

  private:
    std::vector<GraphRange> ranges_;
};

class CaptureSession {
  public:
    // Records the pre-capture mark on `origin`; the capture itself begins in begin_capture (graph.cpp).
    // `source_capture`: the device's memory source's id for the capture (MemorySource::begin_capture).
    CaptureSession(StreamState& origin, std::optional<SourceCaptureId> source_capture);
    CaptureSession(const CaptureSession&) = delete;
    CaptureSession& operator=(const CaptureSession&) = delete;
    ~CaptureSession();

    // This thread's capture, or null.
    [[nodiscard]] static CaptureSession* current() noexcept;
    // Makes `session` this thread's capture (counted in captures_underway); null ends it.
    static void set_current(std::unique_ptr<CaptureSession> session) noexcept;
    [[nodiscard]] static std::unique_ptr<CaptureSession> take_current() noexcept;

    [[nodiscard]] std::uint64_t serial() const noexcept { return serial_; }
    [[nodiscard]] StreamState& origin() const noexcept { return *origin_; }
    [[nodiscard]] DeviceState& device() const noexcept { return origin_->device(); }
    [[nodiscard]] std::optional<SourceCaptureId> source_capture() const noexcept { return source_capture_; }

    // Membership.
    void join(StreamState& stream, CaptureRole role);
    void note_joined(const StreamState& forked) noexcept;
    [[nodiscard]] StreamState* member_with_handle(sys::Stream handle) const noexcept;
    // The timeline of a member's captured work (Note [Stream timelines]).
    [[nodiscard]] Timeline& timeline_of(StreamState& member);
    // Keeps a pooled member stream out of the pool until the end (false: no memory to keep it).
    [[nodiscard]] bool keep_until_end(std::shared_ptr<StreamState>& state) noexcept;
    [[nodiscard]] bool defer_join(StreamState& child, StreamState& parent) noexcept;
    // Takes `buffer` (owned from then on) to release it when the capture ends; false: not deferred.
    [[nodiscard]] bool defer_release(Buffer* buffer) noexcept;
    // Keeps a pooled event until the end (it may have been recorded inside the capture).
    [[nodiscard]] bool keep_event(sys::Event event) noexcept;

    // The overlay of a buffer's state (made on first use; empty: nothing captured touched it yet).
    [[nodiscard]] HazardState& overlay_for(HazardState& real);
    // A captured access's bytes, for the graph's access set.
    void note_touched(HazardState& real, std::size_t offset, std::size_t bytes, Access access) noexcept;
    // A captured raw-pointer use of the whole buffer (record_stream).
    void record_use(HazardState& real, StreamState& member);
    void note_allocation(HazardState& real, StreamState& home);
    [[nodiscard]] bool allocated_inside(const HazardState& real) const noexcept;
    // Whether an access by a stream outside the capture would have to wait for captured work.
    [[nodiscard]] bool conflicts_with_captured_work(const HazardState& real, std::size_t offset,
                                                    std::size_t bytes, Access access) const noexcept;

    // The end. check_forks_joined throws for a forked stream still alive; join_members_into_origin
    // enqueues (captured) the joins of members that joined by waiting.
    void check_forks_joined() const;
    void join_members_into_origin();
    [[nodiscard]] std::vector<GraphBufferUse> take_uses();
    // What the first launch must wait for when the capture took memory from the cache: each stream's work
    // from before it took part (the memory's earlier users ran there). Empty when nothing was allocated.
    [[nodiscard]] std::vector<GraphPrerequisite> take_prerequisites() noexcept;
    // Leaves the capture (members, kept streams, deferred joins and releases). Call once this thread's
    // capture is no longer this one (take_current) and the driver's capture has ended.
    void finish() noexcept;

  private:
    struct Member {
        std::shared_ptr<StreamState> state;
        CaptureRole role = CaptureRole::joined;
        bool joined = false;  // forked: its destruction joined it into its parent
        std::unique_ptr<Timeline> timeline;
    };
    struct Overlay {
        Overlay(std::shared_ptr<BufferLink> l, std::size_t bytes, Timeline* first_writer, bool inside)
            : link(std::move(l)), hazards(bytes, first_writer, nullptr), allocated_inside(inside) {}
        std::shared_ptr<BufferLink> link;
        HazardState hazards;  // between members; Note [Capture overlay]
        AccessSet touched;    // the captured work, for the graph
        bool allocated_inside = false;
    };
    struct DeferredJoin {
        std::shared_ptr<StreamState> child;
        std::shared_ptr<StreamState> parent;
    };
    [[nodiscard]] Overlay* overlay_of(const HazardState& real) const noexcept;
    Overlay& overlay_for(HazardState& real, Timeline* first_writer, bool allocated_inside);

    std::shared_ptr<StreamState> origin_;
    std::optional<SourceCaptureId> source_capture_;
    std::uint64_t serial_;
    std::vector<Member> members_;
    std::unordered_map<const BufferLink*, std::unique_ptr<Overlay>> overlays_;
    std::vector<std::shared_ptr<StreamState>> kept_streams_;
    std::vector<DeferredJoin> deferred_joins_;
    std::vector<BufferHandle> deferred_releases_;
    std::vector<sys::Event> kept_events_;
    bool allocated_ = false;     // the capture took memory from the cache
    bool touched_lost_ = false;  // no memory to note an access: the graph cannot be ordered
    bool finished_ = false;
};

// Hooks the hot paths call only while captures_underway is not zero (Note [Capture overlay]).
// DeviceSlice::record_stream: true when the use was the capture's.
bool capture_record_use(HazardState& real, StreamState& stream);
void capture_note_allocation(Buffer& buffer, StreamState& home);
// destroy_buffer: true when this thread's capture took the buffer, to release it at its end.
bool capture_defer_release(Buffer* buffer) noexcept;
// EventPool::release: true when this thread's capture (on `device`) keeps the event until it ends.
bool capture_keep_event(DeviceState& device, sys::Event event) noexcept;
// Stream::join_parent: true when handled (a graph edge, or deferred to the end of the capture).
bool capture_join_parent(StreamState& child, StreamState& parent) noexcept;
// Stream::join(other): `waiter` is about to wait for `user`.
void capture_prepare_join(StreamState& waiter, StreamState& user);
// Stream::wait(event): the flags for cuStreamWaitEvent; throws for an event recorded in an ended capture.
[[nodiscard]] unsigned capture_prepare_wait(StreamState& waiter, std::uint64_t recorded_in);
// StreamState::order_before: true when handled.
bool order_before_in_capture(StreamState& user, StreamState& waiter);
// Whether an access on `stream` would be captured (a member, or an outsider that would join).
[[nodiscard]] bool capture_would_take(const HazardState& real, const StreamState& stream, std::size_t offset,
                                      std::size_t bytes, Access access);
// Throws "cudarc: WHAT inside a graph capture: WHY" when a capture is under way on this thread.
void refuse_in_capture(const char* what, const char* why);
// Work between two devices (Note [Hazard tracking across devices]) that this thread's capture would take
// part in: `stream` is a member, or the work conflicts with captured work on one of its buffers. A capture
// records one device's streams, so it throws, naming `what` and both devices, before anything is done.
void refuse_across_devices_in_capture(const char* what, const StreamState& stream, int from_device,
                                      int to_device, bool conflicts_with_captured_work);

}  // namespace cudarc::detail

// detail::HazardState — which streams used which bytes of one buffer (Note [Range hazards] in
// core/range_table.hpp), with the single-stream fast path in front and a lock for the slow path.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/range_table.hpp"
#include "core/timeline.hpp"
#include "cudarc/detail/buffer.hpp"

namespace cudarc::detail {

class DeviceState;
class StreamState;
class HazardState;

// What an operation must wait for: at most one use per timeline, the highest position of each.
using Needs = UseSet<8>;

// One stream's use of a buffer, taken out of its state (a free, a release): the stream is kept alive.
struct TimelineUse {
    std::shared_ptr<StreamState> stream;
    Timeline* timeline = nullptr;
    std::uint64_t position = 0;  // concrete, or kEverythingSoFar
};

// What a graph keeps of a buffer its captured work used: the buffer's hazard state while it lives (null
// once it is released), and its address and size to name it in errors. Created at the buffer's first
// captured access.
struct BufferLink {
    HazardState* state = nullptr;
    DevicePtr address = 0;
    std::size_t bytes = 0;
};

// The slow path's lock: held for bookkeeping only, never across a driver call, and uncontended in the
// common case (one thread per stream; threads on disjoint sub-views meet only here, briefly).
class SpinLock {
  public:
    void lock() noexcept {
        if (flag_.exchange(true, std::memory_order_acquire)) [[unlikely]]
            wait_and_lock();
    }
    void unlock() noexcept { flag_.store(false, std::memory_order_release); }

  private:
    // Out of line: the uncontended lock stays two instructions where it is inlined.
    [[gnu::noinline]] void wait_and_lock() noexcept {
        for (unsigned spins = 0; flag_.exchange(true, std::memory_order_acquire); ++spins) {
            if (spins > 64) std::this_thread::yield();
        }
    }
    std::atomic<bool> flag_{false};
};

// Note [Single-stream fast path]
// While one stream alone has written the whole buffer and nothing else happened since, `exclusive_` names
// its timeline, and any access by that stream needs no wait and changes nothing: one comparison (and one
// relaxed load: no capture under way), no lock. That stream's accesses still advance its position, so the
// state stands for "its tracked work so far" (kTrackedSoFar). When another stream touches the buffer, the
// range table is built under the lock, the owner's uses made concrete where the newcomer needs them (a
// concurrent access of the owner elsewhere keeps its "so far"). A write of the whole buffer by one stream
// returns to the fast path.
//
// Thread safety: accesses from several threads at once (one thread per stream) are safe; conflicting
// accesses from two threads at once (overlapping bytes, one a write) must be ordered by the program, as for
// any shared object (the library then orders them in the order it sees them). Reads need no order.
//
// Note [Owner's last access]
// "Its tracked work so far" is more than another stream needs: the owner went on to enqueue work on other
// buffers, and a newcomer that waited for all of it would wait for work it never touches (64 buffers
// handed between pooled streams then run one after another). So the state also keeps the position of the
// owner's latest access to it (owner_last_), stamped when that operation completes (Operation::complete),
// when the allocation is made and when a whole write returns the buffer to the fast path. A first access of
// the whole buffer by another stream, a free and a host wait use it; kTrackedSoFar means unknown (an
// operation that touched more owned buffers than it keeps stamps for), and the owner's position now
// stands in. A first access to part of the buffer still takes "its tracked work so far" for the rest: an
// access of the owner elsewhere in the buffer may be under way on another thread, and its stamp is not
// there yet. So does a read of the whole buffer that builds the table (a second foreign reader): the
// owner may be reading meanwhile, unstamped, as reads need no order among themselves. Only a whole write
// is sure to come after every access of the owner.
//
// Note [One foreign reader]
// The common hand-over (gradients written on one stream, read whole by a step on another, written whole
// again) would build a range table for each buffer at each step and fold it back at the next write: most
// of what a cross-stream step costs per buffer. So the fast path's state may also hold one reader of the
// whole buffer on another stream (reader_, at reader_position_): it stands for a table of one range whose
// writer is the owner (at its last access) and whose one reader is that stream. While it is set, the owner
// is no longer alone (owned_by is false): its write waits for the reader and clears it, its read only
// stamps its last access. The reader reading the whole buffer again moves its position; anything else
// (another reader, a write, part of the buffer, untracked work) builds the table from both.
class HazardState {
  public:
    // Whose work a first writer's stands for.
    enum class Writer {
        tracked,  // its tracked operations (memory it allocated)
        anything  // anything it submitted, tracked or not (borrowed memory: the owner wrote it unseen)
    };

    // A buffer of `bytes` last written as a whole by `first_writer` (null: untouched). `device`: the
    // buffer's device; streams of others, and foreign streams, are kept alive while named here (null: never
    // keep, for a capture's overlay, whose timelines outlive it).
    HazardState(std::size_t bytes, Timeline* first_writer, DeviceState* device,
                Writer writer = Writer::tracked) noexcept;
    HazardState(const HazardState&) = delete;
    HazardState& operator=(const HazardState&) = delete;
    ~HazardState();

    // Note [Single-stream fast path].
    [[nodiscard]] bool owned_by(const Timeline& timeline) const noexcept {
        return exclusive_.load(std::memory_order_acquire) == &timeline &&
               reader_.load(std::memory_order_acquire) == nullptr;
    }
    // Note [Owner's last access]: `timeline`'s operation at `position` accessed the buffer on the fast path
    // (or made it); the stamp changes only while `timeline` still owns the buffer, a foreign reader beside
    // it or not (Note [One foreign reader]: that reader may have come while the access was under way).
    void note_owner_access(const Timeline& timeline, std::uint64_t position) noexcept {
        if (exclusive_.load(std::memory_order_acquire) == &timeline &&
            owner_last_.load(std::memory_order_relaxed) != kOwnersWork)
            owner_last_.store(position, std::memory_order_release);
    }
    // An access of the owner whose position will not be stamped: the owner's position stands in again.
    void forget_owner_access() noexcept {
        // Note: only a concrete stamp is written over (a step over thousands of buffers then writes none).
        if (owner_last_.load(std::memory_order_relaxed) < kTrackedSoFar)
            owner_last_.store(kTrackedSoFar, std::memory_order_release);
    }
    // Adds to `needs` what an access by `timeline` to bytes [offset, offset + bytes) must wait for. Throws
    // only for want of memory, leaving an equivalent state. Inline: the fast path's cases take no lock.
    void collect(Timeline& timeline, std::size_t offset, std::size_t bytes, Access access, Needs& needs) {
        if (bytes == 0) return;
        Timeline* const owner = exclusive_.load(std::memory_order_acquire);
        Timeline* const reader = owner != nullptr ? reader_.load(std::memory_order_acquire) : nullptr;
        if (owner == &timeline && reader != nullptr && access == Access::write && offset == 0 &&
            bytes == bytes_) {
            // Note [One foreign reader]: the owner writes the whole buffer again, after its reader's read.
            // A whole write overlaps every access, so no other thread changes the state meanwhile; the
            // reader's position was stored before the reader itself.
            needs.raise(Use{reader, reader_position_.load(std::memory_order_relaxed)});
            return;
        }
        if (owner != nullptr && (access == Access::read || reader == nullptr)) {
            // Note [One foreign reader]: only a write must see the reader (a read may come beside it).
            if (owner == &timeline) return;
            if (offset == 0 && bytes == bytes_) {
                // The whole buffer on the fast path: the owner's last access, and no lock. Note: a whole
                // access overlaps every other, so no other thread may change the state meanwhile but by an
                // access that needs nothing of this one (a read beside a read), which leaves the owner's
                // uses as they were (Note [Single-stream fast path], thread safety). No table yet: apply
                // builds it.
                needs.raise(Use{owner, owner_position(*owner)});
                return;
            }
        }
        collect_locked(timeline, offset, bytes, access, needs);
    }
    // Note [Hand-over reads] in core/operation.hpp: for a read of all `bytes` of the buffer by `timeline`,
    // on the fast path with another owner (alone, or beside one foreign reader): adds what the read needs
    // (the owner's last access) and returns true. Otherwise returns false, having added nothing.
    [[nodiscard]] bool collect_handover(const Timeline& timeline, std::size_t bytes, Needs& needs) {
        Timeline* owner = exclusive_.load(std::memory_order_acquire);
        if (owner == nullptr || owner == &timeline || bytes != bytes_) return false;
        needs.raise(Use{owner, owner_position(*owner)});  // as collect does for a whole read
        return true;
    }
    // The read collect_handover took, at `position` once its work is enqueued: apply's result, through its
    // commonest case (Note [One foreign reader]: `timeline` becomes, or stays, the one reader) in short.
    // Inline: a step makes thousands.
    [[nodiscard]] bool apply_handover(Timeline& timeline, std::uint64_t position) noexcept {
        // Note: untracked work (kEverythingSoFar) takes apply's table, as there.
        if (position != kEverythingSoFar && !must_keep(timeline)) {
            std::lock_guard lock(lock_);
            Timeline* const owner = exclusive_.load(std::memory_order_relaxed);
            Timeline* const reader = reader_.load(std::memory_order_relaxed);
            // Note [One foreign reader]: apply's case of a whole read by another stream than the owner.
            if (!table_active_ && !precise_ && owner != nullptr && owner != &timeline &&
                (reader == nullptr || reader == &timeline)) {
                become_reader_locked(timeline, position);
                return true;
            }
        }
        return apply(timeline, 0, bytes_, Access::read, position);
    }
    // Records that access at `position` once its work is enqueued. Returns true when another stream may
    // need to wait for it (the buffer stays shared): the operation then records one event after it. Never
    // throws: without memory for the bookkeeping it waits for the device (counted) instead.
    [[nodiscard]] bool apply(Timeline& timeline, std::size_t offset, std::size_t bytes, Access access,
                             std::uint64_t position) noexcept;
    // `timeline`'s stream uses the whole buffer through raw pointers (record_stream): later writers on other
    // streams and the free wait for everything it submitted (kEverythingSoFar).
    void record_use(Timeline& timeline);
    // BorrowedSlice::owner_wrote: `owner` wrote the whole buffer again, untracked; earlier uses are
    // forgotten.
    void reset_to_owner(Timeline& owner) noexcept;
    // Adds to `needs` what an access by the host (no stream) to bytes [offset, offset + bytes) must wait
    // for, concrete positions only (Note [Pinned memory] in core/pinned_state.hpp). Throws only for want
    // of memory.
    void collect_for_host(std::size_t offset, std::size_t bytes, Access access, Needs& needs);
    // Adds every use other than `self`'s to `needs` (BorrowedSlice::sync_owner), leaving the state as it is.
    void collect_all(const Timeline& self, Needs& needs) const;
    // Whether an access by a stream that never used the buffer would have to wait for anything.
    [[nodiscard]] bool would_wait(std::size_t offset, std::size_t bytes, Access access) const noexcept;
    // Every use the state holds, one per timeline (kTrackedSoFar made concrete), added to `uses` (the
    // caller's room, empty), and then forgets them (clear). Throws std::bad_alloc, the state unchanged.
    void take_uses(std::vector<TimelineUse>& uses);
    // Forgets everything.
    void clear() noexcept;

    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
    // The timeline that alone owns the whole buffer (Note [Single-stream fast path]), or null.
    [[nodiscard]] Timeline* exclusive() const noexcept {
        return reader_.load(std::memory_order_acquire) == nullptr ? exclusive_.load(std::memory_order_acquire)
                                                                  : nullptr;
    }
    // For tests and diagnostics: calls f(ranges) with the table's ranges (empty on the fast path; the one
    // range a foreign reader stands for, Note [One foreign reader]).
    template <typename F>
    void inspect(F&& f) const {
        std::lock_guard lock(lock_);
        if (Timeline* reader = reader_.load(std::memory_order_relaxed); !table_active_ && reader != nullptr) {
            Timeline* owner = exclusive_.load(std::memory_order_relaxed);
            RangeTable both(bytes_, Use{owner, owner_position(*owner)});
            both.apply(0, bytes_, Use{reader, reader_position_.load(std::memory_order_relaxed)},
                       Access::read);
            f(both.ranges());
            return;
        }
        f(table_active_ ? table_.ranges() : std::span<const RangeTable::Range>{});
    }

    // Never takes the single-stream fast path: every use keeps its own position and range, so a host wait
    // covers exactly the copies of its range (Note [Pinned memory]). Before any access.
    void keep_ranges() noexcept { precise_ = true; }

    // The buffer's address, for the link.
    void set_address(DevicePtr address) noexcept { address_ = address; }
    [[nodiscard]] DevicePtr address() const noexcept { return address_; }
    // The link graphs keep to this buffer, made on first use (Note [Capture overlay]).
    [[nodiscard]] const std::shared_ptr<BufferLink>& link();
    [[nodiscard]] BufferLink* link_if_any() const noexcept { return link_.get(); }
    // The buffer is going away: links now say so.
    void detach_link() noexcept;

  private:
    // collect, past the fast path's cases: under the lock.
    void collect_locked(Timeline& timeline, std::size_t offset, std::size_t bytes, Access access,
                        Needs& needs);
    // The fast path's owner (or an untouched buffer) becomes a range table; `whole_write`: for a write of
    // the whole buffer (the owner's stamp is then complete). Holds lock_.
    void materialize_locked(bool whole_write);
    // Note [One foreign reader]: `timeline` is the one reader, at `position`. The position goes first: the
    // owner's whole write reads it with no lock, once it sees the reader. Holds lock_.
    void become_reader_locked(Timeline& timeline, std::uint64_t position) noexcept {
        reader_position_.store(position, std::memory_order_relaxed);
        reader_.store(&timeline, std::memory_order_release);
    }
    // Whether this state must keep `timeline`'s stream alive while it names it: a foreign stream's, or
    // another device's (the others live as long as their device).
    [[nodiscard]] bool must_keep(const Timeline& timeline) const noexcept {
        if (device_ == nullptr || timeline.capture() != nullptr) return false;
        return timeline.foreign() || timeline.device() != device_;
    }
    // Keeps `timeline`'s stream (and its device) alive while this state may name it. Holds lock_.
    void keep_locked(const Timeline& timeline);
    // Only `owner`'s stream stays kept. Holds lock_.
    void prune_keeps_locked(const Timeline* owner) noexcept {
        // Note: inline for the common case, nothing kept (only cudarc's own streams of this device named).
        if (!keeps_.empty()) prune_some_keeps_locked(owner);
    }
    void prune_some_keeps_locked(const Timeline* owner) noexcept;
    // Where the fast path's owner last accessed the buffer (Note [Owner's last access]): a concrete
    // position, or kOwnersWork for an owner that wrote unseen.
    [[nodiscard]] std::uint64_t owner_position(const Timeline& owner) const noexcept {
        const std::uint64_t last = owner_last_.load(std::memory_order_acquire);
        return last != kTrackedSoFar ? last : owner.position();
    }

    mutable SpinLock lock_;
    std::atomic<Timeline*> exclusive_;
    // Note [One foreign reader]: set only beside exclusive_, under lock_, after reader_position_ (which the
    // owner's whole write reads with no lock).
    std::atomic<Timeline*> reader_{nullptr};
    // Note [Owner's last access]; kOwnersWork while the owner's uses are Writer::anything.
    std::atomic<std::uint64_t> owner_last_{kTrackedSoFar};
    std::size_t bytes_;
    DeviceState* device_;
    bool table_active_ = false;  // guarded by lock_, like everything below
    bool precise_ = false;       // keep_ranges()
    std::atomic<std::uint64_t> reader_position_{0};
    RangeTable table_;
    struct Keep {
        std::shared_ptr<StreamState> stream;
        std::shared_ptr<DeviceState> device;  // another device's streams need theirs
    };
    std::vector<Keep> keeps_;
    DevicePtr address_ = 0;
    std::shared_ptr<BufferLink> link_;
};

}  // namespace cudarc::detail

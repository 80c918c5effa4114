// Note [Single-stream fast path] and Note [Range hazards]: one buffer's hazard state.
#include "core/hazard_state.hpp"

#include <algorithm>
#include <mutex>

#include "core/device_state.hpp"

namespace cudarc::detail {

std::atomic<unsigned> captures_underway{0};

HazardState::HazardState(std::size_t bytes, Timeline* first_writer, DeviceState* device,
                         Writer writer) noexcept
    : exclusive_(bytes != 0 ? first_writer : nullptr), bytes_(bytes), device_(device) {
    if (writer == Writer::anything) owner_last_.store(kOwnersWork, std::memory_order_relaxed);
}

HazardState::~HazardState() {
    detach_link();
}

const std::shared_ptr<BufferLink>& HazardState::link() {
    if (!link_) link_ = std::make_shared<BufferLink>(BufferLink{this, address_, bytes_});
    return link_;
}

void HazardState::detach_link() noexcept {
    if (!link_) return;
    link_->state = nullptr;
    link_.reset();
}

void HazardState::keep_locked(const Timeline& timeline) {
    if (!must_keep(timeline)) return;
    StreamState& stream = timeline.stream();
    const bool elsewhere = &stream.device() != device_;
    for (const Keep& k : keeps_) {
        if (k.stream.get() == &stream) return;
    }
    keeps_.push_back(
        Keep{stream.shared_from_this(), elsewhere ? stream.device().shared_from_this() : nullptr});
}

void HazardState::prune_some_keeps_locked(const Timeline* owner) noexcept {
    std::erase_if(keeps_,
                  [&](const Keep& k) { return owner == nullptr || k.stream.get() != &owner->stream(); });
}

namespace {
// Whether any use of the range's sole owner is "everything so far" (Note [Stream timelines]).
bool owner_untracked_use(const RangeTable::Range& range) noexcept {
    if (covers_untracked(range.writers[0].position)) return true;
    for (std::size_t k = 0; k < range.readers.size(); ++k) {
        if (covers_untracked(range.readers[k].position)) return true;
    }
    return false;
}
}  // namespace

void HazardState::materialize_locked(bool whole_write) {
    Timeline* owner = exclusive_.load(std::memory_order_relaxed);
    // The owner's uses are "its tracked work so far" (Note [Single-stream fast path]), or everything it
    // submitted for an owner that wrote unseen. Made concrete at once for a write of the whole buffer:
    // any access of the owner not yet counted would conflict with it (Note [Single-stream fast path],
    // thread safety), so its last one is stamped (Note [Owner's last access]).
    const std::uint64_t last = owner_last_.load(std::memory_order_acquire);
    const std::uint64_t position = last == kOwnersWork               ? kOwnersWork
                                   : whole_write && owner != nullptr ? owner_position(*owner)
                                                                     : kTrackedSoFar;
    table_.reset(bytes_, Use{owner, position});  // may throw
    if (Timeline* reader = reader_.load(std::memory_order_relaxed); reader != nullptr) {
        table_.apply(0, bytes_, Use{reader, reader_position_.load(std::memory_order_relaxed)},
                     Access::read);  // no split: cannot throw
        reader_.store(nullptr, std::memory_order_relaxed);
    }
    owner_last_.store(kTrackedSoFar, std::memory_order_relaxed);
    table_active_ = true;
    exclusive_.store(nullptr, std::memory_order_release);
}

void HazardState::collect_locked(Timeline& timeline, std::size_t offset, std::size_t bytes, Access access,
                                 Needs& needs) {
    std::lock_guard lock(lock_);
    Timeline* owner = exclusive_.load(std::memory_order_relaxed);
    Timeline* reader = reader_.load(std::memory_order_relaxed);
    if (!table_active_) {
        if (owner == nullptr) return;  // untouched: nothing to wait for
        // Note [One foreign reader]: a write waits for the reader, whoever writes.
        if (reader != nullptr && reader != &timeline && access == Access::write)
            needs.raise(Use{reader, reader_position_.load(std::memory_order_relaxed)});
        if (owner == &timeline) return;
        if (offset == 0 && bytes == bytes_) {
            needs.raise(Use{owner, owner_position(*owner)});
            return;
        }
        materialize_locked(false);
    }
    table_.collect(offset, offset + bytes, &timeline, access, [&](const Use& use) { needs.raise(use); });
}

void HazardState::collect_for_host(std::size_t offset, std::size_t bytes, Access access, Needs& needs) {
    if (bytes == 0) return;
    std::lock_guard lock(lock_);
    if (!table_active_) {
        if (Timeline* owner = exclusive_.load(std::memory_order_relaxed))
            needs.raise(Use{owner, owner_position(*owner)});
        if (Timeline* reader = reader_.load(std::memory_order_relaxed);
            reader != nullptr && access == Access::write)
            needs.raise(Use{reader, reader_position_.load(std::memory_order_relaxed)});
        return;
    }
    table_.collect(offset, offset + bytes, nullptr, access, [&](const Use& use) {
        needs.raise(Use{use.timeline, use.timeline->concrete(use.position)});
    });
}

bool HazardState::apply(Timeline& timeline, std::size_t offset, std::size_t bytes, Access access,
                        std::uint64_t position) noexcept {
    // Note: untracked work (kEverythingSoFar) is not covered by the owner's "tracked work so far".
    const bool tracked = position != kEverythingSoFar;
    if (bytes == 0 || (tracked && owned_by(timeline))) return false;
    std::unique_lock lock(lock_);
    Timeline* const owner_now = exclusive_.load(std::memory_order_relaxed);
    Timeline* const reader = reader_.load(std::memory_order_relaxed);
    if (tracked && owner_now == &timeline && reader == nullptr) return false;
    const bool whole = offset == 0 && bytes == bytes_;
    try {
        if (!table_active_ && tracked && !precise_ && owner_now != nullptr) {
            // Note [One foreign reader]: the hand-overs that need no table.
            if (owner_now == &timeline) {  // the owner, beside its reader
                if (access == Access::write && whole) {
                    reader_.store(nullptr, std::memory_order_release);
                    prune_keeps_locked(owner_now);
                    owner_last_.store(position, std::memory_order_release);
                    return false;
                }
                if (access == Access::read) {
                    if (owner_last_.load(std::memory_order_relaxed) != kOwnersWork)
                        owner_last_.store(position, std::memory_order_release);
                    return true;
                }
            } else if (access == Access::read && whole && (reader == nullptr || reader == &timeline)) {
                keep_locked(timeline);  // may throw: nothing changed yet
                become_reader_locked(timeline, position);
                return true;
            }
        }
        // Note [Owner's last access]: a whole read may meet a read of the owner not yet stamped (reads
        // need no order among themselves); only a whole write is sure to come after every owner access.
        if (!table_active_) materialize_locked(whole && access == Access::write);
        keep_locked(timeline);
        table_.apply(offset, offset + bytes, Use{&timeline, position}, access);
        // Back to Note [Single-stream fast path] when `timeline` now owns the whole buffer. Note: not for
        // an owner whose write or read is "everything so far" (raw pointers): its later untracked work
        // would be missed by a "tracked work so far".
        Timeline* owner = precise_ ? nullptr : table_.sole_owner();
        if (owner != nullptr && !owner_untracked_use(table_.ranges().front())) {
            table_active_ = false;
            prune_keeps_locked(owner);
            // Note [Owner's last access]: the owner is `timeline` (its write or read made it sole), and
            // `position` is its newest.
            owner_last_.store(position, std::memory_order_release);
            exclusive_.store(owner, std::memory_order_release);
            return false;
        }
        return true;
    } catch (...) {
        // No memory for the bookkeeping. Once the device has finished everything enqueued so far (this
        // access's work included), nothing is left to wait for: the buffer is untouched again.
        lock.unlock();
        timeline.stream().device().synchronize_noexcept();
        lock.lock();
        table_active_ = false;
        reader_.store(nullptr, std::memory_order_relaxed);
        prune_keeps_locked(nullptr);
        exclusive_.store(nullptr, std::memory_order_release);
        return false;
    }
}

void HazardState::record_use(Timeline& timeline) {
    std::lock_guard lock(lock_);
    if (!table_active_) materialize_locked(false);
    keep_locked(timeline);
    table_.add_reader_everywhere(Use{&timeline, kEverythingSoFar});
}

void HazardState::reset_to_owner(Timeline& owner) noexcept {
    // Note: a buffer its owner alone holds (a borrow that lasts, stepped on the owner's stream) only
    // forgets the owner's last access, with no lock, as the owner's own fast path writes it (Note [Owner's
    // last access]). Its keeps are pruned at the next reset that takes the lock, or at its release.
    if (owned_by(owner)) {
        owner_last_.store(kOwnersWork, std::memory_order_release);
        return;
    }
    std::lock_guard lock(lock_);
    table_active_ = false;
    reader_.store(nullptr, std::memory_order_relaxed);
    owner_last_.store(kOwnersWork, std::memory_order_release);
    prune_keeps_locked(&owner);
    exclusive_.store(&owner, std::memory_order_release);
}

void HazardState::collect_all(const Timeline& self, Needs& needs) const {
    // Note: `self` alone holds the buffer: there is nothing to collect (the fast path's test, no lock).
    if (exclusive_.load(std::memory_order_acquire) == &self &&
        reader_.load(std::memory_order_acquire) == nullptr)
        return;
    std::lock_guard lock(lock_);
    if (!table_active_) {
        Timeline* owner = exclusive_.load(std::memory_order_relaxed);
        if (owner != nullptr && owner != &self) needs.raise(Use{owner, owner_position(*owner)});
        if (Timeline* reader = reader_.load(std::memory_order_relaxed); reader != nullptr && reader != &self)
            needs.raise(Use{reader, reader_position_.load(std::memory_order_relaxed)});
        return;
    }
    table_.for_each_use([&](const Use& use) {
        if (use.timeline != &self) needs.raise(Use{use.timeline, use.timeline->concrete(use.position)});
    });
}

bool HazardState::would_wait(std::size_t offset, std::size_t bytes, Access access) const noexcept {
    if (bytes == 0) return false;
    std::lock_guard lock(lock_);
    if (!table_active_) return exclusive_.load(std::memory_order_relaxed) != nullptr;
    return table_.conflicts(offset, offset + bytes, access);
}

void HazardState::take_uses(std::vector<TimelineUse>& uses) {
    const auto add = [&](const Use& use) {
        const std::uint64_t position = use.timeline->concrete(use.position);
        for (TimelineUse& u : uses) {
            if (u.timeline == use.timeline) {
                u.position = std::max(u.position, position);
                return;
            }
        }
        uses.push_back(TimelineUse{use.timeline->stream().shared_from_this(), use.timeline, position});
    };
    {
        std::lock_guard lock(lock_);
        if (!table_active_) {
            if (Timeline* owner = exclusive_.load(std::memory_order_relaxed))
                add(Use{owner, owner_position(*owner)});
            if (Timeline* reader = reader_.load(std::memory_order_relaxed))
                add(Use{reader, reader_position_.load(std::memory_order_relaxed)});
        } else {
            table_.for_each_use(add);
        }
    }
    clear();
}

void HazardState::clear() noexcept {
    // Note: a state is cleared only as its buffer is released, when no other thread may use it; a buffer
    // that never left the fast path has no table or keeps to drop.
    owner_last_.store(kTrackedSoFar, std::memory_order_relaxed);
    reader_.store(nullptr, std::memory_order_relaxed);
    if (!table_active_ && keeps_.empty()) {
        exclusive_.store(nullptr, std::memory_order_release);
        return;
    }
    std::lock_guard lock(lock_);
    table_active_ = false;
    table_.reset(0, Use{});
    exclusive_.store(nullptr, std::memory_order_release);
    // Note: the keeps go last: a retired foreign stream's state must outlive the uses naming it, which the
    // caller has taken (take_uses) or no longer needs.
    keeps_.clear();
}

}  // namespace cudarc::detail

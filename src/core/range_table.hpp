// detail::RangeTable — which streams wrote and read which byte ranges of one buffer, as positions on their
// timelines (Note [Stream timelines] in core/timeline.hpp). Pure bookkeeping: no driver, no events, no
// locks (the hazard state holds its lock around every call). Host tests drive it directly.
//
// Note [Range hazards]
// ~~~~~~~~~~~~~~~~~~~~
// Rationale: one batch buffer whose items are sub-views, each written on its own stream, must run
// concurrently; per-buffer tracking serialized them. An access through a DeviceView covers exactly its
// bytes [begin, end) of the buffer.
//
// Approach: the buffer is covered by contiguous, sorted ranges. Each range keeps two sets of uses, at most
// one per timeline, each a (timeline, position):
//  - writers: the uses later accesses must follow (one, except after a merge);
//  - readers: the reads since those writes (later writes must follow them).
// An access by timeline T over [begin, end):
//  - read: needs the writers (other than T) of every overlapping range; T becomes a reader there;
//  - write: needs every writer and reader (other than T); T becomes the only writer.
// A need that the accessing stream has already waited for is skipped by its vector clock (core/
// timeline.hpp), which replaces per-range "already synced" bits. The access splits the ranges at its ends;
// afterwards neighbours in the same state coalesce, so a write of the whole buffer leaves one range. There
// is no bound on the number of streams: each range holds as many uses as streams touched it.
//
// Limits: at most kMaxRanges ranges. Past that, the two neighbouring ranges whose states differ least
// merge conservatively: writers and readers are united, keeping the later position of each timeline
// (kTrackedSoFar and kEverythingSoFar count as later than any position). The merged state orders every
// later access after at least what the separate states did: an extra wait is possible, a missing one never.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/timeline.hpp"
#include "cudarc/detail/buffer.hpp"

namespace cudarc::detail {

// One use of a buffer: the work of `timeline` up to `position` (or kTrackedSoFar / kEverythingSoFar).
struct Use {
    Timeline* timeline = nullptr;
    std::uint64_t position = 0;
    friend bool operator==(const Use&, const Use&) = default;
};

// A set of uses with at most one entry per timeline; the first N live inline.
template <std::size_t N>
class UseSet {
  public:
    // Note: the first entry is set (raise reads it inline, where the compiler cannot see size_ guard it).
    UseSet() noexcept { inline_.items[0] = Use{}; }
    UseSet(const UseSet&) = default;
    UseSet& operator=(const UseSet&) = default;
    UseSet(UseSet&&) noexcept = default;
    UseSet& operator=(UseSet&&) noexcept = default;

    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    [[nodiscard]] const Use& operator[](std::size_t i) const noexcept {
        return i < N ? inline_.items[i] : more_[i - N];
    }
    [[nodiscard]] Use& operator[](std::size_t i) noexcept { return i < N ? inline_.items[i] : more_[i - N]; }

    // The entry of `timeline`, or null.
    [[nodiscard]] Use* find(const Timeline* timeline) noexcept {
        for (std::size_t i = 0; i < size_; ++i) {
            if ((*this)[i].timeline == timeline) return &(*this)[i];
        }
        return nullptr;
    }
    [[nodiscard]] const Use* find(const Timeline* timeline) const noexcept {
        return const_cast<UseSet*>(this)->find(timeline);
    }
    // A newer use of its timeline: replaces the older one (any event after the newer one covers the older),
    // except an older kEverythingSoFar or kOwnersWork (untracked work), which no later position covers.
    void set(Use use) {
        if (Use* existing = find(use.timeline)) {
            if (!covers_untracked(existing->position)) *existing = use;
            return;
        }
        push(use);
    }
    // Merging: keeps the later position of each timeline.
    void raise(Use use) {
        // Note: a step's needs are mostly one stream's, the first entry's: checked before the search, inline.
        if (size_ != 0 && inline_.items[0].timeline == use.timeline) {
            if (use.position > inline_.items[0].position) inline_.items[0].position = use.position;
            return;
        }
        if (size_ == 0) {  // an operation's first need, as often its only one
            inline_.items[0] = use;
            size_ = 1;
            return;
        }
        raise_elsewhere(use);
    }
    void assign_one(Use use) noexcept {
        clear();
        inline_.items[0] = use;
        size_ = 1;
    }
    void clear() noexcept {
        size_ = 0;
        more_.clear();
    }
    // Whether every entry is `timeline`'s.
    [[nodiscard]] bool only(const Timeline* timeline) const noexcept {
        for (std::size_t i = 0; i < size_; ++i) {
            if ((*this)[i].timeline != timeline) return false;
        }
        return true;
    }
    // The same uses, in any order.
    [[nodiscard]] bool same_as(const UseSet& other) const noexcept {
        if (size_ != other.size_) return false;
        for (std::size_t i = 0; i < size_; ++i) {
            const Use* mine = other.find((*this)[i].timeline);
            if (mine == nullptr || mine->position != (*this)[i].position) return false;
        }
        return true;
    }

  private:
    // Out of line, so that raise stays small enough to inline.
    [[gnu::noinline]] void raise_elsewhere(Use use) {
        if (Use* existing = find(use.timeline)) {
            if (use.position > existing->position) existing->position = use.position;
            return;
        }
        push(use);
    }
    void push(Use use) {
        if (size_ >= N)
            more_.push_back(use);  // may throw: nothing changed yet
        else
            inline_.items[size_] = use;
        ++size_;
    }

    // Note: left uninitialized past size_ but for the first entry (an operation's needs are made fresh for
    // every launch); copied as bytes.
    union Inline {
        Inline() noexcept {}  // NOLINT(modernize-use-equals-default): must not initialize items
        Use items[N];
    } inline_;
    std::size_t size_ = 0;
    std::vector<Use> more_;
};

class RangeTable {
  public:
    static constexpr std::size_t kMaxRanges = 512;
    using Uses = UseSet<2>;

    struct Range {
        std::size_t begin = 0;
        std::size_t end = 0;
        Uses writers;
        Uses readers;
        [[nodiscard]] bool same_state(const Range& other) const noexcept {
            return writers.same_as(other.writers) && readers.same_as(other.readers);
        }
    };

    RangeTable() = default;
    // A buffer of `bytes` whose every byte was last written by `writer` (none when writer.timeline is null).
    RangeTable(std::size_t bytes, Use writer) { reset(bytes, writer); }
    void reset(std::size_t bytes, Use writer);

    // Calls need(use) for every use an access by `self` to [begin, end) must follow (never `self`'s own).
    // kTrackedSoFar uses over those bytes become concrete first (the position their timeline has now: a
    // concurrent access by that timeline elsewhere in the buffer keeps its "so far"), which is why this
    // splits ranges and is not const. Requires begin < end <= bytes(). May throw (no memory for a split),
    // leaving an equivalent table.
    template <typename Need>
    void collect(std::size_t begin, std::size_t end, const Timeline* self, Access access, Need&& need);
    // Records the access once its work is enqueued.
    void apply(std::size_t begin, std::size_t end, Use use, Access access);
    // A use of the whole buffer outside the library's knowledge (record_stream): later writers wait for it.
    void add_reader_everywhere(Use use);

    // Whether an access to [begin, end) by a timeline that never used the buffer would need anything.
    [[nodiscard]] bool conflicts(std::size_t begin, std::size_t end, Access access) const noexcept;
    // The timeline that alone wrote the whole buffer, with no other reader since, or null.
    [[nodiscard]] Timeline* sole_owner() const noexcept;
    // Calls f(use) for every use the table holds.
    template <typename F>
    void for_each_use(F&& f) const {
        for (const Range& r : ranges_) {
            for (std::size_t i = 0; i < r.writers.size(); ++i) f(r.writers[i]);
            for (std::size_t i = 0; i < r.readers.size(); ++i) f(r.readers[i]);
        }
    }

    [[nodiscard]] std::span<const Range> ranges() const noexcept { return ranges_; }
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

  private:
    // Index of the range containing byte `pos` (< bytes()).
    [[nodiscard]] std::size_t index_of(std::size_t pos) const noexcept;
    // Makes a range start at `pos`, returning its index (ranges().size() when pos == bytes()).
    std::size_t split_at(std::size_t pos);
    // Merges neighbours in the same state among indices [first, last].
    void coalesce(std::size_t first, std::size_t last) noexcept;
    // Merges neighbours until at most kMaxRanges remain.
    void enforce_limit();

    std::size_t bytes_ = 0;
    std::vector<Range> ranges_;
};

template <typename Need>
void RangeTable::collect(std::size_t begin, std::size_t end, const Timeline* self, Access access,
                         Need&& need) {
    // Note: the whole buffer in one range (every tensor of a step) needs no split.
    const bool whole = ranges_.size() == 1 && begin == 0 && end == bytes_;
    const std::size_t first = whole ? 0 : split_at(begin);
    const std::size_t last = whole ? 1 : split_at(end);
    const auto visit = [&](Uses& uses) {
        for (std::size_t k = 0; k < uses.size(); ++k) {
            Use& use = uses[k];
            if (use.timeline == self) continue;
            if (use.position == kTrackedSoFar) use.position = use.timeline->position();
            need(use);
        }
    };
    for (std::size_t i = first; i < last; ++i) {
        visit(ranges_[i].writers);
        if (access == Access::write) visit(ranges_[i].readers);
    }
}

}  // namespace cudarc::detail

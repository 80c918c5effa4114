// detail::RangeTable — which streams wrote and read which byte ranges of one buffer. Pure bookkeeping:
// no driver, no events; streams are slot numbers (0..63). The hazard tracker (buffer.cpp) maps streams to
// slots and turns the conflicts it reports into event waits. Host tests drive it directly.
//
// Note [Range hazards]
// ~~~~~~~~~~~~~~~~~~~~
// Rationale: one batch buffer whose items are sub-views, each written on its own stream, must run
// concurrently; per-buffer tracking serialized them. An access through a DeviceView covers exactly its
// bytes [begin, end) of the buffer.
//
// Approach: the buffer is covered by contiguous, sorted ranges. Each range keeps three sets of slots
// (bit masks):
//  - writers: the streams whose writes later accesses must order after (one, except after a merge);
//  - readers: the streams that read since those writes (later writes must order after them);
//  - synced: the streams already ordered after every writer (a second read there needs no wait).
// An access on slot S over [begin, end):
//  - read: waits for the writers of every overlapping range where S is not synced; S becomes synced and,
//    unless it is a writer there, a reader;
//  - write: waits for every writer and reader of the overlapping ranges; S becomes the only writer.
// The access splits the ranges at its ends; afterwards neighbours in the same state coalesce, so a stream
// that writes adjacent pieces leaves one range, and a write of the whole buffer leaves one.
//
// Limits: at most kMaxRanges ranges. Past that, the two neighbouring ranges whose states differ least
// merge conservatively: writers and readers are united, synced is intersected. The merged state orders
// every later access after at least what the separate states did: an extra wait is possible, a missing one
// never. Streams beyond kMaxSlots are handled by the tracker (it relabels the least recently used slot
// after making the new stream wait for it; see buffer.cpp).
//
// Invariant: synced ⊆ writers ∪ readers in every range, so a slot absent from used() is absent from every
// mask and may be given to another stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cudarc/detail/buffer.hpp"

namespace cudarc::detail {

class RangeTable {
  public:
    using Mask = std::uint64_t;
    static constexpr unsigned kMaxSlots = 64;
    static constexpr std::size_t kMaxRanges = 128;

    struct Range {
        std::size_t begin = 0;
        std::size_t end = 0;
        Mask writers = 0;
        Mask readers = 0;
        Mask synced = 0;
        [[nodiscard]] bool same_state(const Range& other) const noexcept {
            return writers == other.writers && readers == other.readers && synced == other.synced;
        }
    };

    [[nodiscard]] static constexpr Mask bit(unsigned slot) noexcept { return Mask{1} << slot; }

    // A buffer of `bytes` whose every byte was last written by `writer` (or untouched when `writer` < 0).
    explicit RangeTable(std::size_t bytes, int writer = -1);

    // The slots that an access on `slot` to [begin, end) must wait for (never `slot` itself).
    // Requires begin <= end <= bytes().
    [[nodiscard]] Mask conflicts(std::size_t begin, std::size_t end, unsigned slot, Access access) const;
    // The slots that an access to [begin, end) by a stream with no slot here would wait for.
    [[nodiscard]] Mask conflicts_without_slot(std::size_t begin, std::size_t end, Access access) const;
    // Whether `slot` is synced over every byte of [begin, end): then a read by it there waits for nothing and
    // changes no range (synced ⊆ writers ∪ readers), so the tracker can skip conflicts() and apply().
    [[nodiscard]] bool synced_over(std::size_t begin, std::size_t end, unsigned slot) const noexcept;
    // Records that access, once its waits are in place.
    void apply(std::size_t begin, std::size_t end, unsigned slot, Access access);
    // Records a use of the whole buffer by `slot` outside the library's knowledge (record_stream): later
    // writers wait for it, and so does the free; nothing is waited for now.
    void add_reader_everywhere(unsigned slot);

    // Every slot some range still names.
    [[nodiscard]] Mask used() const noexcept;
    // The slot that alone wrote the whole buffer with nothing since, or -1.
    [[nodiscard]] int sole_writer() const noexcept;

    [[nodiscard]] std::span<const Range> ranges() const noexcept { return ranges_; }
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

  private:
    // conflicts() for the slots in `self` (none, or one).
    [[nodiscard]] Mask conflicts_of(std::size_t begin, std::size_t end, Mask self, Access access) const;
    // Index of the range containing byte `pos` (< bytes()).
    [[nodiscard]] std::size_t index_of(std::size_t pos) const noexcept;
    // Makes a range start at `pos`, returning its index (ranges().size() when pos == bytes()).
    std::size_t split_at(std::size_t pos);
    // Merges neighbours in the same state among indices [first, last].
    void coalesce(std::size_t first, std::size_t last) noexcept;
    // Merges neighbours until at most kMaxRanges remain.
    void enforce_limit() noexcept;

    std::size_t bytes_;
    std::vector<Range> ranges_;
};

}  // namespace cudarc::detail

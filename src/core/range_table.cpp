#include "core/range_table.hpp"

#include <algorithm>
#include <bit>
#include <limits>

namespace cudarc::detail {

RangeTable::RangeTable(std::size_t bytes, int writer) : bytes_(bytes) {
    if (bytes == 0) return;
    Range whole{0, bytes, 0, 0, 0};
    if (writer >= 0) whole.writers = whole.synced = bit(static_cast<unsigned>(writer));
    ranges_.reserve(4);
    ranges_.push_back(whole);
}

std::size_t RangeTable::index_of(std::size_t pos) const noexcept {
    // The first range that ends after `pos` contains it (ranges are contiguous from 0).
    const auto it = std::upper_bound(ranges_.begin(), ranges_.end(), pos,
                                     [](std::size_t p, const Range& r) { return p < r.end; });
    return static_cast<std::size_t>(it - ranges_.begin());
}

RangeTable::Mask RangeTable::conflicts(std::size_t begin, std::size_t end, unsigned slot,
                                       Access access) const {
    return conflicts_of(begin, end, bit(slot), access);
}

RangeTable::Mask RangeTable::conflicts_without_slot(std::size_t begin, std::size_t end, Access access) const {
    return conflicts_of(begin, end, 0, access);
}

RangeTable::Mask RangeTable::conflicts_of(std::size_t begin, std::size_t end, Mask self,
                                          Access access) const {
    if (begin >= end) return 0;
    Mask waits = 0;
    for (std::size_t i = index_of(begin); i < ranges_.size() && ranges_[i].begin < end; ++i) {
        const Range& r = ranges_[i];
        if (access == Access::write) {
            waits |= r.writers | r.readers;
        } else if ((r.synced & self) == 0) {
            waits |= r.writers;
        }
    }
    return waits & ~self;
}

bool RangeTable::synced_over(std::size_t begin, std::size_t end, unsigned slot) const noexcept {
    const Mask self = bit(slot);
    for (std::size_t i = index_of(begin); i < ranges_.size() && ranges_[i].begin < end; ++i) {
        if ((ranges_[i].synced & self) == 0) return false;
    }
    return true;
}

std::size_t RangeTable::split_at(std::size_t pos) {
    if (pos >= bytes_) return ranges_.size();
    const std::size_t i = index_of(pos);
    if (ranges_[i].begin == pos) return i;
    Range upper = ranges_[i];
    upper.begin = pos;
    ranges_[i].end = pos;
    ranges_.insert(ranges_.begin() + static_cast<std::ptrdiff_t>(i) + 1, upper);
    return i + 1;
}

void RangeTable::apply(std::size_t begin, std::size_t end, unsigned slot, Access access) {
    if (begin >= end) return;
    const Mask self = bit(slot);
    // Note: room for the two splits first, so that nothing below can throw half way.
    ranges_.reserve(ranges_.size() + 2);
    const std::size_t first = split_at(begin);
    const std::size_t last = split_at(end);  // one past the accessed ranges
    for (std::size_t i = first; i < last; ++i) {
        Range& r = ranges_[i];
        if (access == Access::write) {
            r.writers = self;
            r.readers = 0;
            r.synced = self;
        } else {
            r.synced |= self;
            if ((r.writers & self) == 0) r.readers |= self;
        }
    }
    coalesce(first == 0 ? 0 : first - 1, std::min(last, ranges_.size() - 1));
    enforce_limit();
}

void RangeTable::add_reader_everywhere(unsigned slot) {
    const Mask self = bit(slot);
    for (Range& r : ranges_) {
        if ((r.writers & self) == 0) r.readers |= self;
    }
    coalesce(0, ranges_.empty() ? 0 : ranges_.size() - 1);
}

void RangeTable::coalesce(std::size_t first, std::size_t last) noexcept {
    if (ranges_.empty() || first >= last) return;
    std::size_t out = first;
    for (std::size_t i = first + 1; i <= last; ++i) {
        if (ranges_[out].same_state(ranges_[i])) {
            ranges_[out].end = ranges_[i].end;
        } else {
            ranges_[++out] = ranges_[i];
        }
    }
    ranges_.erase(ranges_.begin() + static_cast<std::ptrdiff_t>(out) + 1,
                  ranges_.begin() + static_cast<std::ptrdiff_t>(last) + 1);
}

void RangeTable::enforce_limit() noexcept {
    while (ranges_.size() > kMaxRanges) {
        // The neighbours whose states differ in the fewest slots lose the least precision by merging;
        // among equals, the pair covering the fewest bytes.
        std::size_t best = 0;
        int best_cost = std::numeric_limits<int>::max();
        std::size_t best_bytes = std::numeric_limits<std::size_t>::max();
        for (std::size_t i = 0; i + 1 < ranges_.size(); ++i) {
            const Range& a = ranges_[i];
            const Range& b = ranges_[i + 1];
            const int cost = std::popcount(a.writers ^ b.writers) + std::popcount(a.readers ^ b.readers) +
                             std::popcount(a.synced ^ b.synced);
            const std::size_t span = b.end - a.begin;
            if (cost < best_cost || (cost == best_cost && span < best_bytes)) {
                best = i;
                best_cost = cost;
                best_bytes = span;
            }
        }
        Range& a = ranges_[best];
        const Range& b = ranges_[best + 1];
        a.end = b.end;
        a.writers |= b.writers;
        a.readers |= b.readers;
        a.synced &= b.synced;
        ranges_.erase(ranges_.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        coalesce(best == 0 ? 0 : best - 1, std::min(best + 1, ranges_.size() - 1));
    }
}

RangeTable::Mask RangeTable::used() const noexcept {
    Mask mask = 0;
    for (const Range& r : ranges_) mask |= r.writers | r.readers;
    return mask;
}

int RangeTable::sole_writer() const noexcept {
    if (ranges_.size() != 1) return -1;
    const Range& r = ranges_.front();
    if (r.readers != 0 || std::popcount(r.writers) != 1 || r.synced != r.writers) return -1;
    return std::countr_zero(r.writers);
}

}  // namespace cudarc::detail

// Note [Range hazards] (core/range_table.hpp).
#include "core/range_table.hpp"

#include <algorithm>
#include <limits>

namespace cudarc::detail {

void RangeTable::reset(std::size_t bytes, Use writer) {
    bytes_ = bytes;
    if (bytes == 0) {
        ranges_.clear();
        return;
    }
    // Note: the first range is reused (a buffer goes back and forth between the fast path and a table).
    ranges_.resize(1);  // may throw (the first time): nothing is used before it succeeds
    Range& whole = ranges_.front();
    whole.begin = 0;
    whole.end = bytes;
    whole.readers.clear();
    if (writer.timeline != nullptr) {
        whole.writers.assign_one(writer);
    } else {
        whole.writers.clear();
    }
}

std::size_t RangeTable::index_of(std::size_t pos) const noexcept {
    // The first range that ends after `pos` contains it (ranges are contiguous from 0).
    const auto it = std::upper_bound(ranges_.begin(), ranges_.end(), pos,
                                     [](std::size_t p, const Range& r) { return p < r.end; });
    return static_cast<std::size_t>(it - ranges_.begin());
}

std::size_t RangeTable::split_at(std::size_t pos) {
    if (pos >= bytes_) return ranges_.size();
    const std::size_t i = index_of(pos);
    if (ranges_[i].begin == pos) return i;
    Range upper = ranges_[i];  // may throw: nothing changed yet
    upper.begin = pos;
    ranges_.insert(ranges_.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::move(upper));
    ranges_[i].end = pos;
    return i + 1;
}

void RangeTable::apply(std::size_t begin, std::size_t end, Use use, Access access) {
    if (begin >= end) return;
    if (ranges_.size() == 1 && begin == 0 && end == bytes_) {
        // The whole buffer in one range (every tensor of a step): no split, nothing to coalesce.
        Range& r = ranges_.front();
        if (access == Access::write) {
            r.writers.assign_one(use);
            r.readers.clear();
        } else {
            r.readers.set(use);
        }
        return;
    }
    const std::size_t first = split_at(begin);
    const std::size_t last = split_at(end);  // one past the accessed ranges
    for (std::size_t i = first; i < last; ++i) {
        Range& r = ranges_[i];
        if (access == Access::write) {
            r.writers.assign_one(use);
            r.readers.clear();
        } else {
            r.readers.set(use);
        }
    }
    coalesce(first == 0 ? 0 : first - 1, std::min(last, ranges_.size() - 1));
    enforce_limit();
}

void RangeTable::add_reader_everywhere(Use use) {
    for (Range& r : ranges_) r.readers.set(use);
    if (!ranges_.empty()) coalesce(0, ranges_.size() - 1);
}

void RangeTable::coalesce(std::size_t first, std::size_t last) noexcept {
    if (ranges_.empty() || first >= last) return;
    std::size_t out = first;
    for (std::size_t i = first + 1; i <= last; ++i) {
        if (ranges_[out].same_state(ranges_[i])) {
            ranges_[out].end = ranges_[i].end;
        } else if (++out != i) {
            ranges_[out] = std::move(ranges_[i]);
        }
    }
    ranges_.erase(ranges_.begin() + static_cast<std::ptrdiff_t>(out) + 1,
                  ranges_.begin() + static_cast<std::ptrdiff_t>(last) + 1);
}

namespace {
// How much precision merging two states loses: the uses one has and the other lacks (a timeline present in
// both at different positions costs nothing: the merge keeps its later position, a small extra wait).
template <typename Uses>
int difference(const Uses& a, const Uses& b) noexcept {
    int cost = 0;
    for (std::size_t i = 0; i < a.size(); ++i) cost += b.find(a[i].timeline) == nullptr ? 1 : 0;
    for (std::size_t i = 0; i < b.size(); ++i) cost += a.find(b[i].timeline) == nullptr ? 1 : 0;
    return cost;
}
}  // namespace

void RangeTable::enforce_limit() {
    while (ranges_.size() > kMaxRanges) {
        // The neighbours whose states differ in the fewest timelines lose the least precision by
        // merging; among equals, the pair covering the fewest bytes.
        std::size_t best = 0;
        int best_cost = std::numeric_limits<int>::max();
        std::size_t best_bytes = std::numeric_limits<std::size_t>::max();
        for (std::size_t i = 0; i + 1 < ranges_.size(); ++i) {
            const Range& a = ranges_[i];
            const Range& b = ranges_[i + 1];
            const int cost = difference(a.writers, b.writers) + difference(a.readers, b.readers);
            const std::size_t span = b.end - a.begin;
            if (cost < best_cost || (cost == best_cost && span < best_bytes)) {
                best = i;
                best_cost = cost;
                best_bytes = span;
            }
        }
        Range merged = ranges_[best];  // may throw: nothing changed yet
        const Range& b = ranges_[best + 1];
        merged.end = b.end;
        for (std::size_t i = 0; i < b.writers.size(); ++i) merged.writers.raise(b.writers[i]);
        for (std::size_t i = 0; i < b.readers.size(); ++i) merged.readers.raise(b.readers[i]);
        ranges_[best] = std::move(merged);
        ranges_.erase(ranges_.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        coalesce(best == 0 ? 0 : best - 1, std::min(best + 1, ranges_.size() - 1));
    }
}

bool RangeTable::conflicts(std::size_t begin, std::size_t end, Access access) const noexcept {
    if (begin >= end) return false;
    for (std::size_t i = index_of(begin); i < ranges_.size() && ranges_[i].begin < end; ++i) {
        const Range& r = ranges_[i];
        if (!r.writers.empty() || (access == Access::write && !r.readers.empty())) return true;
    }
    return false;
}

Timeline* RangeTable::sole_owner() const noexcept {
    if (ranges_.size() != 1) return nullptr;
    const Range& r = ranges_.front();
    if (r.writers.size() != 1) return nullptr;
    Timeline* owner = r.writers[0].timeline;
    return r.readers.only(owner) ? owner : nullptr;
}

}  // namespace cudarc::detail

// The range arithmetic behind hazard tracking (Note [Range hazards]), without a driver: split, coalesce,
// overlap, the conservative merge at the range limit, and no bound on the number of streams, checked
// against a byte-exact model.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "core/range_table.hpp"

using cudarc::detail::Access;
using cudarc::detail::kEverythingSoFar;
using cudarc::detail::RangeTable;
using cudarc::detail::Timeline;
using cudarc::detail::Use;

namespace {

// Distinct timeline addresses; the table only compares them (no kTrackedSoFar here, which it would ask).
Timeline* timeline(int i) {
    static unsigned char storage[512][8];
    return reinterpret_cast<Timeline*>(&storage[i][0]);
}

using Needs = std::map<const Timeline*, std::uint64_t>;

Needs collect(RangeTable& table, std::size_t begin, std::size_t end, int self, Access access) {
    Needs needs;
    table.collect(begin, end, timeline(self), access, [&](const Use& use) {
        auto& p = needs[use.timeline];
        p = std::max(p, use.position);
    });
    return needs;
}

// The same rules, one entry per byte, never merged: the exact answer.
struct ByteModel {
    struct Byte {
        std::map<const Timeline*, std::uint64_t> writers, readers;
    };
    std::vector<Byte> bytes;
    ByteModel(std::size_t n, int writer, std::uint64_t position) : bytes(n) {
        if (writer >= 0) {
            for (Byte& b : bytes) b.writers[timeline(writer)] = position;
        }
    }
    [[nodiscard]] Needs collect(std::size_t begin, std::size_t end, int self, Access access) const {
        Needs needs;
        const auto add = [&](const auto& uses) {
            for (const auto& [t, p] : uses) {
                if (t == timeline(self)) continue;
                auto& q = needs[t];
                q = std::max(q, p);
            }
        };
        for (std::size_t i = begin; i < end; ++i) {
            add(bytes[i].writers);
            if (access == Access::write) add(bytes[i].readers);
        }
        return needs;
    }
    void apply(std::size_t begin, std::size_t end, int self, std::uint64_t position, Access access) {
        for (std::size_t i = begin; i < end; ++i) {
            Byte& b = bytes[i];
            if (access == Access::write) {
                b.writers = {{timeline(self), position}};
                b.readers.clear();
            } else {
                auto [it, fresh] = b.readers.emplace(timeline(self), position);
                if (!fresh && it->second != kEverythingSoFar) it->second = position;
            }
        }
    }
};

// The ranges are sorted, contiguous, cover the buffer, and neighbours differ (coalesced).
void check_shape(const RangeTable& table) {
    const auto ranges = table.ranges();
    REQUIRE_FALSE(ranges.empty());
    CHECK(ranges.front().begin == 0);
    CHECK(ranges.back().end == table.bytes());
    CHECK(ranges.size() <= RangeTable::kMaxRanges);
    for (std::size_t i = 0; i < ranges.size(); ++i) {
        CHECK(ranges[i].begin < ranges[i].end);
        if (i > 0) {
            CHECK(ranges[i].begin == ranges[i - 1].end);
            CHECK_FALSE(ranges[i].same_state(ranges[i - 1]));
        }
    }
}

// `got` asks for at least what `want` does: every timeline, at a position no earlier.
bool covers(const Needs& got, const Needs& want) {
    return std::all_of(want.begin(), want.end(), [&](const auto& entry) {
        const auto it = got.find(entry.first);
        return it != got.end() && it->second >= entry.second;
    });
}

}  // namespace

TEST_CASE("core.range_table_split_and_coalesce") {
    RangeTable table(1000, Use{timeline(0), 1});  // written as a whole (the allocating stream)
    CHECK(table.sole_owner() == timeline(0));
    REQUIRE(table.ranges().size() == 1);
    table.apply(100, 200, Use{timeline(1), 1}, Access::write);
    CHECK(table.ranges().size() == 3);
    CHECK(table.sole_owner() == nullptr);
    check_shape(table);
    // The same stream writes the rest at one position: one range again, owned by it.
    table.apply(0, 100, Use{timeline(1), 1}, Access::write);
    table.apply(200, 1000, Use{timeline(1), 1}, Access::write);
    REQUIRE(table.ranges().size() == 1);
    CHECK(table.sole_owner() == timeline(1));
    // A read by the owner keeps it the owner; a read by another does not.
    table.apply(0, 1000, Use{timeline(1), 2}, Access::read);
    CHECK(table.sole_owner() == timeline(1));
    table.apply(0, 10, Use{timeline(2), 1}, Access::read);
    CHECK(table.sole_owner() == nullptr);
    check_shape(table);
}

TEST_CASE("core.range_table_disjoint_ranges_never_conflict") {
    RangeTable table(64 * 100, Use{timeline(0), 5});
    // 64 streams each write their own item, then read it again: none needs another's.
    for (int s = 1; s <= 64; ++s) {
        const auto begin = static_cast<std::size_t>(s - 1) * 100;
        const Needs needs = collect(table, begin, begin + 100, s, Access::write);
        REQUIRE(needs.size() == 1);
        CHECK(needs.at(timeline(0)) == 5);  // only the allocation's write
        table.apply(begin, begin + 100, Use{timeline(s), 1}, Access::write);
    }
    for (int s = 1; s <= 64; ++s) {
        const auto begin = static_cast<std::size_t>(s - 1) * 100;
        CHECK(collect(table, begin, begin + 100, s, Access::read).empty());
        CHECK(collect(table, begin, begin + 100, s, Access::write).empty());
    }
    CHECK(table.ranges().size() == 64);
    // A 65th stream and more (up to the range limit): no slot limit, no relabeling, nothing waits for
    // anyone else.
    RangeTable many(300, Use{});
    for (int s = 1; s <= 300; ++s)
        many.apply(static_cast<std::size_t>(s - 1), static_cast<std::size_t>(s), Use{timeline(s), 1},
                   Access::write);
    for (int s = 1; s <= 300; ++s) {
        const auto i = static_cast<std::size_t>(s - 1);
        CHECK(collect(many, i, i + 1, s, Access::write).empty());
    }
}

TEST_CASE("core.range_table_overlap_orders_reads_and_writes") {
    RangeTable table(100, Use{timeline(0), 1});
    table.apply(0, 50, Use{timeline(1), 3}, Access::write);
    // A read of [40, 60) needs the two writers.
    const Needs read = collect(table, 40, 60, 2, Access::read);
    CHECK(read == Needs{{timeline(0), 1}, {timeline(1), 3}});
    table.apply(40, 60, Use{timeline(2), 7}, Access::read);
    // A write of [55, 56) needs its writer and the reader.
    CHECK(collect(table, 55, 56, 3, Access::write) == Needs{{timeline(0), 1}, {timeline(2), 7}});
    // A read of [55, 56) needs only the writer (reads never order against reads).
    CHECK(collect(table, 55, 56, 3, Access::read) == Needs{{timeline(0), 1}});
    // The reader's own later write needs the writer only.
    CHECK(collect(table, 40, 50, 2, Access::write) == Needs{{timeline(1), 3}});
}

TEST_CASE("core.range_table_one_launch_reads_one_half_and_writes_the_other") {
    RangeTable table(100, Use{timeline(1), 2});
    Needs needs = collect(table, 0, 50, 2, Access::read);
    const Needs more = collect(table, 50, 100, 2, Access::write);
    needs.insert(more.begin(), more.end());
    CHECK(needs == Needs{{timeline(1), 2}});
    table.apply(0, 50, Use{timeline(2), 4}, Access::read);
    table.apply(50, 100, Use{timeline(2), 4}, Access::write);
    CHECK(table.ranges().size() == 2);
    check_shape(table);
}

TEST_CASE("core.range_table_a_raw_use_is_everything_so_far_until_written") {
    RangeTable table(100, Use{timeline(1), 2});
    table.add_reader_everywhere(Use{timeline(3), kEverythingSoFar});
    CHECK(collect(table, 10, 20, 4, Access::write).at(timeline(3)) == kEverythingSoFar);
    CHECK(collect(table, 10, 20, 4, Access::read).count(timeline(3)) == 0);  // reads follow writers only
    // A later tracked read by the same stream does not replace the raw use: its position would not cover
    // untracked work.
    table.apply(0, 100, Use{timeline(3), 9}, Access::read);
    CHECK(collect(table, 10, 20, 4, Access::write).at(timeline(3)) == kEverythingSoFar);
    // A write replaces it.
    table.apply(0, 100, Use{timeline(3), 10}, Access::write);
    CHECK(collect(table, 10, 20, 4, Access::write) == Needs{{timeline(3), 10}});
}

TEST_CASE("core.range_table_untouched_buffer_needs_nothing") {
    RangeTable table(100, Use{});
    CHECK(collect(table, 0, 100, 1, Access::write).empty());
    CHECK_FALSE(table.conflicts(0, 100, Access::write));
    CHECK(table.sole_owner() == nullptr);
    table.apply(10, 20, Use{timeline(1), 1}, Access::read);
    CHECK(table.conflicts(10, 20, Access::write));
    CHECK_FALSE(table.conflicts(10, 20, Access::read));
    CHECK_FALSE(table.conflicts(30, 40, Access::write));
}

TEST_CASE("core.range_table_merges_conservatively_at_the_limit") {
    const std::size_t pieces = RangeTable::kMaxRanges * 2;
    RangeTable table(pieces, Use{timeline(0), 1});
    ByteModel model(pieces, 0, 1);
    for (std::size_t i = 0; i < pieces; i += 2) {
        const int s = 1 + static_cast<int>(i % 7);
        table.apply(i, i + 1, Use{timeline(s), i + 2}, Access::write);
        model.apply(i, i + 1, s, i + 2, Access::write);
    }
    CHECK(table.ranges().size() <= RangeTable::kMaxRanges);
    check_shape(table);
    for (std::size_t i = 0; i + 3 < pieces; i += 3) {
        for (const Access access : {Access::read, Access::write}) {
            const Needs got = collect(table, i, i + 3, 99, access);
            CHECK(covers(got, model.collect(i, i + 3, 99, access)));
        }
    }
}

TEST_CASE("core.range_table_random_accesses_match_the_byte_model") {
    for (const std::size_t bytes : {std::size_t{64}, std::size_t{4096}}) {
        const bool exact = bytes == 64;  // at most 64 ranges: never merged
        std::mt19937 rng(static_cast<unsigned>(bytes));
        for (int round = 0; round < 20; ++round) {
            RangeTable table(bytes, Use{timeline(0), 1});
            ByteModel model(bytes, 0, 1);
            std::uint64_t position = 1;
            for (int step = 0; step < 400; ++step) {
                const std::size_t a = rng() % bytes;
                const std::size_t b = rng() % bytes;
                const std::size_t begin = std::min(a, b);
                const std::size_t end = std::max(a, b) + 1;
                const int self = static_cast<int>(rng() % 100);  // more streams than any mask had
                const Access access = rng() % 2 == 0 ? Access::read : Access::write;
                const Needs want = model.collect(begin, end, self, access);
                const Needs got = collect(table, begin, end, self, access);
                if (exact) {
                    REQUIRE(got == want);
                } else {
                    REQUIRE(covers(got, want));
                }
                ++position;
                table.apply(begin, end, Use{timeline(self), position}, access);
                model.apply(begin, end, self, position, access);
                check_shape(table);
            }
        }
    }
}

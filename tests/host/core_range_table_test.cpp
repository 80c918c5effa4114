// The range arithmetic behind hazard tracking (Note [Range hazards]), without a driver: split, coalesce,
// overlap, and the conservative merge at the range limit, checked against a byte-exact model.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "core/range_table.hpp"

using cudarc::detail::Access;
using cudarc::detail::RangeTable;
using Mask = RangeTable::Mask;

namespace {

constexpr Mask bit(unsigned slot) {
    return RangeTable::bit(slot);
}

// The same rules, one entry per byte, never merged: the exact answer.
struct ByteModel {
    struct Byte {
        Mask writers = 0, readers = 0, synced = 0;
    };
    std::vector<Byte> bytes;
    explicit ByteModel(std::size_t n, int writer) : bytes(n) {
        if (writer >= 0) {
            for (Byte& b : bytes) b.writers = b.synced = bit(static_cast<unsigned>(writer));
        }
    }
    [[nodiscard]] Mask conflicts(std::size_t begin, std::size_t end, unsigned slot, Access access) const {
        Mask waits = 0;
        for (std::size_t i = begin; i < end; ++i) {
            const Byte& b = bytes[i];
            if (access == Access::write) {
                waits |= b.writers | b.readers;
            } else if ((b.synced & bit(slot)) == 0) {
                waits |= b.writers;
            }
        }
        return waits & ~bit(slot);
    }
    void apply(std::size_t begin, std::size_t end, unsigned slot, Access access) {
        for (std::size_t i = begin; i < end; ++i) {
            Byte& b = bytes[i];
            if (access == Access::write) {
                b = {bit(slot), 0, bit(slot)};
            } else {
                b.synced |= bit(slot);
                if ((b.writers & bit(slot)) == 0) b.readers |= bit(slot);
            }
        }
    }
    [[nodiscard]] bool synced_over(std::size_t begin, std::size_t end, unsigned slot) const {
        for (std::size_t i = begin; i < end; ++i) {
            if ((bytes[i].synced & bit(slot)) == 0) return false;
        }
        return true;
    }
    [[nodiscard]] Mask used() const {
        Mask m = 0;
        for (const Byte& b : bytes) m |= b.writers | b.readers;
        return m;
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
        // Invariant: synced ⊆ writers ∪ readers.
        CHECK((ranges[i].synced & ~(ranges[i].writers | ranges[i].readers)) == 0);
    }
}

}  // namespace

TEST_CASE("core.range_table_split_and_coalesce") {
    RangeTable table(1000, 0);  // written as a whole by slot 0 (the allocating stream)
    CHECK(table.sole_writer() == 0);
    REQUIRE(table.ranges().size() == 1);

    // Slot 1 writes the middle: three ranges.
    CHECK(table.conflicts(100, 200, 1, Access::write) == bit(0));
    table.apply(100, 200, 1, Access::write);
    check_shape(table);
    REQUIRE(table.ranges().size() == 3);
    CHECK(table.ranges()[1].begin == 100);
    CHECK(table.ranges()[1].end == 200);
    CHECK(table.ranges()[1].writers == bit(1));
    CHECK(table.sole_writer() == -1);

    // Slot 1 writes the adjacent piece: still three ranges, the middle one grown (coalesced).
    table.apply(200, 300, 1, Access::write);
    check_shape(table);
    REQUIRE(table.ranges().size() == 3);
    CHECK(table.ranges()[1].end == 300);

    // A write of the whole buffer leaves one range and the fast path's sole writer.
    CHECK(table.conflicts(0, 1000, 2, Access::write) == (bit(0) | bit(1)));
    table.apply(0, 1000, 2, Access::write);
    check_shape(table);
    CHECK(table.ranges().size() == 1);
    CHECK(table.sole_writer() == 2);
    CHECK(table.used() == bit(2));
}

TEST_CASE("core.range_table_disjoint_ranges_never_conflict") {
    // The batch pattern: K streams each write their own item of one buffer, then read it.
    constexpr unsigned kStreams = 8;
    constexpr std::size_t kItem = 4096;
    RangeTable table(kStreams * kItem, 0);
    for (unsigned s = 1; s <= kStreams; ++s) {
        const std::size_t begin = (s - 1) * kItem;
        // Each first write waits only for the allocating stream (slot 0), never for another item's stream.
        CHECK(table.conflicts(begin, begin + kItem, s, Access::write) == bit(0));
        table.apply(begin, begin + kItem, s, Access::write);
    }
    check_shape(table);
    CHECK(table.ranges().size() == kStreams);
    for (unsigned s = 1; s <= kStreams; ++s) {
        const std::size_t begin = (s - 1) * kItem;
        CHECK(table.conflicts(begin, begin + kItem, s, Access::write) == 0);
        CHECK(table.conflicts(begin, begin + kItem, s, Access::read) == 0);
        table.apply(begin, begin + kItem, s, Access::read);
    }
    // The home stream reading everything back waits for every item's writer, once.
    Mask all = 0;
    for (unsigned s = 1; s <= kStreams; ++s) all |= bit(s);
    CHECK(table.conflicts(0, kStreams * kItem, 0, Access::read) == all);
    CHECK(table.used() == all);  // slot 0's writes were all overwritten
}

TEST_CASE("core.range_table_overlap_orders_reads_and_writes") {
    RangeTable table(100, 0);
    // Read after write on another stream: waits for the writer, once.
    CHECK(table.conflicts(10, 20, 1, Access::read) == bit(0));
    table.apply(10, 20, 1, Access::read);
    CHECK(table.conflicts(12, 18, 1, Access::read) == 0);       // synced: a second read needs nothing
    CHECK(table.conflicts(0, 100, 1, Access::read) == bit(0));  // but the rest is not synced yet
    // Write after read, overlapping one byte of the read: waits for the reader and the writer.
    CHECK(table.conflicts(19, 30, 2, Access::write) == (bit(0) | bit(1)));
    // Write after read, disjoint from the read: waits only for the writer.
    CHECK(table.conflicts(20, 30, 2, Access::write) == bit(0));
    // The writer itself writing where another stream read: waits for that reader only.
    CHECK(table.conflicts(0, 100, 0, Access::write) == bit(1));
    // Reads on the writer's own stream never wait.
    CHECK(table.conflicts(0, 100, 0, Access::read) == 0);
    table.apply(19, 30, 2, Access::write);
    check_shape(table);
    // [10,19) still read by 1 and written by 0; [19,30) written by 2.
    CHECK(table.conflicts(10, 19, 3, Access::write) == (bit(0) | bit(1)));
    CHECK(table.conflicts(19, 30, 3, Access::read) == bit(2));
    // Empty accesses touch nothing.
    CHECK(table.conflicts(50, 50, 3, Access::write) == 0);
}

TEST_CASE("core.range_table_one_launch_reads_one_half_and_writes_the_other") {
    RangeTable table(1024, 0);
    // Stream 1: read [0, 512), write [512, 1024) in one launch: each access waits for the allocation only.
    CHECK(table.conflicts(0, 512, 1, Access::read) == bit(0));
    table.apply(0, 512, 1, Access::read);
    CHECK(table.conflicts(512, 1024, 1, Access::write) == bit(0));
    table.apply(512, 1024, 1, Access::write);
    check_shape(table);
    // Stream 2 writing the read half waits for the reader (1) and the writer (0); the written half's
    // reader on stream 2 waits for stream 1 only.
    CHECK(table.conflicts(0, 512, 2, Access::write) == (bit(0) | bit(1)));
    CHECK(table.conflicts(512, 1024, 2, Access::read) == bit(1));
}

TEST_CASE("core.range_table_record_use_adds_a_reader_everywhere") {
    RangeTable table(64, 0);
    table.apply(0, 32, 1, Access::write);
    table.add_reader_everywhere(2);
    check_shape(table);
    CHECK(table.conflicts(0, 64, 3, Access::write) == (bit(0) | bit(1) | bit(2)));
    CHECK(table.conflicts(0, 64, 3, Access::read) == (bit(0) | bit(1)));  // a reader is no writer
    CHECK(table.used() == (bit(0) | bit(1) | bit(2)));
}

TEST_CASE("core.range_table_record_use_does_not_excuse_a_later_read") {
    // The bug the old per-buffer state had: after record_stream(s), s was listed as a reader, and a later
    // tracked read on s skipped its read-after-write wait. A reader is not synced: it still waits.
    RangeTable table(64, 0);
    table.add_reader_everywhere(2);
    CHECK(table.conflicts(0, 64, 2, Access::read) == bit(0));
    CHECK(table.conflicts(16, 32, 2, Access::read) == bit(0));
    // Once that read is applied, s is ordered after the writer: a second read needs nothing.
    table.apply(0, 64, 2, Access::read);
    CHECK(table.conflicts(0, 64, 2, Access::read) == 0);
    // A write on another stream after the declared use waits for it; a read on s after that write waits
    // for the new writer, not for itself.
    table.add_reader_everywhere(2);
    CHECK(table.conflicts(0, 64, 1, Access::write) == (bit(0) | bit(2)));
    table.apply(0, 64, 1, Access::write);
    table.add_reader_everywhere(2);
    CHECK(table.conflicts(0, 64, 2, Access::read) == bit(1));
    check_shape(table);
}

TEST_CASE("core.range_table_untouched_buffer_waits_for_nothing") {
    RangeTable table(256, -1);  // borrowed memory without an owner stream
    CHECK(table.used() == 0);
    CHECK(table.sole_writer() == -1);
    CHECK(table.conflicts(0, 256, 3, Access::write) == 0);
    table.apply(0, 256, 3, Access::read);
    CHECK(table.sole_writer() == -1);  // read-only use is not the write fast path
    table.apply(0, 256, 3, Access::write);
    CHECK(table.sole_writer() == 3);
    RangeTable empty(0, 0);
    CHECK(empty.ranges().empty());
    CHECK(empty.used() == 0);
}

TEST_CASE("core.range_table_merges_conservatively_at_the_limit") {
    // Interleaved items on two streams cannot coalesce: past kMaxRanges, neighbours merge.
    constexpr std::size_t kItems = 3 * RangeTable::kMaxRanges;
    RangeTable table(kItems * 16, 0);
    ByteModel model(kItems * 16, 0);
    bool merged = false;
    for (std::size_t item = 0; item < kItems; ++item) {
        const unsigned slot = 1 + static_cast<unsigned>(item % 2);
        const std::size_t begin = item * 16;
        const Mask exact = model.conflicts(begin, begin + 16, slot, Access::write);
        const Mask got = table.conflicts(begin, begin + 16, slot, Access::write);
        CHECK((got & exact) == exact);  // never a missing wait
        table.apply(begin, begin + 16, slot, Access::write);
        model.apply(begin, begin + 16, slot, Access::write);
        merged = merged || table.ranges().size() < item + 2;
    }
    check_shape(table);
    CHECK(merged);
    CHECK(table.ranges().size() <= RangeTable::kMaxRanges);
    // Every item still orders a later reader after its writer; a merged one possibly after both streams.
    for (std::size_t item = 0; item < kItems; ++item) {
        const std::size_t begin = item * 16;
        const Mask exact = model.conflicts(begin, begin + 16, 3, Access::read);
        const Mask got = table.conflicts(begin, begin + 16, 3, Access::read);
        CHECK(exact == bit(1 + static_cast<unsigned>(item % 2)));
        CHECK((got & exact) == exact);
    }
    CHECK(table.used() == (bit(1) | bit(2)));
}

TEST_CASE("core.range_table_random_accesses_match_the_byte_model") {
    // Random reads and writes by 6 streams on a small buffer: exact while under the limit, and never a
    // missing wait (nor a missing user at the free) once merges begin.
    std::mt19937_64 rng{std::random_device{}()};
    std::size_t repeated_reads = 0;  // reads where synced_over held
    for (int trial = 0; trial < 20; ++trial) {
        const std::size_t bytes = 2000;
        RangeTable table(bytes, 0);
        ByteModel model(bytes, 0);
        bool exact_so_far = true;
        for (int step = 0; step < 3000; ++step) {
            const std::size_t begin = rng() % bytes;
            const std::size_t length = 1 + rng() % (trial % 2 == 0 ? 8 : 300);
            const std::size_t end = std::min(bytes, begin + length);
            const auto slot = static_cast<unsigned>(rng() % 6);
            const Access access = rng() % 3 == 0 ? Access::write : Access::read;
            const Mask want = model.conflicts(begin, end, slot, access);
            const Mask got = table.conflicts(begin, end, slot, access);
            REQUIRE((got & want) == want);
            if (exact_so_far) REQUIRE(got == want);
            // synced_over (the tracker's shortcut for a repeated read) only where the exact model agrees,
            // and there a read waits for nothing and changes no range.
            const bool synced = table.synced_over(begin, end, slot);
            if (synced) REQUIRE(model.synced_over(begin, end, slot));
            if (exact_so_far) REQUIRE(synced == model.synced_over(begin, end, slot));
            const std::vector<RangeTable::Range> before(table.ranges().begin(), table.ranges().end());
            table.apply(begin, end, slot, access);
            if (synced && access == Access::read) {
                ++repeated_reads;
                REQUIRE(got == 0);
                const auto after = table.ranges();
                REQUIRE(after.size() == before.size());
                for (std::size_t i = 0; i < before.size(); ++i) {
                    REQUIRE(after[i].begin == before[i].begin);
                    REQUIRE(after[i].end == before[i].end);
                    REQUIRE(after[i].same_state(before[i]));
                }
            }
            model.apply(begin, end, slot, access);
            exact_so_far = exact_so_far && table.ranges().size() < RangeTable::kMaxRanges;
            REQUIRE((table.used() & model.used()) == model.used());
        }
        check_shape(table);
    }
    CHECK(repeated_reads > 0);
}

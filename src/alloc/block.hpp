// A block: a contiguous piece of a driver segment, either handed out, held back, or cached.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <set>
#include <vector>

#include "alloc/backend.hpp"

namespace cudarc::alloc {

struct Block;

// A free block as its pool's ordered set stores it. Note: the key is copied into the set node, so
// that a search compares within the node instead of chasing a pointer to the block at every level.
struct FreeEntry {
    StreamKey stream;
    std::size_t size;
    DevicePtr ptr;
    Block* block;
};

// Best fit order within a pool: by stream, then size, then address, so that the smallest block that
// fits on a stream is one lower_bound away.
struct FreeBlockOrder {
    using is_transparent = void;

    // A search key sorts before every block of its stream with at least its size.
    struct Key {
        StreamKey stream;
        std::size_t size;
    };

    bool operator()(const FreeEntry& a, const FreeEntry& b) const noexcept {
        if (a.stream != b.stream) return a.stream < b.stream;
        if (a.size != b.size) return a.size < b.size;
        return a.ptr < b.ptr;
    }
    bool operator()(const FreeEntry& a, const Key& k) const noexcept {
        if (a.stream != k.stream) return a.stream < k.stream;
        return a.size < k.size;
    }
    bool operator()(const Key& k, const FreeEntry& b) const noexcept {
        if (k.stream != b.stream) return k.stream < b.stream;
        return k.size <= b.size;
    }
};

// The free blocks of one pool.
using FreeBlocks = std::pmr::set<FreeEntry, FreeBlockOrder>;

enum class BlockState : std::uint8_t {
    free,       // in its pool's free set, reusable on its stream
    allocated,  // handed out
    held,       // freed, but waiting for events or for a captured graph's release
    unmapped,   // address space of an expandable segment with no memory behind it (in no set)
};

struct Block {
    DevicePtr ptr = 0;
    std::size_t size = 0;
    StreamKey stream = 0;  // every block of a segment belongs to the segment's stream
    // Address-order neighbours within the same segment; a segment is the chain from its head
    // (prev == nullptr). Note: the head never changes while the segment lives, because merging keeps
    // the lower block and splitting keeps the lower part.
    Block* prev = nullptr;
    Block* next = nullptr;
    std::size_t segment_size = 0;  // on a segment's head only: the whole segment's size
    bool expandable = false;       // on a segment's head only: Note [Expandable segments]
    bool small_pool = false;
    BlockState state = BlockState::free;
    int event_holds = 0;                  // pending events still keeping a freed block back
    int graph_holds = 0;                  // captures still keeping a freed block back
    std::uint64_t capture_id = 0;         // the capture it was allocated during (0: none)
    std::vector<StreamKey> used_streams;  // other streams named by record_stream
    // Work of a stream that could not be ordered before any other may still use it: once freed it stays
    // held for good (CachingAllocator::abandon_stream).
    bool out_of_reach = false;

    // Note: a block owns its free-set node while it is out of the set (extract/insert by node
    // handle), so moving a block in and out of a pool never allocates and never throws.
    FreeBlocks::iterator position{};  // valid while state == free
    FreeBlocks::node_type node;

    [[nodiscard]] bool is_whole_segment() const noexcept { return prev == nullptr && next == nullptr; }
};

// Segments in address order, by their head block.
struct SegmentOrder {
    using is_transparent = void;
    bool operator()(const Block* a, const Block* b) const noexcept { return a->ptr < b->ptr; }
    bool operator()(const Block* a, DevicePtr p) const noexcept { return a->ptr < p; }
    bool operator()(DevicePtr p, const Block* b) const noexcept { return p < b->ptr; }
};

}  // namespace cudarc::alloc

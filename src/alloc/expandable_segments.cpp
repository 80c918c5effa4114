// The caching allocator's expandable segments (Note [Expandable segments] in expandable_segments.hpp):
// growing a segment in place, giving its free chunks back, and tearing it down. Members of CachingAllocator;
// all but visit_mapped_ranges expect the allocator's mutex held.
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "alloc/caching_allocator.hpp"

namespace cudarc::alloc {
namespace {

constexpr std::size_t round_up(std::size_t value, std::size_t multiple) noexcept {
    return (value + multiple - 1) / multiple * multiple;
}

// `rest` (a spare record) takes [block->ptr + offset, end) of `block`, which is in no set, with its stream,
// pool and state; `block` keeps the lower part. Never throws.
void split_at(Block* block, std::size_t offset, Block* rest) noexcept {
    rest->ptr = block->ptr + offset;
    rest->size = block->size - offset;
    rest->stream = block->stream;
    rest->small_pool = block->small_pool;
    rest->state = block->state;
    rest->prev = block;
    rest->next = block->next;
    if (block->next != nullptr) block->next->prev = rest;
    block->next = rest;
    block->size = offset;
}

bool free_or_unmapped(const Block* block) noexcept {
    return block != nullptr && (block->state == BlockState::free || block->state == BlockState::unmapped);
}

// The bytes a run starting at `start` must map to span `size`: free blocks count as they are, unmapped ones
// are mapped in whole chunks, the last perhaps in part. nullopt when the run ends before it spans `size`.
std::optional<std::size_t> mapping_needed(const Block* start, std::size_t size, std::size_t chunk) noexcept {
    std::size_t covered = 0;
    std::size_t to_map = 0;
    for (const Block* b = start; covered < size; b = b->next) {
        if (!free_or_unmapped(b)) return std::nullopt;
        if (b->state == BlockState::free) {
            covered += b->size;
        } else {
            const std::size_t piece = std::min(b->size, round_up(size - covered, chunk));
            covered += piece;
            to_map += piece;
        }
    }
    return to_map;
}

}  // namespace

// Among the stream's segments of the pool, the run that needs the least memory mapped (the lowest address
// among equals); a new range when none spans the request.
Block* CachingAllocator::grow(std::size_t size, StreamKey stream, bool small) {
    if (size > layout_.range(small)) return nullptr;  // larger than any range: out of memory
    const std::size_t chunk = layout_.chunk(small);
    Block* best = nullptr;
    std::size_t best_to_map = 0;
    for (Block* head : segments_) {
        if (!head->expandable || head->stream != stream || head->small_pool != small) continue;
        for (Block* block = head; block != nullptr; block = block->next) {
            if (block->state != BlockState::unmapped) continue;
            Block* start =
                block->prev != nullptr && block->prev->state == BlockState::free ? block->prev : block;
            const std::optional<std::size_t> to_map = mapping_needed(start, size, chunk);
            if (to_map && (best == nullptr || *to_map < best_to_map)) {
                best = start;
                best_to_map = *to_map;
            }
        }
    }
    if (best == nullptr) best = reserve_range(stream, small);
    return best != nullptr ? map_run(best, size, small) : nullptr;
}

Block* CachingAllocator::reserve_range(StreamKey stream, bool small) {
    const std::size_t bytes = layout_.range(small);
    const std::optional<DevicePtr> base = backend_.reserve_address_range(bytes, layout_.chunk(small));
    if (!base) return nullptr;
    Block* head = nullptr;
    try {
        head = new_block();
        head->ptr = *base;
        head->size = bytes;
        head->segment_size = bytes;
        head->stream = stream;
        head->small_pool = small;
        head->expandable = true;
        head->state = BlockState::unmapped;
        segments_.insert(head);
    } catch (...) {
        if (head != nullptr) recycle(head);
        try {
            backend_.free_address_range(*base, bytes);
        } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one to report
        }
        throw;
    }
    ++stats_.segments;
    stats_.address_space_bytes += bytes;
    return head;
}

// Maps what the run from `start` lacks to span `size` and merges the run (and a free block right after it)
// into `start`, which it returns out of its pool's set. Nothing changes when it returns nullptr (out of
// memory, or the cap) or throws.
Block* CachingAllocator::map_run(Block* start, std::size_t size, bool small) {
    const std::size_t chunk = layout_.chunk(small);
    // Phase 1 may throw and changes nothing visible: the pieces to map, a record for the unmapped rest of
    // the last one, and a set node for `start` (hand_out's failure path puts it back into its pool).
    struct Piece {
        Block* block;
        std::size_t bytes;
    };
    std::vector<Piece> pieces;
    std::size_t covered = 0;
    std::size_t to_map = 0;
    Block* last = start;
    for (Block* b = start; covered < size; b = b->next) {
        if (b->state == BlockState::free) {
            covered += b->size;
        } else {
            const std::size_t bytes = std::min(b->size, round_up(size - covered, chunk));
            pieces.push_back({b, bytes});
            covered += bytes;
            to_map += bytes;
        }
        last = b;
    }
    if (to_map > reserve_limit_ || stats_.reserved_bytes > reserve_limit_ - to_map) return nullptr;
    if (start->node.empty() && start->state == BlockState::unmapped) {
        FreeBlocks& pool = pool_of(*start);
        start->node =
            pool.extract(pool.insert(FreeEntry{start->stream, start->size, start->ptr, start}).first);
    }
    Block* rest = !pieces.empty() && pieces.back().bytes < pieces.back().block->size ? new_block() : nullptr;

    // Phase 2: the driver, all or nothing.
    std::size_t mapped = 0;
    const auto unmap_mapped = [&]() noexcept {
        // Never used, so nothing to wait for. Note: a chunk that cannot be unmapped stays mapped and
        // unaccounted for (the next mapping there fails): the first error is the one to report.
        for (std::size_t i = 0; i < mapped; ++i) {
            for (std::size_t offset = 0; offset < pieces[i].bytes; offset += chunk) {
                try {
                    backend_.unmap_chunk(pieces[i].block->ptr + offset, chunk);
                } catch (...) {  // NOLINT(bugprone-empty-catch): see above
                }
            }
        }
        if (rest != nullptr) recycle(rest);
    };
    try {
        while (mapped < pieces.size() &&
               backend_.map_chunks(pieces[mapped].block->ptr, pieces[mapped].bytes, chunk))
            ++mapped;
    } catch (...) {
        unmap_mapped();
        throw;
    }
    if (mapped < pieces.size()) {
        unmap_mapped();
        return nullptr;
    }

    // Phase 3 cannot fail: the run's free blocks leave their sets, the pieces become free blocks (the last
    // one's unmapped rest splits off), and everything from `start` up to the first block that is neither
    // part of the run nor free merges into `start`.
    for (Block* b = start;; b = b->next) {
        if (b->state == BlockState::free) take(b);
        if (b == last) break;
    }
    for (const Piece& piece : pieces) {
        if (piece.bytes < piece.block->size) split_at(piece.block, piece.bytes, std::exchange(rest, nullptr));
        piece.block->state = BlockState::free;
    }
    Block* stop = last->next;
    if (stop != nullptr && stop->state == BlockState::free) {
        take(stop);
        stop = stop->next;
    }
    while (start->next != stop) absorb_next(start);
    stats_.reserved_bytes += to_map;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    stats_.driver_allocations += to_map / chunk;
    return start;
}

// Unmaps every chunk that lies wholly inside a free block, after waiting for the device. Returns the bytes
// unmapped. Note: the address ranges stay (empty_cache frees those with nothing mapped): under memory
// pressure, address space is not what is short.
std::size_t CachingAllocator::release_unused_chunks() {
    const auto has_free_chunk = [this](const Block* b) {
        if (b->state != BlockState::free) return false;
        const std::size_t chunk = layout_.chunk(b->small_pool);
        const DevicePtr lo = round_up(b->ptr, chunk);
        return lo >= b->ptr && lo - b->ptr < b->size && b->size - (lo - b->ptr) >= chunk;
    };
    bool any = false;
    for (const Block* head : segments_) {
        for (const Block* b = head; b != nullptr && !any; b = b->next) any = has_free_chunk(b);
        if (any) break;
    }
    std::size_t released = 0;
    if (any) {
        // Note [Expandable segments]: an unmap does not wait for work queued on the memory.
        backend_.synchronize_device();
        Block* spare[2] = {nullptr, nullptr};
        const auto recycle_spares = [&]() noexcept {
            for (Block*& b : spare) {
                if (b != nullptr) recycle(std::exchange(b, nullptr));
            }
        };
        try {
            for (Block* head : segments_) {
                const std::size_t chunk = layout_.chunk(head->small_pool);
                for (Block* b = head; b != nullptr;) {
                    if (!has_free_chunk(b)) {
                        b = b->next;
                        continue;
                    }
                    for (Block*& s : spare) {
                        if (s != nullptr) continue;
                        s = new_block();
                        if (s->node.empty()) {
                            s->node = large_blocks_.extract(
                                large_blocks_.insert(FreeEntry{~StreamKey{0}, 0, s->ptr, s}).first);
                        }
                    }
                    b = unmap_chunk_of(b, round_up(b->ptr, chunk), chunk, spare);
                    released += chunk;
                }
            }
        } catch (...) {
            recycle_spares();
            throw;
        }
        recycle_spares();
    }
    return released;
}

Block* CachingAllocator::unmap_chunk_of(Block* block, DevicePtr chunk_ptr, std::size_t chunk,
                                        Block* (&spare)[2]) {
    const auto take_spare = [&spare]() noexcept {
        return spare[1] != nullptr ? std::exchange(spare[1], nullptr) : std::exchange(spare[0], nullptr);
    };
    // Split the free block into [lower) [chunk) [upper); lower and upper go back to the pool (their nodes
    // exist: no allocation), the chunk stays out of it while the driver unmaps it.
    take(block);
    Block* lower = nullptr;
    Block* mid = block;
    Block* upper = nullptr;
    if (chunk_ptr > block->ptr) {
        mid = take_spare();
        split_at(block, chunk_ptr - block->ptr, mid);
        lower = block;
    }
    if (mid->size > chunk) {
        upper = take_spare();
        split_at(mid, chunk, upper);
    }
    if (lower != nullptr) insert_free(lower);
    if (upper != nullptr) insert_free(upper);
    try {
        backend_.unmap_chunk(chunk_ptr, chunk);
    } catch (...) {
        return_to_pool(mid);  // merges with lower and upper again: nothing has changed
        throw;
    }
    mid->state = BlockState::unmapped;
    stats_.reserved_bytes -= chunk;
    ++stats_.driver_frees;
    Block* unmapped = mid;
    if (unmapped->prev != nullptr && unmapped->prev->state == BlockState::unmapped) {
        unmapped = unmapped->prev;
        absorb_next(unmapped);
    }
    if (unmapped->next != nullptr && unmapped->next->state == BlockState::unmapped) absorb_next(unmapped);
    return unmapped->next;
}

// Frees the address range of every expandable segment with nothing mapped. Returns the bytes of address
// space freed.
std::size_t CachingAllocator::free_unmapped_ranges() {
    std::size_t freed = 0;
    for (auto it = segments_.begin(); it != segments_.end();) {
        Block* head = *it;
        if (!head->expandable || head->state != BlockState::unmapped || head->next != nullptr) {
            ++it;
            continue;
        }
        backend_.free_address_range(head->ptr, head->segment_size);  // on failure nothing has changed
        it = segments_.erase(it);
        --stats_.segments;
        stats_.address_space_bytes -= head->segment_size;
        freed += head->segment_size;
        recycle(head);
    }
    return freed;
}

// At destruction (the device synchronized): every mapped chunk is unmapped, then the range freed. A chunk
// that stays mapped (its unmap failed twice: Note [A failed unmap or release is tried again] in
// virtual_memory.cpp) keeps its range: the driver frees no range with mappings in it.
void CachingAllocator::destroy_expandable(Block* head) noexcept {
    const std::size_t chunk = layout_.chunk(head->small_pool);
    bool still_mapped = false;
    for (const Block* b = head; b != nullptr; b = b->next) {
        if (b->state == BlockState::unmapped) continue;
        // Note: only runs of mapped blocks start and end on chunk boundaries; each chunk starts inside
        // exactly one mapped block, which unmaps it.
        for (DevicePtr p = round_up(b->ptr, chunk); p < b->ptr + b->size; p += chunk) {
            try {
                backend_.unmap_chunk(p, chunk);
            } catch (...) {  // a destructor must not throw; the memory is lost
                still_mapped = true;
            }
        }
    }
    if (still_mapped) return;
    try {
        backend_.free_address_range(head->ptr, head->segment_size);
    } catch (...) {  // NOLINT(bugprone-empty-catch): as above
    }
}

void CachingAllocator::visit_mapped_ranges(const std::function<void(DevicePtr, std::size_t)>& visit) const {
    std::lock_guard lock(mutex_);
    for (const Block* head : segments_) {
        if (!head->expandable) continue;
        for (const Block* b = head; b != nullptr;) {
            if (b->state == BlockState::unmapped) {
                b = b->next;
                continue;
            }
            const DevicePtr start = b->ptr;
            std::size_t bytes = 0;
            for (; b != nullptr && b->state != BlockState::unmapped; b = b->next) bytes += b->size;
            visit(start, bytes);
        }
    }
}

std::size_t CachingAllocator::largest_free_block() const noexcept {
    std::size_t largest = 0;
    for (const FreeBlocks* pool : {&small_blocks_, &large_blocks_}) {
        for (const FreeEntry& entry : *pool) largest = std::max(largest, entry.size);
    }
    return largest;
}

std::size_t CachingAllocator::mapped_bytes_of(const Block* head) noexcept {
    if (!head->expandable) return head->segment_size;
    std::size_t mapped = 0;
    for (const Block* b = head; b != nullptr; b = b->next)
        mapped += b->state == BlockState::unmapped ? 0 : b->size;
    return mapped;
}

}  // namespace cudarc::alloc

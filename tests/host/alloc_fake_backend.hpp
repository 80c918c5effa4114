// A fake device for the caching allocator's host tests: fake segment addresses, fake events whose
// completion the test controls, a call log, and checks for calls the allocator must never make.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "alloc/backend.hpp"

namespace cudarc::test {

// What the allocator asked of the device, in order.
struct FakeCall {
    enum class Kind {
        allocate,  // succeeded
        allocate_failed,
        free,
        record_event,
        query_event,
        synchronize_event,
        release_event,
        capture_status,
        memory_info,
        // Expandable segments
        reserve_range,  // value: bytes
        free_range,     // value: address
        map,            // succeeded; value: bytes
        map_failed,     // value: bytes
        unmap,          // value: address
        synchronize_device,
    };
    Kind kind;
    std::uint64_t value = 0;  // bytes, address, stream or event id
};

// Shared between a test and the backend that the allocator owns, so the test can look at it after
// the allocator is gone.
class FakeDevice {
  public:
    static constexpr std::size_t kMiB = std::size_t{1} << 20;

    explicit FakeDevice(std::size_t capacity = 1024 * kMiB) : capacity_(capacity) {}

    // --- What the backend calls -------------------------------------------------------------------
    std::optional<DevicePtr> allocate(std::size_t bytes) {
        std::lock_guard lock(mutex_);
        if (bytes > capacity_ - used_) {
            log_.push_back({FakeCall::Kind::allocate_failed, bytes});
            return std::nullopt;
        }
        // Note: a 2 MiB gap between segments, so that a merge across segments would show as a
        // block spanning addresses the device never handed out.
        const DevicePtr ptr = next_address_;
        next_address_ += round_up(bytes, 2 * kMiB) + 2 * kMiB;
        segments_.emplace(ptr, bytes);
        used_ += bytes;
        log_.push_back({FakeCall::Kind::allocate, bytes});
        return ptr;
    }
    void free(DevicePtr ptr, std::size_t bytes) {
        std::lock_guard lock(mutex_);
        log_.push_back({FakeCall::Kind::free, ptr});
        if (!capturing_.empty()) violations_.push_back("segment freed during a capture");
        auto it = segments_.find(ptr);
        if (it == segments_.end() || it->second != bytes) {
            violations_.push_back("free of an unknown segment or with the wrong size");
            return;
        }
        used_ -= it->second;
        segments_.erase(it);
    }
    alloc::EventHandle record(alloc::StreamKey stream) {
        std::lock_guard lock(mutex_);
        log_.push_back({FakeCall::Kind::record_event, stream});
        const alloc::EventHandle event = new_event(stream, /*by_allocator=*/true);
        recorded_on_this_thread().push_back(event);
        return event;
    }
    bool query(alloc::EventHandle event) {
        std::lock_guard lock(mutex_);
        log_.push_back({FakeCall::Kind::query_event, id_of(event)});
        if (!capturing_.empty()) violations_.push_back("event queried during a capture");
        return checked(event).completed;
    }
    void synchronize(alloc::EventHandle event) {
        std::lock_guard lock(mutex_);
        log_.push_back({FakeCall::Kind::synchronize_event, id_of(event)});
        if (!capturing_.empty()) violations_.push_back("event synchronized during a capture");
        checked(event).completed = true;  // the wait lets the device finish the work
    }
    void release(alloc::EventHandle event) {
        std::lock_guard lock(mutex_);
        log_.push_back({FakeCall::Kind::release_event, id_of(event)});
        Event& e = checked(event);
        if (e.released) violations_.push_back("event released twice");
        e.released = true;
    }
    bool capturing(alloc::StreamKey stream) {
        std::lock_guard lock(mutex_);
        log_.push_back({FakeCall::Kind::capture_status, stream});
        return capturing_.count(stream) != 0;
    }
    std::pair<std::size_t, std::size_t> memory_info() {
        std::lock_guard lock(mutex_);
        log_.push_back({FakeCall::Kind::memory_info, 0});
        return {capacity_ - used_, capacity_};
    }

    // --- Virtual memory (expandable segments): ranges at fake addresses, chunks counted against the
    // capacity like segments. Checks that chunks are mapped into a range, aligned and never twice, and that a
    // chunk is unmapped only after a device synchronize since it was mapped (work may still use it), unless
    // nothing can have used it yet: mapped by the same allocation (the undo of a failed one) and not handed
    // out since (handed_out()).
    std::size_t granularity() {
        std::lock_guard lock(mutex_);
        return granularity_;
    }
    std::optional<DevicePtr> reserve_range(std::size_t bytes, std::size_t alignment) {
        std::lock_guard lock(mutex_);
        log_.push_back({FakeCall::Kind::reserve_range, bytes});
        if (bytes % granularity_ != 0 || alignment == 0 || (alignment & (alignment - 1)) != 0)
            violations_.push_back("a range of a size or alignment the driver refuses");
        if (bytes > address_space_left_) return std::nullopt;
        address_space_left_ -= bytes;
        const DevicePtr ptr = round_up(next_address_, alignment);
        next_address_ = ptr + bytes + 2 * kMiB;
        ranges_.emplace(ptr, bytes);
        return ptr;
    }
    void free_range(DevicePtr ptr, std::size_t bytes) {
        std::lock_guard lock(mutex_);
        log_.push_back({FakeCall::Kind::free_range, ptr});
        if (!capturing_.empty()) violations_.push_back("range freed during a capture");
        const auto it = ranges_.find(ptr);
        if (it == ranges_.end() || it->second != bytes) {
            violations_.push_back("free of an unknown range or with the wrong size");
            return;
        }
        const auto mapped = chunks_.lower_bound(ptr);
        if (mapped != chunks_.end() && mapped->first < ptr + bytes)
            violations_.push_back("range freed while mapped");
        address_space_left_ += bytes;
        ranges_.erase(it);
    }
    bool map(DevicePtr ptr, std::size_t bytes, std::size_t chunk) {
        std::lock_guard lock(mutex_);
        if (!capturing_.empty()) violations_.push_back("chunks mapped during a capture");
        if (chunk == 0 || chunk % granularity_ != 0 || bytes % chunk != 0 || ptr % chunk != 0)
            violations_.push_back("a mapping of a size or alignment that is not whole chunks");
        if (!inside_a_range(ptr, bytes)) violations_.push_back("chunks mapped outside a reserved range");
        const bool injected = fail_after_ == 0;
        if (fail_after_ >= 0) --fail_after_;
        if (injected || bytes > capacity_ - used_) {
            log_.push_back({FakeCall::Kind::map_failed, bytes});
            return false;
        }
        for (std::size_t offset = 0; offset < bytes; offset += chunk) {
            if (!chunks_.emplace(ptr + offset, Chunk{chunk, epoch_}).second)
                violations_.push_back("a chunk mapped twice");
            fresh_.insert(ptr + offset);
        }
        used_ += bytes;
        log_.push_back({FakeCall::Kind::map, bytes});
        return true;
    }
    void unmap(DevicePtr ptr, std::size_t chunk) {
        std::lock_guard lock(mutex_);
        log_.push_back({FakeCall::Kind::unmap, ptr});
        if (!capturing_.empty()) violations_.push_back("chunk unmapped during a capture");
        const auto it = chunks_.find(ptr);
        if (it == chunks_.end() || it->second.size != chunk) {
            violations_.push_back("unmap of a chunk that is not mapped, or of another size");
            return;
        }
        if (it->second.epoch == epoch_ && !fresh_.contains(ptr))
            violations_.push_back("a chunk unmapped without a device synchronize since it was mapped");
        used_ -= chunk;
        chunks_.erase(it);
        fresh_.erase(ptr);
    }
    void synchronize_device() {
        std::lock_guard lock(mutex_);
        log_.push_back({FakeCall::Kind::synchronize_device, 0});
        if (!capturing_.empty()) violations_.push_back("device synchronized during a capture");
        ++epoch_;
    }
    // What the allocator handed out since may be in use: its chunks need a synchronize before an unmap.
    void handed_out() {
        std::lock_guard lock(mutex_);
        fresh_.clear();
    }

    // --- What tests call ---------------------------------------------------------------------------
    // An event recorded on `stream` after a use there (what hazard tracking would hand to free()).
    alloc::EventHandle make_event(alloc::StreamKey stream) {
        std::lock_guard lock(mutex_);
        return new_event(stream, /*by_allocator=*/false);
    }
    void complete(alloc::EventHandle event) {
        std::lock_guard lock(mutex_);
        checked(event).completed = true;
    }
    // Completes every event recorded so far on `stream`.
    void complete_stream(alloc::StreamKey stream) {
        std::lock_guard lock(mutex_);
        for (Event& e : events_) {
            if (e.stream == stream) e.completed = true;
        }
    }
    void complete_all() {
        std::lock_guard lock(mutex_);
        for (Event& e : events_) e.completed = true;
    }
    [[nodiscard]] bool completed(alloc::EventHandle event) {
        std::lock_guard lock(mutex_);
        return checked(event).completed;
    }
    [[nodiscard]] bool released(alloc::EventHandle event) {
        std::lock_guard lock(mutex_);
        return checked(event).released;
    }
    // Events the allocator recorded itself (record_stream), in order.
    [[nodiscard]] std::vector<alloc::EventHandle> events_recorded_by_allocator() {
        std::lock_guard lock(mutex_);
        std::vector<alloc::EventHandle> out;
        for (std::size_t i = 0; i < events_.size(); ++i) {
            if (events_[i].by_allocator) out.push_back(handle_of(i + 1));
        }
        return out;
    }
    // Events the allocator recorded on the calling thread since the last call (thread tests).
    static std::vector<alloc::EventHandle> take_recorded_on_this_thread() {
        return std::exchange(recorded_on_this_thread(), {});
    }
    [[nodiscard]] std::size_t unreleased_events() {
        std::lock_guard lock(mutex_);
        std::size_t n = 0;
        for (const Event& e : events_) n += e.released ? 0 : 1;
        return n;
    }
    void set_capturing(alloc::StreamKey stream, bool on) {
        std::lock_guard lock(mutex_);
        if (on) {
            capturing_.insert(stream);
        } else {
            capturing_.erase(stream);
        }
    }
    void set_capacity(std::size_t bytes) {
        std::lock_guard lock(mutex_);
        capacity_ = bytes;
    }
    [[nodiscard]] std::size_t used() {
        std::lock_guard lock(mutex_);
        return used_;
    }
    [[nodiscard]] std::size_t live_segments() {
        std::lock_guard lock(mutex_);
        return segments_.size();
    }
    [[nodiscard]] std::vector<FakeCall> log() {
        std::lock_guard lock(mutex_);
        return log_;
    }
    [[nodiscard]] std::size_t count(FakeCall::Kind kind) {
        std::lock_guard lock(mutex_);
        std::size_t n = 0;
        for (const FakeCall& call : log_) n += call.kind == kind ? 1 : 0;
        return n;
    }
    void clear_log() {
        std::lock_guard lock(mutex_);
        log_.clear();
    }
    [[nodiscard]] std::vector<std::string> violations() {
        std::lock_guard lock(mutex_);
        return violations_;
    }
    // Virtual memory: what is mapped and reserved now; whether [ptr, ptr + bytes) is wholly mapped.
    [[nodiscard]] std::size_t mapped_bytes() {
        std::lock_guard lock(mutex_);
        std::size_t bytes = 0;
        for (const auto& [ptr, chunk] : chunks_) bytes += chunk.size;
        return bytes;
    }
    [[nodiscard]] std::size_t live_ranges() {
        std::lock_guard lock(mutex_);
        return ranges_.size();
    }
    [[nodiscard]] bool mapped(DevicePtr ptr, std::size_t bytes) {
        std::lock_guard lock(mutex_);
        DevicePtr covered = ptr;
        for (auto it = chunks_.upper_bound(ptr); covered < ptr + bytes;) {
            if (it == chunks_.begin()) return false;
            const auto chunk = std::prev(it);
            if (chunk->first > covered || chunk->first + chunk->second.size <= covered) return false;
            covered = chunk->first + chunk->second.size;
            it = chunks_.upper_bound(covered);
        }
        return true;
    }
    void set_granularity(std::size_t bytes) {
        std::lock_guard lock(mutex_);
        granularity_ = bytes;
    }
    void set_address_space(std::size_t bytes) {
        std::lock_guard lock(mutex_);
        address_space_left_ = bytes;
    }
    // After `successes` more map calls succeed (capacity permitting), the next one fails as out of memory.
    void fail_a_map_after(int successes) {
        std::lock_guard lock(mutex_);
        fail_after_ = successes;
    }

    static std::uint64_t id_of(alloc::EventHandle event) noexcept {
        return reinterpret_cast<std::uintptr_t>(event);
    }
    static alloc::EventHandle handle_of(std::uint64_t id) noexcept {
        return reinterpret_cast<alloc::EventHandle>(static_cast<std::uintptr_t>(id));
    }

  private:
    struct Event {
        alloc::StreamKey stream = 0;
        bool completed = false;
        bool released = false;
        bool by_allocator = false;
    };

    static std::vector<alloc::EventHandle>& recorded_on_this_thread() {
        thread_local std::vector<alloc::EventHandle> events;
        return events;
    }
    static constexpr std::size_t round_up(std::size_t v, std::size_t m) { return (v + m - 1) / m * m; }
    bool inside_a_range(DevicePtr ptr, std::size_t bytes) const {
        auto it = ranges_.upper_bound(ptr);
        if (it == ranges_.begin()) return false;
        --it;
        return ptr - it->first < it->second && bytes <= it->second - (ptr - it->first);
    }

    alloc::EventHandle new_event(alloc::StreamKey stream, bool by_allocator) {
        events_.push_back(Event{stream, false, false, by_allocator});
        return handle_of(events_.size());  // ids start at 1: never a null handle
    }
    Event& checked(alloc::EventHandle event) {
        const std::uint64_t id = id_of(event);
        if (id == 0 || id > events_.size()) {
            violations_.push_back("unknown event");
            static Event dummy;
            return dummy;
        }
        return events_[id - 1];
    }

    std::mutex mutex_;
    std::size_t capacity_;
    std::size_t used_ = 0;
    DevicePtr next_address_ = DevicePtr{0x7f0000000000};
    std::map<DevicePtr, std::size_t> segments_;
    std::map<DevicePtr, std::size_t> ranges_;
    struct Chunk {
        std::size_t size = 0;
        std::uint64_t epoch = 0;  // synchronizes before it was mapped
    };
    std::map<DevicePtr, Chunk> chunks_;
    std::set<DevicePtr> fresh_;  // mapped and not handed out since
    std::uint64_t epoch_ = 0;
    std::size_t granularity_ = 2 * kMiB;
    std::size_t address_space_left_ = std::size_t{1} << 46;
    int fail_after_ = -1;  // map calls until one fails (-1: none)
    std::vector<Event> events_;
    std::set<alloc::StreamKey> capturing_;
    std::vector<FakeCall> log_;
    std::vector<std::string> violations_;
};

class FakeBackend final : public alloc::AllocatorBackend {
  public:
    explicit FakeBackend(std::shared_ptr<FakeDevice> device) : device_(std::move(device)) {}

    std::optional<DevicePtr> allocate_segment(std::size_t bytes) override { return device_->allocate(bytes); }
    void free_segment(DevicePtr ptr, std::size_t bytes) override { device_->free(ptr, bytes); }
    alloc::EventHandle record_event(alloc::StreamKey stream) override { return device_->record(stream); }
    bool event_completed(alloc::EventHandle event) override { return device_->query(event); }
    void synchronize_event(alloc::EventHandle event) override { device_->synchronize(event); }
    void release_event(alloc::EventHandle event) noexcept override {
        try {
            device_->release(event);
        } catch (...) {  // NOLINT(bugprone-empty-catch): only a failing test's bookkeeping can throw
        }
    }
    bool stream_capturing(alloc::StreamKey stream) override { return device_->capturing(stream); }
    std::pair<std::size_t, std::size_t> memory_info() override { return device_->memory_info(); }
    int device_ordinal() const noexcept override { return 0; }
    std::size_t mapping_granularity() override { return device_->granularity(); }
    std::optional<DevicePtr> reserve_address_range(std::size_t bytes, std::size_t alignment) override {
        return device_->reserve_range(bytes, alignment);
    }
    void free_address_range(DevicePtr ptr, std::size_t bytes) override { device_->free_range(ptr, bytes); }
    bool map_chunks(DevicePtr ptr, std::size_t bytes, std::size_t chunk) override {
        return device_->map(ptr, bytes, chunk);
    }
    void unmap_chunk(DevicePtr ptr, std::size_t chunk) override { device_->unmap(ptr, chunk); }
    void synchronize_device() override { device_->synchronize_device(); }

  private:
    std::shared_ptr<FakeDevice> device_;
};

}  // namespace cudarc::test

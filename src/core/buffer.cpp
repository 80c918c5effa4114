// detail::Buffer (core/buffer.hpp) and the memory operations on buffers (cudarc/detail/buffer.hpp).
#include "core/buffer.hpp"
#include "core/profiler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <new>
#include <utility>

#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/host_copy.hpp"
#include "core/operation.hpp"
#include "core/peer_access.hpp"
#include "core/trace.hpp"
#include "cudarc/stream.hpp"

namespace cudarc::detail {

// ---- Storage (Note [Stable buffers]) -----------------------------------------------------------------

#if defined(__SANITIZE_ADDRESS__)
#define CUDARC_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDARC_ADDRESS_SANITIZER 1
#endif
#endif
#ifndef CUDARC_ADDRESS_SANITIZER
#define CUDARC_ADDRESS_SANITIZER 0
#endif

namespace {
#if CUDARC_DEBUG_VIEWS
// A buffer's slot: never freed, so that a view whose buffer is gone can still read its generation.
struct Slot {
    std::atomic<std::uint64_t> generation{1};
    Slot* next_free = nullptr;
    alignas(Buffer) unsigned char storage[sizeof(Buffer)];
};

class SlotRegistry {
  public:
    void* take() {
        std::lock_guard lock(mutex_);
        if (free_ == nullptr) {
            constexpr std::size_t kChunk = 256;
            auto* chunk = new Slot[kChunk];  // never deleted: views may read a slot's generation forever
            for (std::size_t i = 0; i < kChunk; ++i) {
                chunk[i].next_free = free_;
                free_ = &chunk[i];
            }
        }
        Slot* slot = free_;
        free_ = slot->next_free;
        return slot->storage;
    }
    void give_back(void* storage) noexcept {
        Slot* slot = of(storage);
        slot->generation.fetch_add(1, std::memory_order_release);  // its views are dangling from now on
        std::lock_guard lock(mutex_);
        slot->next_free = free_;
        free_ = slot;
    }
    static Slot* of(const void* storage) noexcept {
        return reinterpret_cast<Slot*>(
            const_cast<unsigned char*>(static_cast<const unsigned char*>(storage)) - offsetof(Slot, storage));
    }

  private:
    std::mutex mutex_;
    Slot* free_ = nullptr;
};

SlotRegistry& slots() {
    static auto* registry = new SlotRegistry;  // never destroyed: buffers may outlive static destructors
    return *registry;
}
#endif
}  // namespace

#if !CUDARC_DEBUG_VIEWS
namespace {
void* new_storage() {
    // Note: the aligned form only where the type needs it: it is slower (memalign, a popcount call).
    if constexpr (alignof(Buffer) > __STDCPP_DEFAULT_NEW_ALIGNMENT__)
        return ::operator new (sizeof(Buffer), std::align_val_t{alignof(Buffer)});
    else
        return ::operator new(sizeof(Buffer));
}

void delete_storage(void* p) noexcept {
    if constexpr (alignof(Buffer) > __STDCPP_DEFAULT_NEW_ALIGNMENT__)
        ::operator delete (p, std::align_val_t{alignof(Buffer)});
    else
        ::operator delete(p);
}

#if !CUDARC_ADDRESS_SANITIZER
// A few freed buffers' storage kept per thread: an alloc + free pair of a DeviceSlice then costs no malloc
// and free of its state (a tenth of the pair). Off under AddressSanitizer, which should see every free.
struct SpareStorage {
    static constexpr std::size_t kKept = 16;
    void* kept[kKept];
    std::size_t count = 0;
    ~SpareStorage() {
        gone = true;
        while (count != 0) delete_storage(kept[--count]);
    }
    // Set once the thread's spares are destroyed (buffers freed by later thread-exit destructors).
    static thread_local bool gone;
};
thread_local bool SpareStorage::gone = false;
thread_local SpareStorage spare_storage;
#endif
}  // namespace
#endif

void* Buffer::storage() {
#if CUDARC_DEBUG_VIEWS
    return slots().take();
#elif !CUDARC_ADDRESS_SANITIZER
    if (!SpareStorage::gone && spare_storage.count != 0) return spare_storage.kept[--spare_storage.count];
    return new_storage();
#else
    return new_storage();
#endif
}

void Buffer::free_storage(void* p) noexcept {
#if CUDARC_DEBUG_VIEWS
    slots().give_back(p);
#elif !CUDARC_ADDRESS_SANITIZER
    if (!SpareStorage::gone && spare_storage.count < SpareStorage::kKept) {
        spare_storage.kept[spare_storage.count++] = p;
        return;
    }
    delete_storage(p);
#else
    delete_storage(p);
#endif
}

std::uint64_t Buffer::generation() const noexcept {
#if CUDARC_DEBUG_VIEWS
    return SlotRegistry::of(this)->generation.load(std::memory_order_acquire);
#else
    return 0;
#endif
}

// ---- Buffer -----------------------------------------------------------------------------------------

Buffer::Buffer(std::shared_ptr<DeviceState> device, MemorySource* source, std::size_t bytes,
               StreamState* home, bool borrowed, ReleaseHook hook) noexcept
    : device_(std::move(device)),
      source_(source),
      bytes_(bytes),
      home_(home),
      // Note: borrowed memory was written by its owner, unseen (its "work so far" is anything it submitted).
      hazards_(bytes, home != nullptr ? &home->timeline() : nullptr, device_.get(),
               borrowed ? HazardState::Writer::anything : HazardState::Writer::tracked),
      on_release_(hook),
      borrowed_(borrowed) {}

Buffer::~Buffer() = default;

BufferHandle Buffer::allocate(StreamState& stream, std::size_t bytes, MemorySource& source) {
    DeviceState& device = stream.device();
    void* place = storage();
    BufferHandle handle(new (place) Buffer(device.shared_from_this(), &source, bytes, &stream, false, {}));
    Buffer& b = *handle.get();
    if (stream.ownership() == StreamOwnership::foreign) b.home_keep_ = stream.shared_from_this();
    device.releases().poll();  // Note [Deferred release]
    if (bytes == 0) return handle;
    // Note: the memory source binds the context where it calls the driver (a cached block needs no call).
    const MemoryBlock block = source.allocate(bytes, stream);  // throws: the handle frees nothing
    b.ptr_ = block.ptr;
    b.allocation_ = block.handle;
    b.hazards_.set_address(b.ptr_);
    // Note [Capture overlay]: memory allocated on a captured stream belongs to the capture.
    if (captures_underway.load(std::memory_order_relaxed) != 0 && stream.capture() != nullptr) {
        capture_note_allocation(b, stream);
        return handle;
    }
    // The allocation is a point on its stream: the memory's earlier life there (untracked work included,
    // which no position counts) lies before it. Another stream's first use waits for an event recorded
    // after this point, never for an older one that happens to cover the same position (Note [Stream
    // timelines]).
    Timeline& timeline = stream.timeline();
    b.hazards_.note_owner_access(timeline, timeline.advance());  // Note [Owner's last access]
    return handle;
}

BufferHandle Buffer::borrow(const std::shared_ptr<DeviceState>& device, DevicePtr ptr, std::size_t bytes,
                            StreamState* owner, ReleaseHook hook) {
    void* place = storage();
    BufferHandle handle(new (place) Buffer(device, nullptr, bytes, owner, true, hook));
    Buffer& b = *handle.get();
    b.ptr_ = ptr;
    b.hazards_.set_address(ptr);
    if (owner != nullptr && owner->ownership() == StreamOwnership::foreign)
        b.home_keep_ = owner->shared_from_this();
    device->releases().poll();
    return handle;
}

void Buffer::destroy(Buffer* buffer) noexcept {
    // Note [Capture overlay]: released once the capture under way on this thread has ended.
    if (captures_underway.load(std::memory_order_relaxed) != 0 && capture_defer_release(buffer)) return;
    buffer->release();
    buffer->~Buffer();
    free_storage(buffer);
}

namespace {
// Room kept per thread for a release's uses and events: a step may release hundreds of borrowed buffers,
// each with a use or two, and then allocates nothing for them. A release takes the room out while it uses
// it, since a release hook it runs may release another buffer on this thread. Once the thread's room is
// destroyed, releases in later thread-exit destructors use room of their own.
struct ReleaseRoom {
    std::vector<TimelineUse> uses;
    std::vector<EventRef> events;
    ReleaseRoom() = default;
    ReleaseRoom(const ReleaseRoom&) = delete;
    ReleaseRoom& operator=(const ReleaseRoom&) = delete;
    ~ReleaseRoom() { gone = true; }
    static thread_local bool gone;
};
thread_local bool ReleaseRoom::gone = false;
thread_local ReleaseRoom release_room;

class ReleaseRoomLease {
  public:
    ReleaseRoomLease() noexcept {
        if (ReleaseRoom::gone) return;
        uses = std::move(release_room.uses);
        events = std::move(release_room.events);
    }
    ReleaseRoomLease(const ReleaseRoomLease&) = delete;
    ReleaseRoomLease& operator=(const ReleaseRoomLease&) = delete;
    ~ReleaseRoomLease() {
        uses.clear();
        events.clear();
        if (ReleaseRoom::gone) return;
        if (uses.capacity() > release_room.uses.capacity()) release_room.uses = std::move(uses);
        if (events.capacity() > release_room.events.capacity()) release_room.events = std::move(events);
    }
    std::vector<TimelineUse> uses;
    std::vector<EventRef> events;
};

// The uses a free or release must order after, as the memory sources take them: the home stream's own use
// needs no event (it orders the free itself), the others an event covering their use.
std::vector<StreamUse> stream_uses(std::vector<TimelineUse>& uses, StreamState* home) {
    std::vector<StreamUse> out;
    out.reserve(uses.size());
    for (TimelineUse& use : uses) {
        EventRef event;
        if (home == nullptr || use.timeline != &home->timeline())
            event = use.timeline->event_covering(use.position);
        out.push_back(StreamUse{use.stream, std::move(event)});
    }
    return out;
}
}  // namespace

void Buffer::release() noexcept {
    hazards_.detach_link();
    if (borrowed_) {
        release_borrowed();
        return;
    }
    if (ptr_ == 0) return;
    std::vector<StreamUse> uses;
    if (hazards_.exclusive() != &home_->timeline()) {
        // Note: the common case (one stream) skips this, building no list: the home stream orders the free
        // after its own work.
        try {
            ReleaseRoomLease room;
            std::vector<TimelineUse>& taken = room.uses;
            hazards_.take_uses(taken);
            order_uses_on_own_device(*device_, home_, taken);  // Note [Hazard tracking across devices]
            if (trace_waits()) [[unlikely]] {
                for (const TimelineUse& use : taken) trace_free(ptr_, bytes_, *use.timeline, use.position);
            }
            uses = stream_uses(taken, home_);
        } catch (const Error& error) {
            // An event could not be recorded, or no memory for the list: make every use complete before the
            // memory can be reused (Note [Free after a failed record]).
            device_->defer(error);
            device_->synchronize_noexcept();
            uses.clear();
        } catch (...) {
            device_->synchronize_noexcept();
            uses.clear();
        }
    }
    hazards_.clear();
    source_->deallocate(MemoryBlock{ptr_, allocation_}, bytes_, *home_, std::move(uses));
}

void Buffer::release_borrowed() noexcept {
    ReleaseRoomLease room;
    std::vector<TimelineUse>& uses = room.uses;
    bool complete = false;  // every use is known to have completed on the device
    try {
        hazards_.take_uses(uses);
    } catch (...) {
        device_->synchronize_noexcept();
        hazards_.clear();
        complete = true;
    }
    // The owner's stream and the release hook's events are this device's: a use on another device first
    // becomes a wait of a stream here (Note [Hazard tracking across devices]).
    if (!complete && (home_ != nullptr || on_release_)) order_uses_on_own_device(*device_, home_, uses);
    // Note: the initial "written by the owner" entry is not a use by cudarc; it only orders cudarc's first
    // use. The owner waiting for itself is skipped below; the release hook still waits for it (harmless).
    if (!complete && home_ != nullptr) {
        // The stream exchange: the owner's stream waits for cudarc's uses (events, never a host block). A
        // retired owner (its wrapper destroyed first) cannot wait: the host waits instead (counted).
        try {
            if (!home_->alive())
                throw Error("cudarc: the owner's stream was retired before the borrowed slice");
            for (const TimelineUse& use : uses) home_->timeline().wait_for(*use.timeline, use.position);
        } catch (const Error& error) {
            if (home_->alive()) device_->defer(error);
            device_->synchronize_noexcept();
            complete = true;
        } catch (...) {
            device_->synchronize_noexcept();
            complete = true;
        }
    }
    if (!on_release_) return;
    std::vector<EventRef>& events = room.events;
    if (!complete) {
        try {
            events.reserve(uses.size());
            for (const TimelineUse& use : uses) events.push_back(use.timeline->event_covering(use.position));
        } catch (const Error& error) {
            device_->defer(error);
            device_->synchronize_noexcept();
            events.clear();
        } catch (...) {
            device_->synchronize_noexcept();
            events.clear();
        }
    }
    device_->releases().add(events, on_release_);
}

bool Buffer::managed() const noexcept {
    return source_ != nullptr && source_->managed();
}

int Buffer::device_ordinal() const noexcept {
    return device_->ordinal();
}

void Buffer::check_stream(const StreamState& stream) const {
    // Note: another device's stream may use this memory once it has peer access to it (Note [Hazard
    // tracking across devices]).
    if (!stream.device().can_use_memory_of(*device_))
        throw_other_device_buffer("cudarc", device_->ordinal(), stream.device().ordinal());
}

Buffer& non_empty(Buffer* buffer, const char* what) {
    if (buffer == nullptr)
        throw Error(fmt::format("{}: use of an empty (default-constructed or moved-from) slice", what));
    return *buffer;
}

// ---- The exported functions -------------------------------------------------------------------------

void destroy_buffer(Buffer* buffer) noexcept {
    Buffer::destroy(buffer);
}

BufferHandle allocate_buffer(Stream& stream, std::size_t bytes) {
    StreamState& s = Internals::stream_state(stream);
    return Buffer::allocate(s, bytes, s.device().memory());
}

BufferHandle allocate_managed_buffer(Stream& stream, std::size_t bytes) {
    StreamState& s = Internals::stream_state(stream);
    return Buffer::allocate(s, bytes, s.device().managed_memory());
}

DevicePtr buffer_address(const Buffer* buffer) noexcept {
    return buffer != nullptr ? buffer->ptr() : 0;
}

int buffer_device_ordinal(const Buffer* buffer) noexcept {
    return buffer != nullptr ? buffer->device_ordinal() : -1;
}

std::uint64_t buffer_generation(const Buffer* buffer) noexcept {
    return buffer != nullptr ? buffer->generation() : 0;
}

void check_view(const Buffer* buffer, std::uint64_t generation) {
#if CUDARC_DEBUG_VIEWS
    if (buffer != nullptr && buffer->generation() != generation) {
        throw Error(
            "cudarc: a DeviceView (or a ParamTensor) was used after the slice it views was destroyed: a view "
            "must not outlive its DeviceSlice, BorrowedSlice or PinnedBuffer, like std::span (moving the "
            "owner keeps its views valid; destroying it does not). Caught by CUDARC_DEBUG_VIEWS");
    }
#else
    static_cast<void>(buffer);
    static_cast<void>(generation);
#endif
}

void record_stream(Stream& stream, Buffer* buffer) {
    Buffer& b = non_empty(buffer, "cudarc: record_stream");
    StreamState& s = Internals::stream_state(stream);
    b.check_stream(s);
    if (captures_underway.load(std::memory_order_relaxed) != 0 && capture_record_use(b.hazards(), s)) return;
    b.hazards().record_use(s.timeline());
}

void prepare_indirect_access(Stream& stream, Buffer* buffer, DevicePtr ptr, std::size_t bytes,
                             Access access) {
    Buffer& b = non_empty(buffer, "cudarc::prepare_indirect_access");
    StreamState& s = Internals::stream_state(stream);
    b.check_stream(s);
    Operation op(s, Operation::Work::untracked);
    op.access(b.hazards(), static_cast<std::size_t>(ptr - b.ptr()), bytes, access);
    op.order();
    op.complete_untracked();
}

namespace {
// Whether host memory at `ptr` is pageable (not page-locked or registered). Unknown counts as page-locked.
bool pageable(const sys::DriverApi& api, const void* ptr) noexcept {
    unsigned memory_type = 0;
    int attribute = sys::kPointerAttributeMemoryType;
    void* data[] = {&memory_type};
    return api.pointer_get_attributes != nullptr &&
           api.pointer_get_attributes(1, &attribute, data,
                                      static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(ptr))) ==
               sys::kSuccess &&
           memory_type == 0;
}

std::size_t offset_in(const Buffer& buffer, DevicePtr ptr) noexcept {
    return static_cast<std::size_t>(ptr - buffer.ptr());
}
}  // namespace

void complete_copy_to_host(DeviceState& device, sys::Stream stream, const void* dst,
                           bool always_synchronize) {
    // Note [Pageable copies already block]
    const sys::DriverApi& api = device.api();
    if (always_synchronize || !pageable(api, dst)) {
        device.check(api.stream_synchronize(stream), sys::Entry::stream_synchronize);
        AtomicCounters::bump(device.counters().stream_synchronizes);
    } else {
        AtomicCounters::bump(device.counters().blocking_copies);
    }
}

void copy_host_to_device(Stream& stream, Buffer* dst_buffer, DevicePtr dst_ptr, const void* src,
                         std::size_t bytes) {
    if (bytes == 0) return;
    const ProfilerRange range("cudarc: copy");  // Note [Profiler ranges]
    Buffer& dst = non_empty(dst_buffer, "cudarc::copy");
    StreamState& s = Internals::stream_state(stream);
    dst.check_stream(s);
    // Note [Capture overlay]: a captured copy from pageable memory would read it at every replay, long after
    // the vector or span passed here may be gone.
    if (captures_underway.load(std::memory_order_relaxed) != 0 &&
        capture_would_take(dst.hazards(), s, offset_in(dst, dst_ptr), bytes, Access::write) && [&] {
            const auto scope = s.device().bind();
            return pageable(s.device().api(), src);
        }()) {
        throw Error(
            "cudarc: a copy from pageable host memory inside a graph capture: the graph would read that "
            "memory at every replay, after it may be gone; copy before the capture, or from a PinnedBuffer "
            "with copy_to_device_async (which a graph may replay; nothing was done, and the capture goes "
            "on)");
    }
    Operation op(s);
    op.access(dst.hazards(), offset_in(dst, dst_ptr), bytes, Access::write);
    op.order();
    DeviceState& device = s.device();
    const auto scope = device.bind();
    device.check(device.api().memcpy_htod_async(dst_ptr, src, bytes, s.handle()),
                 sys::Entry::memcpy_htod_async);
    op.complete();
}

void copy_device_to_host(Stream& stream, void* dst, Buffer* src_buffer, DevicePtr src_ptr,
                         std::size_t bytes) {
    if (bytes == 0) return;
    const ProfilerRange range("cudarc: copy");
    Buffer& src = non_empty(src_buffer, "cudarc::copy");
    refuse_in_capture(
        "a blocking copy to host memory",
        "the copy would be recorded, not run (it would return with no data, and the graph would "
        "keep the host pointer); use PinnedBuffer::copy_from_device_async inside a capture");
    StreamState& s = Internals::stream_state(stream);
    src.check_stream(s);
    Operation op(s);
    op.access(src.hazards(), offset_in(src, src_ptr), bytes, Access::read);
    op.order();
    DeviceState& device = s.device();
    const auto scope = device.bind();
    device.check(device.api().memcpy_dtoh_async(dst, src_ptr, bytes, s.handle()),
                 sys::Entry::memcpy_dtoh_async);
    op.complete();
    // Note [Pageable copies already block]
    complete_copy_to_host(device, s.handle(), dst, src.managed());
}

void copy_device_to_device(Stream& stream, Buffer* dst_buffer, DevicePtr dst_ptr, Buffer* src_buffer,
                           DevicePtr src_ptr, std::size_t bytes) {
    if (bytes == 0) return;
    const ProfilerRange range("cudarc: copy");
    Buffer& dst = non_empty(dst_buffer, "cudarc::copy");
    Buffer& src = non_empty(src_buffer, "cudarc::copy");
    if (&src.device() != &dst.device()) {
        copy_across_devices(stream, dst, dst_ptr, src, src_ptr, bytes);
        return;
    }
    StreamState& s = Internals::stream_state(stream);
    src.check_stream(s);
    Operation op(s);
    op.access(src.hazards(), offset_in(src, src_ptr), bytes, Access::read);
    op.access(dst.hazards(), offset_in(dst, dst_ptr), bytes, Access::write);
    op.order();
    DeviceState& device = s.device();
    const auto scope = device.bind();
    device.check(device.api().memcpy_dtod_async(dst_ptr, src_ptr, bytes, s.handle()),
                 sys::Entry::memcpy_dtod_async);
    op.complete();
}

void memset_bytes(Stream& stream, Buffer* dst_buffer, DevicePtr dst_ptr, unsigned char value,
                  std::size_t bytes) {
    if (bytes == 0) return;
    Buffer& dst = non_empty(dst_buffer, "cudarc::memset");
    StreamState& s = Internals::stream_state(stream);
    dst.check_stream(s);
    Operation op(s);
    op.access(dst.hazards(), offset_in(dst, dst_ptr), bytes, Access::write);
    op.order();
    DeviceState& device = s.device();
    const auto scope = device.bind();
    if (dst_ptr % 4 == 0 && bytes % 4 == 0) {
        // Note: 32-bit stores fill large buffers faster than byte stores.
        const unsigned word = value * 0x01010101u;
        device.check(device.api().memset_d32_async(dst_ptr, word, bytes / 4, s.handle()),
                     sys::Entry::memset_d32_async);
    } else {
        device.check(device.api().memset_d8_async(dst_ptr, value, bytes, s.handle()),
                     sys::Entry::memset_d8_async);
    }
    op.complete();
}

void prefetch_to_device(Stream& stream, Buffer* buffer_ptr, DevicePtr ptr, std::size_t bytes) {
    Buffer& buffer = non_empty(buffer_ptr, "cudarc::prefetch");
    if (bytes == 0 || !buffer.managed()) return;
    StreamState& s = Internals::stream_state(stream);
    // Note: stricter than check_stream: the pages move to the memory's device, on the stream's.
    if (&s.device() != &buffer.device()) {
        throw Error(fmt::format("cudarc::prefetch: managed memory of device {} with a stream of device {}",
                                buffer.device_ordinal(), stream.device_ordinal()));
    }
    // Note: a prefetch is not a graph node; a replay finds the pages where earlier work left them.
    if (stream.is_capturing()) return;
    // Ordered like a read of exactly these bytes: after the last overlapping write on another stream
    // (pages moved under it would only move back); later writers of them, and the free, wait for it.
    Operation op(s);
    op.access(buffer.hazards(), offset_in(buffer, ptr), bytes, Access::read);
    op.order();
    buffer.source()->prefetch(s, ptr, bytes);
    op.complete();
}

void throw_out_of_range(const char* what, std::size_t offset, std::size_t count, std::size_t size) {
    throw Error(fmt::format("cudarc: {}: elements [{}, {}+{}) are out of range for a view of {} elements",
                            what, offset, offset, count, size));
}

void throw_size_mismatch(const char* what, std::size_t dst_size, std::size_t src_size) {
    throw Error(fmt::format("cudarc: {}: size mismatch: destination has {} elements, source has {}", what,
                            dst_size, src_size));
}

}  // namespace cudarc::detail

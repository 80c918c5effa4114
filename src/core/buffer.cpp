#include "cudarc/detail/buffer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <utility>

#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/hazard_tracker.hpp"
#include "core/host_copy.hpp"
#include "core/peer_access.hpp"
#include "cudarc/stream.hpp"

namespace cudarc::detail {

// ---- Cross-stream ordering --------------------------------------------------------------------------

void wait_for_use(StreamState& waiter, StreamState& user, sys::Event& event) {
    if (&user == &waiter) return;
    // Two wrappers of one foreign stream are one queue of work: nothing to wait for.
    if (user.handle() == waiter.handle() && user.alive() && waiter.alive()) return;
    if (user.capture() != nullptr || waiter.capture() != nullptr) [[unlikely]] {
        wait_in_capture(waiter, user, event);  // Note [Capture overlay]
        return;
    }
    if (event == nullptr) event = user.mark();
    DeviceState& device = waiter.device();
    const auto scope = device.bind();
    device.wait_event(waiter.handle(), event);
}

// ---- HazardTracker ----------------------------------------------------------------------------------

HazardTracker::HazardTracker(std::size_t bytes, StreamState* first_writer)
    : table_(bytes, first_writer != nullptr ? 0 : -1) {
    slots_.reserve(4);
    if (first_writer != nullptr) slots_.push_back(Slot{first_writer->shared_from_this(), nullptr, 0});
}

HazardTracker::~HazardTracker() {
    for (Slot& slot : slots_) free_slot(slot);
}

void HazardTracker::free_slot(Slot& slot) noexcept {
    if (slot.event != nullptr) slot.stream->device().events().release(slot.event);
    slot.event = nullptr;
    slot.stream.reset();
}

unsigned HazardTracker::slot_for(StreamState& stream) {
    for (unsigned i = 0; i < slots_.size(); ++i) {
        if (slots_[i].stream.get() == &stream) return i;
    }
    for (unsigned i = 0; i < slots_.size(); ++i) {
        if (!slots_[i].stream) {
            slots_[i] = Slot{stream.shared_from_this(), nullptr, tick_};
            return i;
        }
    }
    if (slots_.size() < RangeTable::kMaxSlots) {
        slots_.push_back(Slot{stream.shared_from_this(), nullptr, tick_});
        return static_cast<unsigned>(slots_.size() - 1);
    }
    // Every slot taken: first free those the table no longer names (RangeTable's invariant: such a slot is
    // in no mask), then relabel the least recently used one.
    const RangeTable::Mask used = table_.used();
    for (unsigned i = 0; i < slots_.size(); ++i) {
        if ((used & RangeTable::bit(i)) == 0) free_slot(slots_[i]);
    }
    std::shared_ptr<StreamState> keep = stream.shared_from_this();
    unsigned victim = 0;
    for (unsigned i = 0; i < slots_.size(); ++i) {
        if (!slots_[i].stream) {
            slots_[i] = Slot{std::move(keep), nullptr, tick_};
            return i;
        }
        if (slots_[i].last_use < slots_[victim].last_use) victim = i;
    }
    Slot& old = slots_[victim];
    wait_for_use(stream, *old.stream, old.event);  // may throw: nothing has changed
    free_slot(old);
    old = Slot{std::move(keep), nullptr, tick_};
    return victim;
}

void HazardTracker::wait_for(StreamState& waiter, RangeTable::Mask slots) {
    for (unsigned i = 0; slots != 0; ++i, slots >>= 1) {
        if ((slots & 1u) != 0) wait_for_use(waiter, *slots_[i].stream, slots_[i].event);
    }
}

void HazardTracker::note_use(unsigned slot) noexcept {
    Slot& s = slots_[slot];
    if (s.event != nullptr) {
        s.stream->device().events().release(s.event);
        s.event = nullptr;
    }
    s.last_use = ++tick_;
}

void HazardTracker::record_after_use(StreamState& stream) noexcept {
    for (Slot& slot : slots_) {
        if (slot.stream.get() != &stream) continue;
        if (slot.event != nullptr || !stream.alive()) return;  // recorded after the latest use already
        DeviceState& device = stream.device();
        try {
            sys::Event event = device.events().acquire();
            try {
                device.record_into(event, stream.handle());
            } catch (...) {
                device.events().release(event);
                throw;
            }
            slot.event = event;
        } catch (const Error& error) {
            // No event: a waiter records one lazily (more ordering, never less). The failure is kept for
            // Device::rethrow_deferred_error (a sticky one loses the device).
            device.defer(error);
        } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory while describing the failure
        }
        return;
    }
}

void HazardTracker::rerecord_events(sys::Stream stream) noexcept {
    for (Slot& slot : slots_) {
        if (slot.event == nullptr) continue;
        DeviceState& device = slot.stream->device();
        if (device.api().event_record(slot.event, stream) != sys::kSuccess) {
            device.defer(device.api().event_destroy(slot.event), sys::Entry::event_destroy);
            slot.event = nullptr;
        }
    }
}

std::vector<StreamUse> HazardTracker::take_uses() {
    const RangeTable::Mask used = table_.used();
    std::vector<StreamUse> uses;
    uses.reserve(static_cast<std::size_t>(std::popcount(used)));
    for (unsigned i = 0; i < slots_.size(); ++i) {
        if ((used & RangeTable::bit(i)) != 0) {
            uses.push_back(StreamUse{std::move(slots_[i].stream), std::exchange(slots_[i].event, nullptr)});
        }
    }
    for (Slot& slot : slots_) free_slot(slot);
    return uses;
}

// ---- HazardState ------------------------------------------------------------------------------------

std::atomic<unsigned> captures_underway{0};

HazardState::HazardState() noexcept = default;

HazardState::HazardState(std::size_t bytes, StreamState* first_writer) noexcept
    : exclusive_(first_writer), bytes_(bytes) {}

HazardState::HazardState(HazardState&& other) noexcept
    : exclusive_(std::exchange(other.exclusive_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      tracker_(std::move(other.tracker_)),
      address_(std::exchange(other.address_, 0)),
      link_(std::move(other.link_)) {
    if (link_) link_->state = this;
}

HazardState& HazardState::operator=(HazardState&& other) noexcept {
    if (this != &other) {
        detach_link();
        exclusive_ = std::exchange(other.exclusive_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
        tracker_ = std::move(other.tracker_);
        address_ = std::exchange(other.address_, 0);
        link_ = std::move(other.link_);
        if (link_) link_->state = this;
    }
    return *this;
}

HazardState::~HazardState() {
    detach_link();
}

const std::shared_ptr<BufferLink>& HazardState::link() {
    if (!link_) link_ = std::make_shared<BufferLink>(BufferLink{this, address_, bytes_});
    return link_;
}

void HazardState::detach_link() noexcept {
    if (!link_) return;
    link_->state = nullptr;
    link_.reset();
}

HazardTracker& HazardState::ensure_tracker() {
    if (!tracker_) tracker_ = std::make_unique<HazardTracker>(bytes_, exclusive_);
    return *tracker_;
}

void HazardState::before_access_slow(StreamState& stream, std::size_t offset, std::size_t bytes,
                                     Access access) {
    // Note [Capture overlay]: an access by a captured stream goes to the capture.
    if (captures_underway.load(std::memory_order_relaxed) != 0 &&
        capture_before_access(*this, stream, offset, bytes, access)) {
        return;
    }
    order_access(stream, offset, bytes, access);
}

void HazardState::order_access(StreamState& stream, std::size_t offset, std::size_t bytes, Access access) {
    if (exclusive_ == &stream) return;  // Note [Single-stream fast path]
    if (bytes == 0) return;             // touches nothing
    HazardTracker& t = ensure_tracker();
    const unsigned slot = t.slot_for(stream);
    // A repeated read (the slot already synced over these bytes) would wait for nothing and change no range:
    // only the use counts. This is every step's read of gradients that another stream also read.
    if (access == Access::write || !t.table().synced_over(offset, offset + bytes, slot)) {
        const RangeTable::Mask waits = t.table().conflicts(offset, offset + bytes, slot, access);
        if (waits != 0) t.wait_for(stream, waits);
        t.table().apply(offset, offset + bytes, slot, access);
    }
    t.note_use(slot);
    exclusive_ = nullptr;
    if (const int writer = t.table().sole_writer(); writer >= 0) {
        // Back to Note [Single-stream fast path]. The sole writer is `stream` (an access by another slot
        // would have left that slot in the table), whose event note_use() just dropped. Note: the other
        // slots stay (the table names none of them): a stream that comes back finds its slot without
        // churn, and its old event is dropped by note_use() at that access, before anything waits on it.
        exclusive_ = t.stream_of(static_cast<unsigned>(writer));
    }
}

bool HazardState::would_wait(std::size_t offset, std::size_t bytes, Access access) const noexcept {
    if (bytes == 0) return false;
    if (exclusive_ != nullptr) return true;  // written as a whole: every access follows that write
    return tracker_ && tracker_->table().conflicts_without_slot(offset, offset + bytes, access) != 0;
}

void HazardState::after_access_slow(StreamState& stream) noexcept {
    if (captures_underway.load(std::memory_order_relaxed) != 0 && capture_after_access(*this, stream)) return;
    order_after_access(stream);
}

void HazardState::order_after_access(StreamState& stream) noexcept {
    if (exclusive_ == &stream || !tracker_) return;
    tracker_->record_after_use(stream);
}

void HazardState::record_use(StreamState& stream) {
    if (exclusive_ == &stream && captures_underway.load(std::memory_order_relaxed) == 0) return;
    if (captures_underway.load(std::memory_order_relaxed) != 0 && capture_record_use(*this, stream)) return;
    order_use(stream);
}

void HazardState::order_use(StreamState& stream) {
    if (exclusive_ == &stream) return;  // its later work is ordered after its earlier work anyway
    HazardTracker& t = ensure_tracker();
    const unsigned slot = t.slot_for(stream);
    t.table().add_reader_everywhere(slot);
    t.note_use(slot);
    exclusive_ = nullptr;
}

std::vector<StreamUse> HazardState::take_uses() {
    std::vector<StreamUse> uses;
    if (tracker_) {
        uses = tracker_->take_uses();
    } else if (exclusive_ != nullptr) {
        uses.push_back(StreamUse{exclusive_->shared_from_this(), nullptr});
    }
    clear();
    return uses;
}

void HazardState::rerecord_events(sys::Stream stream) noexcept {
    if (tracker_) tracker_->rerecord_events(stream);
}

void HazardState::clear() noexcept {
    tracker_.reset();
    exclusive_ = nullptr;
}

// ---- Buffer -----------------------------------------------------------------------------------------

Buffer::Buffer(Stream& stream, std::size_t bytes)
    : Buffer(stream, bytes, detail::Internals::stream_state(stream).device().memory()) {}

Buffer Buffer::managed(Stream& stream, std::size_t bytes) {
    return Buffer(stream, bytes, detail::Internals::stream_state(stream).device().managed_memory());
}

Buffer::Buffer(Stream& stream, std::size_t bytes, MemorySource& source)
    : device_(detail::Internals::stream_state(stream).device().shared_from_this()),
      source_(&source),
      bytes_(bytes),
      home_(&detail::Internals::stream_state(stream)),
      hazards_(bytes, &detail::Internals::stream_state(stream)) {
    if (home_->ownership() == StreamOwnership::foreign)
        home_keep_ = detail::Internals::shared_stream_state(stream);
    device_->releases().poll();  // Note [Deferred release]
    if (bytes == 0) return;
    // Note: the memory source binds the context where it calls the driver (a cached block needs no call).
    const MemoryBlock block = source.allocate(bytes, *home_);
    ptr_ = block.ptr;
    allocation_ = block.handle;
    hazards_.set_address(ptr_);
    // Note [Capture overlay]: memory allocated on a captured stream belongs to the capture.
    if (captures_underway.load(std::memory_order_relaxed) != 0) capture_note_allocation(*this, *home_);
}

Buffer::Buffer(const std::shared_ptr<DeviceState>& device, DevicePtr ptr, std::size_t bytes,
               const Stream* owner, ReleaseHook hook)
    : device_(device),
      ptr_(ptr),
      bytes_(bytes),
      home_(owner != nullptr ? &detail::Internals::stream_state(*owner) : nullptr),
      hazards_(bytes, home_),
      on_release_(hook),
      borrowed_(true) {
    hazards_.set_address(ptr);
    if (home_ != nullptr && home_->ownership() == StreamOwnership::foreign)
        home_keep_ = detail::Internals::shared_stream_state(*owner);
    device_->releases().poll();
}

Buffer::Buffer(Buffer&& other) noexcept
    : device_(std::move(other.device_)),
      source_(std::exchange(other.source_, nullptr)),
      ptr_(std::exchange(other.ptr_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      allocation_(std::exchange(other.allocation_, nullptr)),
      home_(std::exchange(other.home_, nullptr)),
      home_keep_(std::move(other.home_keep_)),
      hazards_(std::move(other.hazards_)),
      on_release_(std::exchange(other.on_release_, {})),
      borrowed_(std::exchange(other.borrowed_, false)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
    if (this != &other) {
        release();
        device_ = std::move(other.device_);
        source_ = std::exchange(other.source_, nullptr);
        ptr_ = std::exchange(other.ptr_, 0);
        bytes_ = std::exchange(other.bytes_, 0);
        allocation_ = std::exchange(other.allocation_, nullptr);
        home_ = std::exchange(other.home_, nullptr);
        home_keep_ = std::move(other.home_keep_);
        hazards_ = std::move(other.hazards_);
        on_release_ = std::exchange(other.on_release_, {});
        borrowed_ = std::exchange(other.borrowed_, false);
    }
    return *this;
}

Buffer::~Buffer() {
    release();
}

void Buffer::release() noexcept {
    // Note [Capture overlay]: released once the capture under way on this thread has ended.
    if (device_ && captures_underway.load(std::memory_order_relaxed) != 0 && capture_defer_release(*this))
        return;
    hazards_.detach_link();
    if (borrowed_) {
        release_borrowed();
    } else if (device_ && ptr_ != 0) {
        std::vector<StreamUse> uses;
        if (hazards_.exclusive() == home_) {
            // Note: the common case, handled without building a list (no heap allocation per free): the
            // home stream orders the free after its own work.
            hazards_.clear();
        } else {
            try {
                uses = hazards_.take_uses();
            } catch (...) {
                // No memory for the list: make every use complete before the memory can be reused.
                device_->synchronize_noexcept();
                hazards_.clear();
            }
            order_uses_on_own_device(*device_, home_, uses);  // Note [Hazard tracking across devices]
        }
        source_->deallocate(MemoryBlock{ptr_, allocation_}, bytes_, *home_, std::move(uses));
    } else {
        hazards_.clear();
    }
    ptr_ = 0;
    allocation_ = nullptr;
    bytes_ = 0;
    source_ = nullptr;
    home_ = nullptr;
    home_keep_.reset();
    on_release_ = {};
    borrowed_ = false;
    device_.reset();
}

void Buffer::release_borrowed() noexcept {
    if (!device_) return;
    std::vector<StreamUse> uses;
    bool complete = false;  // every use is known to have completed on the device
    try {
        uses = hazards_.take_uses();
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
            for (StreamUse& use : uses) wait_for_use(*home_, *use.stream, use.event);
        } catch (const Error& error) {
            if (home_->alive()) device_->defer(error);
            device_->synchronize_noexcept();
            complete = true;
        } catch (...) {
            device_->synchronize_noexcept();
            complete = true;
        }
    }
    std::vector<sys::Event> events;
    if (on_release_ && !complete) {
        try {
            events.reserve(uses.size());
            for (StreamUse& use : uses) {
                if (use.event == nullptr) use.event = use.stream->mark();
                events.push_back(std::exchange(use.event, nullptr));
            }
        } catch (const Error& error) {
            device_->defer(error);
            device_->synchronize_noexcept();
        } catch (...) {
            device_->synchronize_noexcept();
        }
    }
    for (StreamUse& use : uses) {
        if (use.event != nullptr) use.stream->device().events().release(use.event);
    }
    if (on_release_) device_->releases().add(std::move(events), on_release_);
}

bool Buffer::managed() const noexcept {
    return source_ != nullptr && source_->managed();
}

int Buffer::device_ordinal() const noexcept {
    return device_ ? device_->ordinal() : -1;
}

void Buffer::check_same_device(const Stream& stream) const {
    if (!device_) throw Error("cudarc: use of an empty (default-constructed or moved-from) slice");
    // Note: another device's stream may use this memory once it has peer access to it (Note [Hazard
    // tracking across devices]).
    if (!detail::Internals::stream_state(stream).device().can_use_memory_of(*device_))
        throw_other_device_buffer("cudarc", device_->ordinal(), stream.device_ordinal());
}

void prepare_access(const Stream& stream, Buffer& buffer, DevicePtr ptr, std::size_t bytes, Access access) {
    buffer.check_same_device(stream);
    buffer.hazards().before_access(detail::Internals::stream_state(stream),
                                   static_cast<std::size_t>(ptr - buffer.ptr()), bytes, access);
}

void finish_access(const Stream& stream, Buffer& buffer) noexcept {
    buffer.hazards().after_access(detail::Internals::stream_state(stream));
}

void prepare_access(const Stream& stream, Buffer& buffer, Access access) {
    buffer.check_same_device(stream);
    buffer.hazards().before_access(detail::Internals::stream_state(stream), 0, buffer.bytes(), access);
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

void copy_host_to_device(Stream& stream, Buffer& dst, DevicePtr dst_ptr, const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    // Note [Capture overlay]: a captured copy from pageable memory would read it at every replay, long after
    // the vector or span passed here may be gone.
    if (captures_underway.load(std::memory_order_relaxed) != 0 &&
        capture_would_take(dst.hazards(), detail::Internals::stream_state(stream),
                           static_cast<std::size_t>(dst_ptr - dst.ptr()), bytes, Access::write) &&
        [&] {
            const auto scope = detail::Internals::stream_state(stream).device().bind();
            return pageable(detail::Internals::stream_state(stream).device().api(), src);
        }()) {
        throw Error(
            "cudarc: a copy from pageable host memory inside a graph capture: the graph would read that "
            "memory "
            "at every replay, after it may be gone; copy before the capture, or from a PinnedBuffer with "
            "copy_to_device_async (which a graph may replay; nothing was done, and the capture goes on)");
    }
    prepare_access(stream, dst, dst_ptr, bytes, Access::write);
    DeviceState& device = detail::Internals::stream_state(stream).device();
    const auto scope = device.bind();
    device.check(device.api().memcpy_htod_async(dst_ptr, src, bytes, stream.native()),
                 sys::Entry::memcpy_htod_async);
    finish_access(stream, dst);
}

void copy_device_to_host(Stream& stream, void* dst, Buffer& src, DevicePtr src_ptr, std::size_t bytes) {
    if (bytes == 0) return;
    refuse_in_capture(
        "a blocking copy to host memory",
        "the copy would be recorded, not run (it would return with no data, and the graph would "
        "keep the host pointer); use PinnedBuffer::copy_from_device_async inside a capture");
    prepare_access(stream, src, src_ptr, bytes, Access::read);
    DeviceState& device = detail::Internals::stream_state(stream).device();
    const auto scope = device.bind();
    const sys::DriverApi& api = device.api();
    device.check(api.memcpy_dtoh_async(dst, src_ptr, bytes, stream.native()), sys::Entry::memcpy_dtoh_async);
    finish_access(stream, src);
    // Note [Pageable copies already block]
    complete_copy_to_host(device, stream.native(), dst, src.managed());
}

void copy_device_to_device(Stream& stream, Buffer& dst, DevicePtr dst_ptr, Buffer& src, DevicePtr src_ptr,
                           std::size_t bytes) {
    if (bytes == 0) return;
    if (src.device() != dst.device()) {
        copy_across_devices(stream, dst, dst_ptr, src, src_ptr, bytes);
        return;
    }
    prepare_access(stream, src, src_ptr, bytes, Access::read);
    prepare_access(stream, dst, dst_ptr, bytes, Access::write);
    DeviceState& device = detail::Internals::stream_state(stream).device();
    const auto scope = device.bind();
    device.check(device.api().memcpy_dtod_async(dst_ptr, src_ptr, bytes, stream.native()),
                 sys::Entry::memcpy_dtod_async);
    finish_access(stream, src);
    finish_access(stream, dst);
}

void memset_bytes(Stream& stream, Buffer& dst, DevicePtr dst_ptr, unsigned char value, std::size_t bytes) {
    if (bytes == 0) return;
    prepare_access(stream, dst, dst_ptr, bytes, Access::write);
    DeviceState& device = detail::Internals::stream_state(stream).device();
    const auto scope = device.bind();
    if (dst_ptr % 4 == 0 && bytes % 4 == 0) {
        // Note: 32-bit stores fill large buffers faster than byte stores.
        const unsigned word = value * 0x01010101u;
        device.check(device.api().memset_d32_async(dst_ptr, word, bytes / 4, stream.native()),
                     sys::Entry::memset_d32_async);
    } else {
        device.check(device.api().memset_d8_async(dst_ptr, value, bytes, stream.native()),
                     sys::Entry::memset_d8_async);
    }
    finish_access(stream, dst);
}

void prefetch_to_device(Stream& stream, Buffer& buffer, DevicePtr ptr, std::size_t bytes) {
    if (bytes == 0 || !buffer.managed()) return;
    // Note: stricter than check_same_device: the pages move to the memory's device, on the stream's.
    if (&detail::Internals::stream_state(stream).device() != buffer.device().get()) {
        throw Error(fmt::format("cudarc::prefetch: managed memory of device {} with a stream of device {}",
                                buffer.device_ordinal(), stream.device_ordinal()));
    }
    // Note: a prefetch is not a graph node; a replay finds the pages where earlier work left them.
    if (stream.is_capturing()) return;
    // Ordered like a read of exactly these bytes: after the last overlapping write on another stream
    // (pages moved under it would only move back); later writers of them, and the free, wait for it.
    prepare_access(stream, buffer, ptr, bytes, Access::read);
    buffer.source_->prefetch(detail::Internals::stream_state(stream), ptr, bytes);
    finish_access(stream, buffer);
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

#include "cudarc/detail/buffer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/device_state.hpp"
#include "cudarc/stream.hpp"

namespace cudarc::detail {
namespace {

// Makes `stream` wait for `use` (recording the use's event on first need).
void order_after(StreamState& stream, StreamUse& use) {
    if (!use.stream || use.stream.get() == &stream) return;
    DeviceState& device = stream.device();
    if (use.event == nullptr) use.event = use.stream->mark();
    device.wait_event(stream.handle(), use.event);
}

void release_event(StreamUse& use) noexcept {
    if (use.event != nullptr) {
        use.stream->device().events().release(use.event);
        use.event = nullptr;
    }
}

}  // namespace

void HazardState::before_access_slow(StreamState& stream, Access access) {
    const auto scope = stream.device().bind();
    if (access == Access::read) {
        if (writer_.stream.get() == &stream) {
            // Ordered after the write already; but an event recorded earlier for another stream's read no
            // longer covers this later use: drop it, so whoever needs it next records a fresh one.
            release_event(writer_);
            return;
        }
        const bool already_ordered = std::any_of(
            readers_.begin(), readers_.end(), [&](const StreamUse& r) { return r.stream.get() == &stream; });
        if (already_ordered) return;  // this stream waited for the current write at its first read
        order_after(stream, writer_);
        readers_.push_back({stream.shared_from_this(), nullptr});
        return;
    }
    // A write waits for the last write and for every read since, on other streams.
    order_after(stream, writer_);
    for (StreamUse& reader : readers_) order_after(stream, reader);
    release_event(writer_);
    for (StreamUse& reader : readers_) release_event(reader);
    readers_.clear();
    writer_ = {stream.shared_from_this(), nullptr};
}

void HazardState::record_use(StreamState& stream) {
    if (writer_.stream.get() == &stream) {
        release_event(writer_);  // a later use: a recorded event would no longer cover it
        return;
    }
    for (StreamUse& reader : readers_) {
        if (reader.stream.get() == &stream) {
            release_event(reader);
            return;
        }
    }
    readers_.push_back({stream.shared_from_this(), nullptr});
}

void HazardState::forget_home_use() noexcept {
    release_event(writer_);
    writer_ = {};
}

std::vector<StreamUse> HazardState::take_uses() {
    std::vector<StreamUse> uses = std::move(readers_);
    readers_.clear();
    if (writer_.stream) uses.push_back(std::move(writer_));
    writer_ = {};
    return uses;
}

Buffer::Buffer(Stream& stream, std::size_t bytes) : Buffer(stream, bytes, stream.state().device().memory()) {}

Buffer Buffer::managed(Stream& stream, std::size_t bytes) {
    return Buffer(stream, bytes, stream.state().device().managed_memory());
}

Buffer::Buffer(Stream& stream, std::size_t bytes, MemoryResource& source)
    : device_(stream.state().device().shared_from_this()),
      source_(&source),
      bytes_(bytes),
      home_(stream.shared_state()),
      hazards_(stream.shared_state()) {
    if (bytes == 0) return;
    // Note: the memory source binds the context where it calls the driver (a cached block needs no call).
    const MemoryBlock block = source.allocate(bytes, stream.state());
    ptr_ = block.ptr;
    allocation_ = block.handle;
}

Buffer::Buffer(Buffer&& other) noexcept
    : device_(std::move(other.device_)),
      source_(std::exchange(other.source_, nullptr)),
      ptr_(std::exchange(other.ptr_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      allocation_(std::exchange(other.allocation_, nullptr)),
      home_(std::move(other.home_)),
      hazards_(std::move(other.hazards_)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
    if (this != &other) {
        release();
        device_ = std::move(other.device_);
        source_ = std::exchange(other.source_, nullptr);
        ptr_ = std::exchange(other.ptr_, 0);
        bytes_ = std::exchange(other.bytes_, 0);
        allocation_ = std::exchange(other.allocation_, nullptr);
        home_ = std::move(other.home_);
        hazards_ = std::move(other.hazards_);
    }
    return *this;
}

Buffer::~Buffer() {
    release();
}

void Buffer::release() noexcept {
    if (device_ && ptr_ != 0) {
        std::vector<StreamUse> uses;
        if (hazards_.used_only_on(*home_)) {
            // Note: the common case, handled without building a list (no heap allocation per free):
            // the home stream orders the free after its own work.
            hazards_.forget_home_use();
        } else {
            try {
                uses = hazards_.take_uses();
            } catch (...) {
            }
        }
        source_->deallocate(MemoryBlock{ptr_, allocation_}, bytes_, *home_, std::move(uses));
    } else {
        try {
            for (StreamUse& use : hazards_.take_uses()) release_event(use);
        } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory gathering the uses; their events leak
        }
    }
    ptr_ = 0;
    allocation_ = nullptr;
    bytes_ = 0;
    source_ = nullptr;
    home_.reset();
    device_.reset();
}

bool Buffer::managed() const noexcept {
    return source_ != nullptr && source_->managed();
}

int Buffer::device_ordinal() const noexcept {
    return device_ ? device_->ordinal() : -1;
}

void Buffer::check_same_device(const Stream& stream) const {
    if (!device_) throw Error("cudarc: use of an empty (default-constructed or moved-from) DeviceSlice");
    if (&stream.state().device() != device_.get()) {
        throw Error(fmt::format("cudarc: a buffer on device {} was used with a stream of device {}",
                                device_->ordinal(), stream.device_ordinal()));
    }
}

void prepare_access(const Stream& stream, Buffer& buffer, Access access) {
    buffer.check_same_device(stream);
    buffer.hazards().before_access(stream.state(), access);
}

void copy_host_to_device(Stream& stream, Buffer& dst, DevicePtr dst_ptr, const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    prepare_access(stream, dst, Access::write);
    DeviceState& device = stream.state().device();
    const auto scope = device.bind();
    device.check(device.api().memcpy_htod_async(dst_ptr, src, bytes, stream.native()), "cuMemcpyHtoDAsync");
}

void copy_device_to_host(Stream& stream, void* dst, Buffer& src, DevicePtr src_ptr, std::size_t bytes) {
    if (bytes == 0) return;
    prepare_access(stream, src, Access::read);
    DeviceState& device = stream.state().device();
    const auto scope = device.bind();
    const sys::DriverApi& api = device.api();
    device.check(api.memcpy_dtoh_async(dst, src_ptr, bytes, stream.native()), "cuMemcpyDtoHAsync");
    // Note: into pageable memory the "async" copy returns only once the data is there, so a synchronize
    // would be redundant. Only page-locked memory needs one, and a managed source, for which no driver
    // documentation spells out when the copy returns.
    auto page_locked = [&] {
        unsigned memory_type = 0;
        int attribute = sys::kPointerAttributeMemoryType;
        void* data[] = {&memory_type};
        return api.pointer_get_attributes == nullptr ||
               api.pointer_get_attributes(1, &attribute, data,
                                          static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(dst))) !=
                   sys::kSuccess ||
               memory_type != 0;
    };
    if (src.managed() || page_locked()) {
        device.check(api.stream_synchronize(stream.native()), "cuStreamSynchronize");
        AtomicCounters::bump(device.counters().stream_synchronizes);
    } else {
        AtomicCounters::bump(device.counters().blocking_copies);
    }
}

void copy_device_to_device(Stream& stream, Buffer& dst, DevicePtr dst_ptr, Buffer& src, DevicePtr src_ptr,
                           std::size_t bytes) {
    if (bytes == 0) return;
    prepare_access(stream, src, Access::read);
    prepare_access(stream, dst, Access::write);
    DeviceState& device = stream.state().device();
    const auto scope = device.bind();
    device.check(device.api().memcpy_dtod_async(dst_ptr, src_ptr, bytes, stream.native()),
                 "cuMemcpyDtoDAsync");
}

void memset_bytes(Stream& stream, Buffer& dst, DevicePtr dst_ptr, unsigned char value, std::size_t bytes) {
    if (bytes == 0) return;
    prepare_access(stream, dst, Access::write);
    DeviceState& device = stream.state().device();
    const auto scope = device.bind();
    if (dst_ptr % 4 == 0 && bytes % 4 == 0) {
        // Note: 32-bit stores fill large buffers faster than byte stores.
        const unsigned word = value * 0x01010101u;
        device.check(device.api().memset_d32_async(dst_ptr, word, bytes / 4, stream.native()),
                     "cuMemsetD32Async");
    } else {
        device.check(device.api().memset_d8_async(dst_ptr, value, bytes, stream.native()), "cuMemsetD8Async");
    }
}

void prefetch_to_device(Stream& stream, Buffer& buffer, DevicePtr ptr, std::size_t bytes) {
    if (bytes == 0 || !buffer.managed()) return;
    buffer.check_same_device(stream);
    // Note: a prefetch is not a graph node; a replay finds the pages where earlier work left them.
    if (stream.is_capturing()) return;
    // Ordered like a read: after the last write on another stream (pages moved under it would only move
    // back), and freeing the memory waits for it.
    prepare_access(stream, buffer, Access::read);
    buffer.source_->prefetch(stream.state(), ptr, bytes);
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

// cudarc::IndirectAccess (cudarc/launch.hpp): work that reaches buffers through addresses cudarc does not
// see, tracked as one operation (core/operation.hpp).
#include <fmt/format.h>

#include "core/buffer.hpp"
#include "core/device_state.hpp"
#include "core/operation.hpp"
#include "core/profiler.hpp"
#include "cudarc/launch.hpp"

namespace cudarc {

struct IndirectAccess::State {
    explicit State(detail::StreamState& s) noexcept : stream(s), op(s) {}
    detail::StreamState& stream;
    detail::Operation op;
    bool ordered = false;
    bool done = false;
    std::size_t tensors = 0;  // views added
};

IndirectAccess::IndirectAccess(Stream& stream) : state_(new State(detail::Internals::stream_state(stream))) {}

IndirectAccess::~IndirectAccess() {
    // Note: after order() the work may be partly enqueued (a launch threw half way): recording the uses at
    // the stream's position now covers whatever was (conservative when nothing was).
    if (state_->ordered) done();
    delete state_;
}

void IndirectAccess::add_bytes(detail::Buffer* buffer, DevicePtr ptr, std::size_t bytes,
                               detail::Access access) {
    if (state_->ordered) throw Error("cudarc::IndirectAccess::add: the accesses were ordered already");
    detail::Buffer& b = detail::non_empty(buffer, "cudarc::IndirectAccess::add");
    b.check_stream(state_->stream);
    state_->op.access(b.hazards(), static_cast<std::size_t>(ptr - b.ptr()), bytes, access);
    ++state_->tensors;
}

void IndirectAccess::order() {
    if (state_->ordered) throw Error("cudarc::IndirectAccess::order: the accesses were ordered already");
    // Note [Profiler ranges]: the step's range lasts until done().
    detail::profiler_push("cudarc: step", "cudarc: step of %zu tensors", state_->tensors);
    try {
        state_->op.order();
    } catch (...) {
        detail::profiler_pop();
        throw;
    }
    state_->ordered = true;
}

void IndirectAccess::done() noexcept {
    if (state_->done) return;
    state_->done = true;
    state_->op.complete();
    if (state_->ordered) detail::profiler_pop();
}

}  // namespace cudarc

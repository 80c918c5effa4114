#include "tracking_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace cudarc::test::model {
namespace {

HappensBefore* current = nullptr;

const sys::DriverApi& inner() {
    return current->inner();
}

Clock join(const Clock& a, const Clock& b) noexcept {
    Clock out{};
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::max(a[i], b[i]);
    return out;
}

// The wrapped entries: forward, then note what the call means for the order of work.
sys::Result launch_kernel(sys::Function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shared, sys::Stream stream, void** params, void** extra) {
    const sys::Result r = inner().launch_kernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
    if (r == sys::kSuccess) current->work(stream);
    return r;
}
sys::Result memcpy_htod_async(DevicePtr dst, const void* src, std::size_t bytes, sys::Stream stream) {
    const sys::Result r = inner().memcpy_htod_async(dst, src, bytes, stream);
    if (r == sys::kSuccess) current->work(stream);
    return r;
}
sys::Result memcpy_dtoh_async(void* dst, DevicePtr src, std::size_t bytes, sys::Stream stream) {
    const sys::Result r = inner().memcpy_dtoh_async(dst, src, bytes, stream);
    if (r != sys::kSuccess) return r;
    current->work(stream);
    // Note [Pageable copies already block]: into pageable memory the copy returns with the data there.
    unsigned memory_type = 0;
    int attribute = sys::kPointerAttributeMemoryType;
    void* data[] = {&memory_type};
    if (inner().pointer_get_attributes(1, &attribute, data,
                                       static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(dst))) ==
            sys::kSuccess &&
        memory_type == 0)
        current->host_sees(stream);
    return r;
}
sys::Result memcpy_dtod_async(DevicePtr dst, DevicePtr src, std::size_t bytes, sys::Stream stream) {
    const sys::Result r = inner().memcpy_dtod_async(dst, src, bytes, stream);
    if (r == sys::kSuccess) current->work(stream);
    return r;
}
sys::Result memset_d8_async(DevicePtr dst, unsigned char value, std::size_t count, sys::Stream stream) {
    const sys::Result r = inner().memset_d8_async(dst, value, count, stream);
    if (r == sys::kSuccess) current->work(stream);
    return r;
}
sys::Result memset_d32_async(DevicePtr dst, unsigned value, std::size_t count, sys::Stream stream) {
    const sys::Result r = inner().memset_d32_async(dst, value, count, stream);
    if (r == sys::kSuccess) current->work(stream);
    return r;
}
sys::Result graph_launch(sys::GraphExec exec, sys::Stream stream) {
    const sys::Result r = inner().graph_launch(exec, stream);
    if (r == sys::kSuccess) current->work(stream);
    return r;
}
sys::Result event_record(sys::Event event, sys::Stream stream) {
    const sys::Result r = inner().event_record(event, stream);
    if (r == sys::kSuccess) current->record(event, stream);
    return r;
}
sys::Result stream_wait_event(sys::Stream stream, sys::Event event, unsigned flags) {
    const sys::Result r = inner().stream_wait_event(stream, event, flags);
    if (r == sys::kSuccess) current->wait(stream, event);
    return r;
}
sys::Result stream_synchronize(sys::Stream stream) {
    const sys::Result r = inner().stream_synchronize(stream);
    if (r == sys::kSuccess) current->host_sees(stream);
    return r;
}
sys::Result stream_query(sys::Stream stream) {
    const sys::Result r = inner().stream_query(stream);
    if (r == sys::kSuccess) current->host_sees(stream);
    return r;
}
sys::Result event_synchronize(sys::Event event) {
    const sys::Result r = inner().event_synchronize(event);
    if (r == sys::kSuccess) current->host_sees(event);
    return r;
}
sys::Result event_query(sys::Event event) {
    const sys::Result r = inner().event_query(event);
    if (r == sys::kSuccess) current->host_sees(event);
    return r;
}
sys::Result ctx_synchronize() {
    const sys::Result r = inner().ctx_synchronize();
    if (r == sys::kSuccess) current->host_sees_everything();
    return r;
}
sys::Result mem_free(DevicePtr ptr) {
    // Note: cuMemFree waits for the device (as the fake's does).
    const sys::Result r = inner().mem_free(ptr);
    if (r == sys::kSuccess) current->host_sees_everything();
    return r;
}

}  // namespace

HappensBefore::HappensBefore(const sys::DriverApi& inner) : inner_(inner), table_(inner) {
    if (current != nullptr) throw std::logic_error("one HappensBefore at a time");
    current = this;
    table_.launch_kernel = &model::launch_kernel;
    table_.launch_kernel_ex = nullptr;  // the model tests launch without attributes
    table_.memcpy_htod_async = &model::memcpy_htod_async;
    table_.memcpy_dtoh_async = &model::memcpy_dtoh_async;
    table_.memcpy_dtod_async = &model::memcpy_dtod_async;
    table_.memset_d8_async = &model::memset_d8_async;
    table_.memset_d32_async = &model::memset_d32_async;
    table_.graph_launch = &model::graph_launch;
    table_.event_record = &model::event_record;
    table_.stream_wait_event = &model::stream_wait_event;
    table_.stream_synchronize = &model::stream_synchronize;
    table_.stream_query = &model::stream_query;
    table_.event_synchronize = &model::event_synchronize;
    table_.event_query = &model::event_query;
    table_.ctx_synchronize = &model::ctx_synchronize;
    table_.mem_free = &model::mem_free;
    // Not modelled: the stream-ordered pool (the model tests use the caching allocator).
    table_.mem_alloc_async = nullptr;
    table_.mem_free_async = nullptr;
}

HappensBefore::~HappensBefore() {
    current = nullptr;
}

int HappensBefore::id_locked(sys::Stream stream) {
    const auto [it, fresh] = ids_.emplace(stream, static_cast<int>(streams_.size()));
    if (fresh) {
        if (streams_.size() >= static_cast<std::size_t>(kMaxStreams))
            throw std::logic_error("more streams than the model counts");
        streams_.push_back(Clock{});
        last_.push_back(Work{});
    }
    return it->second;
}

bool HappensBefore::capturing(sys::Stream stream) const {
    int status = 0;
    return inner_.stream_is_capturing(stream, &status) == sys::kSuccess && status != 0;
}

void HappensBefore::work(sys::Stream stream) {
    if (capturing(stream)) return;  // captured: it runs at the replays
    std::lock_guard lock(mutex_);
    const int id = id_locked(stream);
    Clock& clock = streams_[static_cast<std::size_t>(id)];
    clock = join(clock, host_);
    ++clock[static_cast<std::size_t>(id)];
    last_[static_cast<std::size_t>(id)] = Work{id, clock[static_cast<std::size_t>(id)], clock};
}

void HappensBefore::record(sys::Event event, sys::Stream stream) {
    const bool captured = capturing(stream);
    std::lock_guard lock(mutex_);
    if (captured) {
        captured_events_.insert(event);
        return;
    }
    captured_events_.erase(event);
    const int id = id_locked(stream);
    events_[event] = join(streams_[static_cast<std::size_t>(id)], host_);
}

void HappensBefore::wait(sys::Stream stream, sys::Event event) {
    const bool captured = capturing(stream);
    std::lock_guard lock(mutex_);
    if (captured || captured_events_.count(event) != 0) return;  // a graph edge
    ++waits_;
    const int id = id_locked(stream);
    Clock& clock = streams_[static_cast<std::size_t>(id)];
    const auto it = events_.find(event);
    if (it != events_.end()) clock = join(clock, it->second);
}

void HappensBefore::host_sees(sys::Stream stream) {
    std::lock_guard lock(mutex_);
    host_ = join(host_, streams_[static_cast<std::size_t>(id_locked(stream))]);
}

void HappensBefore::host_sees(sys::Event event) {
    std::lock_guard lock(mutex_);
    const auto it = events_.find(event);
    if (it != events_.end() && captured_events_.count(event) == 0) host_ = join(host_, it->second);
}

void HappensBefore::host_sees_everything() {
    std::lock_guard lock(mutex_);
    for (const Clock& clock : streams_) host_ = join(host_, clock);
}

Work HappensBefore::last_work(sys::Stream stream) {
    std::lock_guard lock(mutex_);
    const int id = id_locked(stream);
    Work work = last_[static_cast<std::size_t>(id)];
    if (!work.valid()) work.stream = id;  // nothing yet: tick 0, which everything follows
    return work;
}

Clock HappensBefore::host() const {
    std::lock_guard lock(mutex_);
    return host_;
}

std::uint64_t HappensBefore::waits() const {
    std::lock_guard lock(mutex_);
    return waits_;
}

// ---- AccessModel ------------------------------------------------------------------------------------

std::string AccessModel::access(const Work& work, const std::vector<Access>& accesses, std::size_t* sources) {
    std::set<int> streams;
    std::string problem;
    const auto check = [&](const Work& earlier, DevicePtr unit, const char* what) {
        ++checks_;
        if (earlier.stream != work.stream) streams.insert(earlier.stream);
        if (problem.empty() && !before(earlier, work)) {
            problem = fmt::format(
                "unordered {}: bytes at {:#x}, used by stream {} (tick {}), now stream {} (tick {})", what,
                unit, earlier.stream, earlier.tick, work.stream, work.tick);
        }
    };
    for (const Access& a : accesses) {
        for (DevicePtr u = a.address / kUnit * kUnit; u < a.address + a.bytes; u += kUnit) {
            const Unit& unit = units_[u];
            for (const Work& w : unit.writes) check(w, u, a.write ? "write after write" : "read after write");
            if (a.write) {
                for (const Work& r : unit.reads) check(r, u, "write after read");
            }
        }
    }
    Work stamped = work;
    stamped.sequence = ++sequence_;
    for (const Access& a : accesses) {
        for (DevicePtr u = a.address / kUnit * kUnit; u < a.address + a.bytes; u += kUnit) {
            Unit& unit = units_[u];
            if (a.write) {
                unit.writes = {stamped};
                unit.reads.clear();
            } else {
                // Note: every read since the write stays, even one the new read follows: each is a source a
                // later write conflicts with (the bound on its waits counts them). A stream's own older read
                // is the one exception: its new read stands for it.
                std::erase_if(unit.reads, [&](const Work& r) { return r.stream == work.stream; });
                unit.reads.push_back(stamped);
            }
        }
    }
    if (sources != nullptr) *sources = streams.size();
    return problem;
}

void AccessModel::reallocated(DevicePtr address, std::size_t bytes, const Work& origin) {
    for (DevicePtr u = address / kUnit * kUnit; u < address + bytes; u += kUnit) {
        Unit& unit = units_[u];
        unit.writes.insert(unit.writes.end(), unit.reads.begin(), unit.reads.end());
        unit.reads.clear();
        unit.writes.push_back(origin);
    }
}

std::string AccessModel::complete(DevicePtr address, std::size_t bytes, const Clock& host, int owner,
                                  std::uint64_t since) const {
    Work seen;
    seen.stream = kMaxStreams;  // no stream's own: only the clock counts
    seen.clock = host;
    for (DevicePtr u = address / kUnit * kUnit; u < address + bytes; u += kUnit) {
        const auto it = units_.find(u);
        if (it == units_.end()) continue;
        for (const Work& w : it->second.writes) {
            if (w.stream != owner && w.sequence > since && !before(w, seen))
                return fmt::format("bytes at {:#x} released while stream {} may still write them", u,
                                   w.stream);
        }
        for (const Work& r : it->second.reads) {
            if (r.stream != owner && r.sequence > since && !before(r, seen))
                return fmt::format("bytes at {:#x} released while stream {} may still read them", u,
                                   r.stream);
        }
    }
    return {};
}

}  // namespace cudarc::test::model

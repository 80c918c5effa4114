#include "cudarc/device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>

#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/managed_source.hpp"
#include "core/stream_ordered_source.hpp"

namespace cudarc {
namespace detail {

namespace {
std::atomic<std::uint64_t> next_generation{1};

// DeviceOptions::memory_source when set, else CUDARC_ALLOCATOR, else the caching allocator.
cudarc::MemorySource resolve_memory_source(const DeviceOptions& options) {
    using cudarc::MemorySource;
    if (options.memory_source) return *options.memory_source;
    const char* text = std::getenv("CUDARC_ALLOCATOR");
    const std::string_view name = text != nullptr ? text : "";
    if (name.empty()) return MemorySource::caching_allocator;
    for (const MemorySource source :
         {MemorySource::caching_allocator, MemorySource::expandable, MemorySource::stream_ordered}) {
        if (name == to_string(source)) return source;
    }
    throw Error(
        fmt::format("cudarc: CUDARC_ALLOCATOR is '{}', which names no memory source: use caching_allocator, "
                    "expandable or "
                    "stream_ordered (or leave it unset for the caching allocator)",
                    name));
}

std::unique_ptr<MemorySource> make_memory_source(DeviceState& device, cudarc::MemorySource source,
                                                 const AllocatorConfig& config) {
    switch (source) {
        case cudarc::MemorySource::stream_ordered:
            return make_stream_ordered_source(device);
        case cudarc::MemorySource::caching_allocator:
            return make_caching_source(device, config);
        case cudarc::MemorySource::expandable:
            return make_expandable_source(device, config);
    }
    throw Error(
        fmt::format("cudarc: DeviceOptions::memory_source is {}, which is not a MemorySource value: use "
                    "MemorySource::caching_allocator ({}), MemorySource::stream_ordered ({}) or "
                    "MemorySource::expandable ({})",
                    static_cast<int>(source), static_cast<int>(cudarc::MemorySource::caching_allocator),
                    static_cast<int>(cudarc::MemorySource::stream_ordered),
                    static_cast<int>(cudarc::MemorySource::expandable)));
}
}  // namespace

DeviceState::DeviceState(const sys::DriverApi& api, int ordinal, const DeviceOptions& options)
    : api_(api),
      ordinal_(ordinal),
      generation_(next_generation.fetch_add(1, std::memory_order_relaxed)),
      memory_source_(resolve_memory_source(options)) {
    check(api_.device_get(&device_, ordinal), sys::Entry::device_get);
    check(api_.device_primary_ctx_retain(&context_, device_), sys::Entry::device_primary_ctx_retain);
    try {
        const ContextScope scope = bind();
        check(api_.ctx_get_stream_priority_range(&priority_low_, &priority_high_),
              sys::Entry::ctx_get_stream_priority_range);
        sys::Stream handle = nullptr;
        check(api_.stream_create_with_priority(&handle, sys::kStreamNonBlocking, 0),
              sys::Entry::stream_create_with_priority);
        std::shared_ptr<StreamState> state;
        try {
            state = std::make_shared<StreamState>(*this, handle, StreamOwnership::owned, 0);
        } catch (...) {
            // The state never owned the handle (its event could not be made): destroy it here.
            static_cast<void>(api_.stream_destroy(handle));
            throw;
        }
        default_stream_ =
            std::make_unique<Stream>(Internals::make_stream(nullptr, std::move(state), nullptr));
        memory_ = make_memory_source(*this, memory_source_, options.allocator);
    } catch (...) {
        // What the destructor does, for the parts made so far, before the members go: the pools' destroys
        // report failures into deferred_ and lost_cause_, which are destroyed before the pools are (a write
        // into them then leaked, LSan found), and they must run before the context is released.
        {
            const ContextScope scope = bind_or_defer();
            releases_.drain();
            default_stream_.reset();
            memory_.reset();
            streams_.clear();
            events_.clear();
        }
        api_.device_primary_ctx_release(device_);
        throw;
    }
}

DeviceState::~DeviceState() {
    // Note: order matters: the stream's final work must be enqueued before memory is returned, and
    // everything must go before the context is released. Nothing here may throw (a failure to bind is only
    // deferred, and nobody is left to rethrow it: the device is gone).
    {
        const ContextScope scope = bind_or_defer();
        releases_.drain();  // Note [Deferred release]: every hook runs, after the work it waits for
        default_stream_.reset();
        memory_.reset();
        managed_memory_.reset();
        streams_.clear();
        events_.clear();
    }
    static_cast<void>(api_.device_primary_ctx_release(device_));
}

MemorySource& DeviceState::managed_memory() {
    std::call_once(managed_once_, [this] { managed_memory_ = make_managed_source(*this); });
    return *managed_memory_;
}

int DeviceState::clamp_priority(int priority) const noexcept {
    // Note: CUDA's "greatest" priority is the numerically smallest value.
    return std::clamp(priority, std::min(priority_low_, priority_high_),
                      std::max(priority_low_, priority_high_));
}

ContextScope::ContextScope(const DeviceState& device, std::nothrow_t) noexcept : device_(&device) {
    sys::Context current = nullptr;
    const sys::Result query = device.api_.ctx_get_current(&current);
    if (query == sys::kSuccess && current == device.context_) return;
    try {
        enter(query, current);
    } catch (const Error& error) {
        device.defer(error);
    } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory while describing the failure
    }
}

void ContextScope::enter(sys::Result query, sys::Context current) {
    if (query != sys::kSuccess) device_->throw_error(query, sys::Entry::ctx_get_current);
    const sys::Result set = device_->api_.ctx_set_current(device_->context_);
    if (set != sys::kSuccess) device_->throw_error(set, sys::Entry::ctx_set_current);
    // Note: an empty thread keeps the device's context (see Note [Context scope]).
    if (current != nullptr) {
        previous_ = current;
        restore_ = true;
    }
}

void ContextScope::leave() noexcept {
    const sys::Result result = device_->api_.ctx_set_current(previous_);
    device_->defer(result, sys::Entry::ctx_set_current);
}

// Note [Lost devices]
// A sticky error (sys::is_sticky_error) leaves the context unusable: every later driver call fails, each
// with its own name and often with the same code. The first one seen marks the device lost and is kept;
// from then on every scope (and so every operation, since each binds first) throws DeviceLost naming that
// first error, before it reaches the driver, and the memory sources hand out nothing. Destructors still
// run their calls (no-throw, deferred) so that host resources are returned.
void DeviceState::mark_lost(const Error& cause) const noexcept {
    try {
        std::lock_guard lock(lost_mutex_);
        if (!lost_cause_) lost_cause_ = cause;
    } catch (...) {  // NOLINT(bugprone-empty-catch): the flag below still stops all further work
    }
    lost_.store(true, std::memory_order_release);
}

void DeviceState::throw_lost() const {
    std::optional<Error> cause;
    {
        std::lock_guard lock(lost_mutex_);
        cause = lost_cause_;
    }
    if (!cause) cause = Error(fmt::format("device {} hit a sticky error", ordinal_), ordinal_, api_.backend);
    throw DeviceLost(*cause);
}

void DeviceState::throw_error(sys::Result result, sys::Entry entry, std::string_view context) const {
    throw_error(sys::make_error(api_, entry, result, ordinal_, context));
}

void DeviceState::throw_error(const Error& error) const {
    if (sys::is_sticky_error(error.result())) mark_lost(error);
    if (lost()) throw_lost();
    throw error;
}

void DeviceState::rethrow_current() const {
    try {
        throw;
    } catch (const DeviceLost&) {
        throw;
    } catch (const Error& error) {
        if (sys::is_sticky_error(error.result())) mark_lost(error);
        if (lost()) throw_lost();
        throw;
    }
}

void DeviceState::defer(sys::Result result, sys::Entry entry) const noexcept {
    if (result == sys::kSuccess) return;
    try {
        defer(sys::make_error(api_, entry, result, ordinal_));
    } catch (...) {
        // Out of memory while recording an error: nothing better to do than drop it.
    }
}

void DeviceState::defer(const Error& error) const noexcept {
    if (sys::is_sticky_error(error.result())) mark_lost(error);
    try {
        std::lock_guard lock(deferred_mutex_);
        if (!deferred_) deferred_ = error;
    } catch (...) {
    }
}

void DeviceState::synchronize_noexcept() noexcept {
    const ContextScope scope = bind_or_defer();
    defer(api_.ctx_synchronize(), sys::Entry::ctx_synchronize);
    AtomicCounters::bump(counters_.context_synchronizes);
}

void DeviceState::rethrow_deferred_error() {
    std::optional<Error> error;
    {
        std::lock_guard lock(deferred_mutex_);
        error.swap(deferred_);
    }
    // Note [Lost devices]: a sticky error that only a destructor met (a context put back at the end of a
    // scope, say) is reported as what it is, the device lost.
    if (error && sys::is_sticky_error(error->result())) throw_lost();
    if (error) throw *error;
}

const std::shared_ptr<StreamState>& DeviceState::default_stream_state() const noexcept {
    return detail::Internals::shared_stream_state(*default_stream_);
}

sys::Event DeviceState::record_event(sys::Stream stream) {
    sys::Event event = events_.acquire();
    const sys::Result r = api_.event_record(event, stream);
    if (r != sys::kSuccess) {
        events_.release(event);
        check(r, sys::Entry::event_record);
    }
    AtomicCounters::bump(counters_.events_recorded);
    return event;
}

void DeviceState::record_into(sys::Event event, sys::Stream stream) {
    check(api_.event_record(event, stream), sys::Entry::event_record);
    AtomicCounters::bump(counters_.events_recorded);
}

void DeviceState::wait_event(sys::Stream waiter, sys::Event event) {
    check(api_.stream_wait_event(waiter, event, 0), sys::Entry::stream_wait_event);
    AtomicCounters::bump(counters_.cross_stream_waits);
}

std::shared_ptr<DeviceState> DeviceState::open(int ordinal, const DeviceOptions& options) {
    const sys::DriverApi& api = sys::driver();
    int count = 0;
    sys::check(api, api.device_get_count(&count), sys::Entry::device_get_count);
    if (ordinal < 0 || ordinal >= count) {
        throw Error(
            fmt::format("cudarc: device ordinal {} is out of range: {} {} device(s) visible (valid: 0..{})",
                        ordinal, count, to_string(api.backend), count - 1));
    }
    // Note: one state per ordinal, shared by every handle, so counters and the allocator are per device.
    static std::mutex registry_mutex;
    static std::map<int, std::weak_ptr<DeviceState>> registry;
    std::lock_guard lock(registry_mutex);
    if (auto existing = registry[ordinal].lock()) return existing;
    auto state = std::make_shared<DeviceState>(api, ordinal, options);
    registry[ordinal] = state;
    return state;
}

}  // namespace detail

using detail::DeviceState;

int Device::count() {
    const sys::DriverApi& api = sys::driver();
    int count = 0;
    sys::check(api, api.device_get_count(&count), sys::Entry::device_get_count);
    return count;
}

bool Device::available() noexcept {
    try {
        return count() > 0;
    } catch (...) {
        return false;
    }
}

int Device::driver_version() {
    const sys::DriverApi& api = sys::driver();
    int version = 0;
    sys::check(api, api.driver_get_version(&version), sys::Entry::driver_get_version);
    return version;
}

Device Device::open(int ordinal, const DeviceOptions& options) {
    return Device(DeviceState::open(ordinal, options));
}

Device::Device(std::shared_ptr<detail::DeviceState> state) noexcept : state_(std::move(state)) {}
Device::~Device() = default;

int Device::ordinal() const noexcept {
    return state_->ordinal();
}
Backend Device::backend() const noexcept {
    return state_->api().backend;
}

std::string Device::name() const {
    char name[256] = {};
    state_->check(state_->api().device_get_name(name, static_cast<int>(sizeof(name) - 1), state_->device()),
                  sys::Entry::device_get_name);
    return name;
}

std::array<unsigned char, 16> Device::uuid() const {
    sys::Uuid raw{};
    state_->check(state_->api().device_get_uuid(&raw, state_->device()), sys::Entry::device_get_uuid);
    std::array<unsigned char, 16> out{};
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<unsigned char>(raw.bytes[i]);
    return out;
}

std::string Device::uuid_string() const {
    const auto u = uuid();
    std::string out = "GPU-";
    for (std::size_t i = 0; i < u.size(); ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
        out += fmt::format("{:02x}", u[i]);
    }
    return out;
}

std::string Device::pci_bus_id() const {
    char id[64] = {};
    state_->check(state_->api().device_get_pci_bus_id(id, static_cast<int>(sizeof(id) - 1), state_->device()),
                  sys::Entry::device_get_pci_bus_id);
    return id;
}

int Device::attribute(int cu_device_attribute) const {
    int value = 0;
    state_->check(state_->api().device_get_attribute(&value, cu_device_attribute, state_->device()),
                  sys::Entry::device_get_attribute);
    return value;
}

bool Device::supports_managed_memory() const {
    return detail::supports_managed_memory(*state_);
}

ComputeCapability Device::compute_capability() const {
    return {attribute(sys::attr::kComputeCapabilityMajor), attribute(sys::attr::kComputeCapabilityMinor)};
}

std::string Device::arch() const {
    if (backend() == Backend::hip) return sys::hip_device_offload_arch(ordinal());
    const auto cc = compute_capability();
    return fmt::format("sm_{}{}", cc.major, cc.minor);
}

int Device::multiprocessor_count() const {
    return attribute(sys::attr::kMultiprocessorCount);
}

std::size_t Device::total_memory() const {
    std::size_t bytes = 0;
    state_->check(state_->api().device_total_mem(&bytes, state_->device()), sys::Entry::device_total_mem);
    return bytes;
}

MemoryInfo Device::memory_info() const {
    const detail::ContextScope scope = state_->bind();
    MemoryInfo info;
    state_->check(state_->api().mem_get_info(&info.free, &info.total), sys::Entry::mem_get_info);
    return info;
}

Stream& Device::default_stream() const noexcept {
    return state_->default_stream();
}

void Device::synchronize() const {
    detail::refuse_in_capture("Device::synchronize",
                              "it would wait for work the capture records without running");
    // Note [Deferred release]: hooks run in the caller's own context, after the wait, and also when it
    // failed: on a lost device the poll runs every hook (its events can never complete), which would
    // otherwise wait for the device's teardown, and a hook may be what keeps the device open.
    const detail::PollReleasesOnExit poll(*state_);
    const detail::ContextScope scope = state_->bind();
    state_->check(state_->api().ctx_synchronize(), sys::Entry::ctx_synchronize);
    detail::AtomicCounters::bump(state_->counters().context_synchronizes);
}

Counters Device::counters() const noexcept {
    return state_->counters().snapshot();
}

void Device::rethrow_deferred_error() const {
    state_->rethrow_deferred_error();
}

bool Device::lost() const noexcept {
    return state_->lost();
}

MemorySource Device::memory_source() const noexcept {
    return state_->memory_source();
}

AllocatorStats Device::allocator_stats() const {
    return state_->memory().stats();
}

AllocatorSnapshot Device::allocator_snapshot() const {
    return state_->memory().snapshot();
}

void Device::record_memory_history(std::size_t max_entries) const {
    state_->memory().record_history(max_entries);
}

void Device::reset_peak_memory() const {
    state_->memory().reset_peak();
}

void Device::empty_cache() const {
    const detail::ContextScope scope = state_->bind();
    state_->memory().empty_cache();
}

}  // namespace cudarc

#include "cudarc/device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "core/caching_source.hpp"
#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/managed_source.hpp"
#include "core/stream_ordered_source.hpp"
#include "sys/hip/hip_runtime_loader.hpp"

namespace cudarc {
namespace detail {

thread_local DeviceState::ThreadBinding DeviceState::current_{};

namespace {
std::atomic<std::uint64_t> next_generation{1};

std::unique_ptr<MemoryResource> make_memory_source(DeviceState& device, const DeviceOptions& options) {
    switch (options.memory_source) {
        case cudarc::MemorySource::stream_ordered:
            return make_stream_ordered_source(device);
        case cudarc::MemorySource::caching_allocator:
            return make_caching_source(device, options.allocator);
    }
    throw Error("cudarc: unknown MemorySource value");
}
}  // namespace

DeviceState::DeviceState(const sys::DriverApi& api, int ordinal, const DeviceOptions& options)
    : api_(api),
      ordinal_(ordinal),
      generation_(next_generation.fetch_add(1, std::memory_order_relaxed)),
      memory_source_(options.memory_source) {
    check(api_.device_get(&device_, ordinal), "cuDeviceGet");
    check(api_.device_primary_ctx_retain(&context_, device_), "cuDevicePrimaryCtxRetain");
    try {
        bind();
        check(api_.ctx_get_stream_priority_range(&priority_low_, &priority_high_),
              "cuCtxGetStreamPriorityRange");
        sys::Stream handle = nullptr;
        check(api_.stream_create_with_priority(&handle, sys::kStreamNonBlocking, 0),
              "cuStreamCreateWithPriority");
        auto state = std::make_shared<StreamState>(*this, handle, StreamOwnership::owned, 0);
        default_stream_ = std::make_unique<Stream>(nullptr, std::move(state), nullptr);
        memory_ = make_memory_source(*this, options);
    } catch (...) {
        default_stream_.reset();
        api_.device_primary_ctx_release(device_);
        throw;
    }
}

DeviceState::~DeviceState() {
    // Note: order matters: the stream's final work must be enqueued before memory is returned, and
    // everything must go before the context is released.
    bind();
    releases_.drain();  // Note [Deferred release]: every hook runs, after the work it waits for
    default_stream_.reset();
    memory_.reset();
    managed_memory_.reset();
    streams_.clear();
    events_.clear();
    if (const sys::Result r = api_.device_primary_ctx_release(device_); r != sys::kSuccess) {
        // Nothing left to defer to: the device is gone.
        (void)r;
    }
    if (current_.context == context_) current_ = {};
}

MemoryResource& DeviceState::managed_memory() {
    std::call_once(managed_once_, [this] { managed_memory_ = make_managed_source(*this); });
    return *managed_memory_;
}

int DeviceState::clamp_priority(int priority) const noexcept {
    // Note: CUDA's "greatest" priority is the numerically smallest value.
    return std::clamp(priority, std::min(priority_low_, priority_high_),
                      std::max(priority_low_, priority_high_));
}

void DeviceState::bind_slow() const {
    check(api_.ctx_set_current(context_), "cuCtxSetCurrent");
    current_ = {context_, generation_};
}

void DeviceState::defer(sys::Result result, const char* call) noexcept {
    if (result == sys::kSuccess) return;
    try {
        std::lock_guard lock(deferred_mutex_);
        if (!deferred_) deferred_ = sys::make_error(api_, call, result, ordinal_);
    } catch (...) {
        // Out of memory while recording an error: nothing better to do than drop it.
    }
}

void DeviceState::defer(const Error& error) noexcept {
    try {
        std::lock_guard lock(deferred_mutex_);
        if (!deferred_) deferred_ = error;
    } catch (...) {
    }
}

void DeviceState::synchronize_noexcept() noexcept {
    bind_noexcept();
    defer(api_.ctx_synchronize(), "cuCtxSynchronize");
    AtomicCounters::bump(counters_.context_synchronizes);
}

void DeviceState::rethrow_deferred_error() {
    std::optional<Error> error;
    {
        std::lock_guard lock(deferred_mutex_);
        error.swap(deferred_);
    }
    if (error) throw *error;
}

const std::shared_ptr<StreamState>& DeviceState::default_stream_state() const noexcept {
    return default_stream_->shared_state();
}

sys::Event DeviceState::record_event(sys::Stream stream) {
    sys::Event event = events_.acquire();
    const sys::Result r = api_.event_record(event, stream);
    if (r != sys::kSuccess) {
        events_.release(event);
        check(r, "cuEventRecord");
    }
    AtomicCounters::bump(counters_.events_recorded);
    return event;
}

void DeviceState::record_into(sys::Event event, sys::Stream stream) {
    check(api_.event_record(event, stream), "cuEventRecord");
    AtomicCounters::bump(counters_.events_recorded);
}

void DeviceState::wait_event(sys::Stream waiter, sys::Event event) {
    check(api_.stream_wait_event(waiter, event, 0), "cuStreamWaitEvent");
    AtomicCounters::bump(counters_.cross_stream_waits);
}

std::shared_ptr<DeviceState> DeviceState::open(int ordinal, const DeviceOptions& options) {
    const sys::DriverApi& api = sys::driver();
    int count = 0;
    sys::check(api, api.device_get_count(&count), "cuDeviceGetCount");
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
    sys::check(api, api.device_get_count(&count), "cuDeviceGetCount");
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
    sys::check(api, api.driver_get_version(&version), "cuDriverGetVersion");
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
                  "cuDeviceGetName");
    return name;
}

std::array<unsigned char, 16> Device::uuid() const {
    sys::Uuid raw{};
    state_->check(state_->api().device_get_uuid(&raw, state_->device()), "cuDeviceGetUuid");
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
                  "cuDeviceGetPCIBusId");
    return id;
}

int Device::attribute(int cu_device_attribute) const {
    int value = 0;
    state_->check(state_->api().device_get_attribute(&value, cu_device_attribute, state_->device()),
                  "cuDeviceGetAttribute");
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
    state_->check(state_->api().device_total_mem(&bytes, state_->device()), "cuDeviceTotalMem");
    return bytes;
}

MemoryInfo Device::memory_info() const {
    state_->bind();
    MemoryInfo info;
    state_->check(state_->api().mem_get_info(&info.free, &info.total), "cuMemGetInfo");
    return info;
}

Stream& Device::default_stream() const noexcept {
    return state_->default_stream();
}

void Device::synchronize() const {
    detail::refuse_in_capture("Device::synchronize",
                              "it would wait for work the capture records without running");
    state_->bind();
    state_->check(state_->api().ctx_synchronize(), "cuCtxSynchronize");
    detail::AtomicCounters::bump(state_->counters().context_synchronizes);
    state_->releases().poll();  // Note [Deferred release]
}

Counters Device::counters() const noexcept {
    return state_->counters().snapshot();
}

void Device::rethrow_deferred_error() const {
    state_->rethrow_deferred_error();
}

MemorySource Device::memory_source() const noexcept {
    return state_->memory_source();
}

namespace {
alloc::CachingAllocator* caching_allocator(detail::DeviceState& state) {
    auto* caching = dynamic_cast<detail::CachingResource*>(&state.memory());
    return caching != nullptr ? &caching->allocator() : nullptr;
}
}  // namespace

AllocatorStats Device::allocator_stats() const {
    auto* allocator = caching_allocator(*state_);
    return allocator != nullptr ? allocator->stats() : AllocatorStats{};
}

AllocatorSnapshot Device::allocator_snapshot() const {
    auto* allocator = caching_allocator(*state_);
    return allocator != nullptr ? allocator->snapshot() : AllocatorSnapshot{};
}

void Device::reset_peak_memory() const {
    if (auto* allocator = caching_allocator(*state_)) allocator->reset_peak();
}

void Device::empty_cache() const {
    state_->bind();
    state_->memory().empty_cache();
}

}  // namespace cudarc

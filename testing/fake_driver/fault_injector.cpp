#include "fake_driver/fault_injector.hpp"

#include <cstdio>
#include <cstdlib>

#include "sys/driver_override.hpp"

namespace cudarc::fake {
namespace {

std::atomic<FaultInjector*> g_injector{nullptr};

// One wrapper per entry: count, maybe fail, else forward to the wrapped table.
template <auto Member, Entry E>
struct Wrapper;

template <typename... Args, sys::Result (*sys::DriverApi::*Member)(Args...), Entry E>
struct Wrapper<Member, E> {
    static sys::Result call(Args... args) {
        FaultInjector* injector = g_injector.load(std::memory_order_acquire);
        if (const sys::Result injected = injector->before_call(E); injected != sys::kSuccess) return injected;
        return (injector->inner().*Member)(args...);
    }
};

}  // namespace

const char* cuda_name(Entry entry) noexcept {
    switch (entry) {
#define CUDARC_FAKE_ENTRY_NAME(member, name, ...) \
    case Entry::member:                           \
        return name;
        CUDARC_DRIVER_ENTRIES(CUDARC_FAKE_ENTRY_NAME)
#undef CUDARC_FAKE_ENTRY_NAME
    }
    return "?";
}

const std::array<Entry, kEntryCount>& all_entries() noexcept {
    static const std::array<Entry, kEntryCount> entries{
#define CUDARC_FAKE_ENTRY_LIST(member, name, ...) Entry::member,
        CUDARC_DRIVER_ENTRIES(CUDARC_FAKE_ENTRY_LIST)
#undef CUDARC_FAKE_ENTRY_LIST
    };
    return entries;
}

bool survives_sticky_error(Entry entry) noexcept {
    switch (entry) {
        case Entry::get_error_name:
        case Entry::get_error_string:
        case Entry::driver_get_version:
        case Entry::device_get_count:
        case Entry::device_get:
        case Entry::device_get_name:
        case Entry::device_get_uuid:
        case Entry::device_total_mem:
        case Entry::device_get_attribute:
        case Entry::device_get_pci_bus_id:
        case Entry::device_primary_ctx_release:
        case Entry::device_can_access_peer:
        case Entry::ctx_get_current:
        case Entry::ctx_set_current:
            return true;
        default:
            return false;
    }
}

DriverOverride::DriverOverride(const sys::DriverApi& api) noexcept
    : previous_(sys::set_driver_override(&api)) {}

DriverOverride::~DriverOverride() {
    static_cast<void>(sys::set_driver_override(previous_));
}

FaultInjector::FaultInjector(const sys::DriverApi& inner) : inner_(inner), wrapped_(inner) {
    FaultInjector* expected = nullptr;
    if (!g_injector.compare_exchange_strong(expected, this)) {
        std::fputs("cudarc::fake::FaultInjector: only one may exist at a time\n", stderr);
        std::abort();
    }
    // Wrap every entry the inner table has; a missing one stays missing.
#define CUDARC_FAKE_WRAP(member, name, ...) \
    if (inner_.member != nullptr) wrapped_.member = &Wrapper<&sys::DriverApi::member, Entry::member>::call;
    CUDARC_DRIVER_ENTRIES(CUDARC_FAKE_WRAP)
#undef CUDARC_FAKE_WRAP
}

FaultInjector::~FaultInjector() {
    g_injector.store(nullptr, std::memory_order_release);
}

void FaultInjector::fail_nth(Entry entry, std::uint64_t nth, sys::Result result, std::uint64_t count) {
    if (nth == 0 || count == 0 || result == sys::kSuccess) return;
    std::lock_guard lock(mutex_);
    const std::uint64_t first = calls(entry) + nth;
    const std::uint64_t last = count == kForever || first > kForever - count ? kForever : first + count - 1;
    plans_.push_back(Plan{entry, first, last, result, false});
    armed_.store(true, std::memory_order_release);
}

void FaultInjector::fail_sticky(Entry entry, std::uint64_t nth, sys::Result result) {
    if (nth == 0 || result == sys::kSuccess) return;
    std::lock_guard lock(mutex_);
    const std::uint64_t first = calls(entry) + nth;
    plans_.push_back(Plan{entry, first, first, result, true});
    armed_.store(true, std::memory_order_release);
}

void FaultInjector::clear() noexcept {
    std::lock_guard lock(mutex_);
    plans_.clear();
    sticky_ = sys::kSuccess;
    armed_.store(false, std::memory_order_release);
}

std::uint64_t FaultInjector::calls(Entry entry) const noexcept {
    return calls_[static_cast<std::size_t>(entry)].load(std::memory_order_relaxed);
}

std::array<std::uint64_t, kEntryCount> FaultInjector::call_counts() const noexcept {
    std::array<std::uint64_t, kEntryCount> out{};
    for (std::size_t i = 0; i < kEntryCount; ++i) out[i] = calls_[i].load(std::memory_order_relaxed);
    return out;
}

std::vector<FaultInjector::Fired> FaultInjector::fired() const {
    std::lock_guard lock(mutex_);
    return fired_;
}

sys::Result FaultInjector::before_call(Entry entry) noexcept {
    const std::uint64_t call =
        calls_[static_cast<std::size_t>(entry)].fetch_add(1, std::memory_order_relaxed) + 1;
    if (!armed_.load(std::memory_order_acquire)) return sys::kSuccess;
    std::lock_guard lock(mutex_);
    for (const Plan& plan : plans_) {
        if (plan.entry != entry || call < plan.first || call > plan.last) continue;
        if (plan.sticky) sticky_ = plan.result;
        try {
            fired_.push_back(Fired{entry, call, plan.result});
        } catch (...) {  // NOLINT(bugprone-empty-catch): the log is best effort, the failure is not
        }
        return plan.result;
    }
    if (sticky_ != sys::kSuccess && !survives_sticky_error(entry)) return sticky_;
    return sys::kSuccess;
}

}  // namespace cudarc::fake

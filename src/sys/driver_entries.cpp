// The facts of Note [One driver list] as data, and the names errors report from them.
#include <array>

#include "sys/backend_function_name.hpp"
#include "sys/driver_api.hpp"

namespace cudarc::sys {
namespace {

constexpr std::array kEntries = {
#define CUDARC_SYS_DRIVER_INFO(field, cuda_name, hip_name, need, min_version, ...) \
    EntryInfo{Entry::field, cuda_name, hip_name, EntryNeed::need, min_version},
    CUDARC_SYS_DRIVER_ENTRIES(CUDARC_SYS_DRIVER_INFO)
#undef CUDARC_SYS_DRIVER_INFO
};

// Entry's values are the list's positions.
static_assert([] {
    for (std::size_t i = 0; i < kEntries.size(); ++i) {
        if (static_cast<std::size_t>(kEntries[i].entry) != i) return false;
    }
    return true;
}());

bool is_identifier_char(char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

std::span<const EntryInfo> driver_entries() noexcept {
    return kEntries;
}

const char* entry_name(Backend backend, Entry entry) noexcept {
    const EntryInfo& info = kEntries[static_cast<std::size_t>(entry)];
    if (backend == Backend::hip && info.hip_name != nullptr) return info.hip_name;
    return info.cuda_name;
}

std::string backend_function_name(Backend backend, std::string_view call) {
    if (backend != Backend::hip) return std::string(call);
    std::size_t end = 0;
    while (end < call.size() && is_identifier_char(call[end])) ++end;
    const std::string_view name = call.substr(0, end);
    for (const EntryInfo& info : kEntries) {
        if (name == info.cuda_name && info.hip_name != nullptr)
            return std::string(info.hip_name) + std::string(call.substr(end));
    }
    return std::string(call);
}

}  // namespace cudarc::sys

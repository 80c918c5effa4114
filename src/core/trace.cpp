// Note [Tracing waits] (core/trace.hpp).
#include "core/trace.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#include "core/device_state.hpp"
#include "core/profiler.hpp"
#include "core/timeline.hpp"

namespace cudarc::detail {

namespace {
bool wanted(const char* value) noexcept {
    if (value == nullptr) return false;
    std::string_view list(value);
    while (!list.empty()) {
        const std::size_t comma = list.find(',');
        if (list.substr(0, comma) == "waits" || list.substr(0, comma) == "all") return true;
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
    }
    return false;
}

std::FILE* g_sink = nullptr;

std::FILE* sink() noexcept {
    return g_sink != nullptr ? g_sink : stderr;
}

const void* stream_of(const Timeline& timeline) noexcept {
    return static_cast<const void*>(timeline.stream().handle());
}

std::string position_text(std::uint64_t position) {
    if (position == kEverythingSoFar) return "everything so far";
    if (position == kOwnersWork) return "the owner's work";
    if (position == kTrackedSoFar) return "its work so far";
    return fmt::format("position {}", position);
}
}  // namespace

bool g_trace_waits = wanted(std::getenv("CUDARC_TRACE"));  // NOLINT(cert-err58-cpp): never throws

bool profiler_attached() noexcept {
    static const bool attached = std::getenv("NVTX_INJECTION64_PATH") != nullptr;
    return attached;
}

void set_trace_waits(bool on, std::FILE* out) noexcept {
    g_trace_waits = on;
    g_sink = out;
}

void trace_wait(const Timeline& waiter, const Timeline& source, std::uint64_t position, DevicePtr address,
                std::size_t offset, std::size_t bytes, const char* reason) noexcept {
    try {
        fmt::print(
            sink(),
            "cudarc trace: wait: stream {}{} waits for stream {} ({}): buffer {:#x} bytes [{}, {}) {}\n",
            stream_of(waiter), waiter.capture() != nullptr ? " (captured)" : "", stream_of(source),
            position_text(position), address, offset, offset + bytes, reason);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a log line is not worth an error
    }
}

void trace_event(const Timeline& timeline, std::uint64_t position) noexcept {
    try {
        fmt::print(sink(), "cudarc trace: event: stream {}{} after {} (a buffer it used is shared)\n",
                   stream_of(timeline), timeline.capture() != nullptr ? " (captured)" : "",
                   position_text(position));
    } catch (...) {  // NOLINT(bugprone-empty-catch): a log line is not worth an error
    }
}

void trace_free(DevicePtr address, std::size_t bytes, const Timeline& source,
                std::uint64_t position) noexcept {
    try {
        fmt::print(sink(), "cudarc trace: free: buffer {:#x} ({} bytes) after stream {} ({})\n", address,
                   bytes, stream_of(source), position_text(position));
    } catch (...) {  // NOLINT(bugprone-empty-catch): a log line is not worth an error
    }
}

}  // namespace cudarc::detail

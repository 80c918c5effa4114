// CUDARC_TRACE=waits: a log line for each cross-stream wait and event that hazard tracking inserts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "cudarc/detail/native_handles.hpp"

namespace cudarc::detail {

class Timeline;

// Note [Tracing waits]
// ~~~~~~~~~~~~~~~~~~~~
// "Why is my batch serialized?" With CUDARC_TRACE=waits in the environment (a comma-separated list; read
// once, when the library loads), every tracked operation that must wait for another stream logs, before
// its waits, one line per buffer range and source stream: the buffer's address, the byte range, the waiting
// stream, the stream waited for and its position, and the reason: RAW (a read after that stream's write),
// WAW (a write after its write), WAR (a write after its read). Each event recorded after an operation that
// leaves a buffer shared logs a line, and so does each use a free orders after ("free"). Lines go to
// stderr. Off, the cost is one branch on a flag cached at load (cudarc-bench pipeline's trace row shows it).
// A line names a need that the waiting stream's clock has not seen; the operation then enqueues at most
// one wait per source stream for all of them (Note [Cross-stream ordering]).
extern bool g_trace_waits;

[[nodiscard]] inline bool trace_waits() noexcept {
    return g_trace_waits;
}
// For tests and benchmarks: turns the trace on or off and sends it to `sink` (null: stderr). Not thread-safe.
void set_trace_waits(bool on, std::FILE* sink = nullptr) noexcept;

void trace_wait(const Timeline& waiter, const Timeline& source, std::uint64_t position, DevicePtr address,
                std::size_t offset, std::size_t bytes, const char* reason) noexcept;
void trace_event(const Timeline& timeline, std::uint64_t position) noexcept;
void trace_free(DevicePtr address, std::size_t bytes, const Timeline& source,
                std::uint64_t position) noexcept;

}  // namespace cudarc::detail

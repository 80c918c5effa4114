// AllocatorSnapshot as JSON: the format tools/plot-memory reads (docs/allocator.md, "Snapshots as JSON").
#include <fmt/format.h>

#include <iterator>
#include <string>

#include "cudarc/allocator.hpp"

namespace cudarc {
namespace {

// Snake-case names for JSON ("awaiting_events"), where to_string gives words ("awaiting events").
const char* json_name(AllocatorSnapshot::BlockState state) noexcept {
    switch (state) {
        case AllocatorSnapshot::BlockState::allocated:
            return "allocated";
        case AllocatorSnapshot::BlockState::awaiting_events:
            return "awaiting_events";
        case AllocatorSnapshot::BlockState::held_for_graph:
            return "held_for_graph";
        case AllocatorSnapshot::BlockState::free:
            return "free";
        case AllocatorSnapshot::BlockState::unmapped:
            return "unmapped";
    }
    return "unknown";
}

// The source names are fixed words; anything else is escaped all the same.
void append_string(std::string& out, const std::string& text) {
    out += '"';
    for (const char c : text) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
        } else {
            out += c;
        }
    }
    out += '"';
}

}  // namespace

const char* to_string(AllocatorSnapshot::Event::Action action) noexcept {
    switch (action) {
        case AllocatorSnapshot::Event::Action::allocate:
            return "allocate";
        case AllocatorSnapshot::Event::Action::free:
            return "free";
        case AllocatorSnapshot::Event::Action::segment_allocate:
            return "segment_allocate";
        case AllocatorSnapshot::Event::Action::segment_free:
            return "segment_free";
        case AllocatorSnapshot::Event::Action::map:
            return "map";
        case AllocatorSnapshot::Event::Action::unmap:
            return "unmap";
    }
    return "unknown";
}

std::string to_json(const AllocatorSnapshot& snapshot) {
    std::string out = R"({"format":"cudarc-allocator-snapshot","version":1,"source":)";
    append_string(out, snapshot.source);
    auto to = std::back_inserter(out);
    out += R"(,"segments":[)";
    for (std::size_t i = 0; i < snapshot.segments.size(); ++i) {
        const AllocatorSnapshot::Segment& s = snapshot.segments[i];
        fmt::format_to(
            to,
            R"({}{{"address":{},"size":{},"stream":{},"pool":"{}","expandable":{},"mapped_bytes":{},)"
            R"("blocks":[)",
            i == 0 ? "" : ",", s.address, s.size, s.stream, s.small_pool ? "small" : "large", s.expandable,
            s.mapped_bytes);
        for (std::size_t j = 0; j < s.blocks.size(); ++j) {
            const AllocatorSnapshot::Block& b = s.blocks[j];
            fmt::format_to(to, R"({}{{"address":{},"size":{},"stream":{},"state":"{}"}})", j == 0 ? "" : ",",
                           b.address, b.size, b.stream, json_name(b.state));
        }
        out += "]}";
    }
    out += R"(],"timeline":[)";
    for (std::size_t i = 0; i < snapshot.timeline.size(); ++i) {
        const AllocatorSnapshot::Event& e = snapshot.timeline[i];
        fmt::format_to(to,
                       R"({}{{"time_ns":{},"action":"{}","address":{},"size":{},"stream":{},)"
                       R"("allocated_bytes":{},"reserved_bytes":{}}})",
                       i == 0 ? "" : ",", e.time_ns, to_string(e.action), e.address, e.size, e.stream,
                       e.allocated_bytes, e.reserved_bytes);
    }
    out += "]}\n";
    return out;
}

}  // namespace cudarc

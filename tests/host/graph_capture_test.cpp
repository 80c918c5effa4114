// Graph capture over a model of the driver's capture rules (graph_capture_model.hpp): multi-stream capture,
// replays that hazard tracking and the allocator see, illegal work refused before the driver sees it,
// update. Note [Capture overlay] in src/core/capture.hpp has the design.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/buffer.hpp"
#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "core/range_table.hpp"
#include "cudarc/cudarc.hpp"
#include "graph_capture_model.hpp"

using namespace cudarc;
namespace model = cudarc::test::capture_model;

namespace {

Device model_device() {
    model::reset();
    return detail::Internals::make_device(
        std::make_shared<detail::DeviceState>(model::api(), 0, DeviceOptions{}));
}

std::string joined(const std::vector<std::string>& lines) {
    std::string out;
    for (const auto& line : lines) out += line + "; ";
    return out;
}

#define CHECK_NO_VIOLATIONS() CHECK_MESSAGE(model::violations().empty(), joined(model::violations()))

std::vector<std::uint32_t> words(const DeviceSlice<std::uint32_t>& slice, Stream& stream) {
    return slice.to_vector(stream);
}

bool all_equal(const std::vector<std::uint32_t>& v, std::uint32_t value) {
    return std::all_of(v.begin(), v.end(), [&](std::uint32_t x) { return x == value; });
}

// memset's byte value as the 32-bit word it makes.
constexpr std::uint32_t word(unsigned char byte) {
    return byte * 0x01010101u;
}

std::vector<int> nodes_of_kind(const std::vector<model::Node>& graph, const std::string& kind) {
    std::vector<int> out;
    for (const auto& n : graph) {
        if (n.kind == kind) out.push_back(n.id);
    }
    return out;
}

}  // namespace

TEST_CASE("graph.touched_ranges_of_an_access_set") {
    detail::AccessSet touched;
    CHECK(touched.ranges().empty());
    touched.add(10, 20, detail::Access::read);
    touched.add(20, 30, detail::Access::read);
    touched.add(25, 40, detail::Access::write);
    touched.add(60, 70, detail::Access::read);
    const auto ranges = touched.ranges();
    REQUIRE(ranges.size() == 3);
    CHECK(ranges[0].begin == 10);
    CHECK(ranges[0].end == 25);
    CHECK(ranges[0].access == detail::Access::read);
    CHECK(ranges[1].begin == 25);
    CHECK(ranges[1].end == 40);
    CHECK(ranges[1].access == detail::Access::write);
    CHECK(ranges[2].begin == 60);
    CHECK(ranges[2].end == 70);
    // A read after a write by the captured work leaves the range written.
    touched.add(30, 35, detail::Access::read);
    CHECK(touched.ranges()[1].access == detail::Access::write);
    // A write over a gap and parts of two ranges joins them where the accesses agree.
    touched.add(35, 65, detail::Access::write);
    REQUIRE(touched.ranges().size() == 3);
    CHECK(touched.ranges()[1].begin == 25);
    CHECK(touched.ranges()[1].end == 65);
    CHECK(touched.ranges()[2].begin == 65);
    CHECK(touched.ranges()[2].access == detail::Access::read);
}

TEST_CASE("graph.access_set_matches_a_byte_model") {
    std::mt19937 rng(12345);
    for (int round = 0; round < 200; ++round) {
        detail::AccessSet set;
        std::vector<int> model(64, 0);  // 0 untouched, 1 read, 2 written
        for (int i = 0; i < 20; ++i) {
            const auto a = static_cast<std::size_t>(rng() % 64);
            const auto b = static_cast<std::size_t>(rng() % 64);
            const std::size_t begin = std::min(a, b);
            const std::size_t end = std::max(a, b) + 1;
            const bool write = rng() % 3 == 0;
            set.add(begin, end, write ? detail::Access::write : detail::Access::read);
            for (std::size_t k = begin; k < end; ++k) model[k] = std::max(model[k], write ? 2 : 1);
        }
        std::vector<int> got(64, 0);
        std::size_t last_end = 0;
        for (const auto& r : set.ranges()) {
            REQUIRE(r.begin >= last_end);
            REQUIRE(r.begin < r.end);
            for (std::size_t k = r.begin; k < r.end; ++k) got[k] = r.access == detail::Access::write ? 2 : 1;
            last_end = r.end;
        }
        REQUIRE(got == model);
    }
}

TEST_CASE("graph.model_fork_join_inside_capture_becomes_edges_and_leaves_no_captured_event") {
    auto device = model_device();
    auto origin = device.create_stream();
    constexpr std::size_t kChildren = 4;
    constexpr std::size_t kItem = 1024;
    auto batch = DeviceSlice<std::uint32_t>::zeros(origin, kChildren * kItem);
    auto total = DeviceSlice<std::uint32_t>::zeros(origin, kChildren * kItem);
    std::vector<int> child_ids;

    auto graph = capture(origin, [&](Stream& s) {
        std::vector<Stream> children;
        for (std::size_t k = 0; k < kChildren; ++k) children.push_back(s.fork());
        for (std::size_t k = 0; k < kChildren; ++k) {
            child_ids.push_back(model::stream_id(children[k].native()));
            memset(children[k], batch.view(k * kItem, kItem), static_cast<unsigned char>(k + 1));
        }
        // The children are destroyed here: each joins the origin.
    });
    CHECK_NO_VIOLATIONS();
    // Nothing ran.
    CHECK(all_equal(words(batch, origin), 0));

    // The children's fills depend on none of each other, and a later capture's read of the batch on the
    // origin follows all of them.
    auto nodes = model::last_graph();
    const auto fills = nodes_of_kind(nodes, "memset");
    REQUIRE(fills.size() == kChildren);
    for (int a : fills) {
        for (int b : fills) CHECK_FALSE(model::precedes(nodes, a, b));
    }
    std::vector<int> streams;
    for (int f : fills) streams.push_back(nodes[static_cast<std::size_t>(f)].stream);
    std::sort(streams.begin(), streams.end());
    std::sort(child_ids.begin(), child_ids.end());
    CHECK(streams == child_ids);

    // The graph writes the whole batch (the four items coalesce into one range) and nothing else.
    const auto accesses = graph.accesses();
    REQUIRE(accesses.size() == 1);
    CHECK(accesses[0].address == batch.device_ptr());
    CHECK(accesses[0].bytes == batch.size() * sizeof(std::uint32_t));
    CHECK(accesses[0].writes);

    graph.launch(origin);
    const auto got = words(batch, origin);
    for (std::size_t k = 0; k < kChildren; ++k) {
        CHECK(std::all_of(got.begin() + static_cast<std::ptrdiff_t>(k * kItem),
                          got.begin() + static_cast<std::ptrdiff_t>((k + 1) * kItem),
                          [&](std::uint32_t x) { return x == word(static_cast<unsigned char>(k + 1)); }));
    }

    // A second capture reads the whole batch on the origin after forks that write it: edges from every fill.
    auto graph2 = capture(origin, [&](Stream& s) {
        {
            std::vector<Stream> children;
            for (std::size_t k = 0; k < kChildren; ++k) children.push_back(s.fork());
            for (std::size_t k = 0; k < kChildren; ++k)
                memset(children[k], batch.view(k * kItem, kItem), static_cast<unsigned char>(10 + k));
        }
        copy(s, total.view(), batch.view());
    });
    CHECK_NO_VIOLATIONS();
    nodes = model::last_graph();
    const auto copies = nodes_of_kind(nodes, "memcpy_dtod");
    REQUIRE(copies.size() == 1);
    for (int f : nodes_of_kind(nodes, "memset")) CHECK(model::precedes(nodes, f, copies[0]));
    graph2.launch(origin);
    CHECK(words(total, origin) == words(batch, origin));

    // After the captures, the buffers serve eager work on other streams: no wait for an event recorded
    // inside a capture (the driver's CUDA_ERROR_INVALID_VALUE), and pooled events are all usable.
    auto other = device.create_stream();
    auto copy_out = DeviceSlice<std::uint32_t>::zeros(other, kChildren * kItem);
    copy(other, copy_out.view(), batch.view());
    CHECK(words(copy_out, other) == words(batch, origin));
    std::vector<Event> events;
    for (int i = 0; i < 64; ++i) events.emplace_back(device);
    for (const auto& e : events) CHECK(e.query());
    CHECK_NO_VIOLATIONS();
}

TEST_CASE("graph.model_replay_counts_as_its_accesses_on_the_launch_stream") {
    auto device = model_device();
    auto a = device.create_stream();
    auto b = device.create_stream();
    auto c = device.create_stream();
    constexpr std::size_t n = 4096;
    auto x = DeviceSlice<std::uint32_t>::zeros(a, n);
    auto keep = DeviceSlice<std::uint32_t>::zeros(a, n);

    model::reset();
    auto graph = capture(a, [&](Stream& s) {
        memset(s, x.view(), 7);
        memset(s, keep.view(), 9);
    });
    CHECK(model::calls("cuStreamWaitEvent") == 0);  // the capture waited for nothing

    // The replay on b waits for a's earlier work on the two buffers, and counts as their writer
    // from now on.
    model::reset();
    model::hold_events();  // the replay stays "running"
    graph.launch(b);
    // One source stream: one wait, for both buffers (Note [Stream timelines]).
    CHECK(model::calls("cuStreamWaitEvent") == 1);
    CHECK(cudarc::detail::Internals::buffer(x)->hazards().exclusive() ==
          &cudarc::detail::Internals::stream_state(b).timeline());

    // Freed right after the launch: the block waits for the replay's event, and a new allocation on its
    // stream gets other memory.
    const DevicePtr old = x.device_ptr();
    { auto freed = std::move(x); }
    auto block_state = [&](DevicePtr address) {
        for (const auto& segment : device.allocator_snapshot().segments) {
            for (const auto& block : segment.blocks) {
                if (block.address == address) return block.state;
            }
        }
        return AllocatorSnapshot::BlockState::free;
    };
    CHECK(block_state(old) == AllocatorSnapshot::BlockState::awaiting_events);
    auto fresh = DeviceSlice<std::uint32_t>::uninitialized(a, n);
    CHECK(fresh.device_ptr() != old);
    memset(a, fresh.view(), 3);
    // Later work on another stream waits for the replay.
    auto out = DeviceSlice<std::uint32_t>::zeros(c, n);
    const int before = model::calls("cuStreamWaitEvent");
    copy(c, out.view(), keep.view());
    CHECK(model::calls("cuStreamWaitEvent") == before + 1);
    model::release_events();
    CHECK(all_equal(words(out, c), word(9)));
    CHECK(all_equal(words(fresh, a), word(3)));
    // Once the replay completed, the block is reusable.
    auto later = DeviceSlice<std::uint32_t>::uninitialized(a, 16);  // polls the pending frees
    CHECK(block_state(old) != AllocatorSnapshot::BlockState::awaiting_events);
    CHECK_NO_VIOLATIONS();
}

TEST_CASE("graph.model_earlier_work_on_another_stream_is_waited_for_at_each_launch") {
    auto device = model_device();
    auto a = device.create_stream();
    auto b = device.create_stream();
    constexpr std::size_t n = 256;
    auto x = DeviceSlice<std::uint32_t>::zeros(a, n);
    auto y = DeviceSlice<std::uint32_t>::zeros(b, n);
    memset(a, x.view(), 5);  // last used on a before the capture on b

    model::reset();
    auto graph = capture(b, [&](Stream& s) { copy(s, y.view(), x.view()); });
    CHECK_NO_VIOLATIONS();  // no wait inside the capture for work outside it (the driver's ISOLATION)
    CHECK(model::calls("cuStreamWaitEvent") == 0);
    graph.launch(b);
    CHECK(model::calls("cuStreamWaitEvent") == 1);
    CHECK(all_equal(words(y, b), word(5)));
    // a writes x again; the next replay waits again.
    memset(a, x.view(), 6);
    graph.launch(b);
    CHECK(model::calls("cuStreamWaitEvent") >= 2);
    CHECK(all_equal(words(y, b), word(6)));
    CHECK_NO_VIOLATIONS();
}

TEST_CASE("graph.model_illegal_work_throws_before_the_driver_sees_it") {
    auto device = model_device();
    auto s = device.create_stream();
    auto other = device.create_stream();
    constexpr std::size_t n = 1024;
    auto x = DeviceSlice<std::uint32_t>::zeros(s, n);
    { auto warm = DeviceSlice<std::uint32_t>::uninitialized(s, 2 * n); }  // cached for the capture
    Event recorded(device);
    recorded.record(other);
    PinnedBuffer<std::uint32_t> pinned(device, n);
    pinned.copy_from_device_async(other, x.view());
    std::vector<std::uint32_t> host(n, 1);

    model::reset();
    const int allocations = model::calls("cuMemAlloc");
    auto graph = capture(s, [&](Stream&) {
        const char* inside = "inside a graph capture";
        CHECK_THROWS_WITH_AS((void)x.to_vector(s), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS(s.synchronize(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS(other.synchronize(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS((void)s.query(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS((void)recorded.query(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS(recorded.synchronize(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS(device.synchronize(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS(pinned.synchronize(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS((void)pinned.ready(), doctest::Contains(inside), Error);
        CHECK_THROWS_WITH_AS(x.copy_from_host(s, host), doctest::Contains("pageable host memory"), Error);
        CHECK_THROWS_WITH_AS((void)DeviceSlice<std::uint8_t>::uninitialized(s, std::size_t{64} << 20),
                             doctest::Contains("new large-pool segment"), Error);
        // A cached block serves an allocation, and a copy into page-locked memory is captured.
        auto cached = DeviceSlice<std::uint32_t>::uninitialized(s, 2 * n);
        memset(s, cached.view(), 2);
        memset(s, x.view(), 4);
        pinned.copy_from_device_async(s, x.view());
    });
    CHECK(model::calls("cuMemAlloc") == allocations);
    CHECK(model::calls("cuStreamSynchronize") == 0);
    CHECK(model::calls("cuEventQuery") == 0);
    CHECK(model::calls("cuEventSynchronize") == 0);
    CHECK(model::calls("cuCtxSynchronize") == 0);
    CHECK_NO_VIOLATIONS();  // the capture was never invalidated
    CHECK(all_equal(words(x, s), 0));
    graph.launch(s);
    s.synchronize();
    CHECK(all_equal(words(x, s), word(4)));
    CHECK(std::all_of(pinned.data(), pinned.data() + n, [](std::uint32_t v) { return v == word(4); }));

    // Uncaught, the error abandons the capture; the streams work afterwards.
    CHECK_THROWS_WITH_AS((void)capture(s, [&](Stream&) { s.synchronize(); }),
                         doctest::Contains("Stream::synchronize inside a graph capture"), Error);
    CHECK_FALSE(model::capturing(s.native()));
    memset(s, x.view(), 8);
    CHECK(all_equal(words(x, s), word(8)));
    CHECK_NO_VIOLATIONS();
}

TEST_CASE("graph.model_fork_outliving_the_body_abandons_the_capture") {
    auto device = model_device();
    auto s = device.create_stream();
    auto x = DeviceSlice<std::uint32_t>::zeros(s, 64);
    std::optional<Stream> escaped;
    CHECK_THROWS_WITH_AS((void)capture(s,
                                       [&](Stream&) {
                                           escaped.emplace(s.fork());
                                           memset(*escaped, x.view(), 1);
                                       }),
                         doctest::Contains("forked inside the capture were still alive"), Error);
    CHECK_FALSE(model::capturing(s.native()));
    REQUIRE(escaped.has_value());
    CHECK_FALSE(model::capturing(escaped->native()));
    memset(*escaped, x.view(), 3);  // eager now
    escaped.reset();                // joins s
    CHECK(all_equal(words(x, s), word(3)));
    // A new capture on the same stream works.
    auto graph = capture(s, [&](Stream&) { memset(s, x.view(), 5); });
    graph.launch(s);
    CHECK(all_equal(words(x, s), word(5)));
    CHECK_NO_VIOLATIONS();
}

TEST_CASE("graph.model_stream_conflicting_with_captured_work_joins_the_capture") {
    auto device = model_device();
    auto origin = device.create_stream();
    auto outsider = device.create_stream();
    constexpr std::size_t n = 128;
    auto x = DeviceSlice<std::uint32_t>::zeros(origin, n);
    auto y = DeviceSlice<std::uint32_t>::zeros(outsider, n);
    auto z = DeviceSlice<std::uint32_t>::zeros(outsider, n);

    model::reset();
    auto graph = capture(origin, [&](Stream& s) {
        memset(s, x.view(), 1);
        memset(outsider, z.view(), 3);       // touches nothing captured: runs now
        copy(outsider, y.view(), x.view());  // reads what the capture wrote: joins the capture
        CHECK(model::capturing(outsider.native()));
    });
    CHECK_NO_VIOLATIONS();  // the outsider was joined back into the origin before the end
    CHECK_FALSE(model::capturing(outsider.native()));
    CHECK(all_equal(words(z, outsider), word(3)));  // ran at once
    CHECK(all_equal(words(y, outsider), 0));        // captured
    const auto nodes = model::last_graph();
    const auto fills = nodes_of_kind(nodes, "memset");
    const auto copies = nodes_of_kind(nodes, "memcpy_dtod");
    REQUIRE(fills.size() == 1);
    REQUIRE(copies.size() == 1);
    CHECK(model::precedes(nodes, fills[0], copies[0]));
    CHECK(nodes[static_cast<std::size_t>(copies[0])].stream == model::stream_id(outsider.native()));
    graph.launch(origin);
    CHECK(all_equal(words(y, outsider), word(1)));
    CHECK_NO_VIOLATIONS();
}

TEST_CASE("graph.model_events_waits_and_joins_across_the_capture_border") {
    auto device = model_device();
    auto origin = device.create_stream();
    auto outside = device.create_stream();
    auto x = DeviceSlice<std::uint32_t>::zeros(origin, 64);
    auto w = DeviceSlice<std::uint32_t>::zeros(outside, 64);
    Event before(device);
    before.record(outside);
    Event inside(device);
    auto late = device.create_stream();

    model::reset();
    auto graph = capture(origin, [&](Stream& s) {
        // An event recorded outside: the captured wait is an external event node, not an isolation error.
        s.wait(before);
        memset(s, x.view(), 1);
        inside.record(s);
        // A stream waiting for an event recorded inside joins the capture (and is joined back at the end).
        outside.wait(inside);
        CHECK(model::capturing(outside.native()));
        memset(outside, w.view(), 2);
        // A captured stream cannot join work outside the capture: refused, nothing done.
        CHECK_THROWS_WITH_AS(s.join(late), doctest::Contains("cannot wait for work outside the capture"),
                             Error);
    });
    CHECK_NO_VIOLATIONS();
    CHECK(nodes_of_kind(model::last_graph(), "wait_external").size() == 1);
    // The event marks a point of captured work: refused with a clear error, not the driver's.
    CHECK_THROWS_WITH_AS((void)inside.query(), doctest::Contains("last recorded inside a graph capture"),
                         Error);
    CHECK_THROWS_WITH_AS(outside.wait(inside),
                         doctest::Contains("last recorded inside another graph capture"), Error);
    inside.record(origin);
    CHECK(inside.query());
    graph.launch(origin);
    CHECK(all_equal(words(x, origin), word(1)));
    CHECK(all_equal(words(w, outside), word(2)));
    CHECK_NO_VIOLATIONS();
}

TEST_CASE("graph.model_elapsed_time_is_refused_inside_a_capture_and_for_captured_events") {
    auto device = model_device();
    auto s = device.create_stream();
    auto x = DeviceSlice<std::uint32_t>::zeros(s, 64);
    Event start(device, EventTiming::enabled);
    Event end(device, EventTiming::enabled);
    start.record(s);
    end.record(s);
    s.synchronize();
    auto graph = capture(s, [&](Stream& c) {
        CHECK_THROWS_WITH_AS((void)Event::elapsed_ms(start, end), doctest::Contains("inside a graph capture"),
                             Error);
        memset(c, x.view(), 1);
        end.record(c);
    });
    CHECK_NO_VIOLATIONS();
    CHECK_THROWS_WITH_AS((void)Event::elapsed_ms(start, end),
                         doctest::Contains("last recorded inside a graph capture"), Error);
    // Recorded again outside, it is an ordinary event (the model keeps no times: the GPU tests time events).
    graph.launch(s);
    end.record(s);
    s.synchronize();
    CHECK(end.query());
    CHECK(all_equal(words(x, s), word(1)));
    CHECK_NO_VIOLATIONS();
}

TEST_CASE("graph.model_buffers_and_the_graph_lifetime") {
    auto device = model_device();
    auto s = device.create_stream();
    constexpr std::size_t n = 512;
    auto x = DeviceSlice<std::uint32_t>::zeros(s, n);
    std::optional<DeviceSlice<std::uint32_t>> made_inside;
    DevicePtr temporary = 0;
    auto graph = capture(s, [&](Stream&) {
        memset(s, x.view(), 1);
        made_inside.emplace(DeviceSlice<std::uint32_t>::uninitialized(s, n));  // kept after the capture
        memset(s, made_inside->view(), 2);
        auto tmp = DeviceSlice<std::uint32_t>::uninitialized(s, n);  // allocated and freed inside
        temporary = tmp.device_ptr();
        copy(s, tmp.view(), x.view());
    });
    // The temporary belongs to the graph: held, and left out of the graph's accesses.
    bool held = false;
    for (const auto& segment : device.allocator_snapshot().segments) {
        for (const auto& block : segment.blocks) {
            if (block.address == temporary)
                held = block.state == AllocatorSnapshot::BlockState::held_for_graph;
        }
    }
    CHECK(held);
    const auto accesses = graph.accesses();
    CHECK(accesses.size() == 2);
    for (const auto& a : accesses) CHECK(a.address != temporary);
    graph.launch(s);
    CHECK(all_equal(words(*made_inside, s), word(2)));

    // A buffer the graph uses is destroyed: the next launch throws, naming it, and enqueues nothing.
    const DevicePtr address = x.device_ptr();
    { auto gone = std::move(x); }
    model::reset();
    CHECK_THROWS_WITH_AS(graph.launch(s), doctest::Contains(fmt::format("{:#x}", address).c_str()), Error);
    CHECK(model::calls("cuGraphLaunch") == 0);

    // Destroyed inside the body (allocated before): released when the capture ends, and the graph says so.
    auto y = DeviceSlice<std::uint32_t>::zeros(s, n);
    const DevicePtr y_address = y.device_ptr();
    auto graph2 = capture(s, [&](Stream&) {
        memset(s, y.view(), 3);
        auto moved = std::move(y);
    });
    CHECK_THROWS_WITH_AS(graph2.launch(s), doctest::Contains(fmt::format("{:#x}", y_address).c_str()), Error);
    CHECK_NO_VIOLATIONS();
}

TEST_CASE("graph.model_allocations_on_forked_streams_belong_to_the_graph") {
    auto device = model_device();
    auto s = device.create_stream();
    constexpr std::size_t n = 256;
    auto out = DeviceSlice<std::uint32_t>::zeros(s, n);
    DevicePtr temporary = 0;
    {
        // Warm the child's pool: the pool hands out the same stream again.
        auto child = s.fork();
        auto warm = DeviceSlice<std::uint32_t>::uninitialized(child, n);
    }
    auto graph = capture(s, [&](Stream&) {
        auto child = s.fork();
        auto tmp = DeviceSlice<std::uint32_t>::uninitialized(child, n);
        temporary = tmp.device_ptr();
        memset(child, tmp.view(), 6);
        copy(child, out.view(), tmp.view());
    });
    bool held = false;
    for (const auto& segment : device.allocator_snapshot().segments) {
        for (const auto& block : segment.blocks) {
            if (block.address == temporary)
                held = block.state == AllocatorSnapshot::BlockState::held_for_graph;
        }
    }
    CHECK(held);
    graph.launch(s);
    CHECK(all_equal(words(out, s), word(6)));
    CHECK_NO_VIOLATIONS();
}

TEST_CASE("graph.model_update_in_place_or_reinstantiated") {
    auto device = model_device();
    auto s = device.create_stream();
    auto s2 = device.create_stream();
    auto x = DeviceSlice<std::uint32_t>::zeros(s, 64);
    auto y = DeviceSlice<std::uint32_t>::zeros(s, 64);
    auto graph = capture(s, [&](Stream&) { memset(s, x.view(), 1); });
    graph.upload(s);
    CHECK(model::calls("cuGraphUpload") == 1);
    graph.launch(s);
    CHECK(all_equal(words(x, s), word(1)));

    // Same shape, another value: updated in place.
    CHECK(graph.update(s, [&](Stream&) { memset(s, x.view(), 2); }) == GraphUpdate::in_place);
    graph.launch(s2);  // and on another stream
    CHECK(all_equal(words(x, s), word(2)));
    // Another shape: a new executable graph.
    CHECK(graph.update(s, [&](Stream&) {
        memset(s, x.view(), 3);
        memset(s, y.view(), 4);
    }) == GraphUpdate::reinstantiated);
    CHECK(graph.accesses().size() == 2);
    graph.launch(s);
    CHECK(all_equal(words(x, s), word(3)));
    CHECK(all_equal(words(y, s), word(4)));
    // From a graph captured with capture().
    CHECK(graph.update(capture(s, [&](Stream&) {
        memset(s, x.view(), 5);
        memset(s, y.view(), 6);
    })) == GraphUpdate::in_place);
    graph.launch(s);
    CHECK(all_equal(words(y, s), word(6)));
    CHECK(std::string(to_string(GraphUpdate::reinstantiated)) == "reinstantiated");
    CHECK_NO_VIOLATIONS();
}

TEST_CASE("graph.model_memory_taken_from_the_cache_is_waited_for_by_the_first_launch") {
    auto device = model_device();
    auto s = device.create_stream();
    auto other = device.create_stream();
    constexpr std::size_t n = 256;
    {
        // Earlier work on s uses the block the capture will take from s's cache.
        auto warm = DeviceSlice<std::uint32_t>::uninitialized(s, n);
        memset(s, warm.view(), 1);
    }
    auto out = DeviceSlice<std::uint32_t>::zeros(other, n);
    auto graph = capture(s, [&](Stream&) {
        auto tmp = DeviceSlice<std::uint32_t>::uninitialized(s, n);
        memset(s, tmp.view(), 2);
        copy(s, out.view(), tmp.view());
    });
    // Launched on another stream, the first replay waits for s's work from before the capture; later
    // replays follow the first.
    model::reset();
    graph.launch(other);
    CHECK(model::calls("cuStreamWaitEvent") == 1);
    graph.launch(other);
    CHECK(model::calls("cuStreamWaitEvent") == 1);
    CHECK(all_equal(words(out, other), word(2)));
    // A capture that allocates nothing has nothing to wait for there.
    auto plain = capture(s, [&](Stream&) { memset(s, out.view(), 3); });
    model::reset();
    plain.launch(other);
    CHECK(model::calls("cuStreamWaitEvent") == 0);
    CHECK(all_equal(words(out, other), word(3)));
    CHECK_NO_VIOLATIONS();
}

TEST_CASE("graph.model_events_given_back_during_a_capture_are_usable_after_it") {
    auto device = model_device();
    auto origin = device.create_stream();
    constexpr std::size_t n = 512;
    auto x = DeviceSlice<std::uint32_t>::zeros(origin, n);
    auto graph = capture(origin, [&](Stream& s) {
        auto child = s.fork();
        // Two streams write halves of one buffer: each write records an event inside the capture (Note [Eager
        // events]); the child's next use gives its event back to the pool, still recorded inside (a raw use:
        // nothing takes the event from the pool again before the capture ends).
        memset(s, x.view(0, n / 2), 1);
        memset(child, x.view(n / 2, n / 2), 3);
        x.record_stream(child);
    });
    // Fresh events come from the pool (newest first): each must be usable.
    std::vector<Event> events;
    for (int i = 0; i < 256; ++i) events.emplace_back(device);
    for (const auto& e : events) CHECK(e.query());
    graph.launch(origin);
    const auto got = words(x, origin);
    CHECK(std::all_of(got.begin(), got.begin() + n / 2, [](std::uint32_t v) { return v == word(1); }));
    CHECK(std::all_of(got.begin() + n / 2, got.end(), [](std::uint32_t v) { return v == word(3); }));
    CHECK_NO_VIOLATIONS();
}

// A capture records the streams of one device: work between devices that would take part in it, NCCL and
// managed allocations (whose driver calls would invalidate the capture) throw before anything is done, and
// the capture goes on; work on another device that does not touch captured work runs at once.
TEST_CASE("graph.model_work_across_devices_nccl_and_managed_memory_inside_a_capture_are_refused") {
    auto device = model_device();
    Device device1 = detail::Internals::make_device(
        std::make_shared<detail::DeviceState>(model::api(), 1, DeviceOptions{}));
    auto s = device.create_stream();
    auto t = device1.create_stream();
    constexpr std::size_t n = 256;
    auto x = DeviceSlice<std::uint32_t>::zeros(s, n);
    auto y = DeviceSlice<std::uint32_t>::zeros(t, n);
    auto z = DeviceSlice<std::uint32_t>::zeros(s, n);  // not used by the capture
    const std::vector<std::byte> id_bytes(nccl::UniqueId::kBytes);
    const auto id = nccl::UniqueId::from_bytes(id_bytes);
    const int allocations = model::calls("cuMemAlloc");

    auto graph = capture(s, [&](Stream&) {
        memset(s, x.view(), 5);
        const char* one_device = "a capture records the work of one device";
        // The captured stream would wait for another device's stream, or the other way round.
        CHECK_THROWS_WITH_AS(s.join(t), doctest::Contains("Stream::join between device 1 and device 0"),
                             Error);
        CHECK_THROWS_WITH_AS(t.join(s), doctest::Contains("Stream::join between device 0 and device 1"),
                             Error);
        CHECK_THROWS_WITH_AS(s.join(t), doctest::Contains(one_device), Error);
        // A copy between devices on a captured stream, or one that conflicts with captured work.
        CHECK_THROWS_WITH_AS(copy(s, y.view(), x.view()),
                             doctest::Contains("cudarc::copy between device 0 and device 1"), Error);
        CHECK_THROWS_WITH_AS(copy(t, y.view(), x.view()), doctest::Contains(one_device), Error);
        CHECK_THROWS_WITH_AS(copy(s, y.view(), z.view()), doctest::Contains(one_device), Error);
        // NCCL: neither communicators nor operations.
        CHECK_THROWS_WITH_AS((void)nccl::Communicator::init_all(std::span<const Device>(&device, 1)),
                             doctest::Contains("nccl::Communicator::init_all inside a graph capture"), Error);
        CHECK_THROWS_WITH_AS((void)nccl::Communicator::init_rank(device, id, 0, 1),
                             doctest::Contains("nccl::Communicator::init_rank inside a graph capture"),
                             Error);
        // Managed memory: cuMemAllocManaged would invalidate the capture.
        CHECK_THROWS_WITH_AS((void)DeviceSlice<std::uint32_t>::managed(s, n),
                             doctest::Contains("managed memory inside a graph capture"), Error);
        // Work of the other device that touches nothing captured runs at once.
        memset(t, y.view(), 7);
    });
    CHECK(model::calls("cuMemAlloc") == allocations);
    CHECK_NO_VIOLATIONS();  // the capture was never invalidated
    CHECK(all_equal(words(y, t), word(7)));
    CHECK(all_equal(words(x, s), 0));
    graph.launch(s);
    CHECK(all_equal(words(x, s), word(5)));
    // Outside a capture, the same joins are ordinary.
    t.join(s);
    s.join(t);
    CHECK_NO_VIOLATIONS();
}

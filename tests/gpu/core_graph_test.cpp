// Graph capture and replay, and the caching allocator's capture rule.
#include <doctest/doctest.h>

#include <cstring>

#include "gpu_test.hpp"

using namespace cudarc;

TEST_CASE("core.graph_capture_replays_and_keeps_captured_memory") {
    auto device = Device::open(0);
    auto stream = device.create_stream();
    constexpr std::size_t n = 1 << 16;
    auto first = test::random_floats(n);
    auto a = DeviceSlice<float>::from_host(stream, first);
    auto b = DeviceSlice<float>::from_host(stream, std::vector<float>(n, test::poison_float()));
    stream.synchronize();

    DevicePtr temporary = 0;
    auto graph = capture(stream, [&](Stream& s) {
        auto tmp = DeviceSlice<float>::uninitialized(s, n);  // allocated and freed inside the capture
        temporary = tmp.device_ptr();
        copy(s, tmp.view(), a.view());
        copy(s, b.view(), tmp.view());
    });
    // Nothing ran during the capture.
    auto before = b.to_vector(stream);
    CHECK(std::memcmp(before.data(), std::vector<float>(n, test::poison_float()).data(), n * sizeof(float)) ==
          0);

    // The temporary's block is held for the graph: a new allocation must not get it.
    auto other = DeviceSlice<float>::uninitialized(stream, n);
    CHECK(other.device_ptr() != temporary);
    bool held = false;
    for (const auto& segment : device.allocator_snapshot().segments) {
        for (const auto& block : segment.blocks) {
            if (block.address == temporary)
                held = block.state == AllocatorSnapshot::BlockState::held_for_graph;
        }
    }
    CHECK(held);

    graph.launch(stream);
    auto after = b.to_vector(stream);
    CHECK(std::memcmp(after.data(), first.data(), n * sizeof(float)) == 0);

    // Replays read the current contents.
    const auto second = test::random_floats(n);
    a.copy_from_host(stream, second);
    graph.launch(stream);
    after = b.to_vector(stream);
    CHECK(std::memcmp(after.data(), second.data(), n * sizeof(float)) == 0);
}

TEST_CASE("core.graph_capture_abandoned_on_exception") {
    auto device = Device::open(0);
    auto stream = device.create_stream();
    auto a = DeviceSlice<float>::zeros(stream, 16);
    CHECK_THROWS_AS((void)capture(stream,
                                  [&](Stream& s) {
                                      a.fill_zero(s);
                                      throw Error("abandon");
                                  }),
                    Error);
    // The stream is usable again (no capture left open).
    const auto host = test::random_floats(16);
    a.copy_from_host(stream, host);
    CHECK(a.to_vector(stream) == host);
}

// Multi-stream graph capture (Note [Capture overlay]) on the fake driver, with another context current behind
// cudarc's back: every driver call of the capture, its end, the replays, Graph::upload and Graph::update runs
// in a context scope of the device (Note [Context scope]), and the framework's context is current again
// afterwards.
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::FakeGpu;

namespace {
std::vector<unsigned char> filled(std::size_t count, unsigned char value) {
    return std::vector<unsigned char>(count, value);
}
}  // namespace

TEST_CASE("reliability.multi_stream_capture_update_and_upload_in_a_foreign_context") {
    FakeGpu gpu;
    const sys::Context foreign = gpu.driver.create_context(0);
    {
        auto device = Device::open(0);
        auto& stream = device.default_stream();
        constexpr std::size_t kCount = 4096;
        auto a = DeviceSlice<unsigned char>::zeros(stream, kCount);
        auto b = DeviceSlice<unsigned char>::zeros(stream, kCount);
        auto c = DeviceSlice<unsigned char>::zeros(stream, kCount);
        REQUIRE(gpu.faults.api().ctx_set_current(foreign) == sys::kSuccess);

        // The forked child's memset is captured only if the child joined the capture (it waited for an event
        // recorded inside it): zeroed again before the replay, b shows whether it was.
        Graph graph = capture(stream, [&](Stream& captured) {
            memset(captured, a.view(), 1);
            auto child = captured.fork();
            memset(child, b.view(), 2);
        });
        CHECK(gpu.driver.current_context() == foreign);
        a.fill_zero(stream);
        b.fill_zero(stream);
        graph.upload(stream);
        graph.launch(stream);
        CHECK(a.to_vector(stream) == filled(kCount, 1));
        CHECK(b.to_vector(stream) == filled(kCount, 2));

        // The same shape, other values: updated in place, and the replay runs the new work.
        CHECK(graph.update(stream, [&](Stream& captured) {
            memset(captured, a.view(), 3);
            auto child = captured.fork();
            memset(child, b.view(), 4);
        }) == GraphUpdate::in_place);
        graph.launch(stream);
        CHECK(a.to_vector(stream) == filled(kCount, 3));
        CHECK(b.to_vector(stream) == filled(kCount, 4));

        // Another shape: reinstantiated.
        CHECK(graph.update(stream, [&](Stream& captured) {
            memset(captured, a.view(), 5);
            memset(captured, c.view(), 6);
            auto child = captured.fork();
            memset(child, b.view(), 7);
        }) == GraphUpdate::reinstantiated);
        graph.launch(stream);
        CHECK(a.to_vector(stream) == filled(kCount, 5));
        CHECK(b.to_vector(stream) == filled(kCount, 7));
        CHECK(c.to_vector(stream) == filled(kCount, 6));

        CHECK(gpu.driver.current_context() == foreign);
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

// Note [Tracing waits]: CUDARC_TRACE=waits names each cross-stream wait hazard tracking inserts (buffer,
// byte range, the two streams, the reason) and each event and free; off, nothing is written.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/trace.hpp"
#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::FakeGpu;

namespace {

std::string read_all(std::FILE* file) {
    std::rewind(file);
    std::string text;
    char chunk[512];
    for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, file)) > 0;) text.append(chunk, n);
    return text;
}

std::string hex(const void* p) {
    char text[32];
    std::snprintf(text, sizeof text, "%p", p);
    return text;
}

}  // namespace

TEST_CASE("pipeline.trace_waits_names_the_buffer_range_streams_and_reason") {
    FakeGpu gpu;
    std::FILE* log = std::tmpfile();
    REQUIRE(log != nullptr);
    {
        auto device = Device::open(0);
        auto a = device.create_stream();
        auto b = device.create_stream();
        auto slice = DeviceSlice<int>::zeros(a, 1024);
        b.join(a);
        std::vector<int> host(256, 3);

        detail::set_trace_waits(true, log);
        copy(a, slice.view(0, 256), std::span<const int>(host));  // a writes [0, 1024) bytes
        auto other = DeviceSlice<int>::zeros(b, 256);
        copy(b, other.view(), std::as_const(slice).view(0, 256));  // RAW on a
        memset(a, slice.view(128, 128), 0);                        // WAR on b's read of [512, 1024)
        memset(b, slice.view(512, 256), 0);                        // WAW on a
        const std::string text = read_all(log);
        detail::set_trace_waits(false);
        INFO(text);
        const std::string sa = hex(a.native());
        const std::string sb = hex(b.native());
        const std::string address = fmt::format("{:#x}", slice.device_ptr());
        CHECK(contains(text, "wait: stream " + sb + " waits for stream " + sa));
        CHECK(contains(text, "buffer " + address + " bytes [0, 1024) RAW"));
        CHECK(contains(text, "wait: stream " + sa + " waits for stream " + sb));
        CHECK(contains(text, "bytes [512, 1024) WAR"));
        CHECK(contains(text, "event: stream "));
        // The rest of the buffer was a's since its fill (Note [Single-stream fast path]: its uses there are
        // a's work so far), so b's write there waits for a too.
        CHECK(contains(text, "bytes [2048, 3072) WAW"));
        device.rethrow_deferred_error();

        // Off: nothing more is written.
        std::FILE* quiet = std::tmpfile();
        detail::set_trace_waits(false, quiet);
        copy(a, slice.view(0, 256), std::as_const(other).view());
        CHECK(read_all(quiet).empty());
        std::fclose(quiet);
        detail::set_trace_waits(true, log);
    }  // the slices' frees are traced
    detail::set_trace_waits(false);
    CHECK(contains(read_all(log), "free: buffer "));
    std::fclose(log);
    CHECK(gpu.driver.violations().empty());
}

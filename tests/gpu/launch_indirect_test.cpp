// cudarc::prepare_indirect_access on a real GPU: work that reaches a buffer through a raw address is
// ordered like a launch argument.
#include <doctest/doctest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "core/device_state.hpp"
#include "gpu_test.hpp"

using namespace cudarc;
using cudarc::test::SpinKernel;

namespace {

// Raw, untracked driver copies: they stand for a kernel that finds the buffer in a table.
void raw_htod(Stream& stream, DevicePtr dst, const void* src, std::size_t bytes) {
    auto& state = *cudarc::detail::Internals::device_state(stream.device());
    const auto scope = state.bind();
    state.check(state.api().memcpy_htod_async(dst, src, bytes, stream.native()),
                sys::Entry::memcpy_htod_async);
}
void raw_dtoh(Stream& stream, void* dst, DevicePtr src, std::size_t bytes) {
    auto& state = *cudarc::detail::Internals::device_state(stream.device());
    const auto scope = state.bind();
    state.check(state.api().memcpy_dtoh_async(dst, src, bytes, stream.native()),
                sys::Entry::memcpy_dtoh_async);
}

}  // namespace

TEST_CASE("launch.indirect_access_orders_raw_pointer_work_like_an_argument") {
    auto device = Device::open(0);
    SpinKernel spin(device);
    auto writer = device.create_stream();
    auto reader = device.create_stream();
    constexpr std::size_t n = 1 << 20;
    auto slice = DeviceSlice<float>::zeros(writer, n);
    writer.synchronize();
    const auto first = test::random_floats(n);
    const auto second = test::random_floats(n);

    // Read after write: a held-back write on `writer`, then an indirect read on `reader`.
    spin.launch(writer, spin.cycles_for_ms(100));
    slice.copy_from_host(writer, first);
    Counters before = device.counters();
    prepare_indirect_access(reader, std::as_const(slice).view());
    CHECK((device.counters() - before).cross_stream_waits == 1);
    std::vector<float> seen(n, test::poison_float());
    raw_dtoh(reader, seen.data(), slice.device_ptr(), n * sizeof(float));
    CHECK(std::memcmp(seen.data(), first.data(), n * sizeof(float)) == 0);

    // Write after read: a held-back indirect read on `reader`, then a tracked write on `writer` must wait
    // for it, so the read still sees the old data.
    spin.launch(reader, spin.cycles_for_ms(100));
    prepare_indirect_access(reader, std::as_const(slice).view());
    std::vector<float> read_before_write(n, test::poison_float());
    PinnedBuffer<float> pinned(device, n);
    raw_dtoh(reader, pinned.data(), slice.device_ptr(), n * sizeof(float));
    slice.copy_from_host(writer, second);
    reader.synchronize();
    std::memcpy(read_before_write.data(), pinned.data(), n * sizeof(float));
    CHECK(std::memcmp(read_before_write.data(), first.data(), n * sizeof(float)) == 0);
    CHECK(slice.to_vector(writer) == second);

    // An indirect write on `reader` after that write waits for it, and a later read on `writer` for it.
    spin.launch(writer, spin.cycles_for_ms(100));
    slice.fill_zero(writer);
    prepare_indirect_access(reader, slice.view());
    raw_htod(reader, slice.device_ptr(), first.data(), n * sizeof(float));
    CHECK(slice.to_vector(writer) == first);
}

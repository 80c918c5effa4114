// NCCL on one GPU: a one-rank communicator's operations are correct (for one rank every reduction is the
// identity, so the result must equal the input bit for bit), and hazard tracking orders them against a
// writer (or a reader) held back on another stream: a missing wait would let the collective read poison, or
// let the writer overwrite its input before it ran. Skipped (not failed) where NCCL is not installed.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>

#include "multi_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

constexpr std::size_t kN = (std::size_t{1} << 20) + 7;
constexpr double kHoldMs = 50.0;  // far longer than any operation below

std::vector<nccl::Communicator> one_rank(const Device& device) {
    auto comms = nccl::Communicator::init_all(std::span<const Device>(&device, 1));
    REQUIRE(comms.size() == 1);
    return comms;
}

template <typename T>
std::vector<T> random_values(std::size_t n) {
    std::vector<T> out(n);
    const auto words = random_words((n * sizeof(T) + 3) / 4);
    std::memcpy(out.data(), words.data(), n * sizeof(T));
    return out;
}

}  // namespace

TEST_CASE("multi.one_rank_communicator_is_correct_and_ordered_after_a_held_back_writer") {
    if (!have_nccl()) return;
    auto device = Device::open(0);
    auto comms = one_rank(device);
    auto& comm = comms[0];
    CHECK(comm.rank() == 0);
    CHECK(comm.world_size() == 1);
    CHECK(comm.device_ordinal() == 0);
    CHECK(comm.native() != nullptr);

    const auto copy = bench_module(device).kernel<BenchCopy::signature>("bench_copy");
    auto writer = device.create_stream();
    auto reader = device.create_stream();
    const auto host = random_floats(kN);
    const auto source = DeviceSlice<float>::from_host(writer, host);
    auto x = DeviceSlice<float>::from_host(writer, poisoned(kN));
    auto reduced = DeviceSlice<float>::from_host(reader, poisoned(kN));
    auto broadcast = DeviceSlice<float>::from_host(reader, poisoned(kN));
    auto gathered = DeviceSlice<float>::from_host(reader, poisoned(kN));
    writer.synchronize();
    reader.synchronize();

    const auto before = device.counters();
    hold_back(writer, kHoldMs);
    launch(writer, LaunchConfig::for_elements(kN, device), copy, x, source, kN);  // x = source, held back
    comm.all_reduce(reader, x, reduced);          // reads x on another stream: must wait for the writer
    comm.broadcast(reader, x, broadcast, 0);      // already ordered: no second wait
    comm.all_gather(reader, x.view(), gathered);  // world_size() * kN = kN elements
    const auto enqueued = device.counters() - before;
    CHECK(enqueued.cross_stream_waits == 1);
    // One on the writer for the wait, then one on the reader after each collective's read of x (Note
    // [Eager events]: x is used by two streams, so every access records after its work).
    CHECK(enqueued.events_recorded == 4);
    CHECK(enqueued.host_blocking_calls() == 0);

    CHECK(bitwise_equal(reduced.to_vector(reader), host));
    CHECK(bitwise_equal(broadcast.to_vector(reader), host));
    CHECK(bitwise_equal(gathered.to_vector(reader), host));
}

TEST_CASE("multi.one_rank_collective_held_back_is_waited_for_by_later_writers_and_readers") {
    if (!have_nccl()) return;
    auto device = Device::open(0);
    auto comms = one_rank(device);
    auto& comm = comms[0];
    const auto fill = bench_module(device).kernel<BenchFill::signature>("bench_fill");
    auto collective = device.create_stream();
    auto writer = device.create_stream();
    auto third = device.create_stream();
    const auto host = random_floats(kN);
    auto x = DeviceSlice<float>::from_host(collective, host);
    auto y = DeviceSlice<float>::from_host(collective, poisoned(kN));
    collective.synchronize();

    hold_back(collective, kHoldMs);
    comm.all_reduce(collective, x, y, nccl::ReduceOp::max);  // reads x, writes y, held back
    // Write after read: the fill must wait for the held-back collective, or y would see 7s.
    launch(writer, LaunchConfig::for_elements(kN, device), fill, x, 7.0f, kN);
    // Read after write on a third stream: must wait for the collective's write of y.
    CHECK(bitwise_equal(y.to_vector(third), host));
    CHECK(all_equal(x.to_vector(third), 7.0f));
}

TEST_CASE("multi.one_rank_operations_on_every_element_type") {
    if (!have_nccl()) return;
    auto device = Device::open(0);
    auto comms = one_rank(device);
    auto& comm = comms[0];
    auto stream = device.create_stream();
    constexpr std::size_t n = 4099;

    // In place, every reduction, integer and 16-bit float types: the identity for one rank.
    const auto ints = random_values<std::int32_t>(n);
    auto i32 = DeviceSlice<std::int32_t>::from_host(stream, ints);
    comm.all_reduce(stream, i32, nccl::ReduceOp::sum);
    comm.all_reduce(stream, i32.view(), nccl::ReduceOp::min);
    CHECK(bitwise_equal(i32.to_vector(stream), ints));

    const auto bytes = random_values<std::uint8_t>(n);
    auto u8 = DeviceSlice<std::uint8_t>::from_host(stream, bytes);
    comm.all_reduce(stream, u8, nccl::ReduceOp::max);
    CHECK(bitwise_equal(u8.to_vector(stream), bytes));

    const auto longs = random_values<std::int64_t>(n);
    auto i64 = DeviceSlice<std::int64_t>::from_host(stream, longs);
    auto i64_out = DeviceSlice<std::int64_t>::zeros(stream, n);
    comm.reduce(stream, i64, i64_out, 0, nccl::ReduceOp::prod);
    CHECK(bitwise_equal(i64_out.to_vector(stream), longs));

    // fp16 and bf16: finite values only (a NaN pattern need not survive a reduction bit for bit).
    std::vector<optim::half_bits> halves(n);
    std::vector<optim::bf16_bits> bf16s(n);
    const auto floats = random_floats(n);
    for (std::size_t i = 0; i < n; ++i) {
        halves[i].bits =
            static_cast<std::uint16_t>(0x3c00u + (std::bit_cast<std::uint32_t>(floats[i]) & 0x3ffu));
        bf16s[i].bits = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(floats[i]) >> 16);
    }
    auto f16 = DeviceSlice<optim::half_bits>::from_host(stream, halves);
    auto f16_out = DeviceSlice<optim::half_bits>::zeros(stream, n);
    comm.all_reduce(stream, f16, f16_out, nccl::ReduceOp::avg);
    CHECK(bitwise_equal(f16_out.to_vector(stream), halves));
    auto b16 = DeviceSlice<optim::bf16_bits>::from_host(stream, bf16s);
    auto b16_out = DeviceSlice<optim::bf16_bits>::zeros(stream, n);
    comm.reduce_scatter(stream, b16, b16_out, nccl::ReduceOp::sum);  // world_size() * n = n
    CHECK(bitwise_equal(b16_out.to_vector(stream), bf16s));

    // A sub-view in, another out; double precision.
    std::vector<double> doubles(n);
    for (std::size_t i = 0; i < n; ++i) doubles[i] = static_cast<double>(floats[i]) * 1e300;
    auto f64 = DeviceSlice<double>::from_host(stream, doubles);
    auto f64_out = DeviceSlice<double>::zeros(stream, n);
    comm.broadcast(stream, f64.view(1, n - 1), f64_out.view(0, n - 1), 0);
    const auto f64_got = f64_out.to_vector(stream);
    CHECK(std::memcmp(f64_got.data(), doubles.data() + 1, (n - 1) * sizeof(double)) == 0);
    CHECK(f64_got[n - 1] == 0.0);  // untouched
}

TEST_CASE("multi.one_rank_bad_arguments_are_rejected_and_change_nothing") {
    if (!have_nccl()) return;
    auto device = Device::open(0);
    auto comms = one_rank(device);
    auto& comm = comms[0];
    auto stream = device.create_stream();
    auto other = device.create_stream();
    const auto host = random_floats(64);
    auto x = DeviceSlice<float>::from_host(stream, host);
    auto y = DeviceSlice<float>::zeros(stream, 64);
    auto small = DeviceSlice<float>::zeros(stream, 63);
    stream.synchronize();

    auto error_of = [](auto&& fn) -> std::string {
        try {
            fn();
        } catch (const Error& e) {
            return e.what();
        }
        return "(no error)";
    };
    const auto before = device.counters();
    // `other` would have to wait for x and y: a rejected call must not have inserted that wait.
    CHECK(error_of([&] { comm.all_reduce(other, x, small); }).find("size mismatch") != std::string::npos);
    CHECK(error_of([&] { comm.broadcast(other, x, y, 1); }).find("root 1 is not a rank") !=
          std::string::npos);
    CHECK(error_of([&] { comm.all_gather(other, x, small); }).find("world_size (1) times") !=
          std::string::npos);
    CHECK(error_of([&] { comm.send(other, x, 3); }).find("peer 3 is not a rank") != std::string::npos);
    DeviceSlice<float> moved = std::move(y);
    CHECK(error_of([&] { comm.all_reduce(other, x, y); }).find("empty") != std::string::npos);
    CHECK(error_of([] {
              (void)nccl::Communicator::init_rank(
                  Device::open(0), nccl::UniqueId::from_bytes(std::vector<std::byte>(128)), 1, 1);
          }).find("rank 1 is not in 0..0") != std::string::npos);
    const auto rejected = device.counters() - before;
    CHECK(rejected.cross_stream_waits == 0);
    CHECK(rejected.events_recorded == 0);

    // Still usable afterwards.
    comm.check_async_error();
    CHECK_FALSE(comm.failed());
    comm.all_reduce(stream, x, moved);
    CHECK(bitwise_equal(moved.to_vector(stream), host));

    // An aborted communicator is empty and says so.
    comm.abort();
    CHECK(comm.native() == nullptr);
    CHECK(error_of([&] { comm.all_reduce(stream, x, moved); }).find("empty") != std::string::npos);
}

TEST_CASE("multi.one_rank_init_rank_and_group") {
    if (!have_nccl()) return;
    auto device = Device::open(0);
    const auto id = nccl::UniqueId::create();
    CHECK(nccl::UniqueId::from_bytes(id.bytes()) == id);
    auto comm = nccl::Communicator::init_rank(device, id, 0, 1);
    CHECK(comm.rank() == 0);
    CHECK(comm.world_size() == 1);

    auto stream = device.create_stream();
    const auto a_host = random_floats(1000);
    const auto b_host = random_floats(3000);
    auto a = DeviceSlice<float>::from_host(stream, a_host);
    auto b = DeviceSlice<float>::from_host(stream, b_host);
    auto a_out = DeviceSlice<float>::from_host(stream, poisoned(1000));
    auto b_out = DeviceSlice<float>::from_host(stream, poisoned(3000));
    {
        nccl::Group group;
        comm.all_reduce(stream, a, a_out);
        comm.all_reduce(stream, b, b_out);
        group.end();
    }
    CHECK(bitwise_equal(a_out.to_vector(stream), a_host));
    CHECK(bitwise_equal(b_out.to_vector(stream), b_host));

    // Moving a communicator keeps it working; the moved-from one is empty.
    nccl::Communicator moved = std::move(comm);
    CHECK(comm.native() == nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
    moved.all_reduce(stream, a, nccl::ReduceOp::sum);
    CHECK(bitwise_equal(a.to_vector(stream), a_host));
    device.rethrow_deferred_error();
}

TEST_CASE("multi.one_rank_collective_in_a_group_is_ordered_at_the_call") {
    // NCCL runs a one-rank collective at the call, group or not (a copy on the stream), so cudarc orders it
    // there (Note [Hazard tracking inside a group]): it waits for a writer held back before it, and a writer
    // issued after it, still inside the group, waits for its read.
    if (!have_nccl()) return;
    auto device = Device::open(0);
    auto comms = one_rank(device);
    auto& comm = comms[0];
    const auto copy = bench_module(device).kernel<BenchCopy::signature>("bench_copy");
    auto writer = device.create_stream();
    auto reader = device.create_stream();
    auto third = device.create_stream();
    const auto host = random_floats(kN);
    const auto later = random_floats(kN);
    const auto source = DeviceSlice<float>::from_host(writer, host);
    const auto later_source = DeviceSlice<float>::from_host(writer, later);
    auto x = DeviceSlice<float>::from_host(writer, poisoned(kN));
    auto y = DeviceSlice<float>::from_host(reader, poisoned(kN));
    writer.synchronize();
    reader.synchronize();
    hold_back(writer, kHoldMs);
    launch(writer, LaunchConfig::for_elements(kN, device), copy, x, source, kN);  // x = host, held back
    hold_back(reader, kHoldMs);  // the collective's read is held back too: the later write must wait for it
    {
        nccl::Group group;
        const auto before = device.counters();
        comm.all_reduce(reader, x, y);  // y = x: waits for the held-back copy now
        CHECK((device.counters() - before).cross_stream_waits == 1);
        launch(writer, LaunchConfig::for_elements(kN, device), copy, x, later_source, kN);  // after the read
    }
    CHECK(bitwise_equal(y.to_vector(third), host));
    CHECK(bitwise_equal(x.to_vector(third), later));
}

TEST_CASE("multi.one_rank_collectives_track_exactly_their_views_bytes") {
    // Each operand of a collective covers exactly its view's bytes, as a launch argument does: collectives
    // on disjoint halves of one buffer, on two streams, insert no wait between them, while a read of the
    // half a held-back collective wrote waits for it.
    if (!have_nccl()) return;
    auto device = Device::open(0);
    auto comms = one_rank(device);
    auto& comm = comms[0];
    const auto copy_kernel = bench_module(device).kernel<BenchCopy::signature>("bench_copy");
    auto a = device.create_stream();
    auto b = device.create_stream();
    auto third = device.create_stream();
    const auto data = random_floats(2 * kN);  // x's contents
    const auto fresh = random_floats(kN);     // written over x's first half, held back
    const auto source = DeviceSlice<float>::from_host(a, fresh);
    auto x = DeviceSlice<float>::from_host(a, data);
    auto y = DeviceSlice<float>::from_host(a, poisoned(2 * kN));
    a.synchronize();
    // Stream b takes the second halves over once: it waits for the uploads on `a` here, not below.
    comm.all_reduce(b, x.view(kN, kN), y.view(kN, kN));
    b.synchronize();

    const auto before = device.counters();
    hold_back(a, kHoldMs);
    launch(a, LaunchConfig::for_elements(kN, device), copy_kernel, x.view(0, kN), source, kN);
    comm.all_reduce(a, x.view(0, kN), y.view(0, kN));    // held back with the copy
    comm.all_reduce(b, x.view(kN, kN), y.view(kN, kN));  // the other halves: nothing to wait for
    CHECK((device.counters() - before).cross_stream_waits == 0);

    // Reading the first half of y on b overlaps a's held-back collective: one wait, and the new data.
    std::vector<float> first(kN, poison_float());
    copy(b, std::span<float>(first), y.view(0, kN));
    CHECK((device.counters() - before).cross_stream_waits == 1);
    CHECK(bitwise_equal(first, fresh));
    const auto all = y.to_vector(third);
    CHECK(std::memcmp(all.data(), fresh.data(), kN * sizeof(float)) == 0);
    CHECK(std::memcmp(all.data() + kN, data.data() + kN, kN * sizeof(float)) == 0);
}

// Two or more GPUs: peer access, copies between devices, hazard tracking across devices (held-back
// writers and readers on one device, the other side on another), and NCCL over every device. Each case
// reports itself as skipped on a machine with one GPU (and the NCCL cases where NCCL is missing).
//
// Note: peer access, once enabled, lasts as long as the process's primary contexts; ctest runs every case
// in a process of its own. The cases that need it off check first, and say so when another case in the
// same run enabled it already.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <thread>

#include "core/device_state.hpp"
#include "multi_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

constexpr std::size_t kN = (std::size_t{1} << 20) + 7;
constexpr double kHoldMs = 50.0;

template <typename Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// Host -> device 0 -> device 1 -> device 0 -> host, whole and through sub-views, on streams of both devices.
void copy_round_trip(Device& d0, Device& d1, const char* label) {
    INFO(label);
    auto s0 = d0.create_stream();
    auto s1 = d1.create_stream();
    const auto host = random_floats(kN);
    const auto x0 = DeviceSlice<float>::from_host(s0, host);
    auto y1 = DeviceSlice<float>::from_host(s1, poisoned(kN));
    auto z0 = DeviceSlice<float>::from_host(s0, poisoned(kN));
    copy(s1, y1.view(), x0.view());  // on the destination's stream
    copy(s1, z0.view(), y1.view());  // on the source's stream
    CHECK(bitwise_equal(z0.to_vector(s0), host));
    CHECK(bitwise_equal(y1.to_vector(s1), host));

    // Sub-views at odd offsets, on the source's stream (device 0's).
    constexpr std::size_t offset = 5;
    constexpr std::size_t count = kN - 11;
    auto w1 = DeviceSlice<float>::from_host(s1, poisoned(kN));
    copy(s0, w1.view(3, count), x0.view(offset, count));
    const auto w = w1.to_vector(s1);
    CHECK(std::memcmp(w.data() + 3, host.data() + offset, count * sizeof(float)) == 0);
    CHECK(count_touched_outside(w, 3, count) == 0);
}

}  // namespace

TEST_CASE("multi.peer_copy_round_trip_with_and_without_peer_access") {
    if (!have_devices(2)) return;
    auto d0 = Device::open(0);
    auto d1 = Device::open(1);
    if (!d0.peer_access_enabled(d1) && !d1.peer_access_enabled(d0)) {
        copy_round_trip(d0, d1, "without peer access (staged through host memory by the driver)");
    } else {
        MESSAGE("peer access was enabled earlier in this process: the round trip without it ran elsewhere");
    }
    // A copy's stream must be on one of the two devices.
    if (Device::count() >= 3) {
        auto d2 = Device::open(2);
        auto s2 = d2.create_stream();
        auto s0 = d0.create_stream();
        auto s1 = d1.create_stream();
        const auto a = DeviceSlice<float>::zeros(s0, 16);
        auto b = DeviceSlice<float>::zeros(s1, 16);
        CHECK(contains(error_of([&] { copy(s2, b.view(), a.view()); }), "use a stream of either device"));
    }
    if (!d0.can_access_peer(d1) || !d1.can_access_peer(d0)) {
        MESSAGE("devices 0 and 1 cannot access each other's memory: no round trip with peer access");
        return;
    }
    d0.enable_peer_access(d1);
    d1.enable_peer_access(d0);
    copy_round_trip(d0, d1, "with peer access both ways");
}

TEST_CASE("multi.peer_access_is_one_directional_and_idempotent") {
    if (!have_devices(2)) return;
    auto d0 = Device::open(0);
    auto d1 = Device::open(1);
    CHECK_FALSE(d0.can_access_peer(d0));  // a device is not its own peer
    CHECK(contains(error_of([&] { d0.enable_peer_access(d0); }), "is not its own peer"));
    CHECK_FALSE(d0.peer_access_enabled(d0));
    if (!d1.can_access_peer(d0)) {
        CHECK(contains(error_of([&] { d1.enable_peer_access(d0); }),
                       "cannot access device 0's memory directly"));
        CHECK_FALSE(d1.peer_access_enabled(d0));
        return;
    }
    const bool reverse_before = d0.peer_access_enabled(d1);
    d1.enable_peer_access(d0);
    CHECK(d1.peer_access_enabled(d0));
    CHECK(d0.peer_access_enabled(d1) == reverse_before);  // the other direction is untouched
    d1.enable_peer_access(d0);                            // idempotent
    CHECK(d1.peer_access_enabled(d0));

    // Device 1's kernels may now use device 0's memory; device 0's kernels may use device 1's only when that
    // direction was enabled too.
    auto s0 = d0.create_stream();
    auto s1 = d1.create_stream();
    const auto host = random_floats(kN);
    const auto x0 = DeviceSlice<float>::from_host(s0, host);
    auto y1 = DeviceSlice<float>::from_host(s1, poisoned(kN));
    const auto copy1 = bench_module(d1).kernel<BenchCopy::signature>("bench_copy");
    launch(s1, LaunchConfig::for_elements(kN, d1), copy1, y1, x0, kN);  // y1 = x0, read over the peer link
    CHECK(bitwise_equal(y1.to_vector(s1), host));
    if (!d0.peer_access_enabled(d1)) {
        const auto copy0 = bench_module(d0).kernel<BenchCopy::signature>("bench_copy");
        auto z0 = DeviceSlice<float>::zeros(s0, kN);
        const auto before = d0.counters();
        CHECK(
            contains(error_of([&] { launch(s0, LaunchConfig::for_elements(kN, d0), copy0, z0, y1, kN); }),
                     "argument 1 of kernel 'bench_copy' is a buffer on device 1, the stream is on device 0"));
        CHECK((d0.counters() - before).cross_stream_waits == 0);  // rejected before any wait
    }
}

TEST_CASE("multi.cross_device_ordering_held_back_writer_on_device_0_read_on_device_1") {
    if (!have_devices(2)) return;
    auto d0 = Device::open(0);
    auto d1 = Device::open(1);
    const auto fill0 = bench_module(d0).kernel<BenchFill::signature>("bench_fill");
    const auto copy0 = bench_module(d0).kernel<BenchCopy::signature>("bench_copy");
    auto s0 = d0.create_stream();
    auto s1 = d1.create_stream();
    const auto host = random_floats(kN);
    const auto source0 = DeviceSlice<float>::from_host(s0, host);
    auto y1 = DeviceSlice<float>::from_host(s1, poisoned(kN));
    std::optional<DeviceSlice<float>> x0 = DeviceSlice<float>::from_host(s0, poisoned(kN));
    s0.synchronize();
    s1.synchronize();

    // Read after write: device 1's stream must wait for device 0's held-back writer (an event of device 0
    // waited on by a stream of device 1).
    const auto before0 = d0.counters();
    const auto before1 = d1.counters();
    hold_back(s0, kHoldMs);
    launch(s0, LaunchConfig::for_elements(kN, d0), copy0, *x0, source0, kN);  // x0 = source, held back
    copy(s1, y1.view(), x0->view());                                          // read on device 1
    CHECK((d1.counters() - before1).cross_stream_waits == 1);                 // counted where it waits
    CHECK((d0.counters() - before0).events_recorded == 1);                    // recorded where the write is
    CHECK(bitwise_equal(y1.to_vector(s1), host));

    // Write after read: device 0's writer must wait for device 1's held-back read.
    auto z1 = DeviceSlice<float>::from_host(s1, poisoned(kN));
    s1.synchronize();
    hold_back(s1, kHoldMs);
    copy(s1, z1.view(), x0->view());                                       // reads x0 on device 1, held back
    launch(s0, LaunchConfig::for_elements(kN, d0), fill0, *x0, 7.0f, kN);  // overwrites x0 on device 0
    CHECK(bitwise_equal(z1.to_vector(s1), host));
    CHECK(all_equal(x0->to_vector(s0), 7.0f));

    // Free after a use on another device: the memory goes back to device 0's allocator only after the
    // held-back read on device 1; the next allocation of that size on s0 (the same cached block) is written
    // at once, and the read must still see the old contents.
    auto w1 = DeviceSlice<float>::from_host(s1, poisoned(kN));
    s1.synchronize();
    hold_back(s1, kHoldMs);
    copy(s1, w1.view(), x0->view());
    x0.reset();
    auto reused = DeviceSlice<float>::uninitialized(s0, kN);
    launch(s0, LaunchConfig::for_elements(kN, d0), fill0, reused, 9.0f, kN);
    CHECK(all_equal(w1.to_vector(s1), 7.0f));
    CHECK(all_equal(reused.to_vector(s0), 9.0f));

    // A kernel on device 1 reading device 0's memory directly (peer access) waits the same way.
    if (d1.can_access_peer(d0)) {
        d1.enable_peer_access(d0);
        const auto copy1 = bench_module(d1).kernel<BenchCopy::signature>("bench_copy");
        auto v0 = DeviceSlice<float>::from_host(s0, poisoned(kN));
        auto v1 = DeviceSlice<float>::from_host(s1, poisoned(kN));
        s0.synchronize();
        s1.synchronize();
        hold_back(s0, kHoldMs);
        launch(s0, LaunchConfig::for_elements(kN, d0), copy0, v0, source0, kN);  // held-back writer
        launch(s1, LaunchConfig::for_elements(kN, d1), copy1, v1, v0, kN);       // reader on device 1
        CHECK(bitwise_equal(v1.to_vector(s1), host));
    } else {
        MESSAGE("device 1 cannot access device 0's memory: the peer-access launch case did not run");
    }

    // Joining a stream of another device: s1 waits for s0's held-back work.
    auto u0 = DeviceSlice<float>::from_host(s0, poisoned(kN));
    auto u1 = DeviceSlice<float>::from_host(s1, poisoned(kN));
    s0.synchronize();
    hold_back(s0, kHoldMs);
    launch(s0, LaunchConfig::for_elements(kN, d0), copy0, u0, source0, kN);
    s1.join(s0);
    // Raw addresses bypass hazard tracking: only the join orders this copy after the write.
    {
        const auto scope = cudarc::detail::Internals::device_state(d1)->bind();
        cudarc::detail::Internals::device_state(d1)->check(
            cudarc::detail::Internals::device_state(d1)->api().memcpy_peer_async(
                u1.device_ptr(), cudarc::detail::Internals::device_state(d1)->context(), u0.device_ptr(),
                cudarc::detail::Internals::device_state(d0)->context(), kN * sizeof(float), s1.native()),
            sys::Entry::memcpy_peer_async);
    }
    s1.synchronize();
    CHECK(bitwise_equal(u1.to_vector(s1), host));
}

TEST_CASE("multi.all_reduce_over_every_device_against_a_float64_reference") {
    if (!have_devices(2) || !have_nccl()) return;
    auto devices = open_all_devices();
    const auto n_devices = devices.size();
    auto comms = nccl::Communicator::init_all(devices);
    REQUIRE(comms.size() == n_devices);
    std::vector<Stream> streams;
    std::vector<std::vector<float>> inputs;
    std::vector<DeviceSlice<float>> x;
    std::vector<DeviceSlice<float>> sum;
    std::vector<DeviceSlice<std::int32_t>> counts;
    std::vector<std::int32_t> want_counts(kN, 0);
    std::vector<std::vector<std::int32_t>> count_inputs;
    for (std::size_t r = 0; r < n_devices; ++r) {
        CHECK(comms[r].rank() == static_cast<int>(r));
        CHECK(comms[r].world_size() == static_cast<int>(n_devices));
        CHECK(comms[r].device_ordinal() == devices[r].ordinal());
        streams.push_back(devices[r].create_stream());
        inputs.push_back(random_floats(kN));
        x.push_back(DeviceSlice<float>::from_host(streams[r], inputs[r]));
        sum.push_back(DeviceSlice<float>::from_host(streams[r], poisoned(kN)));
        auto ints = random_words(kN);
        std::vector<std::int32_t> values(kN);
        for (std::size_t i = 0; i < kN; ++i) values[i] = static_cast<std::int32_t>(ints[i] % 100000u) - 50000;
        for (std::size_t i = 0; i < kN; ++i) want_counts[i] += values[i];
        counts.push_back(DeviceSlice<std::int32_t>::from_host(streams[r], values));
    }
    {
        nccl::Group group;  // one thread drives every rank
        for (std::size_t r = 0; r < n_devices; ++r) {
            comms[r].all_reduce(streams[r], x[r], sum[r], nccl::ReduceOp::sum);
            comms[r].all_reduce(streams[r], counts[r], nccl::ReduceOp::sum);  // in place, exact
        }
    }
    std::vector<double> want(kN, 0.0);
    std::vector<double> magnitude(kN, 0.0);
    for (std::size_t r = 0; r < n_devices; ++r) {
        for (std::size_t i = 0; i < kN; ++i) {
            want[i] += static_cast<double>(inputs[r][i]);
            magnitude[i] += std::abs(static_cast<double>(inputs[r][i]));
        }
    }
    // A float32 sum of n terms in any order is within n units of rounding of the magnitude sum.
    const double ranks = static_cast<double>(n_devices);
    const auto tolerance = [&](std::size_t i) { return ranks * fp32_tolerance(magnitude[i]); };
    std::vector<float> first;
    for (std::size_t r = 0; r < n_devices; ++r) {
        const auto got = sum[r].to_vector(streams[r]);
        CHECK(count_mismatches(got, want, tolerance, "all_reduce sum on rank " + std::to_string(r)) == 0);
        if (r == 0) {
            first = got;
        } else {
            CHECK(bitwise_equal(got, first));  // every rank holds the same result, bit for bit
        }
        CHECK(bitwise_equal(counts[r].to_vector(streams[r]), want_counts));
    }
}

TEST_CASE("multi.collectives_over_every_device") {
    if (!have_devices(2) || !have_nccl()) return;
    auto devices = open_all_devices();
    const std::size_t n = devices.size();
    const int last = static_cast<int>(n) - 1;
    auto comms = nccl::Communicator::init_all(devices);
    constexpr std::size_t block = 4097;
    std::vector<Stream> streams;
    std::vector<std::vector<float>> inputs;  // block * n elements each
    std::vector<DeviceSlice<float>> x, bcast, reduced, gathered, scattered;
    for (std::size_t r = 0; r < n; ++r) {
        streams.push_back(devices[r].create_stream());
        inputs.push_back(random_floats(block * n));
        x.push_back(DeviceSlice<float>::from_host(streams[r], inputs[r]));
        bcast.push_back(DeviceSlice<float>::from_host(streams[r], poisoned(block * n)));
        reduced.push_back(DeviceSlice<float>::from_host(streams[r], poisoned(block * n)));
        gathered.push_back(DeviceSlice<float>::from_host(streams[r], poisoned(block * n * n)));
        scattered.push_back(DeviceSlice<float>::from_host(streams[r], poisoned(block)));
    }
    {
        nccl::Group group;
        for (std::size_t r = 0; r < n; ++r) {
            comms[r].broadcast(streams[r], x[r], bcast[r], last);
            comms[r].reduce(streams[r], x[r], reduced[r], 0, nccl::ReduceOp::max);
            comms[r].all_gather(streams[r], x[r], gathered[r]);
            comms[r].reduce_scatter(streams[r], x[r], scattered[r], nccl::ReduceOp::sum);
        }
        group.end();
    }
    for (std::size_t r = 0; r < n; ++r) {
        INFO("rank " << r);
        CHECK(bitwise_equal(bcast[r].to_vector(streams[r]), inputs[static_cast<std::size_t>(last)]));
        const auto gathered_got = gathered[r].to_vector(streams[r]);
        for (std::size_t q = 0; q < n; ++q) {
            CHECK(std::memcmp(gathered_got.data() + q * block * n, inputs[q].data(),
                              block * n * sizeof(float)) == 0);
        }
        std::vector<double> want(block, 0.0);
        std::vector<double> magnitude(block, 0.0);
        for (std::size_t q = 0; q < n; ++q) {
            for (std::size_t i = 0; i < block; ++i) {
                want[i] += static_cast<double>(inputs[q][r * block + i]);
                magnitude[i] += std::abs(static_cast<double>(inputs[q][r * block + i]));
            }
        }
        const auto tolerance = [&](std::size_t i) {
            return static_cast<double>(n) * fp32_tolerance(magnitude[i]);
        };
        CHECK(count_mismatches(scattered[r].to_vector(streams[r]), want, tolerance, "reduce_scatter") == 0);
    }
    std::vector<float> want_max(block * n);
    for (std::size_t i = 0; i < block * n; ++i) {
        float m = inputs[0][i];
        for (std::size_t q = 1; q < n; ++q) m = std::max(m, inputs[q][i]);
        want_max[i] = m;
    }
    CHECK(bitwise_equal(reduced[0].to_vector(streams[0]), want_max));  // the root's (others' are unspecified)
}

TEST_CASE("multi.send_recv_ring") {
    if (!have_devices(2) || !have_nccl()) return;
    auto devices = open_all_devices();
    const std::size_t n = devices.size();
    auto comms = nccl::Communicator::init_all(devices);
    std::vector<Stream> streams;
    std::vector<std::vector<float>> inputs;
    std::vector<DeviceSlice<float>> x, y;
    for (std::size_t r = 0; r < n; ++r) {
        streams.push_back(devices[r].create_stream());
        inputs.push_back(random_floats(kN));
        x.push_back(DeviceSlice<float>::from_host(streams[r], inputs[r]));
        y.push_back(DeviceSlice<float>::from_host(streams[r], poisoned(kN)));
    }
    {
        nccl::Group group;  // every send and receive progresses together
        for (std::size_t r = 0; r < n; ++r) {
            comms[r].send(streams[r], x[r], static_cast<int>((r + 1) % n));
            comms[r].recv(streams[r], y[r], static_cast<int>((r + n - 1) % n));
        }
    }
    for (std::size_t r = 0; r < n; ++r) {
        INFO("rank " << r);
        CHECK(bitwise_equal(y[r].to_vector(streams[r]), inputs[(r + n - 1) % n]));
    }
}

TEST_CASE("multi.init_rank_with_one_thread_per_device") {
    if (!have_devices(2) || !have_nccl()) return;
    const int n = Device::count();
    const auto id = nccl::UniqueId::create();
    const auto id_bytes = id.bytes();
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < n; ++r) inputs.push_back(random_floats(kN));
    std::vector<std::vector<float>> results(static_cast<std::size_t>(n));
    std::vector<int> ranks(static_cast<std::size_t>(n), -1);
    std::vector<int> sizes(static_cast<std::size_t>(n), -1);
    std::vector<std::exception_ptr> failures(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
            const auto slot = static_cast<std::size_t>(r);
            try {
                auto device = Device::open(r);
                // Each rank rebuilds the id from its bytes, as a process that received them would.
                auto comm = nccl::Communicator::init_rank(device, nccl::UniqueId::from_bytes(id_bytes), r, n);
                ranks[slot] = comm.rank();
                sizes[slot] = comm.world_size();
                auto stream = device.create_stream();
                auto x = DeviceSlice<float>::from_host(stream, inputs[slot]);
                comm.all_reduce(stream, x, nccl::ReduceOp::sum);  // no group: one thread per rank
                results[slot] = x.to_vector(stream);
                device.rethrow_deferred_error();
            } catch (...) {
                failures[slot] = std::current_exception();
            }
        });
    }
    for (auto& thread : threads) thread.join();
    for (int r = 0; r < n; ++r) {
        const auto slot = static_cast<std::size_t>(r);
        if (failures[slot]) {
            try {
                std::rethrow_exception(failures[slot]);
            } catch (const std::exception& e) {
                FAIL("rank " << r << ": " << e.what());
            }
        }
        CHECK(ranks[slot] == r);
        CHECK(sizes[slot] == n);
    }
    std::vector<double> want(kN, 0.0);
    std::vector<double> magnitude(kN, 0.0);
    for (const auto& input : inputs) {
        for (std::size_t i = 0; i < kN; ++i) {
            want[i] += static_cast<double>(input[i]);
            magnitude[i] += std::abs(static_cast<double>(input[i]));
        }
    }
    const auto tolerance = [&](std::size_t i) {
        return static_cast<double>(n) * fp32_tolerance(magnitude[i]);
    };
    for (int r = 0; r < n; ++r) {
        CHECK(count_mismatches(results[static_cast<std::size_t>(r)], want, tolerance,
                               "init_rank all_reduce") == 0);
    }
}

// Out of memory, then recovery (issue 4, 7c): under a cap set with AllocatorConfig::memory_fraction, and on
// the shared device with a request larger than the GPU.
//
// Note: device options apply when a device is first opened in a process, and a shipped module keeps its
// device open until exit. The capped test therefore opens the device before anything else in this process
// may have (this file sorts first among the GPU tests, and ctest runs every case in its own process), uses
// no shipped module, and checks that its cap took effect before relying on it.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "alloc/caching_source.hpp"
#include "alloc_gpu_support.hpp"
#include "core/device_state.hpp"
#include "gpu_test.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

constexpr std::size_t kMiB = 1024 * 1024;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Device 0's total memory, read without opening a cudarc device (which would fix its options).
std::size_t total_memory_of_device_0() {
    const sys::DriverApi& api = sys::driver();
    sys::Device device = 0;
    sys::check(api, api.device_get(&device, 0), sys::Entry::device_get, 0);
    std::size_t total = 0;
    sys::check(api, api.device_total_mem(&total, device), sys::Entry::device_total_mem, 0);
    return total;
}

// The configuration the device's allocator was built with, or null when it has none.
const AllocatorConfig* allocator_config(const Device& device) {
    auto* caching =
        dynamic_cast<alloc::CachingSource*>(&cudarc::detail::Internals::device_state(device)->memory());
    return caching != nullptr ? &caching->allocator().config() : nullptr;
}

// Allocates `floats` and fills them with fresh random data, returned in `host`.
DeviceSlice<float> filled(Stream& stream, std::size_t floats, std::vector<float>& host) {
    host = random_floats(floats);
    return DeviceSlice<float>::from_host(stream, host);
}

}  // namespace

TEST_CASE("alloc.capped_device_runs_out_of_memory_and_recovers") {
    // A cap of 300 MiB: four 64 MiB segments fit (256 MiB), a fifth does not.
    const std::size_t total = total_memory_of_device_0();
    const std::size_t cap = 300 * kMiB;
    DeviceOptions options;
    options.memory_source = MemorySource::caching_allocator;  // whatever CUDARC_ALLOCATOR says
    options.allocator.memory_fraction = static_cast<double>(cap) / static_cast<double>(total);
    auto device = Device::open(0, options);
    const AllocatorConfig* config = allocator_config(device);
    if (config == nullptr || config->memory_fraction != options.allocator.memory_fraction) {
        MESSAGE(
            "device 0 was already open in this process with other options: the cap cannot apply here. "
            "Run this case on its own: cudarc_gpu_tests "
            "-tc='alloc.capped_device_runs_out_of_memory_and_recovers'");
        return;
    }
    auto stream = device.create_stream();
    const AllocatorStats s0 = device.allocator_stats();
    REQUIRE(s0.reserved_bytes == 0);

    // Fill up to the cap with 64 MiB slices of random data.
    constexpr std::size_t kFloats = 16 * kMiB;  // 64 MiB
    std::vector<DeviceSlice<float>> slices;
    std::vector<std::vector<float>> hosts;
    std::optional<OutOfMemory> error;
    for (int i = 0; i < 8 && !error; ++i) {
        std::vector<float> host;
        try {
            slices.push_back(filled(stream, kFloats, host));
            hosts.push_back(std::move(host));
        } catch (const OutOfMemory& e) {
            error = e;
        }
    }
    REQUIRE(error.has_value());
    CHECK(slices.size() == 4);
    const AllocatorStats s1 = device.allocator_stats();
    const OutOfMemory::Figures& f = error->figures();
    CHECK(f.requested == 64 * kMiB);
    CHECK(f.allocated == 4 * 64 * kMiB);
    CHECK(f.reserved == 4 * 64 * kMiB);
    CHECK(f.device_total == device.memory_info().total);
    CHECK(f.device_free <= f.device_total);
    CHECK(f.device_free > 0);
    const std::string message = error->what();
    CHECK(message.find("out of memory on device 0") != std::string::npos);
    CHECK(message.find(fmt::format("requested {} bytes", 64 * kMiB)) != std::string::npos);
    CHECK(message.find(fmt::format("{} bytes reserved", 4 * 64 * kMiB)) != std::string::npos);
    CHECK(message.find("Hint") != std::string::npos);
    // The failed request changed nothing but the error count; the data already there is intact.
    CHECK(s1.out_of_memory_errors == s0.out_of_memory_errors + 1);
    CHECK(s1.live_allocations == 4);
    CHECK(s1.allocated_bytes == 4 * 64 * kMiB);
    CHECK(s1.reserved_bytes == 4 * 64 * kMiB);
    CHECK(s1.driver_allocations == 4);
    CHECK(check_snapshot_agrees(device) == 0);
    for (std::size_t i = 0; i < slices.size(); ++i)
        CHECK(bitwise_equal(slices[i].to_vector(stream), hosts[i]));

    // Recovery 1: free one slice; the same request is now served from the cache, no driver call.
    slices.erase(slices.begin() + 1);
    hosts.erase(hosts.begin() + 1);
    std::vector<float> host;
    slices.push_back(filled(stream, kFloats, host));
    hosts.push_back(std::move(host));
    const AllocatorStats s2 = device.allocator_stats();
    CHECK(s2.cache_hits == s1.cache_hits + 1);
    CHECK(s2.driver_allocations == s1.driver_allocations);
    CHECK(bitwise_equal(slices.back().to_vector(stream), hosts.back()));

    // Recovery 2: with everything freed, a 200 MiB request needs a new segment, which the cap allows only
    // once the cached 64 MiB segments are given back: the first escalation step does that and retries.
    slices.clear();
    hosts.clear();
    auto big = filled(stream, 50 * kMiB, host);
    const AllocatorStats s3 = device.allocator_stats();
    CHECK(s3.oom_retries == s2.oom_retries + 1);
    CHECK(s3.driver_frees == s2.driver_frees + 4);
    CHECK(s3.reserved_bytes == 200 * kMiB);
    CHECK(s3.out_of_memory_errors == s2.out_of_memory_errors);
    CHECK(bitwise_equal(big.to_vector(stream), host));
    big = DeviceSlice<float>{};

    // empty_cache returns what is cached: reserved drops to nothing.
    device.empty_cache();
    const AllocatorStats s4 = device.allocator_stats();
    CHECK(s4.reserved_bytes == 0);
    CHECK(s4.segments == 0);
    CHECK(s4.driver_frees == s3.driver_frees + 1);

    // Recovery 3: a block freed while another stream still reads it cannot be given back, so the second
    // escalation step waits for that stream's event (the allocator's only host-blocking wait) and reuses it.
    {
        SpinKernel spin(device);
        auto reader = device.create_stream();
        std::vector<float> held_host;
        auto held = filled(stream, 64 * kMiB, held_host);  // 256 MiB
        const auto next_host = random_floats(32 * kMiB);   // 128 MiB, made before the spin starts
        auto seen = DeviceSlice<float>::from_host(reader, std::vector<float>(kMiB / 4, poison_float()));
        spin.launch(reader, spin.cycles_for_ms(300.0));
        copy(reader, seen.view(), held.view(0, seen.size()));  // queued behind the spin
        held = DeviceSlice<float>{};                           // held back for the reader's event
        const AllocatorStats s5 = device.allocator_stats();
        const Counters before = device.counters();
        CHECK(s5.active_bytes - s5.allocated_bytes == 256 * kMiB);
        // 128 MiB more would pass the cap (256 + 2 + 128 MiB): only the held block can serve it.
        auto next = DeviceSlice<float>::from_host(stream, next_host);
        const AllocatorStats s6 = device.allocator_stats();
        const Counters waited = device.counters() - before;
        CHECK(s6.event_synchronizations == s5.event_synchronizations + 1);
        CHECK(waited.event_synchronizes == 1);
        CHECK(s6.oom_retries > s5.oom_retries);
        CHECK(s6.driver_allocations == s5.driver_allocations);  // served from the released block
        CHECK(s6.out_of_memory_errors == s5.out_of_memory_errors);
        const std::vector<float> held_prefix(held_host.begin(),
                                             held_host.begin() + static_cast<std::ptrdiff_t>(seen.size()));
        CHECK(bitwise_equal(seen.to_vector(reader), held_prefix));
        CHECK(bitwise_equal(next.to_vector(stream), next_host));
        CHECK(check_snapshot_agrees(device) == 0);
    }
    device.empty_cache();
    CHECK(device.allocator_stats().reserved_bytes == 0);
}

TEST_CASE("alloc.request_larger_than_the_device_throws_out_of_memory_and_changes_nothing") {
    // Note: the allocator asks the driver for the segment, and the driver's refusal is the out-of-memory
    // answer; compute-sanitizer reports that refused cuMemAlloc as an API error unless run with
    // --report-api-errors no.
    auto opened = open_device_with(MemorySource::caching_allocator);
    if (!opened) return;
    Device& device = *opened;
    auto stream = device.create_stream();
    std::vector<float> host;
    auto keep = filled(stream, kMiB, host);
    const AllocatorStats before = device.allocator_stats();
    const std::size_t huge = 2 * device.total_memory() + 7;

    std::optional<OutOfMemory> error;
    try {
        auto never = DeviceSlice<std::uint8_t>::uninitialized(stream, huge);
        FAIL("allocating twice the device's memory succeeded");
    } catch (const OutOfMemory& e) {
        error = e;
    }
    REQUIRE(error.has_value());
    const AllocatorStats after = device.allocator_stats();
    const OutOfMemory::Figures& f = error->figures();
    CHECK(f.requested >= huge);
    CHECK(f.requested < huge + 512);  // rounded to 512 bytes
    CHECK(f.allocated == after.allocated_bytes);
    CHECK(f.reserved == after.reserved_bytes);
    CHECK(f.device_total == device.memory_info().total);
    CHECK(f.device_free <= f.device_total);
    const std::string message = error->what();
    CHECK(message.find(fmt::format("requested {} bytes", f.requested)) != std::string::npos);
    CHECK(message.find("Hint") != std::string::npos);
    // It is a cudarc::Error (and so a std::runtime_error) like every other failure.
    const Error& as_error = *error;
    CHECK(std::string(as_error.what()) == message);

    CHECK(after.out_of_memory_errors == before.out_of_memory_errors + 1);
    CHECK(after.live_allocations == before.live_allocations);
    CHECK(after.allocated_bytes == before.allocated_bytes);
    CHECK(after.reserved_bytes <= before.reserved_bytes);  // the escalation may give cached segments back
    CHECK(check_snapshot_agrees(device) == 0);

    // The allocator is still usable, and what was there is intact.
    CHECK(bitwise_equal(keep.to_vector(stream), host));
    std::vector<float> more_host;
    auto more = filled(stream, 64 * kMiB, more_host);
    CHECK(bitwise_equal(more.to_vector(stream), more_host));
    CHECK(device.allocator_stats().out_of_memory_errors == after.out_of_memory_errors);
}

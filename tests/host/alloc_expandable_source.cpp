// MemorySource::expandable on the fake driver, which models virtual memory (testing/fake_driver): data
// across chunks, the synchronize before unmapping, selection by CUDARC_ALLOCATOR, drivers and devices
// without virtual memory, peers, captures; and every source's timeline and its JSON.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::error_from;
using cudarc::test::FakeGpu;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

Device open_with(MemorySource source) {
    DeviceOptions options;
    options.memory_source = source;
    return Device::open(0, options);
}

std::vector<std::uint32_t> random_words(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::uint32_t> out(n);
    for (auto& w : out) w = static_cast<std::uint32_t>(rng());
    return out;
}

// Sets CUDARC_ALLOCATOR for one scope, and puts back what was there.
class AllocatorVariable {
  public:
    explicit AllocatorVariable(const char* value) {
        if (const char* old = std::getenv("CUDARC_ALLOCATOR")) previous_ = old;
        ::setenv("CUDARC_ALLOCATOR", value, 1);
    }
    AllocatorVariable(const AllocatorVariable&) = delete;
    AllocatorVariable& operator=(const AllocatorVariable&) = delete;
    ~AllocatorVariable() {
        if (previous_) {
            ::setenv("CUDARC_ALLOCATOR", previous_->c_str(), 1);
        } else {
            ::unsetenv("CUDARC_ALLOCATOR");
        }
    }

  private:
    std::optional<std::string> previous_;
};

}  // namespace

TEST_CASE("alloc.expandable_source_keeps_data_across_chunks") {
    FakeGpu gpu;
    {
        auto device = open_with(MemorySource::expandable);
        REQUIRE(device.memory_source() == MemorySource::expandable);
        auto& stream = device.default_stream();
        const Counters before = device.counters();
        // Five 7 MiB slices: the third and the fifth span a 16 MiB chunk boundary, each mapped as it was
        // needed.
        std::vector<std::vector<std::uint32_t>> hosts;
        std::vector<DeviceSlice<std::uint32_t>> slices;
        for (std::uint64_t i = 0; i < 5; ++i) {
            hosts.push_back(random_words(7 * kMiB / 4, 17 + i));
            slices.push_back(DeviceSlice<std::uint32_t>::from_host(stream, hosts.back()));
        }
        for (std::size_t i = 1; i < slices.size(); ++i)
            CHECK(slices[i].device_ptr() == slices[i - 1].device_ptr() + 7 * kMiB);  // grown in place
        for (std::size_t i = 0; i < slices.size(); ++i) CHECK(slices[i].to_vector(stream) == hosts[i]);
        copy(stream, slices[0].view(), slices[3].view());
        CHECK(slices[0].to_vector(stream) == hosts[3]);

        const AllocatorStats stats = device.allocator_stats();
        CHECK(stats.reserved_bytes == 48 * kMiB);
        CHECK(stats.segments == 1);
        CHECK(stats.address_space_bytes > 8 * std::size_t{1024} * kMiB);  // the fake device has 8 GiB
        const Counters made = device.counters() - before;
        CHECK(made.driver_allocations == 3);
        CHECK(gpu.faults.calls(fake::Entry::mem_address_reserve) == 1);
        CHECK(gpu.faults.calls(fake::Entry::mem_create) == 3);
        CHECK(gpu.faults.calls(fake::Entry::mem_map) == 3);
        CHECK(gpu.faults.calls(fake::Entry::mem_release) == 3);  // released at once: the mapping keeps it
        CHECK(gpu.faults.calls(fake::Entry::mem_set_access) == 3);
        CHECK(gpu.faults.calls(fake::Entry::mem_alloc) == 0);
        CHECK(gpu.driver.physical_bytes(0) == 48 * kMiB);

        slices.clear();
        device.empty_cache();
        const Counters after = device.counters() - before;
        CHECK(after.driver_frees == 3);
        CHECK(after.context_synchronizes == 1);  // once, before unmapping
        CHECK(gpu.faults.calls(fake::Entry::mem_unmap) == 3);
        CHECK(gpu.faults.calls(fake::Entry::mem_address_free) == 1);
        CHECK(gpu.driver.physical_bytes(0) == 0);
        CHECK(device.allocator_stats().reserved_bytes == 0);
        CHECK(device.allocator_stats().segments == 0);
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("alloc.expandable_source_waits_for_queued_work_before_unmapping") {
    FakeGpu gpu;
    {
        auto device = open_with(MemorySource::expandable);
        auto stream = device.create_stream();
        const auto host = random_words(kMiB, 5);
        {
            auto slice = DeviceSlice<std::uint32_t>::uninitialized(stream, host.size());
            gpu.driver.hold(stream.native());  // the copy stays queued, as behind a long kernel
            slice.copy_from_host(stream, host);
        }  // freed on its own stream: back in the pool at once, its copy still queued
        CHECK(gpu.driver.queued_operations() > 0);
        device.empty_cache();  // unmapping first would leave the copy writing to memory that is gone
        CHECK(gpu.driver.queued_operations() == 0);
        CHECK(device.allocator_stats().reserved_bytes == 0);
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("alloc.expandable_source_is_chosen_by_CUDARC_ALLOCATOR") {
    FakeGpu gpu;
    {
        const AllocatorVariable variable("expandable");
        CHECK(Device::open(0).memory_source() == MemorySource::expandable);
        // A value in DeviceOptions wins over the variable.
        CHECK(open_with(MemorySource::caching_allocator).memory_source() == MemorySource::caching_allocator);
    }
    {
        const AllocatorVariable variable("stream_ordered");
        CHECK(Device::open(0).memory_source() == MemorySource::stream_ordered);
    }
    {
        const AllocatorVariable variable("caching_allocator");
        CHECK(Device::open(0).memory_source() == MemorySource::caching_allocator);
    }
    {
        const AllocatorVariable variable("");
        CHECK(Device::open(0).memory_source() == MemorySource::caching_allocator);
    }
    {
        const AllocatorVariable variable("expandible");
        const std::string what = error_from([] { (void)Device::open(0); });
        INFO(what);
        CHECK(contains(what, "CUDARC_ALLOCATOR is 'expandible'"));
        CHECK(contains(what, "caching_allocator, expandable or stream_ordered"));
        CHECK(gpu.driver.live().retained_primary_contexts == 0);
    }
    CHECK(Device::open(0).memory_source() == MemorySource::caching_allocator);
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("alloc.expandable_source_needs_virtual_memory") {
    SUBCASE("a device without it") {
        fake::Options options;
        options.devices[0].virtual_memory = false;
        FakeGpu gpu(options);
        const std::string what = error_from([] { (void)open_with(MemorySource::expandable); });
        INFO(what);
        CHECK(contains(what, "MemorySource::expandable"));
        CHECK(contains(what, "device 0 does not support"));
        CHECK(gpu.driver.live() == fake::LiveCounts{});
        // The other sources do not care.
        CHECK(open_with(MemorySource::caching_allocator).memory_source() == MemorySource::caching_allocator);
    }
    SUBCASE("a driver without cuMemCreate") {
        fake::FakeDriver driver;
        sys::DriverApi api = driver.api();
        api.mem_create = nullptr;
        {
            const fake::DriverOverride installed(api);
            const std::string what = error_from([] { (void)open_with(MemorySource::expandable); });
            INFO(what);
            CHECK(contains(what, "lacks cuMemCreate"));
        }
        CHECK(driver.live() == fake::LiveCounts{});
    }
}

TEST_CASE("alloc.expandable_source_opens_its_chunks_to_peers") {
    fake::Options options;
    options.devices = {fake::DeviceSpec{}, fake::DeviceSpec{}};
    FakeGpu gpu(options);
    {
        auto owner = open_with(MemorySource::expandable);
        auto user = Device::open(1);
        auto a = DeviceSlice<float>::zeros(owner.default_stream(), kMiB);  // one 16 MiB chunk
        CHECK(gpu.driver.access_mask(a.device_ptr()) == 0b01);
        user.enable_peer_access(owner);
        CHECK(gpu.driver.access_mask(a.device_ptr()) == 0b11);                  // what was mapped before
        auto b = DeviceSlice<float>::zeros(owner.default_stream(), 8 * kMiB);   // 32 MiB: new chunks
        CHECK(gpu.driver.access_mask(b.device_ptr() + b.bytes() - 1) == 0b11);  // and what is mapped later
        // The other direction was not asked for.
        auto c = DeviceSlice<float>::zeros(user.default_stream(), 16);
        CHECK(gpu.driver.access_mask(c.device_ptr()) == 0);  // not virtual memory: the fake tracks none
        owner.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("alloc.expandable_source_maps_nothing_inside_a_capture") {
    FakeGpu gpu;
    {
        auto device = open_with(MemorySource::expandable);
        auto stream = device.create_stream();
        { auto warm = DeviceSlice<std::uint8_t>::uninitialized(stream, 4 * kMiB); }
        const std::uint64_t creates = gpu.faults.calls(fake::Entry::mem_create);
        // What is mapped serves the capture.
        auto graph = capture(stream, [&](Stream& s) {
            auto inside = DeviceSlice<std::uint8_t>::uninitialized(s, 8 * kMiB);
            memset(s, inside.view(), 7);
        });
        graph.launch(stream);
        stream.synchronize();
        // What is not throws a clear error before any driver call.
        const std::string what = error_from([&] {
            (void)capture(stream, [&](Stream& s) {
                auto big = DeviceSlice<std::uint8_t>::uninitialized(s, 40 * kMiB);
            });
        });
        INFO(what);
        CHECK(contains(what, "expandable"));
        CHECK(contains(what, "before capturing"));
        CHECK(gpu.faults.calls(fake::Entry::mem_create) == creates);
        device.rethrow_deferred_error();
    }
    CHECK(gpu.driver.violations().empty());
    CHECK(gpu.driver.live() == fake::LiveCounts{});
}

TEST_CASE("alloc.snapshot_timeline_and_json_for_every_source") {
    using Action = AllocatorSnapshot::Event::Action;
    for (const MemorySource source :
         {MemorySource::caching_allocator, MemorySource::expandable, MemorySource::stream_ordered}) {
        CAPTURE(to_string(source));
        FakeGpu gpu;
        auto device = open_with(source);
        auto& stream = device.default_stream();
        device.record_memory_history(1000);
        DevicePtr small_ptr = 0;
        DevicePtr large_ptr = 0;
        {
            auto small = DeviceSlice<std::uint8_t>::uninitialized(stream, kMiB);
            auto large = DeviceSlice<std::uint8_t>::uninitialized(stream, 30 * kMiB);
            small_ptr = small.device_ptr();
            large_ptr = large.device_ptr();
        }
        stream.synchronize();
        device.empty_cache();
        const AllocatorSnapshot snapshot = device.allocator_snapshot();
        CHECK(snapshot.source == to_string(source));
        std::vector<Action> allocations_and_frees;
        std::uint64_t previous_time = 0;
        std::size_t peak_allocated = 0;
        std::size_t peak_reserved = 0;
        for (const auto& event : snapshot.timeline) {
            CHECK(event.time_ns >= previous_time);
            previous_time = event.time_ns;
            peak_allocated = std::max(peak_allocated, event.allocated_bytes);
            peak_reserved = std::max(peak_reserved, event.reserved_bytes);
            if (event.action == Action::allocate || event.action == Action::free) {
                allocations_and_frees.push_back(event.action);
                CHECK(event.stream != 0);
            }
        }
        // Large first: the slices are destroyed in reverse order.
        CHECK(allocations_and_frees ==
              std::vector<Action>{Action::allocate, Action::allocate, Action::free, Action::free});
        REQUIRE_FALSE(snapshot.timeline.empty());
        CHECK(peak_allocated >= 31 * kMiB);
        CHECK(peak_reserved >= peak_allocated);
        if (source != MemorySource::stream_ordered) {
            CHECK(snapshot.timeline.back().allocated_bytes == 0);
            CHECK(snapshot.timeline.back().reserved_bytes == 0);  // empty_cache gave everything back
            const Action gain = source == MemorySource::expandable ? Action::map : Action::segment_allocate;
            const Action loss = source == MemorySource::expandable ? Action::unmap : Action::segment_free;
            const auto has = [&](Action action) {
                return std::any_of(snapshot.timeline.begin(), snapshot.timeline.end(),
                                   [action](const auto& e) { return e.action == action; });
            };
            CHECK(has(gain));
            CHECK(has(loss));
        }

        // The JSON says the same.
        const nlohmann::json json = nlohmann::json::parse(to_json(snapshot));
        CHECK(json["format"] == "cudarc-allocator-snapshot");
        CHECK(json["version"] == 1);
        CHECK(json["source"] == to_string(source));
        REQUIRE(json["timeline"].size() == snapshot.timeline.size());
        bool saw_small = false;
        bool saw_large = false;
        for (const auto& event : json["timeline"]) {
            if (event["action"] != "allocate") continue;
            saw_small = saw_small || event["address"].get<DevicePtr>() == small_ptr;
            saw_large = saw_large || event["address"].get<DevicePtr>() == large_ptr;
        }
        CHECK(saw_small);
        CHECK(saw_large);

        // Live segments and blocks, with their states.
        if (source != MemorySource::stream_ordered) {
            auto kept = DeviceSlice<std::uint8_t>::uninitialized(stream, 3 * kMiB);
            const nlohmann::json now = nlohmann::json::parse(to_json(device.allocator_snapshot()));
            REQUIRE(now["segments"].size() == 1);
            const auto& segment = now["segments"][0];
            CHECK(segment["expandable"] == (source == MemorySource::expandable));
            CHECK(segment["pool"] == "large");
            CHECK(segment["blocks"][0]["state"] == "allocated");
            CHECK(segment["blocks"][0]["address"].get<DevicePtr>() == kept.device_ptr());
            CHECK(segment["blocks"][0]["stream"].get<std::uintptr_t>() ==
                  segment["stream"].get<std::uintptr_t>());
            if (source == MemorySource::expandable) CHECK(segment["blocks"].back()["state"] == "unmapped");
        }

        // A ring of three keeps the last three; 0 stops and forgets.
        device.record_memory_history(3);
        for (int i = 0; i < 5; ++i) {
            auto s = DeviceSlice<std::uint8_t>::uninitialized(stream, 4096);
        }
        CHECK(device.allocator_snapshot().timeline.size() == 3);
        CHECK(device.allocator_snapshot().timeline.back().action == Action::free);
        device.record_memory_history(0);
        { auto s = DeviceSlice<std::uint8_t>::uninitialized(stream, 4096); }
        CHECK(device.allocator_snapshot().timeline.empty());
    }
}

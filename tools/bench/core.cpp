// cudarc-bench core: fork+join vs raw event record + wait; readback with vs without an extra synchronize;
// slice alloc+free vs the driver's allocators. Host-side costs, median of rounds after warm-up.
#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench.hpp"
#include "core/device_state.hpp"
#include "cudarc/cudarc.hpp"

namespace cudarc::bench {
namespace {

using Report = std::function<void(const std::string&, double, const char*, const std::string&)>;

// Issue 12: K disjoint sub-views of one buffer, each written by a ~1 ms kernel on its own forked stream,
// against the same kernels on K separate buffers (the baseline: nothing to order) and one kernel alone.
// Device time from events on the parent: start, the forks (each waits for the parent), the K kernels, the
// joins, stop. Range-aware hazard tracking makes sub-views cost what separate buffers cost; per-buffer
// tracking made them wait for one another (K x one kernel). (How many of K streams the GPU runs at once
// is the hardware's: CUDA_DEVICE_MAX_CONNECTIONS, 8 by default, shared with the parent; the separate
// buffers show it.)
void bench_disjoint_subviews(Device& device, Stream& parent, std::size_t count, int warmups, int rounds,
                             const Report& report) {
    const Module& bench = Module::shipped(device, "bench.cu");
    const auto spin = bench.kernel<void(long long, long long*)>("bench_spin");
    const long long cycles = static_cast<long long>(1.0 * device.attribute(sys::attr::kClockRate));  // ~1 ms
    auto elapsed = DeviceSlice<long long>::zeros(parent, count);
    std::vector<DeviceSlice<long long>> separate;
    for (std::size_t k = 0; k < count; ++k) separate.push_back(DeviceSlice<long long>::zeros(parent, 1));
    Event start(device, EventTiming::enabled);
    Event stop(device, EventTiming::enabled);
    auto time_ms = [&](std::size_t streams, bool subviews) {
        std::vector<double> out;
        for (int round = 0; round < warmups + rounds; ++round) {
            start.record(parent);
            {
                std::vector<Stream> children;
                for (std::size_t k = 0; k < streams; ++k) children.push_back(parent.fork());
                for (std::size_t k = 0; k < streams; ++k) {
                    launch(children[k], LaunchConfig{1, 1}, spin, cycles,
                           subviews ? elapsed.view(k, 1) : separate[k].view());
                }
            }  // joins
            stop.record(parent);
            stop.synchronize();
            if (round >= warmups) out.push_back(static_cast<double>(Event::elapsed_ms(start, stop)));
        }
        return median(out);
    };
    const double one = time_ms(1, true);
    const double buffers = time_ms(count, false);
    const auto before = device.counters();
    const double many = time_ms(count, true);
    const auto delta = device.counters() - before;
    const double per_round = static_cast<double>(warmups + rounds);
    report(fmt::format("1 ms kernel on one sub-view, one forked stream ({} streams case)", count), one, "ms",
           "");
    report(fmt::format("{} separate buffers x 1 ms kernel on {} forked streams", count, count), buffers, "ms",
           "the baseline");
    report(fmt::format("{} disjoint sub-views x 1 ms kernel on {} forked streams", count, count), many, "ms",
           "");
    report(fmt::format("{} disjoint sub-views / {} separate buffers", count, count), many / buffers, "x",
           count <= 8 ? "target <= 1.05" : "target <= 1.1 (no cap on streams per buffer)");
    report(fmt::format("{} separate buffers / one kernel", count), buffers / one, "x",
           "the GPU's own concurrency (CUDA_DEVICE_MAX_CONNECTIONS)");
    // Per round: each child waits for the parent at its fork, the parent for each child at its join; a
    // child has seen its item's last writer through its fork (Note [Stream timelines]).
    report(fmt::format("  cross-stream waits per round ({} streams)", count),
           static_cast<double>(delta.cross_stream_waits) / per_round, "",
           fmt::format("expect {} ({} forks, {} joins)", 2 * count, count, count));
}

struct CoreArgs : CommonArgs {};

int run_core(const CoreArgs& args) {
    const int warmups = args.warmups;
    const int rounds = args.rounds;
    auto device = Device::open(args.device);
    auto& state = *cudarc::detail::Internals::device_state(device);
    const sys::DriverApi& api = state.api();
    JsonLines json(args, device, "core");
    print_header(json.context(), fmt::format("median of {} rounds after {} warm-up rounds", rounds, warmups));

    auto parent = device.create_stream();
    auto sync_parent = [&] { parent.synchronize(); };
    auto report = [&](const std::string& name, double value, const char* unit, const std::string& note) {
        print_row(name, value, unit, note);
        json.write({{"case", name}, {"value", value}, {"unit", unit}});
    };

    // 1. Fork + join pair vs one raw event record + cross-stream wait.
    {
        constexpr int kIterations = 2000;
        const auto fork_join = median(time_rounds_us(
            warmups, rounds, kIterations, [&] { auto child = parent.fork(); }, sync_parent));
        sys::Stream other = nullptr;
        state.check(api.stream_create_with_priority(&other, sys::kStreamNonBlocking, 0),
                    sys::Entry::stream_create_with_priority);
        sys::Event event = nullptr;
        state.check(api.event_create(&event, sys::kEventDisableTiming), sys::Entry::event_create);
        const auto raw = median(time_rounds_us(
            warmups, rounds, kIterations,
            [&] {
                api.event_record(event, parent.native());
                api.stream_wait_event(other, event, 0);
            },
            sync_parent));
        // The driver calls a fork + join must make: record + wait each way.
        const auto raw_pair = median(time_rounds_us(
            warmups, rounds, kIterations,
            [&] {
                api.event_record(event, parent.native());
                api.stream_wait_event(other, event, 0);
                api.event_record(event, other);
                api.stream_wait_event(parent.native(), event, 0);
            },
            sync_parent));
        api.event_destroy(event);
        api.stream_destroy(other);
        report("fork + join pair", fork_join, "us", "target <= 1 us");
        report("raw cuEventRecord + cuStreamWaitEvent", raw, "us", "");
        report("raw record + wait, both ways", raw_pair, "us", "the driver calls fork + join make");
        report("fork+join / raw record+wait", fork_join / raw, "x", "");
        report("fork+join / raw both ways", fork_join / raw_pair, "x", "cudarc's own overhead");
    }

    // 2. Small work + 4-byte readback: with an extra synchronize vs without (the copy already blocks).
    {
        constexpr int kIterations = 200;
        auto value = DeviceSlice<std::uint32_t>::zeros(parent, 1);
        std::uint32_t host = 0;
        auto work = [&] { memset(parent, value.view(), 0x5a); };
        const auto without = median(time_rounds_us(
            warmups, rounds, kIterations,
            [&] {
                work();
                value.copy_to_host(parent, std::span<std::uint32_t>(&host, 1));
            },
            [] {}));
        const auto with = median(time_rounds_us(
            warmups, rounds, kIterations,
            [&] {
                work();
                parent.synchronize();
                value.copy_to_host(parent, std::span<std::uint32_t>(&host, 1));
            },
            [] {}));
        const auto before = device.counters();
        work();
        value.copy_to_host(parent, std::span<std::uint32_t>(&host, 1));
        const auto delta = device.counters() - before;
        report("memset + 4-byte readback, no extra sync (cudarc)", without, "us",
               fmt::format("host syncs per readback: {}", delta.host_synchronizations()));
        report("memset + 4-byte readback, extra stream sync", with, "us", "");
        report("extra sync / no extra sync", with / without, "x", "");
    }

    // 3. Disjoint sub-views on 8 and 64 streams (issues 12 and 27). How many run at once is the hardware's:
    // CUDA_DEVICE_MAX_CONNECTIONS (8 by default; issue 27 measured 64 with 32).
    bench_disjoint_subviews(device, parent, 8, warmups, rounds, report);
    bench_disjoint_subviews(device, parent, 64, warmups, rounds, report);

    // 4. Alloc + free of 1 MiB: DeviceSlice vs cuMemAllocAsync/FreeAsync vs cuMemAlloc/Free.
    {
        constexpr std::size_t kBytes = std::size_t{1} << 20;
        const auto slice = median(time_rounds_us(
            warmups, rounds, 500, [&] { auto s = DeviceSlice<std::uint8_t>::uninitialized(parent, kBytes); },
            sync_parent));
        const auto async = median(time_rounds_us(
            warmups, rounds, 500,
            [&] {
                DevicePtr p = 0;
                api.mem_alloc_async(&p, kBytes, parent.native());
                api.mem_free_async(p, parent.native());
            },
            sync_parent));
        const auto plain = median(time_rounds_us(
            1, 5, 20,
            [&] {
                DevicePtr p = 0;
                api.mem_alloc(&p, kBytes);
                api.mem_free(p);
            },
            [] {}));
        report("DeviceSlice<u8> 1 MiB alloc + free", slice, "us", "default memory source");
        report("raw cuMemAllocAsync + cuMemFreeAsync 1 MiB", async, "us", "release threshold raised");
        report("raw cuMemAlloc + cuMemFree 1 MiB", plain, "us", "");
        report("cuMemAlloc+Free / DeviceSlice", plain / slice, "x", "");
    }

    // 5. Borrowing another library's memory (issue 27, item 5): a BorrowedSlice with an owner stream,
    // borrowed and released, against the one pointer check it has to make.
    {
        constexpr std::size_t kBytes = std::size_t{1} << 20;
        DevicePtr raw = 0;
        {
            const auto scope = state.bind();
            state.check(api.mem_alloc(&raw, kBytes), sys::Entry::mem_alloc);
        }
        const auto borrow = median(time_rounds_us(
            warmups, rounds, 2000,
            [&] { BorrowedSlice<float> b(device, raw + 256, kBytes / sizeof(float) - 64, parent); }, [] {}));
        const auto check = median(time_rounds_us(
            warmups, rounds, 2000,
            [&] {
                unsigned memory_type = 0;
                sys::Context context = nullptr;
                int ordinal = -1;
                int managed = 0;
                DevicePtr base = 0;
                std::size_t size = 0;
                int attributes[] = {sys::kPointerAttributeMemoryType,    sys::kPointerAttributeContext,
                                    sys::kPointerAttributeDeviceOrdinal, sys::kPointerAttributeIsManaged,
                                    sys::kPointerAttributeRangeStart,    sys::kPointerAttributeRangeSize};
                void* data[] = {&memory_type, &context, &ordinal, &managed, &base, &size};
                api.pointer_get_attributes(6, attributes, data, raw + 256);
            },
            [] {}));
        const auto range = median(time_rounds_us(
            warmups, rounds, 2000,
            [&] {
                DevicePtr base = 0;
                std::size_t size = 0;
                api.mem_get_address_range(&base, &size, raw + 256);
            },
            [] {}));
        {
            const auto scope = state.bind();
            state.check(api.mem_free(raw), sys::Entry::mem_free);
        }
        report("BorrowedSlice borrow + release (owner stream)", borrow, "us", "one pointer check");
        report("raw cuPointerGetAttributes (6 attributes)", check, "us", "the check a borrow makes");
        report("raw cuMemGetAddressRange", range, "us", "no longer made when the attributes give a range");
        report("borrow + release / raw pointer check", borrow / check, "x", "cudarc's own overhead");
    }
    return 0;
}

const Subcommand<CoreArgs> registration{
    "core", "fork/join, readback synchronization, allocation vs raw driver calls", run_core};

}  // namespace
}  // namespace cudarc::bench

// cudarc-bench multi: several GPUs. all_reduce bus bandwidth through cudarc::nccl against the same raw NCCL
// calls on the same communicators and buffers (nccl-tests' formula: busbw = bytes / time * 2 (n - 1) / n),
// from 8 MiB to 1 GiB; then cudarc::copy between two devices against raw cuMemcpyPeerAsync, without and
// with peer access. Device-event time per operation, median of rounds after warm-up; cudarc's and the raw
// rounds alternate, so drift hits both alike. With one GPU the multi-device cells are skipped (the output
// says so) and a one-rank all_reduce measures cudarc's own overhead.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench.hpp"
#include "core/device_state.hpp"
#include "cudarc/cudarc.hpp"
#include "sys/nccl/nccl_api.hpp"

namespace cudarc::bench {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Times `body` (which enqueues `iterations` operations on every stream) with events on every stream; the
// time per operation is the slowest stream's.
double time_per_op_ms(std::vector<Stream>& streams, int iterations, const std::function<void()>& body) {
    std::vector<Event> starts;
    std::vector<Event> stops;
    for (auto& stream : streams) {
        starts.emplace_back(stream.device(), EventTiming::enabled);
        stops.emplace_back(stream.device(), EventTiming::enabled);
    }
    for (std::size_t i = 0; i < streams.size(); ++i) starts[i].record(streams[i]);
    body();
    for (std::size_t i = 0; i < streams.size(); ++i) stops[i].record(streams[i]);
    double slowest = 0.0;
    for (std::size_t i = 0; i < streams.size(); ++i) {
        stops[i].synchronize();
        slowest = std::max(slowest, static_cast<double>(Event::elapsed_ms(starts[i], stops[i])));
    }
    return slowest / iterations;
}

struct Pair {
    std::vector<double> cudarc_ms;
    std::vector<double> raw_ms;
};

// Alternating rounds of the two variants after `warmups` untimed ones.
Pair measure(std::vector<Stream>& streams, int warmups, int rounds, int iterations,
             const std::function<void()>& cudarc_body, const std::function<void()>& raw_body) {
    Pair pair;
    for (int round = 0; round < warmups + rounds; ++round) {
        const double a = time_per_op_ms(streams, iterations, cudarc_body);
        const double b = time_per_op_ms(streams, iterations, raw_body);
        if (round >= warmups) {
            pair.cudarc_ms.push_back(a);
            pair.raw_ms.push_back(b);
        }
    }
    return pair;
}

std::vector<std::size_t> sizes_between(std::size_t min_bytes, std::size_t max_bytes) {
    std::vector<std::size_t> out;
    for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) out.push_back(bytes);
    return out;
}

void check_nccl(const sys::NcclApi& api, sys::NcclResult result, const char* call) {
    if (result != sys::kNcclSuccess) {
        throw Error(fmt::format("{} failed: {} ({})", call, sys::nccl_result_name(result),
                                api.get_error_string(result)));
    }
}

struct MultiArgs : CommonArgs {
    MultiArgs() { rounds = 7; }
    int iterations = 20;
    int min_mib = 8;
    int max_mib = 1024;
};

int run_multi(const MultiArgs& args) {
    const int warmups = args.warmups;
    const int rounds = args.rounds;
    const int iterations = args.iterations;
    const std::size_t min_bytes = static_cast<std::size_t>(args.min_mib) * kMiB;
    const std::size_t max_bytes = static_cast<std::size_t>(args.max_mib) * kMiB;
    if (max_bytes < min_bytes)
        throw Error(fmt::format("--max-mib {} is below --min-mib {}", args.max_mib, args.min_mib));
    // NVLink multicast stays off (docs/multi-gpu.md says why).
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);
    const int count = Device::count();
    std::vector<Device> devices;
    for (int i = 0; i < count; ++i) devices.push_back(Device::open(i));
    JsonLines json(args, devices.front(), "multi");
    print_header(json.context(),
                 fmt::format("{} GPU(s); median of {} rounds of {} operations after {} warm-up rounds", count,
                             rounds, iterations, warmups));
    auto report = [&](const std::string& name, double value, const char* unit, const std::string& note) {
        print_row(name, value, unit, note);
        json.write({{"case", name}, {"value", value}, {"unit", unit}, {"devices", count}});
    };
    if (count < 2) {
        fmt::print(
            "  multi-device cells skipped: {} GPU visible (all_reduce bus bandwidth across devices and peer "
            "copies need 2 or more)\n",
            count);
    }

    // 1. all_reduce (float32 sum, out of place), every device, one thread driving all ranks in a group.
    if (!nccl::available()) {
        fmt::print("  all_reduce cells skipped: NCCL is not available: {}\n", nccl::load_failure());
    } else {
        const sys::NcclApi& api = sys::nccl();
        const auto v = nccl::version();
        fmt::print("  NCCL {}.{}.{} from {}; NCCL_NVLS_ENABLE=0\n", v.major, v.minor, v.patch,
                   nccl::library_path());
        auto comms = nccl::Communicator::init_all(devices);
        std::vector<Stream> streams;
        std::vector<DeviceSlice<float>> send;
        std::vector<DeviceSlice<float>> recv;
        for (auto& device : devices) {
            streams.push_back(device.create_stream());
            send.push_back(DeviceSlice<float>::zeros(streams.back(), max_bytes / sizeof(float)));
            recv.push_back(DeviceSlice<float>::zeros(streams.back(), max_bytes / sizeof(float)));
        }
        const double factor = count > 1 ? 2.0 * (count - 1) / count : 1.0;
        const char* metric = count > 1 ? "busbw" : "algbw (one rank: busbw is 0)";
        for (const std::size_t bytes : sizes_between(min_bytes, max_bytes)) {
            const std::size_t elements = bytes / sizeof(float);
            const auto through_cudarc = [&] {
                for (int i = 0; i < iterations; ++i) {
                    nccl::Group group;
                    for (std::size_t r = 0; r < comms.size(); ++r)
                        comms[r].all_reduce(streams[r], send[r].view(0, elements), recv[r].view(0, elements));
                }
            };
            const auto raw = [&] {
                for (int i = 0; i < iterations; ++i) {
                    check_nccl(api, api.group_start(), "ncclGroupStart");
                    for (std::size_t r = 0; r < comms.size(); ++r) {
                        const auto scope = cudarc::detail::Internals::device_state(devices[r])->bind();
                        check_nccl(api,
                                   api.all_reduce(reinterpret_cast<const void*>(
                                                      static_cast<std::uintptr_t>(send[r].device_ptr())),
                                                  reinterpret_cast<void*>(
                                                      static_cast<std::uintptr_t>(recv[r].device_ptr())),
                                                  elements, sys::nccl_type::kFloat32, sys::nccl_op::kSum,
                                                  comms[r].native(), streams[r].native()),
                                   "ncclAllReduce");
                    }
                    check_nccl(api, api.group_end(), "ncclGroupEnd");
                }
            };
            const Pair pair = measure(streams, warmups, rounds, iterations, through_cudarc, raw);
            const double gb = static_cast<double>(bytes) / 1e9;
            const double cudarc_bw = gb / (median(pair.cudarc_ms) / 1e3) * factor;
            const double raw_bw = gb / (median(pair.raw_ms) / 1e3) * factor;
            const std::string size = fmt::format("{} MiB", bytes / kMiB);
            report(fmt::format("all_reduce {} cudarc {}", size, metric), cudarc_bw, "GB/s", "");
            report(fmt::format("all_reduce {} raw NCCL {}", size, metric), raw_bw, "GB/s", "");
            report(fmt::format("all_reduce {} cudarc / raw", size), cudarc_bw / raw_bw, "x",
                   "target >= 0.98");
        }
    }

    // 2. cudarc::copy from device 0 to device 1 against raw cuMemcpyPeerAsync, on device 1's stream.
    if (count >= 2) {
        auto& d0 = devices[0];
        auto& d1 = devices[1];
        std::vector<Stream> streams;
        streams.push_back(d1.create_stream());
        Stream setup = d0.create_stream();
        const auto src = DeviceSlice<float>::zeros(setup, max_bytes / sizeof(float));
        auto dst = DeviceSlice<float>::zeros(streams[0], max_bytes / sizeof(float));
        setup.synchronize();
        const sys::DriverApi& api = cudarc::detail::Internals::device_state(d1)->api();
        auto run_copies = [&](const std::string& label) {
            for (const std::size_t bytes : sizes_between(min_bytes, max_bytes)) {
                const std::size_t elements = bytes / sizeof(float);
                const auto through_cudarc = [&] {
                    for (int i = 0; i < iterations; ++i)
                        copy(streams[0], dst.view(0, elements), src.view(0, elements));
                };
                const auto raw = [&] {
                    const auto scope = cudarc::detail::Internals::device_state(d1)->bind();
                    for (int i = 0; i < iterations; ++i) {
                        cudarc::detail::Internals::device_state(d1)->check(
                            api.memcpy_peer_async(
                                dst.device_ptr(), cudarc::detail::Internals::device_state(d1)->context(),
                                src.device_ptr(), cudarc::detail::Internals::device_state(d0)->context(),
                                bytes, streams[0].native()),
                            sys::Entry::memcpy_peer_async);
                    }
                };
                const Pair pair = measure(streams, warmups, rounds, iterations, through_cudarc, raw);
                const double gb = static_cast<double>(bytes) / 1e9;
                const double cudarc_bw = gb / (median(pair.cudarc_ms) / 1e3);
                const double raw_bw = gb / (median(pair.raw_ms) / 1e3);
                const std::string size = fmt::format("{} MiB", bytes / kMiB);
                report(fmt::format("peer copy 0->1 {} {} cudarc", label, size), cudarc_bw, "GB/s", "");
                report(fmt::format("peer copy 0->1 {} {} raw", label, size), raw_bw, "GB/s", "");
                report(fmt::format("peer copy 0->1 {} {} cudarc / raw", label, size), cudarc_bw / raw_bw, "x",
                       "");
            }
        };
        if (!d1.peer_access_enabled(d0) && !d0.peer_access_enabled(d1)) run_copies("without peer access");
        if (d1.can_access_peer(d0) && d0.can_access_peer(d1)) {
            d0.enable_peer_access(d1);
            d1.enable_peer_access(d0);
            run_copies("with peer access");
        } else {
            fmt::print(
                "  peer copies with peer access skipped: devices 0 and 1 cannot access each other's "
                "memory\n");
        }
    }
    return 0;
}

const Subcommand<MultiArgs> registration{
    "multi", "all_reduce bus bandwidth (cudarc vs raw NCCL) and peer copies (vs cuMemcpyPeerAsync)",
    run_multi, [](OptionSet& options, MultiArgs& args) {
        options.add("--iterations", args.iterations, "operations per round", Check::positive);
        options.add("--min-mib", args.min_mib, "smallest all_reduce and copy size, MiB", Check::positive);
        options.add("--max-mib", args.max_mib, "largest size, MiB (sizes double from --min-mib)",
                    Check::positive);
    }};

}  // namespace
}  // namespace cudarc::bench

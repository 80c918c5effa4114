// Forks several child streams from the default stream, gives each its own slice of work, and joins them
// back by letting them go out of scope. The host never blocks in a join: the parent stream waits for each
// child's last work on the device (an event and cuStreamWaitEvent).
#include <cudarc/cudarc.hpp>

#include <cstdio>
#include <numeric>
#include <vector>

int main() {
    if (!cudarc::Device::available()) {
        std::printf("fork_join: no GPU available: skipped\n");
        return 0;
    }
    try {
        auto device = cudarc::Device::open(0);
        auto& parent = device.default_stream();

        constexpr std::size_t kChunk = 1 << 20;
        constexpr int kChildren = 4;
        auto data = cudarc::DeviceSlice<int>::zeros(parent, kChunk * kChildren);
        std::vector<int> host(kChunk * kChildren);
        std::iota(host.begin(), host.end(), 0);

        const auto before = device.counters();
        {
            std::vector<cudarc::Stream> children;
            for (int i = 0; i < kChildren; ++i) children.push_back(parent.fork());
            for (int i = 0; i < kChildren; ++i) {
                // Each child writes its own quarter; hazard tracking orders it after the parent's zero fill.
                auto part = data.view(i * kChunk, kChunk);
                cudarc::copy(children[i], part, std::span<const int>(host).subspan(i * kChunk, kChunk));
            }
        }  // children join the parent here
        const auto after = device.counters();

        const auto back = data.to_vector(parent);  // ordered after every child's copy by the joins
        const bool ok = back == host;
        std::printf("fork/join: %d children, %zu ints, round trip %s\n", kChildren, host.size(),
                    ok ? "ok" : "WRONG");
        std::printf("host synchronizations during fork/copy/join: %llu, cross-stream waits: %llu\n",
                    static_cast<unsigned long long>((after - before).host_synchronizations()),
                    static_cast<unsigned long long>((after - before).cross_stream_waits));
        return ok ? 0 : 1;
    } catch (const cudarc::Error& e) {
        std::fprintf(stderr, "fork_join: %s\n", e.what());
        return 1;
    }
}

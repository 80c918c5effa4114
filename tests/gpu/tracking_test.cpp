// Note [Stream timelines] on a real GPU (issue 27): a 1024-tensor AdamW step fed by another stream makes one
// wait and at most two events, eagerly and as a replay, and still reads the gradients the held-back feed
// writes (checked against a float64 CPU reference); 8 host threads, each on its own stream and its own
// sub-views of shared buffers, run their disjoint work at once (device timestamps).
#include <doctest/doctest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <optional>
#include <thread>
#include <vector>

#include "cudarc/optim/optimizer.hpp"
#include "launch_test_support.hpp"

using namespace cudarc;
using namespace cudarc::test;

namespace {

constexpr std::size_t kTensors = 1024;
constexpr std::size_t kElements = 4096;

// AdamW's first step from zero state on one element (torch's formulas, float64): the expected parameter.
double adamw_first_step(double p, double g, const optim::GroupOptions& o) {
    const double m = (1.0 - o.beta1) * g;
    const double v = (1.0 - o.beta2) * g * g;
    const double m_hat = m / (1.0 - o.beta1);
    const double v_hat = v / (1.0 - o.beta2);
    p *= 1.0 - o.lr * o.weight_decay;
    return p - o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
}

void check_one_step(std::vector<DeviceSlice<float>>& params, const std::vector<std::vector<float>>& start,
                    const std::vector<std::vector<float>>& grads, const optim::GroupOptions& options,
                    Stream& stream) {
    std::size_t bad = 0;
    for (std::size_t t = 0; t < params.size(); t += 97) {  // a spread of tensors, every element
        const auto got = params[t].to_vector(stream);
        for (std::size_t i = 0; i < kElements; ++i) {
            const double want = adamw_first_step(start[t][i], grads[t][i], options);
            if (!(std::abs(got[i] - want) <= 1e-5 + 1e-5 * std::abs(want))) ++bad;
        }
    }
    CHECK(bad == 0);
}

}  // namespace

TEST_CASE("tracking.a_1024_tensor_step_fed_by_another_stream_makes_one_wait") {
    auto device = Device::open(0);
    const BenchSpin spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    for (const bool replay : {false, true}) {
        CAPTURE(replay);
        auto stream = device.create_stream();
        auto feed = device.create_stream();
        std::vector<DeviceSlice<float>> params;
        std::vector<DeviceSlice<float>> grads;
        std::vector<std::vector<float>> start;
        std::vector<std::vector<float>> grad_values;
        std::vector<optim::ParamTensor> list;
        params.reserve(kTensors);
        grads.reserve(kTensors);
        for (std::size_t t = 0; t < kTensors; ++t) {
            start.push_back(random_floats(kElements));
            grad_values.push_back(random_floats(kElements, -0.1f, 0.1f));
            params.push_back(DeviceSlice<float>::from_host(stream, start.back()));
            grads.push_back(DeviceSlice<float>::from_host(feed, poisoned(kElements)));
            list.emplace_back(params.back(), grads.back());
        }
        const optim::GroupOptions options = optim::default_options(optim::UpdateRule::adamw);
        optim::Optimizer optimizer(
            stream, optim::OptimizerOptions{optim::UpdateRule::adamw, optim::StatePrecision::fp32,
                                            optim::StatePlacement::device, 16384, replay});
        const auto group = optimizer.add_group(stream, options, list);
        std::optional<Graph> graph;
        if (replay) {
            device.synchronize();
            graph.emplace(capture(stream, [&](Stream& s) { optimizer.step(s, group, list); }));
        }
        // The feed is held back before it writes the gradients: the step must wait for it.
        launch(feed, LaunchConfig{1, 1}, spin, spin_cycles(device, 50.0), nullptr);
        for (std::size_t t = 0; t < kTensors; ++t) grads[t].copy_from_host(feed, grad_values[t]);
        const auto before = device.counters();
        if (replay) {
            graph->launch(stream);
        } else {
            optimizer.step(stream, group, list);
        }
        const auto delta = device.counters() - before;
        CHECK(delta.cross_stream_waits == 1);
        CHECK(delta.events_recorded <= 2);
        CHECK(delta.host_synchronizations() == 0);
        check_one_step(params, start, grad_values, options, stream);
    }
}

TEST_CASE("tracking.threads_on_disjoint_sub_views_of_shared_buffers_overlap") {
    auto device = Device::open(0);
    constexpr std::size_t kThreads = 8;
    constexpr std::size_t kItem = std::size_t{1} << 14;
    const BenchFill fill = bench_module(device).kernel<BenchFill::signature>("bench_fill");
    const BenchSpin spin = bench_module(device).kernel<BenchSpin::signature>("bench_spin");
    auto shared = DeviceSlice<float>::from_host(device.default_stream(), poisoned(kThreads * kItem));
    auto elapsed = DeviceSlice<long long>::zeros(device.default_stream(), kThreads);
    auto stamps = DeviceSlice<unsigned long long>::zeros(device.default_stream(), 2 * kThreads);
    device.synchronize();
    std::vector<Stream> streams;
    for (std::size_t t = 0; t < kThreads; ++t) streams.push_back(device.create_stream());
    const long long cycles = spin_cycles(device, 30.0);
    std::barrier start(static_cast<std::ptrdiff_t>(kThreads));
    const Module timer = Module::compile(device, Program(R"(
extern "C" __global__ void stamp(unsigned long long* at) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    *at = t;
}
)",
                                                         "stamp.cu"));
    const auto stamp = timer.kernel<void(unsigned long long*)>("stamp");
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            Stream& s = streams[t];
            start.arrive_and_wait();
            // Each thread: stamp, spin, fill its item of the shared buffer, stamp (all on its own views).
            launch(s, LaunchConfig{1, 1}, stamp, stamps.view(2 * t, 1));
            launch(s, LaunchConfig{1, 1}, spin, cycles, elapsed.view(t, 1));
            launch(s, LaunchConfig::for_elements(kItem, device), fill, shared.view(t * kItem, kItem),
                   static_cast<float>(t + 1), static_cast<unsigned long long>(kItem));
            launch(s, LaunchConfig{1, 1}, stamp, stamps.view(2 * t + 1, 1));
        });
    }
    for (auto& thread : threads) thread.join();
    const auto values = shared.to_vector(device.default_stream());
    const auto times = stamps.to_vector(device.default_stream());
    for (std::size_t t = 0; t < kThreads; ++t) {
        const auto first = values.begin() + static_cast<std::ptrdiff_t>(t * kItem);
        CHECK(std::all_of(first, first + static_cast<std::ptrdiff_t>(kItem),
                          [&](float x) { return x == static_cast<float>(t + 1); }));
    }
    unsigned long long latest_start = 0;
    unsigned long long earliest_end = ~0ull;
    for (std::size_t t = 0; t < kThreads; ++t) {
        latest_start = std::max(latest_start, times[2 * t]);
        earliest_end = std::min(earliest_end, times[2 * t + 1]);
    }
    MESSAGE("latest start - earliest end: "
            << static_cast<double>(latest_start) - static_cast<double>(earliest_end) << " ns");
    if (kernels_serialized_by_a_tool()) {
        MESSAGE("kernels are serialized by an injected tool (compute-sanitizer): overlap not checked");
    } else {
        CHECK(latest_start < earliest_end);  // all 8 threads' work was running at one moment
    }
}

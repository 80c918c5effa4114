// cudarc/fmt.hpp: every public value type formats as documented, without a device.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <limits>

#include "cudarc/fmt.hpp"

using namespace cudarc;

TEST_CASE("core.fmt_value_types") {
    CHECK(fmt::format("{}", ComputeCapability{9, 0}) == "9.0");
    CHECK(fmt::format("{}", ComputeCapability{12, 1}) == "12.1");
    CHECK(fmt::format("{}", DriverVersion{13000}) == "13.0");
    CHECK(fmt::format("{}", DriverVersion{12080}) == "12.8");
    CHECK(fmt::format("{}", Version{1, 22, 3}) == "1.22.3");
    CHECK(fmt::format("{}", version()) == CUDARC_VERSION_STRING);
    CHECK(fmt::format("{}", Dim3{1024}) == "(1024, 1, 1)");
    CHECK(fmt::format("{}", Dim3{4, 5, 6}) == "(4, 5, 6)");
    CHECK(fmt::format("{}", LaunchConfig{1024, 256}) ==
          "grid (1024, 1, 1), block (256, 1, 1), 0 B dynamic shared memory");
    CHECK(
        fmt::format("{}", LaunchConfig{8, 128, 65536}.with_cluster({2}).with_cooperative()) ==
        "grid (8, 1, 1), block (128, 1, 1), 64.0 KiB dynamic shared memory, cluster (2, 1, 1), cooperative");
    CHECK(fmt::format("{}", LaunchConfig{8, 128}.with_serialization(StreamSerialization::programmatic)) ==
          "grid (8, 1, 1), block (128, 1, 1), 0 B dynamic shared memory, programmatic serialization");
    CHECK(fmt::format("{}", MemoryInfo{std::size_t{3} << 29, std::size_t{80} << 30}) ==
          "1.50 GiB free of 80.0 GiB");
}

TEST_CASE("core.fmt_counters_and_allocator_stats") {
    Counters c;
    c.stream_synchronizes = 1;
    c.event_synchronizes = 2;
    c.cross_stream_waits = 3;
    c.kernel_launches = 7;
    CHECK(fmt::format("{}", c) ==
          "host synchronizations 3 (stream 1, event 2, context 0), blocking copies 0, cross-stream waits 3, "
          "events recorded 0, driver allocations 0, driver frees 0, kernel launches 7");
    AllocatorStats s;
    s.allocated_bytes = 512;
    s.peak_allocated_bytes = std::size_t{1} << 20;
    s.reserved_bytes = std::size_t{20} << 20;
    s.peak_reserved_bytes = std::size_t{20} << 20;
    s.live_allocations = 1;
    s.segments = 1;
    s.cache_misses = 1;
    s.driver_allocations = 1;
    CHECK(
        fmt::format("{}", s) ==
        "allocated 512 B (peak 1.00 MiB), active 0 B, reserved 20.0 MiB (peak 20.0 MiB), 1 live allocations, "
        "1 segments; cache hits 0, cache misses 1, driver allocations 1, driver frees 0, OOM retries 0, "
        "OOM errors 0, event synchronizations 0");
    AllocatorStats huge;
    huge.reserved_bytes = std::numeric_limits<std::size_t>::max();
    CHECK(fmt::format("{}", huge).find("reserved 16777216.0 TiB") != std::string::npos);
}

TEST_CASE("core.fmt_enumerations_by_name") {
    CHECK(fmt::format("{}", Backend::cuda) == "CUDA");
    CHECK(fmt::format("{}", Backend::hip) == "HIP");
    CHECK(fmt::format("{}", MemorySource::caching_allocator) == "caching_allocator");
    CHECK(fmt::format("{}", MemorySource::stream_ordered) == "stream_ordered");
    CHECK(fmt::format("{}", optim::ElementType::bf16) == "bf16");
    CHECK(fmt::format("{}", optim::UpdateRule::adamw) == "adamw");
    CHECK(fmt::format("{}", optim::UpdateRule::ademamix) == "ademamix");
    CHECK(fmt::format("{}", optim::UpdateRule::lamb) == "lamb");
    CHECK(fmt::format("{}", optim::UpdateRule::lars) == "lars");
    for (int r = 0; r <= static_cast<int>(optim::kLastUpdateRule); ++r) {
        const auto rule = static_cast<optim::UpdateRule>(r);
        CHECK(fmt::format("{}", rule) == optim::to_string(rule));
        CHECK(optim::to_string(rule) != "unknown");  // every rule has its name
    }
    CHECK(fmt::format("{}", optim::StatePrecision::blockwise8) == "8bit");
    CHECK(fmt::format("{}", optim::StatePrecision::fp32) == "fp32");
    // Enumerations take string specs.
    CHECK(fmt::format("[{:>6}]", Backend::hip) == "[   HIP]");
    CHECK(fmt::format("[{:<5}]", optim::ElementType::fp32) == "[fp32 ]");
}

// LaunchConfig: construction, attributes, the grid arithmetic of for_elements and the validation that runs
// before any launch (no GPU needed for any of it).
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>

#include "cudarc/detail/launch_args.hpp"
#include "cudarc/launch_config.hpp"

namespace {

std::mt19937_64& rng() {
    static std::mt19937_64 engine{std::random_device{}()};
    return engine;
}

std::string validation_error(const cudarc::LaunchConfig& config) {
    try {
        cudarc::detail::validate_launch_config(config);
    } catch (const cudarc::Error& e) {
        return e.what();
    }
    return {};
}

}  // namespace

TEST_CASE("launch.config_construction") {
    const unsigned grid = 1 + static_cast<unsigned>(rng()() % 100000);
    const unsigned block = 1 + static_cast<unsigned>(rng()() % 1024);
    // `LaunchConfig{grid, block}` means blocks and threads, never grid {x, y}.
    const cudarc::LaunchConfig config{grid, block};
    CHECK(config.grid == cudarc::Dim3(grid, 1, 1));
    CHECK(config.block == cudarc::Dim3(block, 1, 1));
    CHECK(config.shared_mem_bytes == 0);
    CHECK_FALSE(config.has_attributes());

    const cudarc::LaunchConfig shaped{{grid, 2, 3}, {32, 8}, 4096};
    CHECK(shaped.grid.volume() == static_cast<unsigned long long>(grid) * 6);
    CHECK(shaped.block.volume() == 256);
    CHECK(shaped.shared_mem_bytes == 4096);

    const auto clustered = config.with_cluster({2});
    CHECK(clustered.has_attributes());
    CHECK(clustered.cluster == cudarc::Dim3(2, 1, 1));
    CHECK(clustered.grid == config.grid);  // the original is unchanged, the copy carries the attribute
    CHECK_FALSE(config.cluster.has_value());

    const auto cooperative = config.with_cooperative();
    CHECK(cooperative.has_attributes());
    CHECK(cooperative.cooperative == cudarc::Cooperative::yes);
    CHECK_FALSE(config.with_cooperative(cudarc::Cooperative::no).has_attributes());

    CHECK(config.serialization == cudarc::StreamSerialization::full);
    const auto programmatic = config.with_serialization(cudarc::StreamSerialization::programmatic);
    CHECK(programmatic.has_attributes());
    CHECK(programmatic.serialization == cudarc::StreamSerialization::programmatic);
    CHECK(config.serialization == cudarc::StreamSerialization::full);
    CHECK_FALSE(programmatic.with_serialization(cudarc::StreamSerialization::full).has_attributes());
    CHECK(config.with_shared_memory(100 * 1024).shared_mem_bytes == 100 * 1024);
}

TEST_CASE("launch.for_elements_grid_arithmetic") {
    for (int round = 0; round < 200; ++round) {
        const cudarc::DeviceShape shape{1 + static_cast<unsigned>(rng()() % 200),
                                        1024u * (1 + static_cast<unsigned>(rng()() % 2))};
        const unsigned block = 32u * (1 + static_cast<unsigned>(rng()() % 32));
        const std::size_t n = (round % 4 == 0) ? rng()() % 1000 : rng()() % (std::size_t{1} << 34);
        const auto config = cudarc::LaunchConfig::for_elements(n, shape, block);

        const unsigned long long per_sm = std::max(1u, shape.max_threads_per_multiprocessor / block);
        const unsigned long long resident = shape.multiprocessors * per_sm;
        const unsigned long long needed = std::max<unsigned long long>(1, (n + block - 1) / block);
        CHECK(config.grid.x == std::min(needed, resident));
        CHECK(config.grid.y == 1);
        CHECK(config.block == cudarc::Dim3(block));
        CHECK(config.grid.x >= 1);
        // Either every element has its own thread, or the device is full (a grid-stride loop covers the
        // rest).
        CHECK((static_cast<unsigned long long>(config.grid.x) * block >= n || config.grid.x == resident));
        CHECK_FALSE(config.has_attributes());
    }
    // n == 0 still launches (one block that does nothing).
    CHECK(cudarc::LaunchConfig::for_elements(0, cudarc::DeviceShape{132, 2048}, 256).grid.x == 1);
    // An occupancy limit below the thread limit wins.
    CHECK(cudarc::LaunchConfig::for_elements(std::size_t{1} << 30, cudarc::DeviceShape{132, 2048}, 256, 3)
              .grid.x == 396);
}

TEST_CASE("launch.for_elements_rejects_bad_block_sizes") {
    const cudarc::DeviceShape shape{132, 2048};
    CHECK_THROWS_WITH_AS(static_cast<void>(cudarc::LaunchConfig::for_elements(100, shape, 0)),
                         doctest::Contains("block size 0"), cudarc::Error);
    CHECK_THROWS_WITH_AS(static_cast<void>(cudarc::LaunchConfig::for_elements(100, shape, 2048)),
                         doctest::Contains("block size 2048"), cudarc::Error);
    CHECK_THROWS_AS(
        static_cast<void>(cudarc::LaunchConfig::for_elements(100, cudarc::DeviceShape{0, 2048}, 256)),
        cudarc::Error);
}

TEST_CASE("launch.config_validation_messages") {
    const unsigned grid = 2 * (1 + static_cast<unsigned>(rng()() % 1000));
    CHECK(validation_error(cudarc::LaunchConfig{grid, 256}).empty());
    CHECK(validation_error(cudarc::LaunchConfig{grid, 256}.with_cluster({2})).empty());
    CHECK(validation_error(cudarc::LaunchConfig{{grid, 4}, {16, 16}}.with_cluster({2, 2})).empty());

    CHECK(validation_error(cudarc::LaunchConfig{0, 256}).find("at least 1") != std::string::npos);
    CHECK(validation_error(cudarc::LaunchConfig{grid, {32, 0}}).find("at least 1") != std::string::npos);
    CHECK(validation_error(cudarc::LaunchConfig{grid, {64, 32}}).find("at most 1024 threads") !=
          std::string::npos);
    CHECK(validation_error(cudarc::LaunchConfig{grid + 1, 128}.with_cluster({2}))
              .find("whole number of clusters") != std::string::npos);
    CHECK(validation_error(cudarc::LaunchConfig{grid, 128}.with_cluster({0})).find("cluster extent") !=
          std::string::npos);
    // The message shows the configuration.
    CHECK(validation_error(cudarc::LaunchConfig{grid + 1, 128}.with_cluster({2})).find("cluster 2x1x1") !=
          std::string::npos);
}

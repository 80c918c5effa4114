// The 8-bit dynamic code maps and nearest-code quantization, host and kernel routines alike.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cudarc/error.hpp"
#include "cudarc_testing/optim/reference.hpp"
#include "optim/quantization.hpp"

namespace {

using cudarc::optim::dynamic_map;
using cudarc::optim::MapSign;
using cudarc::optim::QuantMap;
namespace reference = cudarc::optim::reference;

std::mt19937_64& rng() {
    static std::mt19937_64 engine{std::random_device{}()};
    return engine;
}

// The code nearest to x by scanning all 256, distances in float (as the kernels compute them),
// ties to the lower code.
std::uint8_t brute_force_nearest(const QuantMap& map, float x) {
    int best = 0;
    for (int i = 1; i < 256; ++i) {
        if (std::abs(x - map[static_cast<std::size_t>(i)]) <
            std::abs(x - map[static_cast<std::size_t>(best)]))
            best = i;
    }
    return static_cast<std::uint8_t>(best);
}

std::uint8_t brute_force_nearest(const QuantMap& map, double x) {
    int best = 0;
    const auto distance = [&](int i) {
        return std::abs(x - static_cast<double>(map[static_cast<std::size_t>(i)]));
    };
    for (int i = 1; i < 256; ++i) {
        if (distance(i) < distance(best)) best = i;
    }
    return static_cast<std::uint8_t>(best);
}

// Random values spread over [-1.1, 1.1], over many decades near 0, and right at code midpoints.
std::vector<double> probe_values(const QuantMap& map) {
    std::vector<double> out;
    std::uniform_real_distribution<double> uniform(-1.1, 1.1);
    std::uniform_real_distribution<double> exponent(-8.0, 0.0);
    std::bernoulli_distribution negative(0.5);
    for (int i = 0; i < 4000; ++i) out.push_back(uniform(rng()));
    for (int i = 0; i < 4000; ++i)
        out.push_back((negative(rng()) ? -1.0 : 1.0) * std::pow(10.0, exponent(rng())));
    for (std::size_t i = 0; i + 1 < map.size(); ++i) {
        const double mid = (static_cast<double>(map[i]) + static_cast<double>(map[i + 1])) / 2.0;
        out.push_back(mid);
        out.push_back(std::nextafter(mid, 2.0));
        out.push_back(std::nextafter(mid, -2.0));
    }
    return out;
}

}  // namespace

TEST_CASE("optim.quant_maps_are_sorted_with_256_distinct_codes") {
    for (MapSign sign : {MapSign::signed_map, MapSign::unsigned_map}) {
        const QuantMap& map = dynamic_map(sign);
        CAPTURE(static_cast<int>(sign));
        CHECK(map.size() == 256);
        CHECK(std::adjacent_find(map.begin(), map.end(), [](float a, float b) { return !(a < b); }) ==
              map.end());
        CHECK(map.back() == 1.0f);
        CHECK(std::count(map.begin(), map.end(), 0.0f) == 1);
        CHECK(std::all_of(map.begin(), map.end(), [](float v) { return v >= -1.0f && v <= 1.0f; }));
    }
}

TEST_CASE("optim.quant_signed_map_matches_bitsandbytes_shape") {
    const QuantMap& map = dynamic_map(MapSign::signed_map);
    // 127 negative codes, 0, then 127 positive midpoints and 1. Like bitsandbytes' signed map, it
    // has no -1: its most negative code is the top decade's last midpoint, -(1 - 0.9 / 128).
    CHECK(std::count_if(map.begin(), map.end(), [](float v) { return v < 0.0f; }) == 127);
    CHECK(std::count_if(map.begin(), map.end(), [](float v) { return v > 0.0f; }) == 128);
    CHECK(map[127] == 0.0f);
    CHECK(map.front() == doctest::Approx(-0.99296875).epsilon(1e-7));
    CHECK(map.front() > -1.0f);
    // Symmetric apart from the 1: code 127 - k mirrors code 127 + k.
    for (int k = 1; k < 128; ++k)
        CHECK(map[static_cast<std::size_t>(127 - k)] == -map[static_cast<std::size_t>(127 + k)]);
    // Decade i (values in [10^(i-7), 10^(i-6))) holds 2^i positive midpoints: 1, 2, 4, ..., 64.
    for (int i = 0; i < 7; ++i) {
        const double low = std::pow(10.0, i - 7);
        const double high = std::pow(10.0, i - 6);
        CAPTURE(i);
        CHECK(std::count_if(map.begin(), map.end(), [&](float v) { return v >= low && v < high; }) ==
              (1 << i));
    }
    // The smallest positive code is the one midpoint of [0.1, 1] in the lowest decade: 0.55e-6.
    CHECK(map[128] == doctest::Approx(0.55e-6).epsilon(1e-7));
    // The top decade's midpoints step by 0.9 / 64.
    CHECK(map[254] == doctest::Approx(1.0 - 0.9 / 128.0).epsilon(1e-7));
    CHECK(map[253] == doctest::Approx(1.0 - 3.0 * 0.9 / 128.0).epsilon(1e-7));
}

TEST_CASE("optim.quant_unsigned_map_matches_bitsandbytes_shape") {
    const QuantMap& map = dynamic_map(MapSign::unsigned_map);
    CHECK(map.front() == 0.0f);
    CHECK(std::count_if(map.begin(), map.end(), [](float v) { return v > 0.0f; }) == 255);
    // Twice the codes per decade of the signed map: 2, 4, ..., 128.
    for (int i = 0; i < 7; ++i) {
        const double low = std::pow(10.0, i - 7);
        const double high = std::pow(10.0, i - 6);
        CAPTURE(i);
        CHECK(std::count_if(map.begin(), map.end(), [&](float v) { return v >= low && v < high; }) ==
              (2 << i));
    }
    CHECK(map[1] == doctest::Approx(0.325e-6).epsilon(1e-7));
    CHECK(map[2] == doctest::Approx(0.775e-6).epsilon(1e-7));
    CHECK(map[254] == doctest::Approx(1.0 - 0.9 / 256.0).epsilon(1e-7));
}

TEST_CASE("optim.quant_map_other_sizes_and_bad_parameters") {
    // 4 bits, 3 exponent bits, signed: decades of 1, 2, 4 midpoints, mirrored, plus 0 and 1 = 16
    // codes; the other 240 entries are padding zeros.
    const QuantMap small = cudarc::optim::make_dynamic_map(MapSign::signed_map, 3, 4);
    CHECK(std::count(small.begin(), small.end(), 0.0f) == 241);
    CHECK(std::is_sorted(small.begin(), small.end()));
    CHECK(small.back() == 1.0f);
    CHECK_THROWS_AS(static_cast<void>(cudarc::optim::make_dynamic_map(MapSign::signed_map, 8, 8)),
                    cudarc::Error);
    CHECK_THROWS_AS(static_cast<void>(cudarc::optim::make_dynamic_map(MapSign::signed_map, 0, 8)),
                    cudarc::Error);
    CHECK_THROWS_AS(static_cast<void>(cudarc::optim::make_dynamic_map(MapSign::unsigned_map, 7, 9)),
                    cudarc::Error);
}

TEST_CASE("optim.quant_every_code_round_trips") {
    for (MapSign sign : {MapSign::signed_map, MapSign::unsigned_map}) {
        const QuantMap& map = dynamic_map(sign);
        for (float absmax : {1.0f, 0.37f, 123.5f, 3e-20f, 7e30f}) {
            const float inverse = 1.0f / absmax;
            for (int code = 0; code < 256; ++code) {
                const auto c = static_cast<std::uint8_t>(code);
                const float value = map[c] * absmax;  // dequantize, as the kernels do
                CAPTURE(code);
                CAPTURE(absmax);
                CHECK(cudarc::optim::nearest_code(map, value * inverse) == c);
                CHECK(reference::nearest_code(map, static_cast<double>(value) / absmax) == c);
            }
        }
    }
}

TEST_CASE("optim.quant_nearest_code_matches_brute_force") {
    for (MapSign sign : {MapSign::signed_map, MapSign::unsigned_map}) {
        const QuantMap& map = dynamic_map(sign);
        int checked = 0;
        for (double x : probe_values(map)) {
            const auto xf = static_cast<float>(x);
            CAPTURE(x);
            REQUIRE(cudarc::optim::nearest_code(map, xf) == brute_force_nearest(map, xf));
            REQUIRE(reference::nearest_code(map, x) == brute_force_nearest(map, x));
            ++checked;
        }
        CHECK(checked > 8000);
    }
}

// The kernels search through a map image (256 codes and a bucket table); it must give exactly the
// binary search's code for every input, including ends, zeros of both signs, NaN and the floats on
// either side of every threshold. Unsigned maps also take the nonnegative shortcut, and finite values
// below 2 the searches without the upper clamp.
TEST_CASE("optim.quant_map_image_search_equals_binary_search") {
    std::uniform_int_distribution<std::uint32_t> any_bits;
    for (const MapSign sign : {MapSign::signed_map, MapSign::unsigned_map}) {
        const QuantMap& map = dynamic_map(sign);
        const cudarc::optim::QuantMapImage image = cudarc::optim::make_map_image(map, sign);
        std::vector<float> probes;
        for (double x : probe_values(map)) probes.push_back(static_cast<float>(x));
        for (int i = 0; i < 20000; ++i)
            probes.push_back(std::bit_cast<float>(any_bits(rng())));  // all magnitudes
        for (std::size_t i = 0; i < map.size(); ++i) {
            const float code = map[i];
            for (const float x : {code, std::nextafter(code, 2.0f), std::nextafter(code, -2.0f)}) {
                probes.push_back(x);
            }
            if (i + 1 < map.size()) {
                // Around the float midpoint, where the code changes: a few floats each way.
                float x = (code + map[i + 1]) * 0.5f;
                for (int k = 0; k < 4; ++k) x = std::nextafter(x, -2.0f);
                for (int k = 0; k < 9; ++k, x = std::nextafter(x, 2.0f)) probes.push_back(x);
            }
        }
        for (float edge :
             {0.0f, -0.0f, 1e-45f, -1e-45f, 6e-8f, -6e-8f, 5.9604645e-8f, -5.9604645e-8f, 1.9999999f,
              -1.9999999f, 2.0f, -2.0f, 1e30f, -1e30f, std::numeric_limits<float>::infinity(),
              -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
              -std::numeric_limits<float>::quiet_NaN()}) {
            probes.push_back(edge);
        }
        for (float x : probes) {
            CAPTURE(x);
            const std::uint8_t expected = cudarc::optim::nearest_code(map, x);
            REQUIRE(cudarc::optim::nearest_code(image, x) == expected);
            if (sign == MapSign::unsigned_map)
                REQUIRE(cudarc::optim::nearest_code_nonnegative(image, x) == expected);
            // Without the upper clamp, for what the kernels know to be finite and below 2.
            if (std::isfinite(x) && std::abs(x) < 2.0f) {
                REQUIRE(cudarc::optim::nearest_code_within(image, x) == expected);
                if (sign == MapSign::unsigned_map)
                    REQUIRE(cudarc::optim::nearest_code_within_nonnegative(image, x) == expected);
            }
            // (Far outside [-1, 1] every float distance rounds alike and brute force cannot tell.)
            if (std::abs(x) <= 4.0f) REQUIRE(map[expected] == map[brute_force_nearest(map, x)]);
        }
    }
}

TEST_CASE("optim.quant_map_image_refuses_maps_it_cannot_search") {
    // A padded map repeats 0: its codes are not distinct.
    const QuantMap padded = cudarc::optim::make_dynamic_map(MapSign::unsigned_map, 3, 5);
    CHECK_THROWS_WITH_AS(static_cast<void>(cudarc::optim::make_map_image(padded, MapSign::unsigned_map)),
                         doctest::Contains("distinct and increasing"), cudarc::Error);
    // Three codes within one ulp of each other: two thresholds in one bucket.
    QuantMap crowded = dynamic_map(MapSign::signed_map);
    crowded[253] = std::nextafter(crowded[254], 0.0f);
    crowded[252] = std::nextafter(crowded[253], 0.0f);
    CHECK_THROWS_WITH_AS(static_cast<void>(cudarc::optim::make_map_image(crowded, MapSign::signed_map)),
                         doctest::Contains("bucket"), cudarc::Error);
    // The signed map under the unsigned map's shortcut.
    CHECK_THROWS_WITH_AS(static_cast<void>(cudarc::optim::make_map_image(dynamic_map(MapSign::signed_map),
                                                                         MapSign::unsigned_map)),
                         doctest::Contains("no negative codes"), cudarc::Error);
}

TEST_CASE("optim.quant_rounding_keeps_the_sign") {
    const QuantMap& map = dynamic_map(MapSign::signed_map);
    for (double x : probe_values(map)) {
        const auto xf = static_cast<float>(x);
        const float host = map[cudarc::optim::nearest_code(map, xf)];
        const float ref = map[reference::nearest_code(map, x)];
        CAPTURE(x);
        if (xf < 0.0f) CHECK(host <= 0.0f);
        if (xf > 0.0f) CHECK(host >= 0.0f);
        if (x < 0.0) CHECK(ref <= 0.0f);
        if (x > 0.0) CHECK(ref >= 0.0f);
    }
    // The tiniest values of either sign round to 0, never across it.
    CHECK(map[cudarc::optim::nearest_code(map, -1e-30f)] == 0.0f);
    CHECK(map[cudarc::optim::nearest_code(map, 1e-30f)] == 0.0f);
    // Past the ends: clamped to the extreme codes.
    CHECK(cudarc::optim::nearest_code(map, -5.0f) == 0);
    CHECK(cudarc::optim::nearest_code(map, 5.0f) == 255);
}

TEST_CASE("optim.quant_blockwise_round_trip") {
    const QuantMap& map = dynamic_map(MapSign::signed_map);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    std::vector<float> values(1000);  // 3 full blocks and a short one
    for (auto& v : values) v = normal(rng());
    std::fill(values.begin() + 256, values.begin() + 512, 0.0f);  // an all-zero block

    const cudarc::optim::BlockwiseState q = cudarc::optim::quantize_blockwise(values, map);
    REQUIRE(q.codes.size() == values.size());
    REQUIRE(q.absmax.size() == 4);
    for (std::size_t block = 0; block < 4; ++block) {
        float expected = 0.0f;
        for (std::size_t i = block * 256; i < std::min<std::size_t>(values.size(), block * 256 + 256); ++i) {
            expected = std::max(expected, std::abs(values[i]));
        }
        CHECK(q.absmax[block] == expected);
    }
    CHECK(q.absmax[1] == 0.0f);
    const std::vector<float> back = cudarc::optim::dequantize_blockwise(q, map);
    for (std::size_t i = 0; i < values.size(); ++i) {
        const float absmax = q.absmax[i / 256];
        CAPTURE(i);
        CHECK(back[i] == map[q.codes[i]] * absmax);
        const double normalized = absmax > 0.0f ? static_cast<double>(values[i]) / absmax : 0.0;
        CHECK(reference::codes_agree(map, q.codes[i], reference::nearest_code(map, normalized), normalized));
        if (absmax == 0.0f) CHECK(map[q.codes[i]] == 0.0f);
    }
    cudarc::optim::BlockwiseState broken = q;
    broken.absmax.pop_back();
    CHECK_THROWS_AS(static_cast<void>(cudarc::optim::dequantize_blockwise(broken, map)), cudarc::Error);
}

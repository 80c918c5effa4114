// fp16 / bf16 conversions: the kernels' bit-manipulation routines (kernels/optim_common.cuh, compiled
// here for the host) and the reference's double rounding, both against brute force.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "../../kernels/optim_common.cuh"
#include "cudarc_testing/optim/reference.hpp"

namespace {

namespace reference = cudarc::optim::reference;

std::mt19937_64& rng() {
    static std::mt19937_64 engine{std::random_device{}()};
    return engine;
}

// Every finite value of a 16-bit format, plus its infinity treated as the next step up (2^16 for
// half, 2^128 for bf16) so that brute force overflows exactly as IEEE rounding does.
struct Candidates {
    std::vector<double> value;
    std::vector<std::uint16_t> bits;
};

Candidates non_negative_values(double (*decode)(std::uint16_t), std::uint16_t infinity, double infinity_as) {
    Candidates c;
    for (std::uint32_t b = 0; b < infinity; ++b) {
        c.value.push_back(decode(static_cast<std::uint16_t>(b)));
        c.bits.push_back(static_cast<std::uint16_t>(b));
    }
    c.value.push_back(infinity_as);
    c.bits.push_back(infinity);
    return c;
}

const Candidates& half_candidates() {
    static const Candidates c = non_negative_values(reference::from_half_bits, 0x7c00, 65536.0);
    return c;
}
const Candidates& bf16_candidates() {
    static const Candidates c = non_negative_values(reference::from_bf16_bits, 0x7f80, std::ldexp(1.0, 128));
    return c;
}

// Nearest by linear scan; a tie goes to the even encoding (round half to even).
std::uint16_t brute_force_round(const Candidates& c, double x) {
    const double a = std::abs(x);
    std::size_t best = 0;
    for (std::size_t i = 1; i < c.value.size(); ++i) {
        const double d = std::abs(c.value[i] - a);
        const double best_d = std::abs(c.value[best] - a);
        if (d < best_d || (d == best_d && (c.bits[i] & 1u) == 0)) best = i;
    }
    return static_cast<std::uint16_t>(c.bits[best] | (std::signbit(x) ? 0x8000u : 0u));
}

// Random floats over the format's whole range (and a bit past it), with many near the edges.
std::vector<float> probe_floats(double largest) {
    std::vector<float> out;
    std::uniform_int_distribution<std::uint32_t> any_bits;
    while (out.size() < 1500) {
        const float f = std::bit_cast<float>(any_bits(rng()));
        if (std::isfinite(f) && std::abs(static_cast<double>(f)) < largest * 1.01) out.push_back(f);
    }
    std::uniform_real_distribution<double> small(-1e-7, 1e-7);  // half's subnormal range
    for (int i = 0; i < 500; ++i) out.push_back(static_cast<float>(small(rng())));
    return out;
}

}  // namespace

TEST_CASE("optim.half_every_pattern_round_trips_through_float") {
    int nans = 0;
    for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
        const auto h = static_cast<std::uint16_t>(b);
        const float f = cudarc_optim::half_to_float(h);
        const double expected = reference::from_half_bits(h);
        CAPTURE(b);
        if (std::isnan(expected)) {
            ++nans;
            REQUIRE(std::isnan(f));
            const std::uint16_t back = cudarc_optim::float_to_half(f);
            REQUIRE((back & 0x7c00u) == 0x7c00u);
            REQUIRE((back & 0x3ffu) != 0);               // still a NaN
            REQUIRE((back & 0x8000u) == (h & 0x8000u));  // same sign
            continue;
        }
        REQUIRE(static_cast<double>(f) == expected);
        REQUIRE(std::signbit(f) == std::signbit(expected));
        REQUIRE(cudarc_optim::float_to_half(f) == h);
        REQUIRE(reference::to_half_bits(expected) == h);
    }
    CHECK(nans == 2 * 1023);
}

TEST_CASE("optim.bf16_every_pattern_round_trips_through_float") {
    int nans = 0;
    for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
        const auto h = static_cast<std::uint16_t>(b);
        const float f = cudarc_optim::bf16_to_float(h);
        const double expected = reference::from_bf16_bits(h);
        CAPTURE(b);
        if (std::isnan(expected)) {
            ++nans;
            REQUIRE(std::isnan(f));
            const std::uint16_t back = cudarc_optim::float_to_bf16(f);
            REQUIRE((back & 0x7f80u) == 0x7f80u);
            REQUIRE((back & 0x7fu) != 0);
            REQUIRE((back & 0x8000u) == (h & 0x8000u));
            continue;
        }
        REQUIRE(static_cast<double>(f) == expected);
        REQUIRE(cudarc_optim::float_to_bf16(f) == h);
        REQUIRE(reference::to_bf16_bits(expected) == h);
    }
    CHECK(nans == 2 * 127);
}

// The 8-bit kernels widen parameters and gradients two to a word (first value in the low half).
TEST_CASE("optim.values_widen_from_either_half_of_a_word") {
    for (std::uint32_t b = 0; b <= 0xffffu; b += 7) {
        const auto h = static_cast<std::uint16_t>(b);
        const std::uint32_t other = 0xffffu - b;  // a different value in the other half
        CAPTURE(b);
        const float half = cudarc_optim::half_to_float(h);
        const float bf16 = cudarc_optim::bf16_to_float(h);
        REQUIRE(std::bit_cast<std::uint32_t>(cudarc_optim::Fp16::load_half(b | (other << 16), false)) ==
                std::bit_cast<std::uint32_t>(half));
        REQUIRE(std::bit_cast<std::uint32_t>(cudarc_optim::Fp16::load_half(other | (b << 16), true)) ==
                std::bit_cast<std::uint32_t>(half));
        REQUIRE(std::bit_cast<std::uint32_t>(cudarc_optim::Bf16::load_half(b | (other << 16), false)) ==
                std::bit_cast<std::uint32_t>(bf16));
        REQUIRE(std::bit_cast<std::uint32_t>(cudarc_optim::Bf16::load_half(other | (b << 16), true)) ==
                std::bit_cast<std::uint32_t>(bf16));
    }
}

TEST_CASE("optim.float_to_half_rounds_to_nearest_even") {
    std::vector<float> probes = probe_floats(65520.0);
    // Edges: the largest half, the overflow midpoint, the smallest subnormal and ties around it.
    for (double edge : {65504.0, 65519.0, 65520.0, 65521.0, 1e6, 6.103515625e-05, 6.0975552e-05,
                        5.9604645e-08, 2.98023223876953125e-08, 2.9802326e-08, 8.9406967e-08, 1.0009765625,
                        1.00048828125, 1.00146484375, 2049.0, 2051.0}) {
        probes.push_back(static_cast<float>(edge));
        probes.push_back(static_cast<float>(-edge));
    }
    for (float f : probes) {
        const std::uint16_t expected = brute_force_round(half_candidates(), static_cast<double>(f));
        CAPTURE(f);
        REQUIRE(cudarc_optim::float_to_half(f) == expected);
        REQUIRE(reference::to_half_bits(static_cast<double>(f)) == expected);
    }
    CHECK(cudarc_optim::float_to_half(std::numeric_limits<float>::infinity()) == 0x7c00);
    CHECK(cudarc_optim::float_to_half(-std::numeric_limits<float>::infinity()) == 0xfc00);
}

TEST_CASE("optim.float_to_bf16_rounds_to_nearest_even") {
    std::vector<float> probes = probe_floats(3.5e38);
    for (float edge :
         {std::numeric_limits<float>::max(), 3.3895314e38f, 1.00390625f, 1.01171875f, 1e-40f, 1e-45f}) {
        probes.push_back(edge);
        probes.push_back(-edge);
    }
    for (float f : probes) {
        const std::uint16_t expected = brute_force_round(bf16_candidates(), static_cast<double>(f));
        CAPTURE(f);
        REQUIRE(cudarc_optim::float_to_bf16(f) == expected);
        REQUIRE(reference::to_bf16_bits(static_cast<double>(f)) == expected);
    }
}

TEST_CASE("optim.double_rounding_to_half_and_bf16_is_correct") {
    // Doubles that are not floats, so rounding through float first could be wrong; the reference
    // must round once.
    std::uniform_real_distribution<double> mantissa(1.0, 2.0);
    std::uniform_int_distribution<int> half_exponent(-26, 16);
    std::uniform_int_distribution<int> bf16_exponent(-135, 128);
    std::bernoulli_distribution negative(0.5);
    for (int i = 0; i < 1500; ++i) {
        const double sign = negative(rng()) ? -1.0 : 1.0;
        const double h = sign * std::ldexp(mantissa(rng()), half_exponent(rng()));
        const double b = sign * std::ldexp(mantissa(rng()), bf16_exponent(rng()));
        CAPTURE(h);
        CAPTURE(b);
        REQUIRE(reference::to_half_bits(h) == brute_force_round(half_candidates(), h));
        REQUIRE(reference::to_bf16_bits(b) == brute_force_round(bf16_candidates(), b));
    }
    // A double just above a half midpoint rounds up, though as a float it would be the midpoint
    // itself and round to even (down): 1 + 2^-11 + 2^-40.
    const double above_tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
    CHECK(reference::to_half_bits(above_tie) == 0x3c01);
    CHECK(cudarc_optim::float_to_half(static_cast<float>(above_tie)) == 0x3c00);
}

TEST_CASE("optim.narrowing_keeps_every_nan_a_nan") {
    // A NaN whose payload sits only in the low bits would become infinity if merely truncated.
    for (std::uint32_t bits : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7f801fffu, 0xffffffffu}) {
        const float nan = std::bit_cast<float>(bits);
        const std::uint16_t h = cudarc_optim::float_to_half(nan);
        const std::uint16_t b = cudarc_optim::float_to_bf16(nan);
        CAPTURE(bits);
        CHECK(std::isnan(cudarc_optim::half_to_float(h)));
        CHECK(std::isnan(cudarc_optim::bf16_to_float(b)));
        CHECK((h & 0x8000u) == ((bits >> 16) & 0x8000u));
        CHECK((b & 0x8000u) == ((bits >> 16) & 0x8000u));
        CHECK(std::isnan(reference::from_half_bits(reference::to_half_bits(static_cast<double>(nan)))));
        CHECK(std::isnan(reference::from_bf16_bits(reference::to_bf16_bits(static_cast<double>(nan)))));
    }
}

TEST_CASE("optim.ulp_distance") {
    using cudarc::optim::ElementType;
    CHECK(reference::ulp_distance(ElementType::fp16, 0x3c00, 0x3c01) == 1);
    CHECK(reference::ulp_distance(ElementType::fp16, 0x0001, 0x8001) == 2);  // across zero
    CHECK(reference::ulp_distance(ElementType::bf16, 0x0000, 0x8000) == 0);  // +0 and -0
    CHECK(reference::ulp_distance(ElementType::fp32, std::bit_cast<std::uint32_t>(1.0f),
                                  std::bit_cast<std::uint32_t>(std::nextafter(1.0f, 2.0f))) == 1);
    CHECK(reference::to_bits(ElementType::bf16, 1.0) == 0x3f80u);
    CHECK(reference::from_bits(ElementType::fp16, 0x3c00u) == 1.0);
}

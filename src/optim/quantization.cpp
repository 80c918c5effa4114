#include "optim/quantization.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "cudarc/error.hpp"
// Note: the kernels' own quantization routines, compiled for the host, so host and device agree
// bit for bit on every code.
#include "../../kernels/optim_common.cuh"

namespace cudarc::optim {
namespace {

// Midpoints of `count` equal parts of [0.1, 1], times `scale`.
void append_decade(std::vector<double>& out, std::int64_t count, double scale, bool with_negative) {
    for (std::int64_t k = 0; k < count; ++k) {
        const double mean = 0.1 + 0.9 * (static_cast<double>(k) + 0.5) / static_cast<double>(count);
        out.push_back(scale * mean);
        if (with_negative) out.push_back(-scale * mean);
    }
}

}  // namespace

QuantMap make_dynamic_map(MapSign sign, int max_exponent_bits, int total_bits) {
    if (total_bits < 2 || total_bits > 8 || max_exponent_bits < 1 || max_exponent_bits >= total_bits) {
        throw Error(
            fmt::format("cudarc: no dynamic map with max_exponent_bits = {} and total_bits = {} (need "
                        "total_bits in [2, 8] and 1 <= max_exponent_bits < total_bits)",
                        max_exponent_bits, total_bits));
    }
    const bool is_signed = sign == MapSign::signed_map;
    // Note: bitsandbytes reserves one bit (the sign, or the linear-fraction indicator) either way.
    const int non_sign_bits = total_bits - 1;
    std::vector<double> values;
    double scale = 1.0;
    for (int i = 0; i < max_exponent_bits; ++i) {
        const int fraction_bits = i + non_sign_bits - max_exponent_bits + (is_signed ? 0 : 1);
        scale = std::pow(10.0, i - (max_exponent_bits - 1));
        append_decade(values, std::int64_t{1} << fraction_bits, scale, is_signed);
    }
    const std::int64_t additional = (std::int64_t{1} << (non_sign_bits - max_exponent_bits)) - 1;
    if (additional > 0) append_decade(values, additional, scale, is_signed);  // in the top decade
    values.push_back(0.0);
    values.push_back(1.0);
    if (values.size() > 256) {
        throw Error(
            fmt::format("cudarc: a dynamic map with max_exponent_bits = {} and total_bits = {} needs {} "
                        "codes, more than 256",
                        max_exponent_bits, total_bits, values.size()));
    }
    values.resize(256, 0.0);
    QuantMap map{};
    std::transform(values.begin(), values.end(), map.begin(), [](double v) { return static_cast<float>(v); });
    std::sort(map.begin(), map.end());
    return map;
}

const QuantMap& dynamic_map(MapSign sign) {
    static const QuantMap signed_map = make_dynamic_map(MapSign::signed_map);
    static const QuantMap unsigned_map = make_dynamic_map(MapSign::unsigned_map);
    return sign == MapSign::signed_map ? signed_map : unsigned_map;
}

static_assert(sizeof(cudarc_optim::QuantMapImage) == kQuantMapImageBytes);

std::uint8_t nearest_code(const QuantMap& map, float normalized) noexcept {
    return cudarc_optim::nearest_code(map.data(), normalized);
}

QuantMapImage make_map_image(const QuantMap& map, MapSign sign) {
    const auto image = std::make_unique<cudarc_optim::QuantMapImage>();
    bool nonnegative_search = false;
    if (!cudarc_optim::build_map_image(map.data(), *image, nonnegative_search)) {
        throw Error(
            "cudarc: this code map has no search image: its codes must be distinct and increasing, "
            "within the search's clamp (|x| < 2), and the nearest code may step at most once within one "
            "bucket (1/128 of a binade)");
    }
    if (sign == MapSign::unsigned_map && !nonnegative_search) {
        throw Error("cudarc: an unsigned code map must have no negative codes and code 0 equal to 0");
    }
    QuantMapImage bytes{};
    std::memcpy(bytes.data(), image.get(), bytes.size());
    return bytes;
}

namespace {

cudarc_optim::QuantMapImage image_of(const QuantMapImage& bytes) noexcept {
    cudarc_optim::QuantMapImage image;
    std::memcpy(&image, bytes.data(), bytes.size());
    return image;
}

}  // namespace

std::uint8_t nearest_code(const QuantMapImage& bytes, float normalized) noexcept {
    return cudarc_optim::nearest_code(image_of(bytes), normalized);
}

std::uint8_t nearest_code_nonnegative(const QuantMapImage& bytes, float normalized) noexcept {
    return cudarc_optim::nearest_code_nonnegative(image_of(bytes), normalized);
}

std::uint8_t nearest_code_within(const QuantMapImage& bytes, float normalized) noexcept {
    return static_cast<std::uint8_t>(cudarc_optim::coded_word_within(image_of(bytes).bucket, normalized) >>
                                     24);
}

std::uint8_t nearest_code_within_nonnegative(const QuantMapImage& bytes, float normalized) noexcept {
    return static_cast<std::uint8_t>(
        cudarc_optim::coded_word_within_nonnegative(image_of(bytes).bucket, normalized) >> 24);
}

BlockwiseState quantize_blockwise(std::span<const float> values, const QuantMap& map) {
    BlockwiseState out;
    out.codes.resize(values.size());
    out.absmax.resize((values.size() + kQuantBlockSize - 1) / kQuantBlockSize);
    for (std::size_t block = 0; block < out.absmax.size(); ++block) {
        const std::size_t begin = block * kQuantBlockSize;
        const std::size_t end = std::min(values.size(), begin + kQuantBlockSize);
        float absmax = 0.0f;
        for (std::size_t i = begin; i < end; ++i) absmax = cudarc_optim::fp::max(absmax, std::abs(values[i]));
        const float inverse = cudarc_optim::inverse_absmax(absmax);
        // Note: the binary search gives the code the kernels' table search gives (tested).
        for (std::size_t i = begin; i < end; ++i) {
            out.codes[i] = cudarc_optim::nearest_code(map.data(), cudarc_optim::fp::mul(values[i], inverse));
        }
        out.absmax[block] = absmax;
    }
    return out;
}

std::vector<float> dequantize_blockwise(const BlockwiseState& state, const QuantMap& map) {
    const std::size_t blocks = (state.codes.size() + kQuantBlockSize - 1) / kQuantBlockSize;
    if (state.absmax.size() != blocks) {
        throw Error(fmt::format("cudarc: blockwise state of {} codes needs {} absmax values, got {}",
                                state.codes.size(), blocks, state.absmax.size()));
    }
    std::vector<float> out(state.codes.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
        out[i] = cudarc_optim::dequantize(map.data(), state.codes[i], state.absmax[i / kQuantBlockSize]);
    }
    return out;
}

}  // namespace cudarc::optim

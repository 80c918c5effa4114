// 8-bit blockwise quantization of optimizer state, host side: the dynamic code maps and helpers.
//
// A state tensor is stored as one byte code per element plus one float absmax per block of 256
// elements: value = map[code] * absmax. The maps are bitsandbytes' "dynamic tree" maps
// (create_dynamic_map(signed, max_exponent_bits=7, total_bits=8)), re-derived in make_dynamic_map;
// docs/optimizers.md spells out the construction.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace cudarc::optim {

// Signed maps span [-1, 1] (first moments, momentum); unsigned ones [0, 1] (second moments).
enum class MapSign : int { signed_map = 0, unsigned_map = 1 };

inline constexpr std::size_t kQuantBlockSize = 256;  // elements sharing one absmax
using QuantMap = std::array<float, 256>;             // sorted ascending

// The dynamic map: for each decade 10^-(E-1) .. 10^0 (E = max_exponent_bits), evenly spaced
// midpoints of [0.1, 1] scaled to that decade, twice as many in each decade as in the one below
// (mirrored to negative values when signed), plus 0 and 1; padded with zeros to 256, then sorted.
// Computed in double and rounded to float once. Throws cudarc::Error for parameters that do not
// give a map of at most 256 codes (total_bits in [2, 8], 1 <= max_exponent_bits < total_bits).
[[nodiscard]] QuantMap make_dynamic_map(MapSign sign, int max_exponent_bits = 7, int total_bits = 8);

// The default maps (max_exponent_bits = 7, total_bits = 8), built once.
[[nodiscard]] const QuantMap& dynamic_map(MapSign sign);

// The nearest code to `normalized` (a value divided by its block's absmax), as the kernels choose it
// (in float: the last code <= x, then the upper neighbour if strictly nearer; ties go to the lower
// code). A negative value never gets a positive code.
[[nodiscard]] std::uint8_t nearest_code(const QuantMap& map, float normalized) noexcept;

// What the kernels take for a map (qmap1/qmap2, in device memory, 16-byte aligned): the 256 codes
// and a bucket table that finds the nearest code in one load (layout: cudarc_optim::QuantMapImage in
// kernels/optim_common.cuh). The kernels
// search an unsigned map's image with a shortcut that knows no negative codes. Throws cudarc::Error
// for a map the search cannot serve: codes not distinct and increasing, or so close that the
// nearest code steps twice within one bucket; or, for MapSign::unsigned_map, a negative code or code 0 != 0.
inline constexpr std::size_t kQuantMapImageBytes = 26624;
using QuantMapImage = std::array<std::uint8_t, kQuantMapImageBytes>;
[[nodiscard]] QuantMapImage make_map_image(const QuantMap& map, MapSign sign);

// The kernels' searches through an image (for tests: they must agree with nearest_code). The
// nonnegative one is what the kernels use for unsigned maps.
[[nodiscard]] std::uint8_t nearest_code(const QuantMapImage& image, float normalized) noexcept;
[[nodiscard]] std::uint8_t nearest_code_nonnegative(const QuantMapImage& image, float normalized) noexcept;
// The same two searches without the upper clamp, which the kernels use when a block's values and
// 1 / absmax are all finite: valid only for finite `normalized` with |normalized| < 2.
[[nodiscard]] std::uint8_t nearest_code_within(const QuantMapImage& image, float normalized) noexcept;
[[nodiscard]] std::uint8_t nearest_code_within_nonnegative(const QuantMapImage& image,
                                                           float normalized) noexcept;

// Blockwise state as the kernels store it.
struct BlockwiseState {
    std::vector<std::uint8_t> codes;  // one per element
    std::vector<float> absmax;        // one per block of 256 elements (the last block may be short)
};

// Quantizes like the kernels: absmax = max |value| over each block, code = nearest_code(value * (1 /
// absmax)) in float (an all-zero block gets absmax 0 and the code of 0).
[[nodiscard]] BlockwiseState quantize_blockwise(std::span<const float> values, const QuantMap& map);

// value = map[code] * absmax, in float. Throws cudarc::Error when absmax has the wrong length.
[[nodiscard]] std::vector<float> dequantize_blockwise(const BlockwiseState& state, const QuantMap& map);

}  // namespace cudarc::optim

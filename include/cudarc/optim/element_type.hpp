/// @file
/// cudarc::optim element types: what a parameter and its gradient are made of (fp32, fp16, bf16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace cudarc::optim {

/// IEEE binary16, stored as its 16 bits. Note: C++20 has no portable half type, and the library's
/// kernels convert by bit manipulation, so the host side only needs the storage.
struct half_bits {
    /// The 16 bits of the binary16 value.
    std::uint16_t bits = 0;
    /// Bitwise equality (so +0 and -0 differ, and a NaN equals itself).
    friend constexpr bool operator==(half_bits, half_bits) = default;
};

/// bfloat16 (the upper half of a float), stored as its 16 bits.
struct bf16_bits {
    /// The 16 bits of the bfloat16 value.
    std::uint16_t bits = 0;
    /// Bitwise equality (so +0 and -0 differ, and a NaN equals itself).
    friend constexpr bool operator==(bf16_bits, bf16_bits) = default;
};

static_assert(sizeof(half_bits) == 2 && std::is_trivially_copyable_v<half_bits>);
static_assert(sizeof(bf16_bits) == 2 && std::is_trivially_copyable_v<bf16_bits>);

/// The element type of a parameter tensor (its gradient has the same one): `fp32` (float), `fp16`
/// (half_bits) or `bf16` (bf16_bits).
enum class ElementType : int { fp32 = 0, fp16 = 1, bf16 = 2 };

/// The types a parameter tensor may hold: float, half_bits, bf16_bits.
template <typename T>
concept ParamElement =
    std::is_same_v<T, float> || std::is_same_v<T, half_bits> || std::is_same_v<T, bf16_bits>;

/// The ElementType of a ParamElement type: fp32 for float, fp16 for half_bits, bf16 for bf16_bits.
template <ParamElement T>
inline constexpr ElementType element_type_of = std::is_same_v<T, float>       ? ElementType::fp32
                                               : std::is_same_v<T, half_bits> ? ElementType::fp16
                                                                              : ElementType::bf16;

/// Bytes per element: 4 for fp32, 2 for fp16 and bf16.
[[nodiscard]] constexpr std::size_t element_size(ElementType type) noexcept {
    return type == ElementType::fp32 ? 4 : 2;
}

/// "fp32", "fp16" or "bf16".
[[nodiscard]] constexpr std::string_view to_string(ElementType type) noexcept {
    switch (type) {
        case ElementType::fp32:
            return "fp32";
        case ElementType::fp16:
            return "fp16";
        case ElementType::bf16:
            return "bf16";
    }
    return "unknown";
}

}  // namespace cudarc::optim

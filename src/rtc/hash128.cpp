#include "rtc/hash128.hpp"

namespace cudarc::rtc {
namespace {

// FNV-1a 128 parameters (from the FNV specification): the offset basis, and the prime
// 2^88 + 2^8 + 0x3b, which makes the multiply a shift and a small product.
constexpr std::uint64_t kOffsetHigh = 0x6c62272e07bb0142ULL;
constexpr std::uint64_t kOffsetLow = 0x62b821756295c58dULL;
constexpr std::uint64_t kPrimeLowPart = 0x13bULL;  // 2^8 + 0x3b

// (high, low) *= 2^88 + 0x13b, modulo 2^128.
inline void multiply_by_prime(std::uint64_t& high, std::uint64_t& low) noexcept {
    // low * 0x13b needs 73 bits: split low into 32-bit halves to keep the carry.
    const std::uint64_t low_lo = low & 0xffffffffULL;
    const std::uint64_t low_hi = low >> 32;
    const std::uint64_t product_lo = low_lo * kPrimeLowPart;                       // < 2^41
    const std::uint64_t product_hi = low_hi * kPrimeLowPart + (product_lo >> 32);  // < 2^42
    const std::uint64_t new_low = (product_hi << 32) | (product_lo & 0xffffffffULL);
    const std::uint64_t carry = product_hi >> 32;
    // x * 2^88 contributes low << 24 to the high word (88 - 64 = 24); high * 2^88 overflows away.
    high = high * kPrimeLowPart + carry + (low << 24);
    low = new_low;
}

}  // namespace

std::string Hash128::hex() const {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out(32, '0');
    for (int i = 0; i < 16; ++i) {
        out[static_cast<std::size_t>(15 - i)] = kDigits[(high >> (4 * i)) & 0xf];
        out[static_cast<std::size_t>(31 - i)] = kDigits[(low >> (4 * i)) & 0xf];
    }
    return out;
}

Fnv1a128::Fnv1a128() noexcept : high_(kOffsetHigh), low_(kOffsetLow) {}

Fnv1a128& Fnv1a128::update(const void* data, std::size_t bytes) noexcept {
    const auto* p = static_cast<const unsigned char*>(data);
    std::uint64_t high = high_;
    std::uint64_t low = low_;
    for (std::size_t i = 0; i < bytes; ++i) {
        low ^= p[i];
        multiply_by_prime(high, low);
    }
    high_ = high;
    low_ = low;
    return *this;
}

Fnv1a128& Fnv1a128::field(std::string_view text) noexcept {
    field(static_cast<std::uint64_t>(text.size()));
    return update(text);
}

Fnv1a128& Fnv1a128::field(std::uint64_t value) noexcept {
    unsigned char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
    return update(bytes, sizeof bytes);
}

Hash128 Fnv1a128::digest() const noexcept {
    return Hash128{high_, low_};
}

}  // namespace cudarc::rtc

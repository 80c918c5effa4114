// A 128-bit FNV-1a hash: the kernel cache's key and its files' checksum. Internal to src/rtc.
//
// Note: FNV-1a is not cryptographic; it only has to keep distinct compile inputs apart and to
// notice damaged files, and 128 bits make an accidental collision practically impossible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cudarc::rtc {

struct Hash128 {
    std::uint64_t high = 0;
    std::uint64_t low = 0;

    // 32 lowercase hex digits, most significant first.
    [[nodiscard]] std::string hex() const;
    friend bool operator==(const Hash128&, const Hash128&) = default;
};

class Fnv1a128 {
  public:
    Fnv1a128() noexcept;

    Fnv1a128& update(const void* data, std::size_t bytes) noexcept;
    Fnv1a128& update(std::string_view text) noexcept { return update(text.data(), text.size()); }
    // A length-prefixed field: ("ab", "c") and ("a", "bc") hash differently.
    Fnv1a128& field(std::string_view text) noexcept;
    Fnv1a128& field(std::uint64_t value) noexcept;

    [[nodiscard]] Hash128 digest() const noexcept;

  private:
    std::uint64_t high_;
    std::uint64_t low_;
};

[[nodiscard]] inline Hash128 fnv1a128(std::string_view text) noexcept {
    return Fnv1a128().update(text).digest();
}

}  // namespace cudarc::rtc

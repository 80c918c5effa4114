// A 128-bit hash (XXH3-128): the kernel cache's key and its files' checksum. Internal to src/rtc.
//
// Note [Kernel cache hash]: XXH3-128 comes from Debian's libxxhash-dev in header-only inline mode
// (XXH_INLINE_ALL): every xxhash function becomes a static inline function of the file that includes
// this header, so nothing is linked and libcudarc exports none of them. It is not cryptographic; it
// only has to keep distinct compile inputs apart and notice damaged files, and 128 bits make an
// accidental collision practically impossible. It runs at memory speed (tens of GB/s), so a memory
// hit of the cache costs microseconds, not the hundreds a byte-at-a-time hash took.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace cudarc::rtc {

struct Hash128 {
    std::uint64_t high = 0;
    std::uint64_t low = 0;

    // 32 lowercase hex digits, most significant first.
    [[nodiscard]] std::string hex() const;
    friend bool operator==(const Hash128&, const Hash128&) = default;
};

// Streaming XXH3-128 (seed 0): update() in pieces gives the digest of the concatenation.
class Hasher128 {
  public:
    Hasher128() noexcept {
        XXH3_INITSTATE(&state_);
        static_cast<void>(XXH3_128bits_reset(&state_));
    }

    Hasher128& update(const void* data, std::size_t bytes) noexcept {
        static_cast<void>(XXH3_128bits_update(&state_, data, bytes));
        return *this;
    }
    Hasher128& update(std::string_view text) noexcept { return update(text.data(), text.size()); }
    // A length-prefixed field: ("ab", "c") and ("a", "bc") hash differently.
    Hasher128& field(std::string_view text) noexcept {
        field(static_cast<std::uint64_t>(text.size()));
        return update(text);
    }
    // Eight bytes, little-endian, whatever the host's byte order.
    Hasher128& field(std::uint64_t value) noexcept {
        unsigned char bytes[8];
        for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
        return update(bytes, sizeof bytes);
    }
    Hasher128& field(const Hash128& digest) noexcept { return field(digest.high).field(digest.low); }

    [[nodiscard]] Hash128 digest() const noexcept {
        const XXH128_hash_t h = XXH3_128bits_digest(&state_);
        return Hash128{h.high64, h.low64};
    }

  private:
    XXH3_state_t state_;
};

// The XXH3-128 digest of `text` in one call (what Hasher128().update(text).digest() gives).
[[nodiscard]] inline Hash128 xxh3_128(std::string_view text) noexcept {
    const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
    return Hash128{h.high64, h.low64};
}

}  // namespace cudarc::rtc

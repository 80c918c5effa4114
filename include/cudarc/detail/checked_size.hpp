// Byte counts computed from element counts, checked for overflow.
#pragma once

#include <cstddef>
#include <limits>

#include "cudarc/export.hpp"

namespace cudarc::detail {

// Throws cudarc::Error: "`what`: `count` elements of `element_bytes` bytes overflow ..."
// (src/core/error.cpp).
[[noreturn]] CUDARC_API void throw_size_overflow(const char* what, std::size_t count,
                                                 std::size_t element_bytes);

// `count` * `element_bytes`, or an error naming the request (`what`) when the product does not fit in
// size_t. Note: `element_bytes` is a sizeof at every call site, so the division is folded away.
[[nodiscard]] inline std::size_t checked_bytes(const char* what, std::size_t count,
                                               std::size_t element_bytes) {
    if (element_bytes != 0 && count > std::numeric_limits<std::size_t>::max() / element_bytes) [[unlikely]]
        throw_size_overflow(what, count, element_bytes);
    return count * element_bytes;
}

}  // namespace cudarc::detail

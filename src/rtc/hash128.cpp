#include "rtc/hash128.hpp"

namespace cudarc::rtc {

std::string Hash128::hex() const {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out(32, '0');
    for (int i = 0; i < 16; ++i) {
        out[static_cast<std::size_t>(15 - i)] = kDigits[(high >> (4 * i)) & 0xf];
        out[static_cast<std::size_t>(31 - i)] = kDigits[(low >> (4 * i)) & 0xf];
    }
    return out;
}

}  // namespace cudarc::rtc

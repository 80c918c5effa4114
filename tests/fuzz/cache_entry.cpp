// Fuzz target: a kernel cache entry read from disk (Note [Fuzzing] in docs/reliability.md). The first input
// byte picks how the rest becomes the file: as it is (mode 0), or with the header's key, payload size and
// checksum made to match (mode 1), so that mutations reach the payload's parser instead of stopping at the
// checksum. Whatever the bytes, the reader returns a program or a reason, never crashes; the file reader
// agrees with the decoder; a program it accepts encodes and decodes to itself.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "rtc/cache_file.hpp"

namespace {

// The key the seed corpus was written with (tests/fuzz/corpus/cache_entry/).
constexpr cudarc::rtc::Hash128 kKey{0x0123456789abcdefULL, 0xfedcba9876543210ULL};

void put_u64(std::string& bytes, std::size_t offset, std::uint64_t value) {
    for (int i = 0; i < 8; ++i) bytes[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

// Gives `bytes` (at least a header) the key, payload size and checksum its payload needs.
void seal(std::string& bytes) {
    put_u64(bytes, 16, kKey.high);
    put_u64(bytes, 24, kKey.low);
    const std::string_view payload = std::string_view(bytes).substr(cudarc::rtc::kCacheHeaderBytes);
    put_u64(bytes, 32, payload.size());
    const cudarc::rtc::Hash128 sum = cudarc::rtc::xxh3_128(payload);
    put_u64(bytes, 40, sum.high);
    put_u64(bytes, 48, sum.low);
}

// A folder of this process's own for the file, removed at exit.
struct Folder {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("cudarc-fuzz-cache-" + std::to_string(getpid()));
    Folder() { std::filesystem::create_directories(path); }
    Folder(const Folder&) = delete;
    Folder& operator=(const Folder&) = delete;
    ~Folder() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
};

const std::filesystem::path& entry_path() {
    static const Folder folder;
    static const std::filesystem::path path = folder.path / "entry.kernel";
    return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
    if ((data[0] & 1) != 0 && bytes.size() >= cudarc::rtc::kCacheHeaderBytes) seal(bytes);

    std::string why;
    const auto decoded = cudarc::rtc::decode_cache_file(bytes, kKey, why);
    if (decoded) {
        if (!why.empty()) std::abort();  // accepted with a reason
        std::string again_why;
        const auto again =
            cudarc::rtc::decode_cache_file(cudarc::rtc::encode_cache_file(kKey, *decoded), kKey, again_why);
        if (!again || !(*again == *decoded)) std::abort();
    } else if (why.empty()) {
        std::abort();  // rejected without a reason
    }

    // The same bytes as a file on disk.
    {
        std::ofstream out(entry_path(), std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    std::string file_why;
    const auto read = cudarc::rtc::read_cache_file(entry_path(), kKey, file_why);
    if (read.has_value() != decoded.has_value() || (read && !(*read == *decoded))) std::abort();
    // A limit below the file's size refuses it, with a reason.
    if (!bytes.empty()) {
        std::string capped_why;
        if (cudarc::rtc::read_cache_file(entry_path(), kKey, capped_why, bytes.size() - 1) ||
            capped_why.empty())
            std::abort();
    }
    return 0;
}

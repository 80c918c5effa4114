// The kernel cache's file format. Internal to src/rtc; tests reach it to damage files on purpose.
//
// Layout (integers little-endian):
//   offset  0  magic "CUDARCKC"                 8 bytes
//           8  format version (kFormatVersion)  u32
//          12  reserved, 0                      u32
//          16  key (Hash128: high, low)         2 x u64
//          32  payload size in bytes            u64
//          40  payload checksum (XXH3-128)      2 x u64
//          56  payload: backend (u32), then length-prefixed (u64) fields: arch, PTX, binary, log,
//              and the lowered names (count u64, then expression, lowered name per entry)
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "cudarc/kernel_cache.hpp"
#include "cudarc/nvrtc.hpp"
#include "rtc/hash128.hpp"

namespace cudarc::rtc {

inline constexpr char kCacheMagic[8] = {'C', 'U', 'D', 'A', 'R', 'C', 'K', 'C'};
// 2: the checksum is XXH3-128 (was FNV-1a 128).
inline constexpr std::uint32_t kFormatVersion = 2;
inline constexpr std::size_t kCacheHeaderBytes = 56;

// The file's bytes for `program` under `key`.
[[nodiscard]] std::string encode_cache_file(const Hash128& key, const CompiledProgram& program);

// The program stored in `bytes`, or nullopt with the reason in `why` (wrong magic, another
// format version, another key, truncated, checksum mismatch, malformed payload).
[[nodiscard]] std::optional<CompiledProgram> decode_cache_file(std::string_view bytes, const Hash128& key,
                                                               std::string& why);

// Reads and decodes `path`. nullopt with `why` empty: no such file (a plain miss); with `why`
// set: the file exists but cannot be used. Only a regular file (a symbolic link is followed) of at most
// `max_bytes` is read; anything else (a FIFO, a device, a folder, a huge file) is refused without reading
// or blocking. Never throws.
[[nodiscard]] std::optional<CompiledProgram> read_cache_file(
    const std::filesystem::path& path, const Hash128& key, std::string& why,
    std::size_t max_bytes = KernelCache::kMaxEntryBytes);

// Writes atomically: the bytes go to a temporary file in the same folder ("NAME.tmp.PID.N"), which is
// flushed to disk (fsync) and then renamed over `path`, so a reader (or a concurrent writer) sees the old
// file or the new one, never a mix, even after a crash. Returns false with the reason in `why` (a file of
// more than `max_bytes` is not written); never throws.
bool write_cache_file(const std::filesystem::path& path, const Hash128& key, const CompiledProgram& program,
                      std::string& why, std::size_t max_bytes = KernelCache::kMaxEntryBytes);

// Marks an entry as just used (its modification time), for least-recently-used eviction. Best effort.
void touch_cache_file(const std::filesystem::path& path) noexcept;

// Removes temporary files of writers that were killed: "*.tmp.PID.N" whose process is gone, or older than
// an hour (a writer on another machine sharing the folder). Best effort, never throws.
void remove_stale_temporaries(const std::filesystem::path& directory) noexcept;

// Removes the least recently used entries ("*.kernel", oldest modification time first) until the entries
// take at most `max_bytes`, never `keep`. Best effort, never throws.
void evict_least_recently_used(const std::filesystem::path& directory, std::size_t max_bytes,
                               const std::filesystem::path& keep) noexcept;

}  // namespace cudarc::rtc

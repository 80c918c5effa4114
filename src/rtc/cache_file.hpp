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

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

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
// set: the file exists but cannot be used.
[[nodiscard]] std::optional<CompiledProgram> read_cache_file(const std::filesystem::path& path,
                                                             const Hash128& key, std::string& why);

// Writes atomically: the bytes go to a temporary file in the same folder, which is then renamed
// over `path`, so a reader (or a concurrent writer) sees the old file or the new one, never a mix.
// Returns false with the reason in `why`; never throws for I/O failures.
bool write_cache_file(const std::filesystem::path& path, const Hash128& key, const CompiledProgram& program,
                      std::string& why);

}  // namespace cudarc::rtc

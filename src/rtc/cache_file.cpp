#include "rtc/cache_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <string_view>
#include <system_error>
#include <vector>

namespace cudarc::rtc {
namespace {

void put_u32(std::string& out, std::uint32_t value) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void put_u64(std::string& out, std::uint64_t value) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void put_field(std::string& out, std::string_view bytes) {
    put_u64(out, bytes.size());
    out.append(bytes);
}

// Reads the payload front to back; any read past the end marks it malformed.
class Reader {
  public:
    explicit Reader(std::string_view bytes) : bytes_(bytes) {}

    std::uint64_t u64() {
        if (!has(8)) return 0;
        std::uint64_t value = 0;
        for (int i = 0; i < 8; ++i) {
            value |= static_cast<std::uint64_t>(
                         static_cast<unsigned char>(bytes_[offset_ + static_cast<std::size_t>(i)]))
                     << (8 * i);
        }
        offset_ += 8;
        return value;
    }
    std::uint32_t u32() {
        if (!has(4)) return 0;
        std::uint32_t value = 0;
        for (int i = 0; i < 4; ++i) {
            value |= static_cast<std::uint32_t>(
                         static_cast<unsigned char>(bytes_[offset_ + static_cast<std::size_t>(i)]))
                     << (8 * i);
        }
        offset_ += 4;
        return value;
    }
    std::string_view field() {
        const std::uint64_t size = u64();
        if (!has(size)) return {};
        const std::string_view out = bytes_.substr(offset_, static_cast<std::size_t>(size));
        offset_ += static_cast<std::size_t>(size);
        return out;
    }
    [[nodiscard]] bool ok() const { return ok_; }
    [[nodiscard]] bool at_end() const { return offset_ == bytes_.size(); }

  private:
    bool has(std::uint64_t count) {
        if (ok_ && count <= bytes_.size() - offset_) return true;
        ok_ = false;
        return false;
    }
    std::string_view bytes_;
    std::size_t offset_ = 0;
    bool ok_ = true;
};

std::string encode_payload(const CompiledProgram& program) {
    std::string out;
    out.reserve(64 + program.arch.size() + program.ptx.size() + program.binary.size() + program.log.size());
    put_u32(out, program.backend == Backend::hip ? 1u : 0u);
    put_field(out, program.arch);
    put_field(out, program.ptx);
    put_field(out, std::string_view(program.binary.data(), program.binary.size()));
    put_field(out, program.log);
    put_u64(out, program.lowered_names.size());
    for (const auto& [expression, lowered] : program.lowered_names) {
        put_field(out, expression);
        put_field(out, lowered);
    }
    return out;
}

std::string errno_text() {
    return std::strerror(errno);
}

}  // namespace

std::string encode_cache_file(const Hash128& key, const CompiledProgram& program) {
    const std::string payload = encode_payload(program);
    const Hash128 checksum = xxh3_128(payload);
    std::string out;
    out.reserve(kCacheHeaderBytes + payload.size());
    out.append(kCacheMagic, sizeof kCacheMagic);
    put_u32(out, kFormatVersion);
    put_u32(out, 0);
    put_u64(out, key.high);
    put_u64(out, key.low);
    put_u64(out, payload.size());
    put_u64(out, checksum.high);
    put_u64(out, checksum.low);
    out += payload;
    return out;
}

std::optional<CompiledProgram> decode_cache_file(std::string_view bytes, const Hash128& key,
                                                 std::string& why) {
    if (bytes.size() < kCacheHeaderBytes) {
        why = "truncated (" + std::to_string(bytes.size()) + " bytes, shorter than the header)";
        return std::nullopt;
    }
    if (bytes.substr(0, sizeof kCacheMagic) != std::string_view(kCacheMagic, sizeof kCacheMagic)) {
        why = "not a cudarc kernel cache file (wrong magic)";
        return std::nullopt;
    }
    Reader header(bytes.substr(sizeof kCacheMagic, kCacheHeaderBytes - sizeof kCacheMagic));
    const std::uint32_t version = header.u32();
    static_cast<void>(header.u32());  // reserved
    const Hash128 stored_key{header.u64(), header.u64()};
    const std::uint64_t payload_size = header.u64();
    const Hash128 stored_checksum{header.u64(), header.u64()};
    if (version != kFormatVersion) {
        why = "format version " + std::to_string(version) + ", expected " + std::to_string(kFormatVersion);
        return std::nullopt;
    }
    if (stored_key != key) {
        why = "holds key " + stored_key.hex() + ", not " + key.hex();
        return std::nullopt;
    }
    const std::string_view payload = bytes.substr(kCacheHeaderBytes);
    if (payload.size() != payload_size) {
        why = (payload.size() < payload_size ? "truncated" : "has trailing bytes") +
              std::string(" (payload of ") + std::to_string(payload.size()) + " bytes, header says " +
              std::to_string(payload_size) + ")";
        return std::nullopt;
    }
    if (xxh3_128(payload) != stored_checksum) {
        why = "checksum mismatch (the payload was damaged)";
        return std::nullopt;
    }
    Reader reader(payload);
    CompiledProgram program;
    program.backend = reader.u32() == 1 ? Backend::hip : Backend::cuda;
    program.arch = std::string(reader.field());
    program.ptx = std::string(reader.field());
    const std::string_view binary = reader.field();
    program.binary.assign(binary.begin(), binary.end());
    program.log = std::string(reader.field());
    const std::uint64_t names = reader.u64();
    for (std::uint64_t i = 0; reader.ok() && i < names; ++i) {
        std::string expression(reader.field());
        std::string lowered(reader.field());
        program.lowered_names.emplace(std::move(expression), std::move(lowered));
    }
    if (!reader.ok() || !reader.at_end()) {
        why = "malformed payload";
        return std::nullopt;
    }
    return program;
}

std::optional<CompiledProgram> read_cache_file(const std::filesystem::path& path, const Hash128& key,
                                               std::string& why, std::size_t max_bytes) {
    why.clear();
    // Note: O_NONBLOCK so that opening a FIFO cannot wait for a writer; fstat then refuses anything but a
    // regular file (a FIFO, /dev/zero behind a symbolic link) before a byte is read.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT && errno != ENOTDIR)
            why = "cannot be opened: " + errno_text();  // else a plain miss
        return std::nullopt;
    }
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
        why = "cannot be examined: " + errno_text();
        return std::nullopt;
    }
    if (!S_ISREG(info.st_mode)) {
        why = "not a regular file (a FIFO, a device, a folder?), left unread";
        return std::nullopt;
    }
    const auto size = static_cast<std::uint64_t>(info.st_size);
    if (size > max_bytes) {
        why = "larger than " + std::to_string(max_bytes) + " bytes (" + std::to_string(size) +
              "), which no entry is: left unread";
        return std::nullopt;
    }
    try {
        std::string bytes(static_cast<std::size_t>(size), '\0');
        std::size_t got_total = 0;
        while (got_total < bytes.size()) {
            const ssize_t got = ::read(fd, bytes.data() + got_total, bytes.size() - got_total);
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) {
                why = "cannot be read: " + errno_text();
                return std::nullopt;
            }
            if (got == 0) break;  // shorter than it was: the decoder reports it truncated
            got_total += static_cast<std::size_t>(got);
        }
        bytes.resize(got_total);
        return decode_cache_file(bytes, key, why);
    } catch (const std::exception& e) {  // out of memory: a disk problem like any other
        why = std::string("cannot be read: ") + e.what();
        return std::nullopt;
    }
}

bool write_cache_file(const std::filesystem::path& path, const Hash128& key, const CompiledProgram& program,
                      std::string& why, std::size_t max_bytes) {
    try {
        // A name no other writer uses: this process's id plus a per-process counter.
        static std::atomic<unsigned long long> counter{0};
        const std::filesystem::path temporary =
            path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
        const std::string bytes = encode_cache_file(key, program);
        if (bytes.size() > max_bytes) {
            why = "the entry's " + std::to_string(bytes.size()) + " bytes exceed the cache's limit of " +
                  std::to_string(max_bytes);
            return false;
        }

        const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) {
            why = "cannot create " + temporary.string() + ": " + errno_text();
            return false;
        }
        const auto fail = [&](const char* what) {
            why = std::string(what) + " " + temporary.string() + ": " + errno_text();
            ::close(fd);
            ::unlink(temporary.c_str());
            return false;
        };
        std::size_t written = 0;
        while (written < bytes.size()) {
            const ssize_t put = ::write(fd, bytes.data() + written, bytes.size() - written);
            if (put < 0 && errno == EINTR) continue;
            if (put <= 0) return fail("cannot write");
            written += static_cast<std::size_t>(put);
        }
        // Note: the bytes reach the disk before the name does, so a crash never leaves a named entry with
        // missing contents.
        if (::fsync(fd) != 0) return fail("cannot flush");
        if (::close(fd) != 0) {
            why = "cannot write " + temporary.string() + ": " + errno_text();
            ::unlink(temporary.c_str());
            return false;
        }
        if (::rename(temporary.c_str(), path.c_str()) != 0) {
            why = "cannot rename " + temporary.string() + " to " + path.string() + ": " + errno_text();
            ::unlink(temporary.c_str());
            return false;
        }
        return true;
    } catch (const std::exception& e) {
        why = std::string("cannot write: ") + e.what();
        return false;
    }
}

void touch_cache_file(const std::filesystem::path& path) noexcept {
    static_cast<void>(::utimensat(AT_FDCWD, path.c_str(), nullptr, 0));
}

namespace {

// The writer's pid in "NAME.tmp.PID.N", or -1 when `name` is not a temporary file.
long long temporary_writer(std::string_view name) {
    const std::size_t tag = name.rfind(".tmp.");
    if (tag == std::string_view::npos) return -1;
    const std::string_view rest = name.substr(tag + 5);
    const std::size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string_view::npos || dot + 1 == rest.size()) return -1;
    long long pid = 0;
    for (const char c : rest.substr(0, dot)) {
        if (c < '0' || c > '9' || pid > 1'000'000'000'000LL) return -1;
        pid = pid * 10 + (c - '0');
    }
    for (const char c : rest.substr(dot + 1)) {
        if (c < '0' || c > '9') return -1;
    }
    return pid;
}

}  // namespace

void remove_stale_temporaries(const std::filesystem::path& directory) noexcept {
    constexpr auto kWriterLifetime = std::chrono::hours(1);
    try {
        std::error_code ec;
        const auto now = std::filesystem::file_time_type::clock::now();
        for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
            const long long pid = temporary_writer(it->path().filename().native());
            if (pid < 0) continue;
            std::error_code stat_ec;
            const auto written = std::filesystem::last_write_time(it->path(), stat_ec);
            const bool ancient = !stat_ec && now - written > kWriterLifetime;
            const bool orphaned = pid > std::numeric_limits<pid_t>::max() ||
                                  (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
            if (ancient || orphaned) std::filesystem::remove(it->path(), stat_ec);
        }
    } catch (...) {  // NOLINT(bugprone-empty-catch): best effort
    }
}

void evict_least_recently_used(const std::filesystem::path& directory, std::size_t max_bytes,
                               const std::filesystem::path& keep) noexcept {
    try {
        struct Entry {
            std::filesystem::file_time_type used;
            std::uintmax_t bytes;
            std::filesystem::path path;
        };
        std::vector<Entry> entries;
        std::uintmax_t total = 0;
        std::error_code ec;
        for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
            if (it->path().extension() != ".kernel") continue;
            std::error_code stat_ec;
            if (!it->is_regular_file(stat_ec)) continue;
            const std::uintmax_t bytes = it->file_size(stat_ec);
            if (stat_ec) continue;
            const auto used = it->last_write_time(stat_ec);
            if (stat_ec) continue;
            total += bytes;
            entries.push_back({used, bytes, it->path()});
        }
        if (total <= max_bytes) return;
        std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
            return a.used != b.used ? a.used < b.used : a.path < b.path;
        });
        for (const Entry& entry : entries) {
            if (total <= max_bytes) break;
            if (entry.path == keep) continue;
            std::error_code remove_ec;
            // Another process may have removed it already: it no longer counts either way.
            std::filesystem::remove(entry.path, remove_ec);
            total -= entry.bytes;
        }
    } catch (...) {  // NOLINT(bugprone-empty-catch): best effort
    }
}

}  // namespace cudarc::rtc

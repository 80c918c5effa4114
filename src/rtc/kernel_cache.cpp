// KernelCache: memory map + disk folder in front of Program::compile.
#include "cudarc/kernel_cache.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "rtc/cache_file.hpp"
#include "rtc/compiler_arguments.hpp"
#include "rtc/embedded_kernels.hpp"
#include "rtc/hash128.hpp"
#include "sys/dynamic_library.hpp"
#include "sys/rtc_api.hpp"

namespace cudarc {
namespace {

// Bump when what goes into the key changes meaning, so that old entries are never matched.
// v2: XXH3-128, headers hashed as (name, digest of text).
constexpr std::string_view kKeySchema = "cudarc kernel cache key v2";

struct HashOfHash {
    std::size_t operator()(const rtc::Hash128& h) const noexcept {
        return static_cast<std::size_t>(h.low ^ h.high);
    }
};

// The compiler's identity: a patched NVRTC installed in place keeps its path and version but may
// generate different code, so the file's size and modification time are part of it too.
rtc::Hash128 compiler_identity(const sys::RtcApi& api) {
    int major = 0;
    int minor = 0;
    if (api.version != nullptr) static_cast<void>(api.version(&major, &minor));
    rtc::Hasher128 hash;
    hash.field(api.backend == Backend::hip ? "hip" : "cuda")
        .field(static_cast<std::uint64_t>(major))
        .field(static_cast<std::uint64_t>(minor))
        .field(api.library_path);
    struct stat info {};
    if (::stat(api.library_path.c_str(), &info) == 0) {
        hash.field(static_cast<std::uint64_t>(info.st_size))
            .field(static_cast<std::uint64_t>(info.st_mtim.tv_sec))
            .field(static_cast<std::uint64_t>(info.st_mtim.tv_nsec));
    }
    return hash.digest();
}

// Once per backend: the library is loaded once and stays loaded, so what compiles is the file as it
// was then (a file replaced later is not what this process runs). Saves a stat() per lookup.
const rtc::Hash128& compiler_identity(Backend backend) {
    if (backend == Backend::hip) {
        static const rtc::Hash128 hip = compiler_identity(sys::rtc(Backend::hip));
        return hip;
    }
    static const rtc::Hash128 cuda = compiler_identity(sys::rtc(Backend::cuda));
    return cuda;
}

// The digest of a header's text. The shipped kernels/*.cuh never change while the library is loaded,
// so theirs are computed once: a memory hit then hashes only the program's own source and options.
rtc::Hash128 header_digest(std::string_view text) {
    struct Shipped {
        const char* data;
        std::size_t size;
        rtc::Hash128 digest;
    };
    static const std::vector<Shipped> shipped = [] {
        std::vector<Shipped> out;
        for (const auto& entry : detail::embedded_kernel_sources())
            out.push_back({entry.source.data(), entry.source.size(), rtc::xxh3_128(entry.source)});
        return out;
    }();
    for (const Shipped& s : shipped) {
        if (s.data == text.data() && s.size == text.size()) return s.digest;
    }
    return rtc::xxh3_128(text);
}

rtc::Hash128 compute_key(const Program& program, const CompileOptions& options) {
    const std::vector<std::string> arguments = rtc::compiler_arguments(options);  // throws for bad options
    rtc::Hasher128 hash;
    hash.field(kKeySchema);
    hash.field(compiler_identity(options.backend));
    hash.field(options.arch);
    hash.field(program.name()).field(program.source());
    const auto headers = rtc::headers_for(options);
    hash.field(static_cast<std::uint64_t>(headers.size()));
    for (const auto& [name, text] : headers) hash.field(name).field(header_digest(text));
    hash.field(static_cast<std::uint64_t>(arguments.size()));
    for (const auto& argument : arguments) hash.field(argument);
    std::vector<std::string_view> expressions(program.name_expressions().begin(),
                                              program.name_expressions().end());
    std::sort(expressions.begin(), expressions.end());
    hash.field(static_cast<std::uint64_t>(expressions.size()));
    for (const auto& expression : expressions) hash.field(expression);
    return hash.digest();
}

std::filesystem::path entry_path(const std::filesystem::path& directory, const rtc::Hash128& key) {
    return directory / (key.hex() + ".kernel");
}

}  // namespace

const char* to_string(CacheSource source) noexcept {
    switch (source) {
        case CacheSource::compiled:
            return "compiled";
        case CacheSource::memory:
            return "memory";
        case CacheSource::disk:
            return "disk";
    }
    return "unknown";
}

struct KernelCache::State {
    std::optional<std::filesystem::path> directory;
    std::size_t max_bytes = kDefaultMaxBytes;
    std::string configuration_note;  // a CUDARC_CACHE_MAX_BYTES value that was not understood
    mutable std::mutex mutex;
    // Note: shared_ptr so that a hit copies out under the lock without the map's node staying
    // borrowed, and clear_memory() cannot pull an entry from under a reader.
    std::unordered_map<rtc::Hash128, std::shared_ptr<const CompiledProgram>, HashOfHash> entries;
};

KernelCache::KernelCache(std::optional<std::filesystem::path> directory, std::size_t max_bytes)
    : state_(std::make_unique<State>()) {
    state_->directory = std::move(directory);
    state_->max_bytes = max_bytes;
}

KernelCache::~KernelCache() = default;

KernelCache& KernelCache::process_cache() {
    struct Limit {
        std::size_t max_bytes = kDefaultMaxBytes;
        std::string note;  // a value that was not understood
    };
    static const Limit limit = [] {
        Limit out;
        try {
            out.max_bytes = max_bytes_from(sys::env_or_empty("CUDARC_CACHE_MAX_BYTES"));
        } catch (const Error& e) {
            out.note = std::string(e.what()) + "; the default applies";
        }
        return out;
    }();
    static KernelCache cache(directory_from_environment(), limit.max_bytes);
    static const bool noted = [] {
        cache.state_->configuration_note = limit.note;
        return true;
    }();
    static_cast<void>(noted);
    return cache;
}

std::size_t KernelCache::max_bytes_from(std::string_view value) {
    if (value.empty()) return kDefaultMaxBytes;
    const auto bad = [&] {
        return Error("cudarc: CUDARC_CACHE_MAX_BYTES=\"" + std::string(value) +
                     "\" is not a size: give a byte count, optionally with K, M or G (e.g. 512M)");
    };
    std::size_t shift = 0;
    std::string_view digits = value;
    switch (digits.back()) {
        case 'k':
        case 'K':
            shift = 10;
            break;
        case 'm':
        case 'M':
            shift = 20;
            break;
        case 'g':
        case 'G':
            shift = 30;
            break;
        default:
            break;
    }
    if (shift != 0) digits.remove_suffix(1);
    if (digits.empty()) throw bad();
    std::size_t bytes = 0;
    for (const char c : digits) {
        if (c < '0' || c > '9') throw bad();
        const auto digit = static_cast<std::size_t>(c - '0');
        if (bytes > (std::numeric_limits<std::size_t>::max() - digit) / 10) throw bad();
        bytes = bytes * 10 + digit;
    }
    if (bytes > (std::numeric_limits<std::size_t>::max() >> shift)) throw bad();
    return bytes << shift;
}

std::optional<std::filesystem::path> KernelCache::directory_from_environment() {
    return directory_from(sys::env_or_empty("CUDARC_CACHE_DIR"), sys::env_or_empty("XDG_CACHE_HOME"),
                          sys::env_or_empty("HOME"));
}

std::optional<std::filesystem::path> KernelCache::directory_from(std::string_view cudarc_cache_dir,
                                                                 std::string_view xdg_cache_home,
                                                                 std::string_view home) {
    if (cudarc_cache_dir == "off") return std::nullopt;
    if (!cudarc_cache_dir.empty()) return std::filesystem::path(cudarc_cache_dir);
    // The XDG base directory rules ignore a relative XDG_CACHE_HOME.
    if (!xdg_cache_home.empty() && xdg_cache_home.front() == '/') {
        return std::filesystem::path(xdg_cache_home) / "cudarc";
    }
    if (!home.empty()) return std::filesystem::path(home) / ".cache" / "cudarc";
    return std::nullopt;
}

CachedProgram KernelCache::compile(const Program& program, const CompileOptions& options) {
    rtc::Hash128 key;
    try {
        key = compute_key(program, options);
    } catch (const CompileError&) {
        throw;
    } catch (const Error&) {
        // Options the compiler cannot take: let Program::compile report them as the CompileError
        // it would throw uncached (a compiler that cannot be loaded throws from there as well).
        static_cast<void>(program.compile(options));
        throw;
    }

    CachedProgram out;
    out.key = key.hex();
    {
        std::lock_guard lock(state_->mutex);
        const auto found = state_->entries.find(key);
        if (found != state_->entries.end()) {
            out.program = *found->second;
            out.source = CacheSource::memory;
            if (state_->directory) out.file = entry_path(*state_->directory, key);
            return out;
        }
    }

    std::string ignored;  // why a file at the entry's path was not used
    if (state_->directory) {
        out.file = entry_path(*state_->directory, key);
        std::string why;
        if (auto stored =
                rtc::read_cache_file(out.file, key, why, std::min(state_->max_bytes, kMaxEntryBytes))) {
            rtc::touch_cache_file(out.file);  // recently used: evicted last
            auto entry = std::make_shared<const CompiledProgram>(std::move(*stored));
            out.program = *entry;
            out.source = CacheSource::disk;
            std::lock_guard lock(state_->mutex);
            state_->entries.emplace(key, std::move(entry));
            return out;
        }
        if (!why.empty()) ignored = "ignored " + out.file.string() + ": " + why;
    }

    out.program = program.compile(options);
    out.source = CacheSource::compiled;
    if (state_->directory) {
        std::string why;
        try {
            std::error_code ec;
            std::filesystem::create_directories(*state_->directory, ec);
            if (ec) {
                why = "cannot create " + state_->directory->string() + ": " + ec.message();
            } else if (rtc::write_cache_file(out.file, key, out.program, why,
                                             std::min(state_->max_bytes, kMaxEntryBytes))) {
                rtc::remove_stale_temporaries(*state_->directory);
                rtc::evict_least_recently_used(*state_->directory, state_->max_bytes, out.file);
            }
        } catch (const std::exception& e) {  // out of memory: a disk problem like any other
            why = e.what();
        }
        if (!ignored.empty()) {
            out.disk_note = ignored + (why.empty() ? "; recompiled and rewrote it"
                                                   : "; recompiled it, but could not rewrite it: " + why);
        } else if (!why.empty()) {
            out.disk_note = "not stored: " + why;
        }
        if (!state_->configuration_note.empty())
            out.disk_note += (out.disk_note.empty() ? "" : "; ") + state_->configuration_note;
    }
    std::lock_guard lock(state_->mutex);
    state_->entries.emplace(key, std::make_shared<const CompiledProgram>(out.program));
    return out;
}

std::string KernelCache::key(const Program& program, const CompileOptions& options) const {
    return compute_key(program, options).hex();
}

std::optional<std::filesystem::path> KernelCache::file_for(const Program& program,
                                                           const CompileOptions& options) const {
    if (!state_->directory) return std::nullopt;
    return entry_path(*state_->directory, compute_key(program, options));
}

void KernelCache::clear_memory() noexcept {
    std::lock_guard lock(state_->mutex);
    state_->entries.clear();
}

std::size_t KernelCache::memory_entries() const {
    std::lock_guard lock(state_->mutex);
    return state_->entries.size();
}

const std::optional<std::filesystem::path>& KernelCache::directory() const noexcept {
    return state_->directory;
}

std::size_t KernelCache::max_bytes() const noexcept {
    return state_->max_bytes;
}

CachedProgram compile_cached(const Program& program, const CompileOptions& options) {
    return KernelCache::process_cache().compile(program, options);
}

CachedProgram compile_embedded_cached(std::string_view file_name, const CompileOptions& options,
                                      const std::vector<std::string>& name_expressions) {
    Program program = Program::embedded(file_name);
    for (const auto& expression : name_expressions) program.add_name_expression(expression);
    return compile_cached(program, options);
}

}  // namespace cudarc

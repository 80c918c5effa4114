/// @file
/// cudarc::KernelCache — compiled kernels kept in memory (per process) and on disk (across
/// processes), so that a program's second start loads its kernels in milliseconds.
///
/// The key is a 128-bit hash of everything that decides the compiler's output: the source text and
/// name, every in-memory header (name and text), the rendered options (arch included), the name
/// expressions, and the compiler (backend, version, library path, size and modification time).
/// Change any of them and the old entry is simply never looked up again.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cudarc/compile_options.hpp"
#include "cudarc/export.hpp"
#include "cudarc/nvrtc.hpp"

namespace cudarc {

/// Where a cached compile's result came from: `compiled` now, found in `memory`, or read from `disk`.
enum class CacheSource { compiled, memory, disk };

/// "compiled", "memory" or "disk".
[[nodiscard]] CUDARC_API const char* to_string(CacheSource source) noexcept;

/// What KernelCache::compile returns: the compiled program, where it came from, its key and disk entry.
struct CachedProgram {
    /// The compiled program.
    CompiledProgram program;
    /// Whether it was compiled now, found in memory or read from disk.
    CacheSource source = CacheSource::compiled;
    std::string key;             ///< the key as 32 hex digits
    std::filesystem::path file;  ///< the disk entry's path; empty when the disk cache is off
    /// Why the disk cache was not used or not updated, when that happened: a damaged file that was
    /// ignored (and whether it could be rewritten), a folder that cannot be written. Empty normally.
    std::string disk_note;
};

/// A cache of compiled programs, in memory and (optionally) in a folder on disk. Thread-safe. See the file's
/// description for the key.
class CUDARC_API KernelCache {
  public:
    /// The disk cache's default size cap (CUDARC_CACHE_MAX_BYTES overrides it for the process cache), of the
    /// order of the driver's own JIT cache (CUDA_CACHE_MAXSIZE).
    static constexpr std::size_t kDefaultMaxBytes = std::size_t{1} << 30;
    /// No entry is larger: a file at an entry's path that is larger is never read.
    static constexpr std::size_t kMaxEntryBytes = std::size_t{512} << 20;

    /// A cache whose disk entries live in `directory` (created on first write); memory-only when
    /// `directory` is nullopt. After each write the folder's entries are kept within `max_bytes`, the least
    /// recently used (written or read) removed first, and temporary files of killed writers are removed.
    explicit KernelCache(std::optional<std::filesystem::path> directory,
                         std::size_t max_bytes = kDefaultMaxBytes);
    KernelCache(const KernelCache&) = delete;
    KernelCache& operator=(const KernelCache&) = delete;
    /// Drops the in-memory entries; the disk entries stay.
    ~KernelCache();

    /// The process-wide cache that compile_cached() uses; its folder is read from the environment
    /// on first use (see directory_from_environment()).
    [[nodiscard]] static KernelCache& process_cache();

    /// $CUDARC_CACHE_DIR, else $XDG_CACHE_HOME/cudarc, else $HOME/.cache/cudarc; nullopt (no disk
    /// cache) when CUDARC_CACHE_DIR is "off" or no folder can be derived.
    [[nodiscard]] static std::optional<std::filesystem::path> directory_from_environment();
    /// The same rule over given values (empty means unset), for tests and tools.
    [[nodiscard]] static std::optional<std::filesystem::path> directory_from(
        std::string_view cudarc_cache_dir, std::string_view xdg_cache_home, std::string_view home);
    /// A CUDARC_CACHE_MAX_BYTES value: a byte count, optionally with a K, M or G suffix (powers of 1024);
    /// empty means the default. Throws cudarc::Error naming the variable and the value for anything else.
    [[nodiscard]] static std::size_t max_bytes_from(std::string_view value);

    /// The compiled program for (program, options): from memory, else from disk, else compiled now
    /// and stored in both. Throws what Program::compile throws; disk problems never throw (they are
    /// reported in CachedProgram::disk_note and the compile goes ahead): an entry that is not a regular file
    /// or is too large is not read, and running out of memory while reading or writing one is a disk problem
    /// too. Thread-safe.
    [[nodiscard]] CachedProgram compile(const Program& program, const CompileOptions& options);

    /// The key (32 hex digits) and disk path compile() would use. Loads the compiler (its version
    /// is part of the key); throws cudarc::Error for options that cannot be compiled.
    [[nodiscard]] std::string key(const Program& program, const CompileOptions& options) const;
    /// The disk entry's path for (program, options); nullopt when the cache has no folder. Computes the key
    /// like key().
    [[nodiscard]] std::optional<std::filesystem::path> file_for(const Program& program,
                                                                const CompileOptions& options) const;

    /// Forgets the in-memory entries (the disk stays): what a fresh process would see.
    void clear_memory() noexcept;
    /// The number of in-memory entries.
    [[nodiscard]] std::size_t memory_entries() const;
    /// The folder of the disk entries; nullopt for a memory-only cache.
    [[nodiscard]] const std::optional<std::filesystem::path>& directory() const noexcept;
    /// The disk cache's size cap in bytes.
    [[nodiscard]] std::size_t max_bytes() const noexcept;

  private:
    struct State;
    std::unique_ptr<State> state_;
};

/// KernelCache::process_cache().compile(program, options).
[[nodiscard]] CUDARC_API CachedProgram compile_cached(const Program& program, const CompileOptions& options);

/// The cached compile of a file shipped under kernels/, for example compile_embedded_cached("bench.cu",
/// options).
[[nodiscard]] CUDARC_API CachedProgram
compile_embedded_cached(std::string_view file_name, const CompileOptions& options,
                        const std::vector<std::string>& name_expressions = {});

}  // namespace cudarc

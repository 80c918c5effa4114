// Issue 14, items 2 and 9 (the cache note): the kernel cache's disk entries are read only when they are
// regular files of a sane size, temporary files of killed writers are removed, the folder is capped with
// least-recently-used eviction, and disk problems never throw out of KernelCache::compile.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "cudarc/kernel_cache.hpp"
#include "rtc_test_support.hpp"

using namespace cudarc;
using cudarc::test::fresh_small_program;
using cudarc::test::options_for;
using cudarc::test::require_nvrtc;
using cudarc::test::TemporaryFolder;

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// Compiles on another thread and gives up after `limit`, so that a hang fails the test instead of
// stopping it. `unblock` runs on a hang to let the stuck thread finish.
template <typename Unblock>
CachedProgram compile_within(KernelCache& cache, const Program& program, const CompileOptions& options,
                             std::chrono::seconds limit, Unblock unblock) {
    auto done = std::async(std::launch::async, [&] { return cache.compile(program, options); });
    if (done.wait_for(limit) != std::future_status::ready) {
        unblock();
        FAIL_CHECK("KernelCache::compile did not return within " << limit.count() << " s");
    }
    try {
        return done.get();
    } catch (const std::exception& e) {
        FAIL("KernelCache::compile threw for a disk problem: " << e.what());
        throw;
    }
}

void set_age(const fs::path& path, std::chrono::seconds age) {
    fs::last_write_time(path, fs::file_time_type::clock::now() - age);
}

}  // namespace

TEST_CASE("reliability.cache_entry_that_is_a_fifo_does_not_hang") {
    require_nvrtc();
    TemporaryFolder folder;
    KernelCache cache(folder.path());
    const Program program = fresh_small_program();
    const CompileOptions options = options_for("sm_90");
    const fs::path entry = *cache.file_for(program, options);
    REQUIRE(::mkfifo(entry.c_str(), 0644) == 0);
    const CachedProgram result = compile_within(cache, program, options, 30s, [&] {
        const int fd = ::open(entry.c_str(), O_WRONLY | O_NONBLOCK);  // a writer lets the blocked open return
        if (fd >= 0) ::close(fd);
    });
    CHECK(result.source == CacheSource::compiled);
    INFO(result.disk_note);
    CHECK(contains(result.disk_note, "not a regular file"));
    CHECK(fs::is_regular_file(entry));  // replaced by a proper entry
    cache.clear_memory();
    CHECK(cache.compile(program, options).source == CacheSource::disk);
}

TEST_CASE("reliability.cache_entry_linked_to_dev_zero_is_not_read") {
    require_nvrtc();
    TemporaryFolder folder;
    KernelCache cache(folder.path());
    const Program program = fresh_small_program();
    const CompileOptions options = options_for("sm_90");
    const fs::path entry = *cache.file_for(program, options);
    fs::create_symlink("/dev/zero", entry);
    const CachedProgram result = compile_within(cache, program, options, 30s, [] {});
    CHECK(result.source == CacheSource::compiled);
    INFO(result.disk_note);
    CHECK(contains(result.disk_note, "not a regular file"));
}

TEST_CASE("reliability.cache_entry_too_large_is_not_read") {
    require_nvrtc();
    TemporaryFolder folder;
    KernelCache cache(folder.path());
    const Program program = fresh_small_program();
    const CompileOptions options = options_for("sm_90");
    const fs::path entry = *cache.file_for(program, options);
    { std::ofstream create(entry); }
    fs::resize_file(entry, KernelCache::kMaxEntryBytes + 1);  // sparse: costs no disk
    const auto started = std::chrono::steady_clock::now();
    const CachedProgram result = compile_within(cache, program, options, 30s, [] {});
    INFO(result.disk_note);
    CHECK(contains(result.disk_note, "larger than"));
    CHECK(result.source == CacheSource::compiled);
    MESSAGE("took " << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
                    << " s");
}

TEST_CASE("reliability.cache_removes_temporary_files_of_killed_writers") {
    require_nvrtc();
    TemporaryFolder folder;
    KernelCache cache(folder.path());
    // pid 999999999 is above any Linux pid_max: its writer is gone. Our own pid is a live writer, unless its
    // file is older than a writer could ever take.
    const fs::path dead = folder.path() / "0123.kernel.tmp.999999999.0";
    const fs::path live = folder.path() / ("0456.kernel.tmp." + std::to_string(::getpid()) + ".77");
    const fs::path ancient = folder.path() / ("0789.kernel.tmp." + std::to_string(::getpid()) + ".78");
    const fs::path unrelated = folder.path() / "notes.txt";
    for (const auto& path : {dead, live, ancient, unrelated}) std::ofstream(path) << "partial";
    set_age(ancient, 2h);
    const CachedProgram result = cache.compile(fresh_small_program(), options_for("sm_90"));
    CHECK(result.source == CacheSource::compiled);
    CHECK_FALSE(fs::exists(dead));
    CHECK_FALSE(fs::exists(ancient));
    CHECK(fs::exists(live));
    CHECK(fs::exists(unrelated));
    CHECK(fs::exists(result.file));
}

TEST_CASE("reliability.cache_size_cap_evicts_least_recently_used") {
    require_nvrtc();
    TemporaryFolder folder;
    const Program a = fresh_small_program("a.cu");
    const Program b = fresh_small_program("b.cu");
    const Program c = fresh_small_program("c.cu");
    const CompileOptions options = options_for("sm_90");
    std::uintmax_t sizes = 0;
    fs::path file_a;
    fs::path file_b;
    {
        KernelCache uncapped(folder.path());
        file_a = uncapped.compile(a, options).file;
        file_b = uncapped.compile(b, options).file;
        sizes = fs::file_size(file_a) + fs::file_size(file_b);
    }
    set_age(file_a, 200s);  // a is older than b ...
    set_age(file_b, 100s);
    // Room for about three entries of this size, less a margin (the entries differ by a few bytes).
    const std::size_t cap = static_cast<std::size_t>(sizes + sizes / 2 - 256);
    KernelCache capped(folder.path(), cap);
    CHECK(capped.max_bytes() == cap);
    CHECK(capped.compile(a, options).source ==
          CacheSource::disk);  // ... but a is used now: b is least recent
    const CachedProgram third = capped.compile(c, options);
    CHECK(third.source == CacheSource::compiled);
    CHECK(fs::exists(file_a));
    CHECK(fs::exists(third.file));
    CHECK_FALSE(fs::exists(file_b));
    std::uintmax_t total = 0;
    for (const auto& item : fs::directory_iterator(folder.path())) total += item.file_size();
    CHECK(total <= capped.max_bytes());
}

TEST_CASE("reliability.cache_max_bytes_from_environment") {
    CHECK(KernelCache::max_bytes_from("") == KernelCache::kDefaultMaxBytes);
    CHECK(KernelCache::kDefaultMaxBytes == std::size_t{1} << 30);
    CHECK(KernelCache::max_bytes_from("1048576") == 1048576);
    CHECK(KernelCache::max_bytes_from("64M") == std::size_t{64} << 20);
    CHECK(KernelCache::max_bytes_from("2G") == std::size_t{2} << 30);
    CHECK(KernelCache::max_bytes_from("512k") == 512 * 1024);
    for (const char* bad : {"abc", "12x", "-5", "99999999999999999999999", "1.5G"}) {
        INFO(bad);
        try {
            (void)KernelCache::max_bytes_from(bad);
            FAIL("accepted");
        } catch (const Error& e) {
            CHECK(contains(e.what(), "CUDARC_CACHE_MAX_BYTES"));
            CHECK(contains(e.what(), bad));
        }
    }
}

TEST_CASE("reliability.cache_note_does_not_claim_a_rewrite_that_failed") {
    require_nvrtc();
    TemporaryFolder folder;
    KernelCache cache(folder.path());
    const Program program = fresh_small_program();
    const CompileOptions options = options_for("sm_90");
    const fs::path entry = *cache.file_for(program, options);
    fs::create_directories(entry / "occupied");  // neither readable as an entry nor replaceable by one
    const CachedProgram result = cache.compile(program, options);
    CHECK(result.source == CacheSource::compiled);
    INFO(result.disk_note);
    CHECK(contains(result.disk_note, "ignored"));
    CHECK_FALSE(contains(result.disk_note, "rewrote"));
    CHECK(contains(result.disk_note, "could not rewrite"));
}

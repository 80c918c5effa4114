// The kernel cache: key, memory and disk layers, damaged files, concurrent writers.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cudarc/kernel_cache.hpp"
#include "rtc/cache_file.hpp"
#include "rtc/hash128.hpp"
#include "rtc_test_support.hpp"

using namespace cudarc;
using cudarc::test::fresh_small_program;
using cudarc::test::options_for;
using cudarc::test::require_nvrtc;
using cudarc::test::TemporaryFolder;

namespace {

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

std::string read_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

rtc::Hash128 key_of(const CachedProgram& cached) {
    // The file name is the key's hex; parse it back for read_cache_file.
    const std::string& hex = cached.key;
    return rtc::Hash128{std::stoull(hex.substr(0, 16), nullptr, 16),
                        std::stoull(hex.substr(16), nullptr, 16)};
}

// A random program of random bytes and names, for the file codec.
CompiledProgram random_program() {
    auto& rng = test::random_engine();
    CompiledProgram program;
    program.arch = "sm_" + std::to_string(70 + rng() % 60);
    program.binary.resize(1 + rng() % 5000);
    for (auto& byte : program.binary) byte = static_cast<char>(rng());
    program.log = "warning #" + std::to_string(rng());
    for (int i = 0; i < 3; ++i)
        program.lowered_names["k<" + std::to_string(rng()) + ">"] = "_Z" + std::to_string(rng());
    return program;
}

// `bytes` with byte `at` XORed with `mask`.
std::string with_flipped(std::string bytes, std::size_t at, unsigned mask) {
    REQUIRE(at < bytes.size());
    const auto flipped = static_cast<char>(static_cast<unsigned char>(bytes[at]) ^ mask);
    bytes.replace(at, 1, 1, flipped);
    return bytes;
}

// Compiles into a fresh cache folder and damages the entry with `damage`; the next lookup from a
// fresh memory must notice, recompile, and leave a valid file.
void check_damage_is_detected(const std::function<std::string(std::string)>& damage,
                              const std::string& reason) {
    require_nvrtc();
    TemporaryFolder folder;
    KernelCache cache(folder.path());
    const Program program = fresh_small_program();
    const CompileOptions options = options_for("sm_90");
    const CachedProgram first = cache.compile(program, options);
    REQUIRE(first.source == CacheSource::compiled);
    REQUIRE(std::filesystem::exists(first.file));

    write_bytes(first.file, damage(read_bytes(first.file)));
    cache.clear_memory();
    const CachedProgram second = cache.compile(program, options);
    CHECK(second.source == CacheSource::compiled);  // not trusted: compiled again
    INFO(second.disk_note);
    CHECK(contains(second.disk_note, reason));
    CHECK(second.program == first.program);

    // ... and rewritten: a fresh memory now gets it from disk.
    std::string why;
    CHECK(rtc::read_cache_file(first.file, key_of(first), why).has_value());
    cache.clear_memory();
    CHECK(cache.compile(program, options).source == CacheSource::disk);
}

}  // namespace

TEST_CASE("rtc.hash128_matches_xxh3_reference") {
    // Reference digests from xxhsum -H2 (the xxhash command-line tool; canonical form, high half first).
    CHECK(rtc::xxh3_128("").hex() == "99aa06d3014798d86001c324468d497f");
    CHECK(rtc::xxh3_128("a").hex() == "a96faf705af16834e6c632b61e964e1f");
    CHECK(rtc::xxh3_128("foobar").hex() == "3c9e102628997f44ac87b0b131c6992d");
    std::string all_bytes;
    for (int repeat = 0; repeat < 4; ++repeat) {
        for (int byte = 0; byte < 256; ++byte) all_bytes.push_back(static_cast<char>(byte));
    }
    CHECK(rtc::xxh3_128(all_bytes).hex() == "83885e853bb6640ca870f92984398d22");
    // Long enough for the streaming path's stripes and blocks: (i * 7 + 3) mod 256, 100000 bytes.
    std::string long_input(100000, '\0');
    for (std::size_t i = 0; i < long_input.size(); ++i) long_input[i] = static_cast<char>((i * 7 + 3) % 256);
    CHECK(rtc::xxh3_128(long_input).hex() == "d9e155dd16e141d00c056f6fcc340974");
    // Incremental updates, in any split, equal one update; fields are length-prefixed.
    rtc::Hasher128 pieces;
    for (std::size_t at = 0; at < long_input.size(); at += 1 + at % 977)
        pieces.update(std::string_view(long_input).substr(at, 1 + at % 977));
    CHECK(pieces.digest() == rtc::xxh3_128(long_input));
    CHECK(rtc::Hasher128().update("foo").update("bar").digest() == rtc::xxh3_128("foobar"));
    CHECK(rtc::Hasher128().field("ab").field("c").digest() !=
          rtc::Hasher128().field("a").field("bc").digest());
}

TEST_CASE("rtc.cache_directory_from_environment") {
    using Path = std::filesystem::path;
    CHECK(KernelCache::directory_from("/data/kernels", "/xdg", "/home/u") == Path("/data/kernels"));
    CHECK(KernelCache::directory_from("", "/xdg", "/home/u") == Path("/xdg/cudarc"));
    CHECK(KernelCache::directory_from("", "", "/home/u") == Path("/home/u/.cache/cudarc"));
    CHECK(KernelCache::directory_from("", "relative/xdg", "/home/u") == Path("/home/u/.cache/cudarc"));
    CHECK_FALSE(KernelCache::directory_from("off", "/xdg", "/home/u").has_value());
    CHECK_FALSE(KernelCache::directory_from("", "", "").has_value());
}

TEST_CASE("rtc.cache_file_codec_round_trips") {
    const CompiledProgram program = random_program();
    const rtc::Hash128 key{test::random_engine()(), test::random_engine()()};
    const std::string bytes = rtc::encode_cache_file(key, program);
    CHECK(bytes.substr(0, 8) == "CUDARCKC");
    std::string why;
    const auto decoded = rtc::decode_cache_file(bytes, key, why);
    REQUIRE_MESSAGE(decoded.has_value(), why);
    CHECK(*decoded == program);
    CHECK_FALSE(rtc::decode_cache_file(bytes, rtc::Hash128{key.high, key.low + 1}, why).has_value());
    CHECK(contains(why, "holds key"));
    CHECK_FALSE(rtc::decode_cache_file(bytes + "x", key, why).has_value());
    CHECK(contains(why, "trailing"));
}

TEST_CASE("rtc.cache_miss_then_memory_then_disk") {
    require_nvrtc();
    TemporaryFolder folder;
    KernelCache cache(folder.path() / "nested" / "kernels");  // created on first write
    Program program = fresh_small_program();
    program.add_name_expression("small");
    const CompileOptions options = options_for("sm_90");

    const CachedProgram miss = cache.compile(program, options);
    CHECK(miss.source == CacheSource::compiled);
    CHECK(miss.key.size() == 32);
    CHECK(miss.key == cache.key(program, options));
    CHECK(miss.file == cache.file_for(program, options));
    CHECK(std::filesystem::exists(miss.file));
    CHECK(miss.disk_note.empty());
    CHECK(cache.memory_entries() == 1);

    const CachedProgram memory = cache.compile(program, options);
    CHECK(memory.source == CacheSource::memory);
    CHECK(memory.program == miss.program);

    cache.clear_memory();  // what a fresh process sees
    CHECK(cache.memory_entries() == 0);
    const auto started = std::chrono::steady_clock::now();
    const CachedProgram disk = cache.compile(program, options);
    const double disk_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    MESSAGE("disk hit took " << disk_ms << " ms (the benchmark, not this test, judges speed)");
    CHECK(disk.source == CacheSource::disk);
    CHECK(disk.program == miss.program);
    CHECK(disk.program.lowered_name("small") == "small");
    CHECK(cache.compile(program, options).source == CacheSource::memory);  // the disk hit was kept in memory

    // Another cache object over the same folder (another process) finds it on disk.
    KernelCache other(cache.directory());
    CHECK(other.compile(program, options).source == CacheSource::disk);

    // Any other input is another entry.
    CompileOptions ptx = options_for("compute_90");
    const CachedProgram as_ptx = cache.compile(program, ptx);
    CHECK(as_ptx.source == CacheSource::compiled);
    CHECK(as_ptx.key != miss.key);
    CHECK(as_ptx.program.format() == CodeFormat::ptx);
}

TEST_CASE("rtc.cache_key_covers_every_input") {
    require_nvrtc();
    KernelCache cache(std::nullopt);
    const Program base("extern \"C\" __global__ void k(int* p) { *p = VALUE; }\n", "k.cu");
    CompileOptions options = options_for("sm_90");
    options.defines = {{"VALUE", "1"}};
    const std::string key = cache.key(base, options);
    CHECK(cache.key(base, options) == key);  // deterministic
    CHECK(cache.key(Program(base.source(), base.name()), options) == key);

    std::set<std::string> keys{key};
    auto distinct = [&](const Program& program, const CompileOptions& o, const char* what) {
        INFO(what);
        CHECK(keys.insert(cache.key(program, o)).second);
    };
    distinct(Program(base.source() + " ", "k.cu"), options, "source text");
    distinct(Program(base.source(), "other.cu"), options, "source name");
    CompileOptions changed = options;
    changed.defines = {{"VALUE", "2"}};
    distinct(base, changed, "define");
    changed = options;
    changed.arch = "sm_80";
    distinct(base, changed, "arch");
    changed = options;
    changed.headers = {{"extra.cuh", "// a"}};
    distinct(base, changed, "header text");
    changed.headers = {{"extra.cuh", "// b"}};
    distinct(base, changed, "header text changed");
    changed = options;
    changed.fast_math = true;
    distinct(base, changed, "fast math");
    Program named = base;
    named.add_name_expression("k");
    distinct(named, options, "name expression");

    // The order name expressions were added in does not matter.
    const Program templ("template <int N> __global__ void t(int* p) { *p = N; }\n", "t.cu");
    Program ab = templ;
    ab.add_name_expression("t<1>").add_name_expression("t<2>");
    Program ba = templ;
    ba.add_name_expression("t<2>").add_name_expression("t<1>");
    CHECK(cache.key(ab, options) == cache.key(ba, options));
}

TEST_CASE("rtc.cache_without_disk") {
    require_nvrtc();
    KernelCache cache(std::nullopt);
    const Program program = fresh_small_program();
    const auto first = cache.compile(program, options_for("sm_90"));
    CHECK(first.source == CacheSource::compiled);
    CHECK(first.file.empty());
    CHECK(cache.compile(program, options_for("sm_90")).source == CacheSource::memory);
    cache.clear_memory();
    CHECK(cache.compile(program, options_for("sm_90")).source == CacheSource::compiled);
}

TEST_CASE("rtc.cache_unwritable_folder_still_compiles") {
    require_nvrtc();
    TemporaryFolder folder;
    const auto blocker = folder.path() / "a_file";
    write_bytes(blocker, "not a folder");
    KernelCache cache(blocker / "cache");  // cannot be created: its parent is a file
    const auto result = cache.compile(fresh_small_program(), options_for("sm_90"));
    CHECK(result.source == CacheSource::compiled);
    CHECK(contains(result.disk_note, "not stored"));
    CHECK_FALSE(result.program.binary.empty());
}

TEST_CASE("rtc.cache_compile_error_is_not_cached") {
    require_nvrtc();
    TemporaryFolder folder;
    KernelCache cache(folder.path());
    const Program broken("extern \"C\" __global__ void k() { undefined_thing(); }\n", "broken.cu");
    CHECK_THROWS_AS(static_cast<void>(cache.compile(broken, options_for("sm_90"))), CompileError);
    CHECK_THROWS_AS(static_cast<void>(cache.compile(broken, options_for("sm_90"))), CompileError);
    CHECK_THROWS_AS(static_cast<void>(cache.compile(broken, options_for(""))), CompileError);
    CHECK(cache.memory_entries() == 0);
    CHECK(std::filesystem::is_empty(folder.path()));
}

TEST_CASE("rtc.cache_detects_truncated_file") {
    check_damage_is_detected(
        [](std::string bytes) { return bytes.substr(0, bytes.size() - 1 - test::random_engine()() % 100); },
        "truncated");
    check_damage_is_detected([](std::string bytes) { return bytes.substr(0, 20); }, "truncated");
    check_damage_is_detected([](std::string) { return std::string(); }, "truncated");
}

TEST_CASE("rtc.cache_detects_flipped_bit") {
    // A random bit in the payload (past the 56-byte header).
    check_damage_is_detected(
        [](std::string bytes) {
            const std::size_t payload = bytes.size() - rtc::kCacheHeaderBytes;
            return with_flipped(std::move(bytes), rtc::kCacheHeaderBytes + test::random_engine()() % payload,
                                1u << (test::random_engine()() % 8));
        },
        "checksum mismatch");
    // A bit in the stored key (bytes 16..31).
    check_damage_is_detected([](std::string bytes) { return with_flipped(std::move(bytes), 20, 0x10); },
                             "holds key");
}

TEST_CASE("rtc.cache_detects_wrong_magic_and_version") {
    check_damage_is_detected([](std::string bytes) { return with_flipped(std::move(bytes), 0, 0x01); },
                             "wrong magic");
    check_damage_is_detected([](std::string bytes) { return with_flipped(std::move(bytes), 8, 0x01); },
                             "format version");
}

TEST_CASE("rtc.cache_concurrent_writers_leave_a_valid_file") {
    TemporaryFolder folder;
    const auto path = folder.path() / "entry.kernel";
    const rtc::Hash128 key{test::random_engine()(), test::random_engine()()};
    // Programs of different sizes, so an interleaved write would be visible as a bad size or checksum.
    std::vector<CompiledProgram> programs;
    for (int i = 0; i < 8; ++i) programs.push_back(random_program());

    std::atomic<bool> corrupt_seen{false};
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            for (int round = 0; round < 40; ++round) {
                std::string why;
                if (!rtc::write_cache_file(path, key, programs[static_cast<std::size_t>(t)], why)) ++failures;
                // Every read sees one writer's complete file, never a mix.
                const auto read = rtc::read_cache_file(path, key, why);
                if (!read || std::find(programs.begin(), programs.end(), *read) == programs.end())
                    corrupt_seen = true;
            }
        });
    }
    for (auto& thread : threads) thread.join();
    CHECK(failures == 0);
    CHECK_FALSE(corrupt_seen);
    std::string why;
    const auto final_entry = rtc::read_cache_file(path, key, why);
    REQUIRE_MESSAGE(final_entry.has_value(), why);
    CHECK(std::find(programs.begin(), programs.end(), *final_entry) != programs.end());
    // No temporary file is left behind.
    std::size_t files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(folder.path())) {
        static_cast<void>(entry);
        ++files;
    }
    CHECK(files == 1);
}

TEST_CASE("rtc.cache_concurrent_compiles_agree") {
    require_nvrtc();
    TemporaryFolder folder;
    KernelCache cache(folder.path());
    const Program program = fresh_small_program();
    std::vector<CachedProgram> results(4);
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < results.size(); ++t) {
        threads.emplace_back([&, t] { results[t] = cache.compile(program, options_for("sm_90")); });
    }
    for (auto& thread : threads) thread.join();
    for (const auto& result : results) CHECK(result.program == results[0].program);
    std::string why;
    CHECK(rtc::read_cache_file(results[0].file, key_of(results[0]), why).has_value());
    cache.clear_memory();
    CHECK(cache.compile(program, options_for("sm_90")).source == CacheSource::disk);
}

TEST_CASE("rtc.compile_cached_uses_process_cache") {
    require_nvrtc();
    const Program program = fresh_small_program();
    const auto first = compile_cached(program, options_for("compute_90"));
    CHECK(first.source == CacheSource::compiled);
    CHECK(compile_cached(program, options_for("compute_90")).source == CacheSource::memory);
    const auto bench = compile_embedded_cached("bench.cu", options_for("compute_90"));
    CHECK(contains(bench.program.ptx, ".entry bench_copy("));
    CHECK(std::string(to_string(CacheSource::disk)) == "disk");
}

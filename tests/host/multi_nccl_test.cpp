// cudarc::nccl without a GPU: where NCCL is looked for, what the loader says when it fails, the stand-in
// libraries it must reject or accept, and the argument checks every operation runs before anything changes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "cudarc/nccl.hpp"
#include "nccl/validation.hpp"
#include "rtc_test_support.hpp"
#include "sys/nccl/nccl_api.hpp"

using namespace cudarc;

namespace {

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

void touch(const std::filesystem::path& file) {
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << "not a library\n";
}

std::filesystem::path wheel_library(const std::filesystem::path& site) {
    return site / "nvidia" / "nccl" / "lib" / "libnccl.so.2";
}

// Sets (or unsets, with nullptr) an environment variable for one scope.
class ScopedEnv {
  public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old, had_ = true;
        if (value != nullptr) {
            ::setenv(name, value, 1);
        } else {
            ::unsetenv(name);
        }
    }
    ~ScopedEnv() {
        if (had_) {
            ::setenv(name_, old_.c_str(), 1);
        } else {
            ::unsetenv(name_);
        }
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

  private:
    const char* name_;
    std::string old_;
    bool had_ = false;
};

template <typename Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("multi.nccl_search_order") {
    test::TemporaryFolder root;
    const auto python_path_site = root.path() / "pythonpath";
    const auto venv = root.path() / "venv";
    const auto venv_new = venv / "lib" / "python3.12" / "site-packages";
    const auto venv_old = venv / "lib" / "python3.9" / "site-packages";
    const auto user = root.path() / "user";
    const auto user_site = user / "lib" / "python3.11" / "site-packages";
    const auto debian_site = user / "lib" / "python3" / "dist-packages";  // looked in, holds no NCCL
    touch(wheel_library(python_path_site));
    touch(wheel_library(venv_new));
    touch(wheel_library(venv_old));
    touch(wheel_library(user_site));
    std::filesystem::create_directories(debian_site);

    sys::NcclSearchEnvironment env;
    env.python_path = {python_path_site.string()};
    env.python_prefixes = {venv.string(), user.string(), (root.path() / "no-such-prefix").string()};
    env.system_folders = {"/sys-a", "/sys-b"};
    const sys::NcclSearch search = sys::nccl_search(env);
    const std::vector<std::string> want = {
        "libnccl.so.2",                            // the dynamic linker first
        wheel_library(python_path_site).string(),  // then pip wheels: PYTHONPATH, prefixes in order,
        wheel_library(venv_new).string(),          // newest Python first
        wheel_library(venv_old).string(),
        wheel_library(user_site).string(),
        "/sys-a/libnccl.so.2",  // the system folders last
        "/sys-b/libnccl.so.2",
    };
    CHECK(search.candidates == want);
    // Every site folder looked in is remembered for the error message, the empty one included.
    const auto& sites = search.site_folders;
    CHECK(std::find(sites.begin(), sites.end(), debian_site.string()) != sites.end());
    CHECK(std::find(sites.begin(), sites.end(), venv_new.string()) != sites.end());

    // The process's environment: the same shape, with the usual system folders.
    const auto process = sys::nccl_search(sys::NcclSearchEnvironment::from_process());
    if (std::getenv("CUDARC_NCCL") == nullptr) {
        REQUIRE(!process.candidates.empty());
        CHECK(process.candidates.front() == "libnccl.so.2");
        CHECK(std::find(process.candidates.begin(), process.candidates.end(),
                        "/usr/lib/x86_64-linux-gnu/libnccl.so.2") != process.candidates.end());
    }
}

TEST_CASE("multi.nccl_override_is_the_only_place_looked_at") {
    sys::NcclSearchEnvironment env;
    env.override_path = "/opt/nccl/libnccl.so.2.28.7";
    env.system_folders = {"/usr/lib"};
    CHECK(sys::nccl_search(env).candidates == std::vector<std::string>{"/opt/nccl/libnccl.so.2.28.7"});
    test::TemporaryFolder folder;
    env.override_path = folder.path().string();
    CHECK(sys::nccl_search(env).candidates ==
          std::vector<std::string>{folder.path().string() + "/libnccl.so.2",
                                   folder.path().string() + "/libnccl.so"});
}

TEST_CASE("multi.nccl_load_failure_names_every_place_tried") {
    test::TemporaryFolder folder;
    const auto not_a_library = folder.path() / "libnccl.so.2";
    touch(not_a_library);
    const std::string missing = "/nonexistent/cudarc-test/libnccl.so.2";
    sys::NcclSearch search;
    search.candidates = {missing, not_a_library.string(), "libm.so.6"};
    search.site_folders = {"/some/site-packages"};
    sys::NcclApi api;
    std::string why;
    CHECK_FALSE(sys::load_nccl_from(search, api, why));
    CHECK((api.all_reduce == nullptr));  // left as it was
    INFO(why);
    CHECK(contains(why, missing));
    CHECK(contains(why, not_a_library.string()));
    CHECK(contains(why, "libm.so.6: not a usable NCCL (lacks ncclGetVersion"));
    CHECK(contains(why, "/some/site-packages"));
    CHECK(contains(why, "CUDARC_NCCL"));

    search.candidates.clear();
    CHECK_FALSE(sys::load_nccl_from(search, api, why));
    CHECK(contains(why, "no candidate paths"));
}

TEST_CASE("multi.nccl_loader_rejects_an_old_or_incomplete_library") {
    sys::NcclApi api;
    std::string why;
    sys::NcclSearch search;
    search.candidates = {CUDARC_FAKE_NCCL_OLD};
    CHECK_FALSE(sys::load_nccl_from(search, api, why));
    CHECK(contains(why, "NCCL 2.9.5 is too old: cudarc needs 2.10 or newer"));
    search.candidates = {CUDARC_FAKE_NCCL_PARTIAL};
    CHECK_FALSE(sys::load_nccl_from(search, api, why));
    CHECK(contains(why, "lacks ncclSend"));
    CHECK((api.get_version == nullptr));

    // The first usable candidate wins, after the unusable ones.
    search.candidates = {CUDARC_FAKE_NCCL_OLD, CUDARC_FAKE_NCCL_PARTIAL, CUDARC_FAKE_NCCL_FULL};
    REQUIRE_MESSAGE(sys::load_nccl_from(search, api, why), why);
    CHECK(api.version == 22807);
    CHECK(std::filesystem::path(api.library_path).is_absolute());
    CHECK(std::filesystem::equivalent(api.library_path, CUDARC_FAKE_NCCL_FULL));
    CHECK(std::string(api.get_error_string(sys::kNcclInvalidArgument)) == "fake: invalid argument");
    CHECK((api.get_last_error != nullptr));
    CHECK((api.comm_finalize != nullptr));

    // CUDARC_NCCL naming a folder finds libnccl.so.2 in it.
    sys::NcclSearchEnvironment env;
    env.override_path = std::filesystem::path(CUDARC_FAKE_NCCL_FULL).parent_path().string();
    sys::NcclApi from_folder;
    REQUIRE_MESSAGE(sys::load_nccl_from(sys::nccl_search(env), from_folder, why), why);
    CHECK(from_folder.version == 22807);
}

TEST_CASE("multi.nccl_version_codes") {
    CHECK(sys::decode_nccl_version(2804) == sys::NcclVersion{2, 8, 4});    // 2.8 and older: X*1000+Y*100+Z
    CHECK(sys::decode_nccl_version(21003) == sys::NcclVersion{2, 10, 3});  // since 2.9: X*10000+Y*100+Z
    CHECK(sys::decode_nccl_version(22807) == sys::NcclVersion{2, 28, 7});
    CHECK(sys::decode_nccl_version(20905) < sys::kMinimumNcclVersion);
    CHECK_FALSE(sys::decode_nccl_version(21000) < sys::kMinimumNcclVersion);
    CHECK(sys::nccl_result_name(sys::kNcclRemoteError) == "ncclRemoteError");
    CHECK(sys::nccl_result_name(42) == "ncclResult 42");
}

TEST_CASE("multi.nccl_without_nccl_gives_a_clear_error") {
    // In CI NCCL is not installed: every entry point that needs it throws the loader's explanation. Where
    // NCCL is present (the GPU machine) it loads, and is new enough.
    if (nccl::available()) {
        const auto v = nccl::version();
        CHECK(sys::NcclVersion{v.major, v.minor, v.patch} >= sys::kMinimumNcclVersion);
        CHECK(std::filesystem::path(nccl::library_path()).is_absolute());
        CHECK(nccl::load_failure().empty());
        return;
    }
    const std::string failure = nccl::load_failure();
    INFO(failure);
    CHECK(contains(failure, "libnccl.so.2"));
    CHECK(contains(failure, "CUDARC_NCCL"));
    const std::string thrown = error_of([] { (void)nccl::UniqueId::create(); });
    CHECK(contains(thrown, "NCCL (libnccl.so.2) could not be loaded"));
    CHECK(contains(error_of([] { (void)nccl::version(); }), "could not be loaded"));
    CHECK(contains(error_of([] { nccl::Group group; }), "could not be loaded"));
}

TEST_CASE("multi.nccl_init_checks_its_arguments_before_anything_else") {
    // No device, and a bad rank, are rejected before NCCL is even looked for (so also in CI).
    CHECK(contains(error_of([] { (void)nccl::Communicator::init_all(std::span<const Device>{}); }),
                   "cudarc::nccl::Communicator::init_all: no device given"));
}

TEST_CASE("multi.nvlink_multicast_is_off_unless_asked_for") {
    {
        ScopedEnv unset("NCCL_NVLS_ENABLE", nullptr);
        sys::default_nvls_off();
        REQUIRE(std::getenv("NCCL_NVLS_ENABLE") != nullptr);
        CHECK(std::string(std::getenv("NCCL_NVLS_ENABLE")) == "0");
    }
    {
        ScopedEnv opted_in("NCCL_NVLS_ENABLE", "1");  // the user's explicit choice stands
        sys::default_nvls_off();
        CHECK(std::string(std::getenv("NCCL_NVLS_ENABLE")) == "1");
    }
}

TEST_CASE("multi.nccl_argument_validation") {
    using namespace nccl::detail;
    const char* what = "op";
    CHECK_NOTHROW(check_rank(what, 0, 1));
    CHECK_NOTHROW(check_rank(what, 3, 4));
    CHECK(contains(error_of([&] { check_rank(what, 4, 4); }),
                   "op: rank 4 is not in 0..3 (a communicator of 4 ranks)"));
    CHECK(contains(error_of([&] { check_rank(what, -1, 2); }), "rank -1 is not in 0..1"));
    CHECK(contains(error_of([&] { check_rank(what, 0, 0); }), "needs at least one rank (0 asked for)"));
    CHECK(contains(error_of([&] { check_root(what, 2, 2); }),
                   "root 2 is not a rank of this communicator (0..1)"));
    CHECK(contains(error_of([&] { check_peer(what, -1, 8); }),
                   "peer -1 is not a rank of this communicator (0..7)"));
    CHECK_NOTHROW(check_root(what, 1, 2));
    CHECK_NOTHROW(check_peer(what, 0, 1));

    CHECK_NOTHROW(check_same_count(what, 5, 5));
    CHECK(contains(error_of([&] { check_same_count(what, 5, 6); }),
                   "size mismatch: the send buffer has 5 elements, the receive buffer 6"));
    CHECK_NOTHROW(check_gather_counts(what, 3, 12, 4));
    CHECK_NOTHROW(check_gather_counts(what, 0, 0, 4));
    CHECK(contains(
        error_of([&] { check_gather_counts(what, 3, 11, 4); }),
        "the receive buffer must hold world_size (4) times the send buffer's 3 elements; it holds 11"));
    // (2^63 + 1) * 2 wraps around to 2: a wrapped product must never pass for a match.
    const std::size_t huge = (std::size_t{1} << 63) + 1;
    CHECK_THROWS_AS(check_gather_counts(what, huge, 2, 2), Error);
    CHECK_NOTHROW(check_scatter_counts(what, 12, 3, 4));
    CHECK(contains(
        error_of([&] { check_scatter_counts(what, 12, 4, 4); }),
        "the send buffer must hold world_size (4) times the receive buffer's 4 elements; it holds 12"));
    CHECK_THROWS_AS(check_scatter_counts(what, 2, huge, 2), Error);

    CHECK_NOTHROW(check_devices_for_init_all(std::vector<int>{0, 1, 2}));
    CHECK_NOTHROW(check_devices_for_init_all(std::vector<int>{3, 1}));
    CHECK(contains(error_of([] { check_devices_for_init_all(std::vector<int>{}); }), "no device given"));
    CHECK(contains(error_of([] {
                       check_devices_for_init_all(std::vector<int>{0, 1, 0});
                   }),
                   "device 0 is given twice"));

    std::vector<std::byte> bytes(nccl::UniqueId::kBytes);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7);
    const auto id = nccl::UniqueId::from_bytes(bytes);
    CHECK(std::equal(bytes.begin(), bytes.end(), id.bytes().begin()));
    CHECK(id == nccl::UniqueId::from_bytes(id.bytes()));
    bytes.pop_back();
    CHECK(contains(error_of([&] { (void)nccl::UniqueId::from_bytes(bytes); }),
                   "a NCCL unique id has 128 bytes, 127 given"));
}

TEST_CASE("multi.nccl_data_types") {
    using nccl::DataType;
    using nccl::DataTypeOf;
    static_assert(DataTypeOf<float>::value == DataType::float32);
    static_assert(DataTypeOf<double>::value == DataType::float64);
    static_assert(DataTypeOf<optim::half_bits>::value == DataType::float16);
    static_assert(DataTypeOf<optim::bf16_bits>::value == DataType::bfloat16);
    static_assert(DataTypeOf<std::int8_t>::value == DataType::int8);
    static_assert(DataTypeOf<char>::value == (std::is_signed_v<char> ? DataType::int8 : DataType::uint8));
    static_assert(DataTypeOf<std::uint8_t>::value == DataType::uint8);
    static_assert(DataTypeOf<std::int32_t>::value == DataType::int32);
    static_assert(DataTypeOf<std::uint32_t>::value == DataType::uint32);
    static_assert(DataTypeOf<std::int64_t>::value == DataType::int64);
    static_assert(DataTypeOf<long long>::value == DataType::int64);
    static_assert(DataTypeOf<unsigned long long>::value == DataType::uint64);
    static_assert(nccl::Element<const float>);
    static_assert(!nccl::Element<std::int16_t>);  // NCCL has no 16-bit integers
    static_assert(!nccl::Element<bool>);

    // cudarc's numbering is its own; the mapping gives NCCL's ncclDataType_t and ncclRedOp_t.
    using nccl::detail::element_size;
    using nccl::detail::nccl_data_type;
    using nccl::detail::nccl_reduce_op;
    CHECK(nccl_data_type(DataType::int8) == 0);
    CHECK(nccl_data_type(DataType::uint8) == 1);
    CHECK(nccl_data_type(DataType::int32) == 2);
    CHECK(nccl_data_type(DataType::uint32) == 3);
    CHECK(nccl_data_type(DataType::int64) == 4);
    CHECK(nccl_data_type(DataType::uint64) == 5);
    CHECK(nccl_data_type(DataType::float16) == 6);
    CHECK(nccl_data_type(DataType::float32) == 7);
    CHECK(nccl_data_type(DataType::float64) == 8);
    CHECK(nccl_data_type(DataType::bfloat16) == 9);
    CHECK(nccl_reduce_op(nccl::ReduceOp::sum) == 0);
    CHECK(nccl_reduce_op(nccl::ReduceOp::prod) == 1);
    CHECK(nccl_reduce_op(nccl::ReduceOp::max) == 2);
    CHECK(nccl_reduce_op(nccl::ReduceOp::min) == 3);
    CHECK(nccl_reduce_op(nccl::ReduceOp::avg) == 4);
    CHECK(element_size(DataType::bfloat16) == 2);
    CHECK(element_size(DataType::uint64) == 8);
    CHECK(element_size(DataType::int8) == 1);
    CHECK(element_size(DataType::float32) == 4);
}

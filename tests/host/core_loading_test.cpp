// Loading and error paths that need no GPU: they run in CI.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "cudarc/cudarc.hpp"
#include "sys/backends.hpp"

namespace {

// Sets an environment variable for one scope.
class ScopedEnv {
  public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old, had_ = true;
        ::setenv(name, value, 1);
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

}  // namespace

TEST_CASE("core.driver_override_path_that_does_not_exist") {
    ScopedEnv env("CUDARC_CUDA_DRIVER", "/nonexistent/dir/libcuda.so.1");
    cudarc::sys::DriverApi api;
    std::string why;
    CHECK_FALSE(cudarc::sys::load_cuda_driver(api, why));
    CHECK(why.find("/nonexistent/dir/libcuda.so.1") != std::string::npos);
    CHECK(why.find("CUDARC_CUDA_DRIVER") != std::string::npos);
    CHECK((api.init == nullptr));  // nothing half-filled
}

TEST_CASE("core.driver_override_that_is_not_a_cuda_driver") {
    // A real shared library without cuGetProcAddress: loads, then is rejected with a clear reason.
    ScopedEnv env("CUDARC_CUDA_DRIVER", "libm.so.6");
    cudarc::sys::DriverApi api;
    std::string why;
    CHECK_FALSE(cudarc::sys::load_cuda_driver(api, why));
    CHECK(why.find("libm.so.6") != std::string::npos);
    CHECK(why.find("cuGetProcAddress") != std::string::npos);
}

TEST_CASE("core.no_driver_gives_a_clear_error_not_a_crash") {
    // In CI there is no driver: count() must throw cudarc::Error that says what was looked for. With a
    // driver present (the GPU machine) the same call must succeed instead.
    if (cudarc::sys::driver_if_loaded() != nullptr) {
        CHECK(cudarc::Device::count() >= 0);
        CHECK(cudarc::sys::driver_load_failure().empty());
        return;
    }
    CHECK_FALSE(cudarc::Device::available());
    try {
        (void)cudarc::Device::count();
        FAIL("Device::count() did not throw without a driver");
    } catch (const cudarc::Error& e) {
        const std::string what = e.what();
        CHECK(what.find("libcuda.so.1") != std::string::npos);
        CHECK(what.find("no GPU driver available") != std::string::npos);
    }
    CHECK_THROWS_AS((void)cudarc::Device::open(0), cudarc::Error);
}

TEST_CASE("core.error_message_names_call_result_and_device") {
    const cudarc::Error error("cuMemAlloc", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", 3,
                              cudarc::Backend::cuda);
    const std::string what = error.what();
    CHECK(what.find("cuMemAlloc") != std::string::npos);
    CHECK(what.find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos);
    CHECK(what.find("out of memory") != std::string::npos);
    CHECK(what.find("device 3") != std::string::npos);
    CHECK(error.result() == 2);
    CHECK(error.device() == 3);
    CHECK(error.api() == "cuMemAlloc");
    const std::runtime_error& base = error;  // derived from std::runtime_error
    CHECK(std::string(base.what()) == what);
}

TEST_CASE("core.out_of_memory_carries_figures") {
    cudarc::OutOfMemory::Figures figures;
    figures.requested = 1 << 20;
    figures.allocated = 5000;
    figures.reserved = 6000;
    figures.device_free = 700;
    figures.device_total = 8000;
    const cudarc::OutOfMemory oom(1, figures);
    const std::string what = oom.what();
    CHECK(what.find("1048576") != std::string::npos);
    CHECK(what.find("6000") != std::string::npos);
    CHECK(what.find("Hint") != std::string::npos);
    CHECK(oom.figures().reserved == 6000);
    CHECK(oom.device() == 1);
}

TEST_CASE("core.counters_subtract_and_sum") {
    cudarc::Counters before;
    before.stream_synchronizes = 1;
    before.cross_stream_waits = 4;
    cudarc::Counters after = before;
    after.stream_synchronizes = 3;
    after.blocking_copies = 2;
    after.event_synchronizes = 1;
    after.cross_stream_waits = 9;
    const cudarc::Counters delta = after - before;
    CHECK(delta.stream_synchronizes == 2);
    CHECK(delta.blocking_copies == 2);
    CHECK(delta.cross_stream_waits == 5);
    CHECK(delta.host_synchronizations() == 3);
    CHECK(delta.host_blocking_calls() == 5);
    CHECK(delta != cudarc::Counters{});
}

TEST_CASE("core.view_bounds_are_checked") {
    // No buffer, no device needed: bounds are checked on the host.
    const auto view = cudarc::detail::Internals::make_view<float>(nullptr, 0x10000, 10, 0);
    CHECK(view.subview(2, 8).size() == 8);
    CHECK(view.subview(2, 8).device_ptr() == 0x10000 + 2 * sizeof(float));
    CHECK(view.subview(10).empty());
    CHECK_THROWS_WITH_AS((void)view.subview(5, 6), doctest::Contains("out of range"), cudarc::Error);
    CHECK_THROWS_AS((void)view.subview(11), cudarc::Error);
    CHECK_THROWS_AS((void)view.subview(std::size_t(-1), 2), cudarc::Error);  // no overflow wrap-around
    const cudarc::DeviceView<const float> read_only = view;                  // T -> const T converts
    CHECK(read_only.size() == 10);
    static_assert(!std::is_convertible_v<cudarc::DeviceView<const float>, cudarc::DeviceView<float>>,
                  "a read-only view must not convert to a writable one");
}

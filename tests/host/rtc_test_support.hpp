// Helpers shared by the rtc.* host tests.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <string>

#include "cudarc/nvrtc.hpp"

namespace cudarc::test {

// NVRTC must be present where these tests run (CI has the toolkit's): a missing compiler is a
// failure carrying the loader's own explanation, never a skip.
inline CompilerVersion require_nvrtc() {
    try {
        return compiler_version(Backend::cuda);
    } catch (const std::exception& e) {
        const std::string message = std::string("NVRTC could not be loaded: ") + e.what();
        FAIL(message);
        throw;
    }
}

// A fresh folder under the system's temporary directory, removed with everything in it.
class TemporaryFolder {
  public:
    TemporaryFolder() {
        static std::atomic<int> counter{0};
        path_ = std::filesystem::temp_directory_path() /
                ("cudarc-rtc-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
                 std::to_string(std::random_device{}()));
        std::filesystem::create_directories(path_);
    }
    TemporaryFolder(const TemporaryFolder&) = delete;
    TemporaryFolder& operator=(const TemporaryFolder&) = delete;
    ~TemporaryFolder() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    [[nodiscard]] const std::filesystem::path& path() const { return path_; }

  private:
    std::filesystem::path path_;
};

inline std::mt19937_64& random_engine() {
    static std::mt19937_64 engine{std::random_device{}()};
    return engine;
}

// A different small kernel every call (a random constant in it), so no cache can already hold it.
inline Program fresh_small_program(const std::string& name = "small.cu") {
    const auto salt = random_engine()();
    return Program("extern \"C\" __global__ void small(unsigned long long* out) { out[threadIdx.x] = " +
                       std::to_string(salt) + "ull + threadIdx.x; }\n",
                   name);
}

inline CompileOptions options_for(const std::string& arch) {
    CompileOptions options;
    options.arch = arch;
    return options;
}

}  // namespace cudarc::test

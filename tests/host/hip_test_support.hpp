// Shared by the hip.* host tests.
//
// Note: these tests need ROCm's HIP packages (libamdhip64, hiprtc, comgr, device libraries), which
// .ci/run installs from .ci/hip-packages.txt, but no AMD GPU. Without the packages they FAIL, so that
// CI cannot pass by silently skipping them. A developer who lacks the packages sets
// CUDARC_SKIP_HIP_TESTS=1; each test then says that it was skipped and why.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace hip_test {

// True (after a clear message) when the developer asked to skip the HIP tests.
inline bool skipped_by_request() {
    const char* value = std::getenv("CUDARC_SKIP_HIP_TESTS");
    if (value == nullptr || std::string(value) != "1") return false;
    MESSAGE(
        "SKIPPED: CUDARC_SKIP_HIP_TESTS=1 is set, so this HIP test checks nothing. CI installs the HIP "
        "packages listed in .ci/hip-packages.txt and runs it for real.");
    return true;
}

// Sets an environment variable for one scope and restores the previous value.
class ScopedEnvironment {
  public:
    ScopedEnvironment(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name); old != nullptr) previous_ = old;
        if (value != nullptr) {
            ::setenv(name, value, 1);
        } else {
            ::unsetenv(name);
        }
    }
    ScopedEnvironment(const ScopedEnvironment&) = delete;
    ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;
    ~ScopedEnvironment() {
        if (previous_) {
            ::setenv(name_.c_str(), previous_->c_str(), 1);
        } else {
            ::unsetenv(name_.c_str());
        }
    }

  private:
    std::string name_;
    std::optional<std::string> previous_;
};

}  // namespace hip_test

// FakeNccl: the NCCL table (sys::NcclApi) on top of the fake driver, so that host tests can run cudarc's
// communicators, collectives and groups without NCCL or a GPU.
//
//     fake::FakeDriver gpu;
//     fake::DriverOverride driver(gpu.api());
//     fake::FakeNccl nccl(gpu.api());          // the driver table its own CUDA work goes through
//     fake::NcclOverride installed(nccl.api());
//
// What it models: communicators of one rank (ncclCommInitRank with nranks 1, ncclCommInitAll of one
// device), each holding a small device allocation, as NCCL's do, from init to destroy or abort. A
// collective of one rank is a copy from the send to the receive buffer on the caller's stream
// (cuMemcpyDtoDAsync through the given table), none when they are the same; point-to-point operations are
// refused (ncclInvalidUsage). A CUDA call that fails makes the NCCL call return ncclUnhandledCudaError, as
// NCCL does; so does every call on a communicator whose device hit a sticky error.
//
// fail_nth makes the Nth call of one NCCL function return a chosen result. live_communicators() counts the
// communicators neither destroyed nor aborted, for leak checks. One FakeNccl may exist at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sys/driver_api.hpp"
#include "sys/nccl/nccl_api.hpp"

namespace cudarc::fake {

class FakeNccl {
  public:
    // `cuda` is the driver table the fake's own device work goes through (the fake driver's, not the fault
    // injector's, so that cudarc's call counts stay its own).
    explicit FakeNccl(const sys::DriverApi& cuda);
    FakeNccl(const FakeNccl&) = delete;
    FakeNccl& operator=(const FakeNccl&) = delete;
    ~FakeNccl();

    [[nodiscard]] const sys::NcclApi& api() const noexcept { return api_; }

    // The `nth` call of `function` ("ncclAllReduce") from now (1: the next one) returns `result`.
    void fail_nth(const std::string& function, std::uint64_t nth, sys::NcclResult result);
    // Calls of `function` made so far.
    [[nodiscard]] std::uint64_t calls(const std::string& function) const;
    // Communicators made and not yet destroyed or aborted.
    [[nodiscard]] std::size_t live_communicators() const;

    // Internal: what the table's plain functions use.
    struct Impl;
    [[nodiscard]] Impl& impl() noexcept { return *impl_; }

  private:
    std::unique_ptr<Impl> impl_;
    sys::NcclApi api_;
};

// Installs an NCCL table for the process (sys::set_nccl_override) and puts the previous one back. Create it
// before any communicator and let every communicator go before it.
class NcclOverride {
  public:
    explicit NcclOverride(const sys::NcclApi& api) noexcept;
    NcclOverride(const NcclOverride&) = delete;
    NcclOverride& operator=(const NcclOverride&) = delete;
    ~NcclOverride();

  private:
    const sys::NcclApi* previous_;
};

}  // namespace cudarc::fake

// cudarc::nccl on the fake driver and the fake NCCL (testing/fake_driver/fake_nccl.hpp): communicators of
// one rank, their collectives on tracked buffers, and what an NCCL failure does to the device.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cudarc/nccl.hpp"
#include "fake_driver/fake_nccl.hpp"
#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::error_from;
using cudarc::test::FakeGpu;

namespace {

struct FakeGpuAndNccl : FakeGpu {
    fake::FakeNccl nccl{driver.api()};
    fake::NcclOverride installed_nccl{nccl.api()};
};

}  // namespace

TEST_CASE("multi.nccl_one_rank_on_the_fake_driver") {
    FakeGpuAndNccl gpu;
    {
        auto device = Device::open(0);
        Stream& stream = device.default_stream();
        auto comm = nccl::Communicator::init_rank(device, nccl::UniqueId::create(), 0, 1);
        CHECK(comm.world_size() == 1);
        CHECK(gpu.nccl.live_communicators() == 1);
        const std::vector<float> host(64, 3.0F);
        auto x = DeviceSlice<float>::from_host(stream, host);
        auto y = DeviceSlice<float>::zeros(stream, 64);
        {
            Stream child = stream.fork();
            comm.broadcast(child, x, y, 0);  // on another stream: waits for the parent's upload
        }
        CHECK(y.to_vector(stream) == host);
        comm.all_reduce(stream, y);
        device.rethrow_deferred_error();
    }
    CHECK(gpu.nccl.live_communicators() == 0);
    CHECK(gpu.driver.live() == fake::LiveCounts{});
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("multi.nccl_error_with_a_sticky_cuda_error_loses_the_device") {
    // NCCL reports the CUDA error it met as ncclUnhandledCudaError; when the context is broken the device
    // is lost (Note [NCCL errors and lost devices]).
    FakeGpuAndNccl gpu;
    {
        auto device = Device::open(0);
        Stream& stream = device.default_stream();
        auto comm = nccl::Communicator::init_rank(device, nccl::UniqueId::create(), 0, 1);
        auto x = DeviceSlice<float>::zeros(stream, 64);
        comm.all_reduce(stream, x);
        gpu.driver.lose_device(0);  // a kernel faulted: the context is broken
        const std::string what = error_from([&] { comm.all_reduce(stream, x); });
        INFO(what);
        CHECK(device.lost());
        CHECK(contains(what, "is lost"));
        CHECK(contains(what, "ncclAllReduce"));
        CHECK(contains(what, "ncclUnhandledCudaError"));
        CHECK(contains(what, "CUDA_ERROR_ILLEGAL_ADDRESS"));
        // From now on every call throws DeviceLost before it reaches NCCL.
        const std::uint64_t calls = gpu.nccl.calls("ncclAllReduce");
        CHECK_THROWS_AS(comm.all_reduce(stream, x), DeviceLost);
        CHECK(gpu.nccl.calls("ncclAllReduce") == calls);
    }
    CHECK(gpu.nccl.live_communicators() == 0);  // aborted
}

TEST_CASE("multi.nccl_error_without_a_sticky_cuda_error_keeps_the_device") {
    // ncclUnhandledCudaError from a CUDA error that is not sticky (out of memory inside NCCL, say): the
    // communicator has failed, the device has not.
    FakeGpuAndNccl gpu;
    {
        auto device = Device::open(0);
        Stream& stream = device.default_stream();
        auto comm = nccl::Communicator::init_rank(device, nccl::UniqueId::create(), 0, 1);
        auto x = DeviceSlice<float>::zeros(stream, 64);
        gpu.nccl.fail_nth("ncclAllReduce", 1, sys::kNcclUnhandledCudaError);
        const std::string what = error_from([&] { comm.all_reduce(stream, x); });
        CHECK(contains(what, "ncclAllReduce"));
        CHECK_FALSE(contains(what, "is lost"));
        CHECK_FALSE(device.lost());
        CHECK(comm.failed());
        CHECK(x.to_vector(stream) == std::vector<float>(64, 0.0F));  // the device still works
        // The sticky probe also follows a failed group, on every device of it.
        auto again = nccl::Communicator::init_rank(device, nccl::UniqueId::create(), 0, 1);
        std::string group_error;
        try {
            nccl::Group group;
            again.all_reduce(stream, x);  // one rank: runs at the call
            gpu.driver.lose_device(0);
            gpu.nccl.fail_nth("ncclGroupEnd", 1, sys::kNcclUnhandledCudaError);
            group.end();
        } catch (const Error& e) {
            group_error = e.what();
        }
        INFO(group_error);
        CHECK(contains(group_error, "is lost"));
        CHECK(device.lost());
    }
    CHECK(gpu.nccl.live_communicators() == 0);
}

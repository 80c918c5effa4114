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

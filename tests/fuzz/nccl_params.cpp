// Fuzz target: NCCL parameter validation (Note [Fuzzing] in docs/reliability.md). The checks accept exactly
// what cudarc::nccl documents (ranks, roots and peers of the communicator; equal counts, or world_size times
// as many, with no overflow; distinct devices), and a communicator of one rank on the fake driver and the
// fake NCCL (testing/fake_driver) refuses bad collectives before NCCL sees them, and stays usable.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "cudarc/cudarc.hpp"
#include "cudarc/nccl.hpp"
#include "fake_device.hpp"
#include "fake_driver/fake_nccl.hpp"
#include "nccl/validation.hpp"

namespace {

using namespace cudarc;

template <typename Body>
bool accepts(Body&& body) {
    try {
        body();
    } catch (const Error&) {
        return false;
    }
    return true;
}

void check_validation(FuzzedDataProvider& in) {
    namespace d = nccl::detail;
    const int world =
        in.ConsumeBool() ? in.ConsumeIntegralInRange(1, 8) : in.ConsumeIntegralInRange(1, INT32_MAX);
    const int rank = in.ConsumeBool() ? in.ConsumeIntegralInRange(-2, 9) : in.ConsumeIntegral<int>();
    const int count = in.ConsumeBool() ? in.ConsumeIntegralInRange(-2, 9) : in.ConsumeIntegral<int>();
    if (accepts([&] { d::check_rank("fuzz", rank, count); }) != (count >= 1 && rank >= 0 && rank < count))
        std::abort();
    if (accepts([&] { d::check_root("fuzz", rank, world); }) != (rank >= 0 && rank < world)) std::abort();
    if (accepts([&] { d::check_peer("fuzz", rank, world); }) != (rank >= 0 && rank < world)) std::abort();
    const auto send =
        in.ConsumeBool() ? in.ConsumeIntegralInRange<std::size_t>(0, 64) : in.ConsumeIntegral<std::size_t>();
    const auto recv =
        in.ConsumeBool() ? send * static_cast<std::size_t>(world) : in.ConsumeIntegral<std::size_t>();
    if (accepts([&] { d::check_same_count("fuzz", send, recv); }) != (send == recv)) std::abort();
    const auto n = static_cast<unsigned __int128>(world);
    if (accepts([&] { d::check_gather_counts("fuzz", send, recv, world); }) != (n * send == recv))
        std::abort();
    if (accepts([&] { d::check_scatter_counts("fuzz", recv, send, world); }) != (n * send == recv))
        std::abort();
    std::vector<int> ordinals(in.ConsumeIntegralInRange<std::size_t>(0, 5));
    for (int& ordinal : ordinals) ordinal = in.ConsumeIntegralInRange(-1, 4);
    const bool distinct = std::set<int>(ordinals.begin(), ordinals.end()).size() == ordinals.size();
    if (accepts([&] { d::check_devices_for_init_all(ordinals); }) != (!ordinals.empty() && distinct))
        std::abort();
    const auto id_bytes = in.ConsumeBytes<std::byte>(in.ConsumeIntegralInRange<std::size_t>(0, 130));
    if (accepts([&] { static_cast<void>(nccl::UniqueId::from_bytes(id_bytes)); }) !=
        (id_bytes.size() == nccl::UniqueId::kBytes))
        std::abort();
}

struct OneRank {
    fake::FakeNccl nccl{fuzz::fake_device().driver.api()};
    fake::NcclOverride installed{nccl.api()};
    nccl::Communicator comm =
        nccl::Communicator::init_rank(fuzz::fake_device().device, nccl::UniqueId::create(), 0, 1);
};

OneRank& one_rank() {
    static OneRank r;
    return r;
}

std::uint64_t nccl_calls(const fake::FakeNccl& nccl) {
    std::uint64_t calls = 0;
    for (const char* name : {"ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather",
                             "ncclReduceScatter", "ncclSend", "ncclRecv", "ncclCommInitRank"})
        calls += nccl.calls(name);
    return calls;
}

void check_collective(FuzzedDataProvider& in) {
    auto& gpu = fuzz::fake_device();
    OneRank& r = one_rank();
    Stream& stream = gpu.device.default_stream();
    const auto a = in.ConsumeIntegralInRange<std::size_t>(0, 8);
    const auto b = in.ConsumeBool() ? a : in.ConsumeIntegralInRange<std::size_t>(0, 8);
    const int root = in.ConsumeIntegralInRange(-2, 2);
    auto x = DeviceSlice<float>::zeros(stream, a);
    auto y = DeviceSlice<float>::zeros(stream, b);
    const std::uint64_t before = nccl_calls(r.nccl);
    bool valid = true;
    const int op = in.ConsumeIntegralInRange(0, 6);
    const bool ok = accepts([&] {
        switch (op) {
            case 0:
                valid = a == b;
                r.comm.all_reduce(stream, x, y);
                break;
            case 1:
                valid = a == b && root == 0;
                r.comm.broadcast(stream, x, y, root);
                break;
            case 2:
                valid = a == b && root == 0;
                r.comm.reduce(stream, x, y, root, nccl::ReduceOp::max);
                break;
            case 3:
                valid = a == b;  // one rank: recv holds 1 x send
                r.comm.all_gather(stream, x, y);
                break;
            case 4:
                valid = a == b;
                r.comm.reduce_scatter(stream, x, y);
                break;
            case 5:
                // Only a bad peer: the fake NCCL has no second rank to send to.
                valid = root == 0;
                if (!valid) r.comm.send(stream, x, root);
                break;
            default: {
                const int rank = in.ConsumeIntegralInRange(-1, 1);
                const int count = in.ConsumeIntegralInRange(-1, 1);
                valid = rank == 0 && count == 1;
                static_cast<void>(
                    nccl::Communicator::init_rank(gpu.device, nccl::UniqueId::create(), rank, count));
                break;
            }
        }
    });
    if (!valid) {
        // Refused by cudarc before NCCL was called; the communicator has not failed.
        if (ok || nccl_calls(r.nccl) != before || r.comm.failed()) std::abort();
    } else if (!ok) {
        std::abort();
    }
    if (r.comm.failed()) std::abort();
    if (gpu.device.lost()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    static_cast<void>(one_rank());  // the fake NCCL is installed before anything loads NCCL
    check_validation(in);
    check_collective(in);
    return 0;
}

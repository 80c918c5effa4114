// The 8-bit kernels' branch-free reciprocal of a block's absmax (Note [Reciprocal of an absmax] in
// kernels/optim_common.cuh) against the correctly rounded one, __frcp_rn, for every float in its range.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <vector>

#include "cudarc/cudarc.hpp"
#include "gpu_test.hpp"

using namespace cudarc;

namespace {

// Every float with bits in [first, last]: counts the ones whose two reciprocals differ and keeps the
// smallest such bits. Also checks the range test on each, and that 0 gives 0.
constexpr const char* kSource = R"(
#include "optim_common.cuh"
extern "C" __global__ void compare_reciprocals(unsigned first, unsigned last, unsigned long long* mismatches,
                                               unsigned* smallest, unsigned long long* outside_range) {
    unsigned long long differ = 0;
    unsigned long long outside = 0;
    const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
    for (unsigned long long b = first + static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
         b <= last; b += stride) {
        const float a = __uint_as_float(static_cast<unsigned>(b));
        if (!cudarc_optim::absmax_in_reciprocal_range(a)) ++outside;
        if (__float_as_uint(cudarc_optim::inverse_absmax_in_range(a)) != __float_as_uint(__frcp_rn(a))) {
            ++differ;
            atomicMin(smallest, static_cast<unsigned>(b));
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0 && cudarc_optim::inverse_absmax_in_range(0.0f) != 0.0f) ++differ;
    if (differ != 0) atomicAdd(mismatches, differ);
    if (outside != 0) atomicAdd(outside_range, outside);
}
)";
using CompareReciprocals =
    Kernel<void(unsigned, unsigned, unsigned long long*, unsigned*, unsigned long long*)>;

}  // namespace

TEST_CASE("optim.absmax_reciprocal_without_a_branch_is_correctly_rounded") {
    auto device = Device::open(0);
    const Module module = Module::compile(device, Program(kSource, "compare_reciprocals.cu"));
    const auto compare = module.kernel<CompareReciprocals::signature>("compare_reciprocals");
    auto& stream = device.default_stream();
    auto mismatches = DeviceSlice<unsigned long long>::zeros(stream, 1);
    auto smallest = DeviceSlice<unsigned>::from_host(stream, std::vector<unsigned>{~0u});
    auto outside = DeviceSlice<unsigned long long>::zeros(stream, 1);
    // [2^-126, 2^126]: 2^31 - 2^25 + 1 floats, in one launch of a few milliseconds.
    const unsigned first = std::bit_cast<std::uint32_t>(0x1p-126f);
    const unsigned last = std::bit_cast<std::uint32_t>(0x1p126f);
    launch(stream, LaunchConfig{4096, 256}, compare, first, last, mismatches, smallest, outside);
    const auto differ = mismatches.to_vector(stream)[0];
    CAPTURE(std::bit_cast<float>(smallest.to_vector(stream)[0]));
    CHECK(differ == 0);
    CHECK(outside.to_vector(stream)[0] == 0);
    // The ends of the range, and what lies outside it (those blocks take inverse_absmax).
    launch(stream, LaunchConfig{1, 32}, compare, last + 1, last + 1, mismatches, smallest, outside);
    launch(stream, LaunchConfig{1, 32}, compare, first - 1, first - 1, mismatches, smallest, outside);
    CHECK(outside.to_vector(stream)[0] == 2);
}

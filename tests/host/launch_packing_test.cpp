// Argument packing for cudarc::launch, through detail::PackedArguments (the same code launch() runs, minus
// the driver call): parameter values, sizes and order, and which arguments the kernel reads or writes.
// Views here pair buffers of a fake device (testing/fake_driver) with made-up device addresses: packing only
// compares the buffers and never touches a GPU, but a library that checks views (CUDARC_DEBUG_VIEWS, on in
// the sanitizer build) reads each view's buffer, so the buffers must exist.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "cudarc/launch.hpp"
#include "reliability_support.hpp"

namespace {

using cudarc::DevicePtr;
using cudarc::DeviceSlice;
using cudarc::DeviceView;
using cudarc::detail::Access;
using cudarc::detail::Buffer;

// Distinct buffers, alive for one test.
struct Buffers {
    cudarc::test::FakeGpu gpu;
    cudarc::Device device = cudarc::Device::open(0);
    std::vector<DeviceSlice<std::byte>> slices;

    Buffer* make() {
        slices.push_back(DeviceSlice<std::byte>::zeros(device.default_stream(), 16));
        return cudarc::detail::Internals::buffer(slices.back().view());
    }
};
template <typename T>
DeviceView<T> fake_view(Buffer* buffer, cudarc::DevicePtr address, std::size_t count) {
    return cudarc::detail::Internals::make_view<T>(buffer, address, count,
                                                   cudarc::detail::view_generation(buffer));
}
using cudarc::detail::PackedArguments;

std::mt19937_64& rng() {
    static std::mt19937_64 engine{std::random_device{}()};
    return engine;
}

// A random 256-byte-aligned device-looking address.
DevicePtr random_address() {
    return (rng()() & 0x0000'7fff'ffff'ff00ull) | 0x100ull;
}

// Packs `args` for `Signature` exactly as cudarc::launch does (forwarded argument types).
template <typename Signature, typename... Args>
PackedArguments<Signature, Args&&...> pack(Args&&... args) {
    return PackedArguments<Signature, Args&&...>(std::forward<Args>(args)...);
}

// The parameter at `index`, read back as a T (the packed storage must hold exactly a T).
template <typename T, typename Packed>
T read_parameter(Packed& packed, std::size_t index) {
    T value;
    std::memcpy(&value, packed.parameters()[index], sizeof(T));
    return value;
}

DevicePtr pointer_bits(const void* p) {
    return static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(p));
}

struct Params3 {
    int count;
    float scale;
    double offset;
};

}  // namespace

TEST_CASE("launch.pack_views_and_values") {
    Buffers buffers;
    Buffer* out_buffer = buffers.make();
    Buffer* in_buffer = buffers.make();
    const DevicePtr out_address = random_address();
    const DevicePtr in_address = random_address();
    auto out = fake_view<float>(out_buffer, out_address, 64);
    auto in = fake_view<const float>(in_buffer, in_address, 64);
    const double scale = std::uniform_real_distribution<double>(-4.0, 4.0)(rng());
    const int n = static_cast<int>(rng()() % 100000);

    auto packed = pack<void(float*, const float*, float, unsigned long long)>(out, in, scale, n);

    CHECK(packed.size() == 4);
    CHECK(packed.parameter_sizes == std::array<std::size_t, 4>{8, 8, 4, 8});
    CHECK(read_parameter<DevicePtr>(packed, 0) == out_address);
    CHECK(read_parameter<DevicePtr>(packed, 1) == in_address);
    CHECK(read_parameter<float>(packed, 2) == static_cast<float>(scale));  // converted to the exact type
    CHECK(read_parameter<unsigned long long>(packed, 3) == static_cast<unsigned long long>(n));

    REQUIRE(packed.access_count() == 2);
    CHECK(packed.accesses()[0].buffer == out_buffer);
    CHECK(packed.accesses()[0].access == Access::write);
    CHECK(packed.accesses()[0].argument == 0);
    CHECK(packed.accesses()[1].buffer == in_buffer);
    CHECK(packed.accesses()[1].access == Access::read);
    CHECK(packed.accesses()[1].argument == 1);
}

TEST_CASE("launch.pack_slices_by_constness_of_the_parameter") {
    DeviceSlice<float> y;  // empty slices: a buffer and address 0, enough to see what is packed
    DeviceSlice<float> x;
    const DeviceSlice<float> frozen;

    // y written, x read, frozen read; x given for a const parameter even though it is writable.
    auto packed = pack<void(float*, const float*, const float*)>(y, x, frozen);
    REQUIRE(packed.access_count() == 3);
    CHECK(packed.accesses()[0].buffer == cudarc::detail::Internals::buffer(y));
    CHECK(packed.accesses()[0].access == Access::write);
    CHECK(packed.accesses()[1].buffer == cudarc::detail::Internals::buffer(x));
    CHECK(packed.accesses()[1].access == Access::read);
    CHECK(packed.accesses()[2].buffer == cudarc::detail::Internals::buffer(frozen.view()));
    CHECK(packed.accesses()[2].access == Access::read);
    for (std::size_t i = 0; i < 3; ++i) CHECK(read_parameter<DevicePtr>(packed, i) == 0);
}

TEST_CASE("launch.pack_subview_address_and_position") {
    Buffers buffers;
    Buffer* buffer = buffers.make();
    const DevicePtr base = random_address();
    auto whole = fake_view<double>(buffer, base, 1000);
    const std::size_t offset = rng()() % 900;
    // A subview passes its own start address; the tracked buffer is the whole allocation's.
    auto packed = pack<void(int, double*, char)>(7, whole.subview(offset, 50), 'q');
    CHECK(read_parameter<int>(packed, 0) == 7);
    CHECK(read_parameter<DevicePtr>(packed, 1) == base + offset * sizeof(double));
    CHECK(read_parameter<char>(packed, 2) == 'q');
    REQUIRE(packed.access_count() == 1);
    CHECK(packed.accesses()[0].buffer == buffer);
    CHECK(packed.accesses()[0].argument == 1);  // its position in the argument list
    CHECK(packed.accesses()[0].access == Access::write);
    // Hazard tracking sees exactly the subview's bytes (Note [Range hazards]).
    CHECK(packed.accesses()[0].ptr == base + offset * sizeof(double));
    CHECK(packed.accesses()[0].bytes == 50 * sizeof(double));
}

TEST_CASE("launch.pack_raw_pointers_are_untracked") {
    float host_marker[4] = {};
    float* raw = host_marker + (rng()() % 4);  // any address: the host never dereferences it
    const float* raw_const = host_marker;
    auto packed = pack<void(float*, const float*, long long*)>(raw, raw_const, nullptr);
    CHECK(packed.access_count() == 0);
    CHECK(packed.accesses() == nullptr);
    CHECK(read_parameter<DevicePtr>(packed, 0) == pointer_bits(raw));
    CHECK(read_parameter<DevicePtr>(packed, 1) == pointer_bits(raw_const));
    CHECK(read_parameter<DevicePtr>(packed, 2) == 0);
}

TEST_CASE("launch.pack_values_keep_order_and_exact_types") {
    const auto a = static_cast<std::int8_t>(rng()() % 100);
    const auto b = static_cast<unsigned short>(rng()() % 60000);
    const double c = std::uniform_real_distribution<double>(-1e6, 1e6)(rng());
    const Params3 d{static_cast<int>(rng()() % 1000), 0.25f, c * 2.0};
    const bool e = (rng()() & 1) != 0;

    // Arguments of other (convertible) types land as the parameter's exact type and size.
    auto packed = pack<void(std::int8_t, unsigned short, double, Params3, bool, float)>(
        static_cast<int>(a), b, static_cast<float>(c), d, e, c);
    CHECK(packed.parameter_sizes == std::array<std::size_t, 6>{1, 2, 8, sizeof(Params3), 1, 4});
    CHECK(read_parameter<std::int8_t>(packed, 0) == a);
    CHECK(read_parameter<unsigned short>(packed, 1) == b);
    CHECK(read_parameter<double>(packed, 2) == static_cast<double>(static_cast<float>(c)));
    const auto packed_d = read_parameter<Params3>(packed, 3);
    CHECK(packed_d.count == d.count);
    CHECK(packed_d.scale == d.scale);
    CHECK(packed_d.offset == d.offset);
    CHECK(read_parameter<bool>(packed, 4) == e);
    CHECK(read_parameter<float>(packed, 5) == static_cast<float>(c));
    // Each address points at its own storage, in order, with no overlap.
    for (std::size_t i = 0; i < packed.size(); ++i) {
        for (std::size_t j = i + 1; j < packed.size(); ++j)
            CHECK(packed.parameters()[i] != packed.parameters()[j]);
    }
}

TEST_CASE("launch.pack_void_pointers_take_any_element_type") {
    Buffers buffers;
    Buffer* bytes_buffer = buffers.make();
    Buffer* words_buffer = buffers.make();
    auto bytes = fake_view<double>(bytes_buffer, random_address(), 8);
    auto words = fake_view<const std::uint32_t>(words_buffer, random_address(), 8);
    auto packed = pack<void(void*, const void*)>(bytes, words);
    REQUIRE(packed.access_count() == 2);
    CHECK(packed.accesses()[0].access == Access::write);
    CHECK(packed.accesses()[1].access == Access::read);
    CHECK(read_parameter<DevicePtr>(packed, 0) == bytes.device_ptr());
    CHECK(read_parameter<DevicePtr>(packed, 1) == words.device_ptr());
}

TEST_CASE("launch.pack_no_parameters") {
    auto packed = pack<void()>();
    CHECK(packed.size() == 0);
    CHECK(packed.parameters() == nullptr);
    CHECK(packed.access_count() == 0);
}

// The compile-time rules, also proven by the compile-fail tests (tests/compile_fail); here as a table that
// runs in the host suite.
TEST_CASE("launch.argument_rules") {
    using cudarc::detail::launchable_with_v;
    using Saxpy = void(float*, const float*, float, unsigned long long);
    using Slice = DeviceSlice<float>;
    // Accepted.
    CHECK(launchable_with_v<Saxpy, Slice&, const Slice&, float&&, int&&>);
    CHECK(launchable_with_v<Saxpy, Slice&, Slice&, double&&, std::size_t&>);
    CHECK(launchable_with_v<Saxpy, DeviceView<float>&&, DeviceView<const float>&&, float&&, unsigned&&>);
    CHECK(launchable_with_v<Saxpy, const DeviceView<float>&, DeviceView<float>&, float&&, unsigned&&>);
    CHECK(launchable_with_v<Saxpy, float*&, const float*&, float&&, unsigned&&>);
    CHECK(launchable_with_v<Saxpy, float*&, float*&, float&&, unsigned&&>);
    CHECK(launchable_with_v<Saxpy, std::nullptr_t&&, std::nullptr_t&&, float&&, unsigned&&>);
    // Rejected: counts.
    CHECK_FALSE(launchable_with_v<Saxpy, Slice&, const Slice&, float&&>);
    CHECK_FALSE(launchable_with_v<Saxpy, Slice&, const Slice&, float&&, int&&, int&&>);
    // Rejected: read-only buffers where the kernel writes.
    CHECK_FALSE(launchable_with_v<Saxpy, const Slice&, const Slice&, float&&, int&&>);
    CHECK_FALSE(launchable_with_v<Saxpy, DeviceView<const float>&&, const Slice&, float&&, int&&>);
    CHECK_FALSE(launchable_with_v<Saxpy, const float*&, const Slice&, float&&, int&&>);
    // Rejected: element types.
    CHECK_FALSE(launchable_with_v<Saxpy, DeviceSlice<double>&, const Slice&, float&&, int&&>);
    CHECK_FALSE(launchable_with_v<Saxpy, Slice&, const DeviceSlice<int>&, float&&, int&&>);
    CHECK_FALSE(launchable_with_v<Saxpy, int*&, const Slice&, float&&, int&&>);
    // Rejected: buffers and pointers for values, values for pointers, temporaries.
    CHECK_FALSE(launchable_with_v<Saxpy, Slice&, const Slice&, Slice&, int&&>);
    CHECK_FALSE(launchable_with_v<Saxpy, Slice&, const Slice&, float*&, int&&>);
    CHECK_FALSE(launchable_with_v<Saxpy, DevicePtr&, const Slice&, float&&, int&&>);
    CHECK_FALSE(launchable_with_v<Saxpy, Slice&&, const Slice&, float&&, int&&>);
}

TEST_CASE("launch.kernel_parameter_types") {
    using cudarc::detail::is_kernel_parameter_v;
    CHECK(is_kernel_parameter_v<float*>);
    CHECK(is_kernel_parameter_v<const double*>);
    CHECK(is_kernel_parameter_v<unsigned long long>);
    CHECK(is_kernel_parameter_v<Params3>);
    CHECK_FALSE(is_kernel_parameter_v<float&>);
    CHECK_FALSE(is_kernel_parameter_v<DeviceSlice<float>>);
    CHECK_FALSE(is_kernel_parameter_v<DeviceView<float>>);
    CHECK(cudarc::Kernel<void(float*, int)>::arity == 2);
    CHECK(cudarc::Kernel<void()>::arity == 0);
}

TEST_CASE("launch.kernel_arg_values_and_buffers") {
    Buffers buffers;
    const int n = static_cast<int>(rng()() % 1000);
    const auto value = cudarc::KernelArg::value(n);
    CHECK(value.size() == sizeof(int));
    int read_back = -1;
    std::memcpy(&read_back, value.data(), sizeof(int));
    CHECK(read_back == n);
    CHECK(value.tracked_buffer() == nullptr);

    // Small values are copied in: a temporary is safe.
    const auto temporary = cudarc::KernelArg::value(2.5);
    double d = 0;
    std::memcpy(&d, temporary.data(), sizeof(d));
    CHECK(d == 2.5);

    // Large values are referenced.
    struct Big {
        unsigned char bytes[200];
    };
    Big big{};
    for (auto& b : big.bytes) b = static_cast<unsigned char>(rng()());
    const auto large = cudarc::KernelArg::value(big);
    CHECK(large.size() == sizeof(Big));
    CHECK(large.data() == &big);

    Buffer* buffer = buffers.make();
    const DevicePtr address = random_address();
    auto view = fake_view<float>(buffer, address, 16);
    const auto written = cudarc::KernelArg::writes(view);
    CHECK(written.size() == sizeof(DevicePtr));
    DevicePtr bits = 0;
    std::memcpy(&bits, written.data(), sizeof(bits));
    CHECK(bits == address);
    CHECK(written.tracked_buffer() == buffer);
    CHECK(written.access() == Access::write);
    CHECK(written.tracked_ptr() == address);
    CHECK(written.tracked_bytes() == 16 * sizeof(float));

    const DeviceSlice<float> frozen;
    const auto read = cudarc::KernelArg::reads(frozen);
    CHECK(read.tracked_buffer() == cudarc::detail::Internals::buffer(frozen.view()));
    CHECK(read.access() == Access::read);

    const auto raw = cudarc::KernelArg::pointer(address + 64);
    std::memcpy(&bits, raw.data(), sizeof(bits));
    CHECK(bits == address + 64);
    CHECK(raw.tracked_buffer() == nullptr);

    // A copy carries its own bytes (no pointer into the original).
    const cudarc::KernelArg copy = written;
    CHECK(copy.data() != written.data());
    std::memcpy(&bits, copy.data(), sizeof(bits));
    CHECK(bits == address);
}

TEST_CASE("launch.empty_function_errors") {
    const cudarc::Function empty;
    CHECK(empty.empty());
    CHECK(empty.name().empty());
    CHECK(empty.device_ordinal() == -1);
    CHECK_THROWS_WITH_AS(static_cast<void>(empty.attributes()), doctest::Contains("empty Function"),
                         cudarc::Error);
    CHECK_THROWS_WITH_AS(static_cast<void>(empty.parameter_sizes()), doctest::Contains("empty Function"),
                         cudarc::Error);
    CHECK_THROWS_AS(empty.set_max_dynamic_shared_memory(1 << 16), cudarc::Error);
}

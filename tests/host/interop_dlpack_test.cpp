// DLPack import checks on hand-built tensors, without a driver: every rejected input names its problem,
// and the deleter runs exactly once on rejection (the import took ownership).
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <string>

#include "cudarc/dlpack.hpp"
#include "cudarc/optim/element_type.hpp"

using namespace cudarc;
using cudarc::detail::check_dlpack;
using cudarc::detail::DlpackSource;

namespace {

// A versioned tensor of 2 x 3 floats on device 0 whose deleter counts its calls.
struct Versioned {
    std::array<std::int64_t, 2> shape{2, 3};
    std::array<std::int64_t, 2> strides{3, 1};
    int deleted = 0;
    dlpack::DLManagedTensorVersioned tensor{};
    Versioned() {
        tensor.version = {1, 1};
        tensor.manager_ctx = this;
        tensor.deleter = [](dlpack::DLManagedTensorVersioned* self) {
            ++static_cast<Versioned*>(self->manager_ctx)->deleted;
        };
        tensor.flags = 0;
        tensor.dl_tensor.data = reinterpret_cast<void*>(std::uintptr_t{0x7f0000100000});
        tensor.dl_tensor.device = {dlpack::kDLCUDA, 0};
        tensor.dl_tensor.ndim = 2;
        tensor.dl_tensor.dtype = {dlpack::kDLFloat, 32, 1};
        tensor.dl_tensor.shape = shape.data();
        tensor.dl_tensor.strides = strides.data();
        tensor.dl_tensor.byte_offset = 0;
    }
    DlpackSource source() { return DlpackSource{&tensor, nullptr}; }
};

template <typename T>
std::string rejection(Versioned& v, int ordinal = 0) {
    try {
        (void)check_dlpack(v.source(), ordinal, detail::dlpack_element<T>());
    } catch (const Error& e) {
        return e.what();
    }
    return "accepted";
}

// A framework's own declaration of the legacy struct (as ATen/dlpack.h has it), outside cudarc.
namespace framework {
struct DLManagedTensor {
    dlpack::DLTensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(DLManagedTensor* self);
};
}  // namespace framework

}  // namespace

TEST_CASE("interop.dlpack_accepts_a_compact_cuda_tensor") {
    Versioned v;
    const auto plan = check_dlpack(v.source(), 0, detail::dlpack_element<float>());
    CHECK(plan.count == 6);
    CHECK(plan.ptr == 0x7f0000100000);
    CHECK(v.deleted == 0);  // accepted: the slice owns it now

    // byte_offset is honoured; null strides mean compact; an extent of 1 may have any stride.
    v.tensor.dl_tensor.byte_offset = 64;
    v.tensor.dl_tensor.strides = nullptr;
    CHECK(check_dlpack(v.source(), 0, detail::dlpack_element<float>()).ptr == 0x7f0000100000 + 64);
    v.shape = {1, 6};
    v.strides = {99, 1};
    v.tensor.dl_tensor.strides = v.strides.data();
    CHECK(check_dlpack(v.source(), 0, detail::dlpack_element<float>()).count == 6);
    // Managed memory and a read-only tensor imported as const.
    v.tensor.dl_tensor.device.device_type = dlpack::kDLCUDAManaged;
    v.tensor.flags = dlpack::kFlagReadOnly;
    CHECK(check_dlpack(v.source(), 0, detail::dlpack_element<const float>()).count == 6);
    // A scalar (ndim 0) is one element; an empty tensor none.
    v.tensor.dl_tensor.ndim = 0;
    CHECK(check_dlpack(v.source(), 0, detail::dlpack_element<const float>()).count == 1);
    v.tensor.dl_tensor.ndim = 2;
    v.shape = {0, 6};
    CHECK(check_dlpack(v.source(), 0, detail::dlpack_element<const float>()).count == 0);
    CHECK(v.deleted == 0);
}

TEST_CASE("interop.dlpack_rejections_name_the_problem_and_run_the_deleter_once") {
    struct Case {
        const char* name;
        void (*spoil)(Versioned&);
        const char* message;
    };
    const Case cases[] = {
        {"host memory", [](Versioned& v) { v.tensor.dl_tensor.device.device_type = dlpack::kDLCPU; },
         "device type kDLCPU (host memory) is not CUDA device memory"},
        {"pinned memory", [](Versioned& v) { v.tensor.dl_tensor.device.device_type = dlpack::kDLCUDAHost; },
         "kDLCUDAHost (page-locked host memory) is not CUDA device memory"},
        {"another device", [](Versioned& v) { v.tensor.dl_tensor.device.device_id = 3; },
         "the tensor is on device 3, the Device is 0"},
        {"wrong dtype",
         [](Versioned& v) {
             v.tensor.dl_tensor.dtype = {dlpack::kDLFloat, 16, 1};
         },
         "dtype is float16, the element type is float32"},
        {"int for float",
         [](Versioned& v) {
             v.tensor.dl_tensor.dtype = {dlpack::kDLInt, 32, 1};
         },
         "dtype is int32, the element type is float32"},
        {"vector lanes",
         [](Versioned& v) {
             v.tensor.dl_tensor.dtype = {dlpack::kDLFloat, 32, 4};
         },
         "dtype is float32x4"},
        {"transposed",
         [](Versioned& v) {
             v.strides = {1, 2};
         },
         "strides [1, 2] for shape [2, 3] are not compact row-major"},
        {"padded rows",
         [](Versioned& v) {
             v.strides = {4, 1};
         },
         "strides [4, 1] for shape [2, 3] are not compact row-major"},
        {"major version 2",
         [](Versioned& v) {
             v.tensor.version = {2, 0};
         },
         "DLPack version 2.0 is not supported"},
        {"major version 0",
         [](Versioned& v) {
             v.tensor.version = {0, 8};
         },
         "DLPack version 0.8 is not supported"},
        {"read-only as writable", [](Versioned& v) { v.tensor.flags = dlpack::kFlagReadOnly; },
         "the tensor is read-only"},
        {"negative extent",
         [](Versioned& v) {
             v.shape = {-2, 3};
         },
         "negative extent in shape [-2, 3]"},
        {"negative ndim", [](Versioned& v) { v.tensor.dl_tensor.ndim = -1; }, "ndim is negative (-1)"},
        {"no shape", [](Versioned& v) { v.tensor.dl_tensor.shape = nullptr; }, "shape is null"},
        {"null data", [](Versioned& v) { v.tensor.dl_tensor.data = nullptr; }, "data pointer is null"},
        {"misaligned", [](Versioned& v) { v.tensor.dl_tensor.byte_offset = 2; },
         "is not aligned to the element type's 4 bytes"},
        {"overflow",
         [](Versioned& v) {
             v.shape = {std::int64_t{1} << 40, std::int64_t{1} << 40};
         },
         "overflows the address space"},
        {"byte_offset past the address space",
         [](Versioned& v) { v.tensor.dl_tensor.byte_offset = ~std::uint64_t{0} - 3; },
         "overflows the address space"},
        {"negative stride",
         [](Versioned& v) {
             v.strides = {-3, 1};
         },
         "strides [-3, 1] for shape [2, 3] are not compact row-major"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.name);
        Versioned v;
        c.spoil(v);
        const std::string message = rejection<float>(v);
        CHECK(message.find(c.message) != std::string::npos);
        CHECK(message.find("cudarc::from_dlpack") != std::string::npos);
        if (message.find(c.message) == std::string::npos) MESSAGE(message);
        CHECK(v.deleted == 1);
    }
}

TEST_CASE("interop.dlpack_legacy_tensor_and_foreign_declarations") {
    Versioned v;
    framework::DLManagedTensor legacy{v.tensor.dl_tensor, &v, [](framework::DLManagedTensor* self) {
                                          ++static_cast<Versioned*>(self->manager_ctx)->deleted;
                                      }};
    const DlpackSource source = detail::as_source(&legacy);
    CHECK(source.versioned == nullptr);
    CHECK(static_cast<void*>(source.legacy) == static_cast<void*>(&legacy));
    CHECK(check_dlpack(source, 0, detail::dlpack_element<float>()).count == 6);
    // A rejected legacy tensor runs its (framework-declared) deleter once, too.
    legacy.dl_tensor.dtype = {dlpack::kDLFloat, 64, 1};
    CHECK_THROWS_WITH_AS((void)check_dlpack(source, 0, detail::dlpack_element<float>()),
                         doctest::Contains("dtype is float64"), Error);
    CHECK(v.deleted == 1);
    // Element types: half and bfloat16 storage map to float16 / bfloat16.
    CHECK(detail::dlpack_element<optim::half_bits>().dtype.code == dlpack::kDLFloat);
    CHECK(detail::dlpack_element<optim::bf16_bits>().dtype.code == dlpack::kDLBfloat);
    CHECK(detail::dlpack_element<const std::int64_t>().read_only);
    // A null tensor has no deleter to run.
    CHECK_THROWS_WITH_AS((void)check_dlpack(DlpackSource{}, 0, detail::dlpack_element<float>()),
                         doctest::Contains("null tensor"), Error);
}

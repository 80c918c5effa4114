// The DLPack ABI (v1.x, with the legacy DLManagedTensor of v0.x), declared from the DLPack specification.
//
// Note: Debian's libdlpack-dev is 0.6, without DLManagedTensorVersioned, so the structs are declared here:
// a layout is a fact of the ABI. They live in namespace cudarc::dlpack, so that a program that also
// includes a framework's own dlpack.h (ATen/dlpack.h) sees no redefinition; from_dlpack accepts either
// declaration (layouts identical, checked at compile time in dlpack.hpp). The offsets below are the ABI's
// on LP64 targets.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cudarc::dlpack {

inline constexpr std::uint32_t kMajorVersion = 1;  // DLPACK_MAJOR_VERSION understood by cudarc
inline constexpr std::uint32_t kMinorVersion = 1;  // DLPACK_MINOR_VERSION written by to_dlpack

// DLDeviceType values cudarc meets.
enum DLDeviceType : std::int32_t {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,
    kDLROCM = 10,
    kDLROCMHost = 11,
    kDLCUDAManaged = 13,
};

// DLDataTypeCode values.
enum DLDataTypeCode : std::uint8_t {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLOpaqueHandle = 3,
    kDLBfloat = 4,
    kDLComplex = 5,
    kDLBool = 6,
};

// DLManagedTensorVersioned::flags bits.
inline constexpr std::uint64_t kFlagReadOnly = std::uint64_t{1} << 0;
inline constexpr std::uint64_t kFlagIsCopied = std::uint64_t{1} << 1;
inline constexpr std::uint64_t kFlagIsSubbyteTypePadded = std::uint64_t{1} << 2;

struct DLPackVersion {
    std::uint32_t major;
    std::uint32_t minor;
};

struct DLDevice {
    DLDeviceType device_type;
    std::int32_t device_id;
};

struct DLDataType {
    std::uint8_t code;
    std::uint8_t bits;
    std::uint16_t lanes;
};

struct DLTensor {
    void* data;
    DLDevice device;
    std::int32_t ndim;
    DLDataType dtype;
    std::int64_t* shape;
    std::int64_t* strides;  // null: compact row-major
    std::uint64_t byte_offset;
};

struct DLManagedTensor {
    DLTensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(DLManagedTensor* self);
};

struct DLManagedTensorVersioned {
    DLPackVersion version;
    void* manager_ctx;
    void (*deleter)(DLManagedTensorVersioned* self);
    std::uint64_t flags;
    DLTensor dl_tensor;
};

static_assert(sizeof(DLPackVersion) == 8);
static_assert(sizeof(DLDevice) == 8 && offsetof(DLDevice, device_id) == 4);
static_assert(sizeof(DLDataType) == 4 && offsetof(DLDataType, bits) == 1 && offsetof(DLDataType, lanes) == 2);
static_assert(offsetof(DLTensor, data) == 0);
static_assert(offsetof(DLTensor, device) == 8);
static_assert(offsetof(DLTensor, ndim) == 16);
static_assert(offsetof(DLTensor, dtype) == 20);
static_assert(offsetof(DLTensor, shape) == 24);
static_assert(offsetof(DLTensor, strides) == 32);
static_assert(offsetof(DLTensor, byte_offset) == 40);
static_assert(sizeof(DLTensor) == 48);
static_assert(offsetof(DLManagedTensor, dl_tensor) == 0);
static_assert(offsetof(DLManagedTensor, manager_ctx) == 48);
static_assert(offsetof(DLManagedTensor, deleter) == 56);
static_assert(sizeof(DLManagedTensor) == 64);
static_assert(offsetof(DLManagedTensorVersioned, version) == 0);
static_assert(offsetof(DLManagedTensorVersioned, manager_ctx) == 8);
static_assert(offsetof(DLManagedTensorVersioned, deleter) == 16);
static_assert(offsetof(DLManagedTensorVersioned, flags) == 24);
static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) == 32);
static_assert(sizeof(DLManagedTensorVersioned) == 80);

}  // namespace cudarc::dlpack

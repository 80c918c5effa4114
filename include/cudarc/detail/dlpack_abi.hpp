/// @file
/// The DLPack ABI (v1.x, with the legacy DLManagedTensor of v0.x), declared from the DLPack specification.
///
/// Note: Debian's libdlpack-dev is 0.6, without DLManagedTensorVersioned, so the structs are declared here:
/// a layout is a fact of the ABI. They live in namespace cudarc::dlpack, so that a program that also
/// includes a framework's own dlpack.h (ATen/dlpack.h) sees no redefinition; from_dlpack accepts either
/// declaration (layouts identical, checked at compile time in dlpack.hpp). The offsets below are the ABI's
/// on LP64 targets.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cudarc::dlpack {

inline constexpr std::uint32_t kMajorVersion = 1;  ///< DLPACK_MAJOR_VERSION understood by cudarc
inline constexpr std::uint32_t kMinorVersion = 1;  ///< DLPACK_MINOR_VERSION written by to_dlpack

/// DLDeviceType values cudarc meets.
enum DLDeviceType : std::int32_t {
    kDLCPU = 1,           ///< host memory
    kDLCUDA = 2,          ///< CUDA device memory
    kDLCUDAHost = 3,      ///< page-locked host memory (cudaMallocHost)
    kDLROCM = 10,         ///< ROCm (HIP) device memory
    kDLROCMHost = 11,     ///< page-locked host memory of ROCm
    kDLCUDAManaged = 13,  ///< CUDA managed (unified) memory
};

/// DLDataTypeCode values.
enum DLDataTypeCode : std::uint8_t {
    kDLInt = 0,           ///< signed integer
    kDLUInt = 1,          ///< unsigned integer
    kDLFloat = 2,         ///< IEEE floating point
    kDLOpaqueHandle = 3,  ///< an opaque handle
    kDLBfloat = 4,        ///< bfloat16
    kDLComplex = 5,       ///< complex: the real then the imaginary part
    kDLBool = 6,          ///< boolean
};

/// DLManagedTensorVersioned::flags bits. This one: the tensor must not be written
/// (DLPACK_FLAG_BITMASK_READ_ONLY); from_dlpack needs a const T for it.
inline constexpr std::uint64_t kFlagReadOnly = std::uint64_t{1} << 0;
/// The producer made a copy of the data for this tensor (DLPACK_FLAG_BITMASK_IS_COPIED).
inline constexpr std::uint64_t kFlagIsCopied = std::uint64_t{1} << 1;
/// Sub-byte elements are padded to whole bytes (DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED).
inline constexpr std::uint64_t kFlagIsSubbyteTypePadded = std::uint64_t{1} << 2;

/// A DLPack ABI version.
struct DLPackVersion {
    /// The major version: tensors of another major version are not understood.
    std::uint32_t major;
    /// The minor version.
    std::uint32_t minor;
};

/// Where a tensor's memory lives: a device type and an ordinal.
struct DLDevice {
    /// The kind of memory (kDLCUDA, kDLCUDAManaged, ...).
    DLDeviceType device_type;
    /// The device ordinal.
    std::int32_t device_id;
};

/// An element type: a type code, a bit width and a lane count.
struct DLDataType {
    /// A DLDataTypeCode value.
    std::uint8_t code;
    /// Bits per lane (for example 32 for float).
    std::uint8_t bits;
    /// Lanes per element (1 for scalars; cudarc accepts only 1).
    std::uint16_t lanes;
};

/// A strided n-dimensional array: where it is, its element type, shape and strides.
struct DLTensor {
    /// The allocation's address (the first element is at data + byte_offset).
    void* data;
    /// The device whose memory it is.
    DLDevice device;
    /// The number of dimensions.
    std::int32_t ndim;
    /// The element type.
    DLDataType dtype;
    /// ndim extents.
    std::int64_t* shape;
    /// ndim strides in elements; null: compact row-major.
    std::int64_t* strides;  // null: compact row-major
    /// Bytes from data to the first element.
    std::uint64_t byte_offset;
};

/// The legacy (DLPack 0.x) managed tensor: a tensor and the deleter its consumer calls once when done with
/// it.
struct DLManagedTensor {
    /// The tensor.
    DLTensor dl_tensor;
    /// The producer's context for the deleter.
    void* manager_ctx;
    /// Called once by the consumer to give the tensor back; may be null.
    void (*deleter)(DLManagedTensor* self);
};

/// The DLPack 1.x managed tensor: a version, flags, a tensor and the deleter its consumer calls once.
struct DLManagedTensorVersioned {
    /// The ABI version the producer wrote.
    DLPackVersion version;
    /// The producer's context for the deleter.
    void* manager_ctx;
    /// Called once by the consumer to give the tensor back; may be null.
    void (*deleter)(DLManagedTensorVersioned* self);
    /// kFlag* bits.
    std::uint64_t flags;
    /// The tensor.
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

// DLPack import checks and export (cudarc/dlpack.hpp).
#include "cudarc/dlpack.hpp"

#include <fmt/format.h>

#include <limits>
#include <memory>
#include <string>

#include "core/buffer.hpp"
#include "core/device_state.hpp"
#include "core/operation.hpp"

namespace cudarc::detail {
namespace {

void call_versioned_deleter(void* tensor) noexcept {
    auto* t = static_cast<dlpack::DLManagedTensorVersioned*>(tensor);
    if (t->deleter != nullptr) t->deleter(t);
}
void call_legacy_deleter(void* tensor) noexcept {
    auto* t = static_cast<dlpack::DLManagedTensor*>(tensor);
    if (t->deleter != nullptr) t->deleter(t);
}

ReleaseHook deleter_of(DlpackSource source) noexcept {
    void* tensor = source.versioned != nullptr ? static_cast<void*>(source.versioned) : source.legacy;
    if (source.run_deleter != nullptr && tensor != nullptr) return ReleaseHook{source.run_deleter, tensor};
    if (source.versioned != nullptr) return ReleaseHook{&call_versioned_deleter, source.versioned};
    if (source.legacy != nullptr) return ReleaseHook{&call_legacy_deleter, source.legacy};
    return {};
}

std::string describe(dlpack::DLDataType dtype) {
    const char* code = "code ";
    switch (dtype.code) {
        case dlpack::kDLInt:
            code = "int";
            break;
        case dlpack::kDLUInt:
            code = "uint";
            break;
        case dlpack::kDLFloat:
            code = "float";
            break;
        case dlpack::kDLBfloat:
            code = "bfloat";
            break;
        case dlpack::kDLBool:
            code = "bool";
            break;
        case dlpack::kDLComplex:
            code = "complex";
            break;
        default:
            return fmt::format("code {} bits {} lanes {}", dtype.code, dtype.bits, dtype.lanes);
    }
    std::string out = fmt::format("{}{}", code, dtype.bits);
    if (dtype.lanes != 1) out += fmt::format("x{}", dtype.lanes);
    return out;
}

std::string describe(std::int32_t type) {
    switch (type) {
        case dlpack::kDLCPU:
            return "kDLCPU (host memory)";
        case dlpack::kDLCUDAHost:
            return "kDLCUDAHost (page-locked host memory)";
        case dlpack::kDLROCM:
            return "kDLROCM";
        case dlpack::kDLROCMHost:
            return "kDLROCMHost";
        default:
            return fmt::format("{}", type);
    }
}

std::string list(const std::int64_t* values, std::int32_t n) {
    std::string out = "[";
    for (std::int32_t i = 0; i < n; ++i) out += fmt::format("{}{}", i == 0 ? "" : ", ", values[i]);
    return out + "]";
}

// Every rule an imported tensor must follow; throws naming the first one broken.
DlpackPlan check(DlpackSource source, int ordinal, const DlpackElement& element) {
    const dlpack::DLTensor& t =
        source.versioned != nullptr ? source.versioned->dl_tensor : source.legacy->dl_tensor;
    if (source.versioned != nullptr) {
        const dlpack::DLPackVersion v = source.versioned->version;
        if (v.major != dlpack::kMajorVersion) {
            throw Error(
                fmt::format("cudarc::from_dlpack: DLPack version {}.{} is not supported (cudarc reads "
                            "major version {})",
                            v.major, v.minor, dlpack::kMajorVersion));
        }
        if ((source.versioned->flags & dlpack::kFlagReadOnly) != 0 && !element.read_only) {
            throw Error(
                "cudarc::from_dlpack: the tensor is read-only (DLPACK_FLAG_BITMASK_READ_ONLY); import it "
                "with a "
                "const element type, e.g. from_dlpack<const float>");
        }
    }
    if (t.device.device_type != dlpack::kDLCUDA && t.device.device_type != dlpack::kDLCUDAManaged) {
        throw Error(
            fmt::format("cudarc::from_dlpack: device type {} is not CUDA device memory (kDLCUDA or "
                        "kDLCUDAManaged)",
                        describe(t.device.device_type)));
    }
    if (t.device.device_id != ordinal) {
        throw Error(fmt::format("cudarc::from_dlpack: the tensor is on device {}, the Device is {}",
                                t.device.device_id, ordinal));
    }
    if (t.dtype.code != element.dtype.code || t.dtype.bits != element.dtype.bits || t.dtype.lanes != 1) {
        throw Error(fmt::format("cudarc::from_dlpack: the tensor's dtype is {}, the element type is {}",
                                describe(t.dtype), describe(element.dtype)));
    }
    if (t.ndim < 0) throw Error(fmt::format("cudarc::from_dlpack: ndim is negative ({})", t.ndim));
    if (t.ndim > 0 && t.shape == nullptr) throw Error("cudarc::from_dlpack: ndim > 0 but shape is null");
    std::size_t count = 1;
    for (std::int32_t i = 0; i < t.ndim; ++i) {
        if (t.shape[i] < 0) {
            throw Error(
                fmt::format("cudarc::from_dlpack: negative extent in shape {}", list(t.shape, t.ndim)));
        }
        const auto extent = static_cast<std::size_t>(t.shape[i]);
        if (extent != 0 && count > std::numeric_limits<std::size_t>::max() / element.size / extent) {
            throw Error(fmt::format("cudarc::from_dlpack: shape {} overflows the address space",
                                    list(t.shape, t.ndim)));
        }
        count *= extent;
    }
    if (t.strides != nullptr && count > 0) {
        // Compact row-major: each stride is the product of the extents after it; an extent of 1 may carry
        // any stride (it never steps).
        // Note: in size_t, which holds every product of these extents (their count fits, checked above).
        std::size_t expected = 1;
        for (std::int32_t i = t.ndim - 1; i >= 0; --i) {
            if (t.shape[i] != 1 && (t.strides[i] < 0 || static_cast<std::size_t>(t.strides[i]) != expected)) {
                throw Error(
                    fmt::format("cudarc::from_dlpack: strides {} for shape {} are not compact row-major "
                                "(cudarc needs contiguous elements; make the tensor contiguous first)",
                                list(t.strides, t.ndim), list(t.shape, t.ndim)));
            }
            expected *= static_cast<std::size_t>(t.shape[i]);
        }
    }
    const auto base = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(t.data));
    if (count > 0 && base == 0) throw Error("cudarc::from_dlpack: the tensor's data pointer is null");
    if (t.byte_offset > std::numeric_limits<DevicePtr>::max() - base) {
        throw Error(
            fmt::format("cudarc::from_dlpack: byte_offset {} past data ({:#x}) overflows the address space",
                        t.byte_offset, base));
    }
    const DevicePtr ptr = base + t.byte_offset;
    if (ptr % element.alignment != 0) {
        throw Error(
            fmt::format("cudarc::from_dlpack: data + byte_offset ({:#x}) is not aligned to the element "
                        "type's {} bytes",
                        ptr, element.alignment));
    }
    return DlpackPlan{ptr, count};
}

// The context behind an exported tensor: the memory and the arrays the DLTensor points into.
struct ExportContext {
    BufferHandle buffer;
    std::int64_t shape[1] = {0};
    std::int64_t strides[1] = {1};
    dlpack::DLManagedTensorVersioned versioned{};
    dlpack::DLManagedTensor legacy{};
};

void delete_versioned(dlpack::DLManagedTensorVersioned* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);  // frees the memory, ordered after every use
}
void delete_legacy(dlpack::DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
}

}  // namespace

DlpackPlan check_dlpack(DlpackSource source, int ordinal, const DlpackElement& element) {
    if (source.versioned == nullptr && source.legacy == nullptr)
        throw Error("cudarc::from_dlpack: a null tensor");
    try {
        return check(source, ordinal, element);
    } catch (...) {
        const ReleaseHook deleter = deleter_of(source);
        deleter.call(deleter.context);  // the import took ownership: the producer gets the tensor back
        throw;
    }
}

std::pair<BufferHandle, std::size_t> import_dlpack(const Device& device, DlpackSource source,
                                                   const DlpackElement& element, const Stream* stream) {
    const DlpackPlan plan = check_dlpack(source, device.ordinal(), element);
    const ReleaseHook deleter = deleter_of(source);
    try {
        return {borrow_memory(device, plan.ptr, plan.count, element.size, stream, deleter), plan.count};
    } catch (...) {
        deleter.call(deleter.context);
        throw;
    }
}

void* export_dlpack(BufferHandle& handle, std::size_t count, dlpack::DLDataType dtype, Stream& stream,
                    bool versioned) {
    Buffer& buffer = non_empty(handle.get(), "cudarc::to_dlpack");
    StreamState& s = Internals::stream_state(stream);
    buffer.check_stream(s);
    if (buffer.borrowed())
        throw Error("cudarc::to_dlpack: the slice is borrowed; only owned memory can be handed over");
    auto context = std::make_unique<ExportContext>();
    // The exchange: the consumer's stream waits for cudarc's pending work, and counts as writing the whole
    // buffer from now on (everything it submits: cudarc never sees its work), so the free at the deleter
    // orders after the consumer's work too.
    Operation exchange(s, Operation::Work::untracked);
    exchange.access(buffer.hazards(), 0, buffer.bytes(), Access::write);
    exchange.order();
    exchange.complete_untracked();
    context->shape[0] = static_cast<std::int64_t>(count);
    dlpack::DLTensor tensor{};
    tensor.data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(buffer.ptr()));
    tensor.device = dlpack::DLDevice{dlpack::kDLCUDA, buffer.device_ordinal()};
    tensor.ndim = 1;
    tensor.dtype = dtype;
    tensor.shape = context->shape;
    tensor.strides = context->strides;
    tensor.byte_offset = 0;
    context->buffer = std::move(handle);
    ExportContext* raw = context.release();
    if (versioned) {
        raw->versioned = dlpack::DLManagedTensorVersioned{
            dlpack::DLPackVersion{dlpack::kMajorVersion, dlpack::kMinorVersion}, raw, &delete_versioned, 0,
            tensor};
        return &raw->versioned;
    }
    raw->legacy = dlpack::DLManagedTensor{tensor, raw, &delete_legacy};
    return &raw->legacy;
}

}  // namespace cudarc::detail

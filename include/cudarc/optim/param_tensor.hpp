/// @file
/// cudarc::optim::ParamTensor — one parameter tensor and its gradient, as a step reads and writes them.
#pragma once

#include <cstddef>

#include "cudarc/export.hpp"
#include "cudarc/optim/element_type.hpp"
#include "cudarc/slice.hpp"

namespace cudarc::optim {

/// A non-owning pair (parameter, gradient) of the same element type and size, both in device memory the
/// caller owns (any DeviceView: of a DeviceSlice, or of memory another library owns). Like DeviceView it
/// must not outlive the memory, nor a move of a DeviceSlice behind it (a moved DeviceSlice moves its
/// buffer: build ParamTensors once the slices are in place, e.g. after filling a vector). The optimizer
/// does not keep it: every step is given its tensors afresh (their hazard state tells it which work to
/// wait for).
class CUDARC_API ParamTensor {
  public:
    /// Throws cudarc::Error when the gradient's size differs from the parameter's.
    template <ParamElement T>
    ParamTensor(DeviceView<T> param, DeviceView<const T> grad)
        : type_(element_type_of<T>),
          numel_(param.size()),
          device_(param.device_ordinal() == grad.device_ordinal() ? param.device_ordinal() : -1),
          param_(as_writable_bytes(param)),
          grad_(as_bytes(grad)) {
        if (grad.size() != param.size()) throw_size_mismatch(param.size(), grad.size());
    }
    /// The same with a writable gradient view (read only).
    template <ParamElement T>
    ParamTensor(DeviceView<T> param, DeviceView<T> grad) : ParamTensor(param, DeviceView<const T>(grad)) {}
    /// The same from two slices (their whole views).
    template <ParamElement T>
    ParamTensor(DeviceSlice<T>& param, const DeviceSlice<T>& grad) : ParamTensor(param.view(), grad.view()) {}

    /// The element type of both tensors.
    [[nodiscard]] ElementType element_type() const noexcept { return type_; }
    /// The number of elements of each tensor.
    [[nodiscard]] std::size_t numel() const noexcept { return numel_; }
    /// The parameter's device address.
    [[nodiscard]] DevicePtr param_ptr() const noexcept { return param_.device_ptr(); }
    /// The gradient's device address.
    [[nodiscard]] DevicePtr grad_ptr() const noexcept { return grad_.device_ptr(); }
    /// The ordinal of the device whose memory holds both, or -1 when they are on different devices (or
    /// either is a view of an empty slice). Note: kept, so that a step checks 1000 tensors cheaply.
    [[nodiscard]] int device_ordinal() const noexcept { return device_; }
    /// The parameter (written by a step) and the gradient (read), as bytes.
    [[nodiscard]] DeviceView<std::byte> param_bytes() const noexcept { return param_; }
    /// The gradient as read-only bytes.
    [[nodiscard]] DeviceView<const std::byte> grad_bytes() const noexcept { return grad_; }

  private:
    [[noreturn]] static void throw_size_mismatch(std::size_t param, std::size_t grad);

    ElementType type_;
    std::size_t numel_;
    int device_;
    DeviceView<std::byte> param_;
    DeviceView<const std::byte> grad_;
};

}  // namespace cudarc::optim

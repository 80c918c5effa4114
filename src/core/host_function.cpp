// Stream::host_function (Note [No CUDA in host functions] in core/device_state.hpp).
#include <fmt/format.h>

#include <exception>
#include <memory>
#include <new>

#include "core/capture.hpp"
#include "core/device_state.hpp"
#include "cudarc/stream.hpp"

namespace cudarc {
namespace detail {

bool& in_host_function() noexcept {
    thread_local bool inside = false;
    return inside;
}

void throw_cuda_call_in_host_function() {
    throw Error(
        "cudarc: a CUDA call inside a host function (Stream::host_function): the driver forbids CUDA calls "
        "there (they may deadlock or fail); move the call out of the function, e.g. to a host thread that "
        "a CompletionQueue wakes");
}

namespace {
// What the driver's thread receives: the task and the device that keeps its errors.
struct HostCall {
    std::unique_ptr<HostTask> task;
    std::shared_ptr<DeviceState> device;
};

// Runs on the driver's thread. Never throws into the driver: errors are kept on the device.
void run_host_call(void* data) noexcept {
    std::unique_ptr<HostCall> call(static_cast<HostCall*>(data));
    bool& inside = in_host_function();
    inside = true;
    try {
        call->task->run();
    } catch (const Error& error) {
        call->device->defer(error);
    } catch (const std::exception& error) {
        try {
            call->device->defer(Error(fmt::format("cudarc: a host function threw: {}", error.what())));
        } catch (...) {  // NOLINT(bugprone-empty-catch): no memory to describe it
        }
    } catch (...) {
        try {
            call->device->defer(Error("cudarc: a host function threw an exception of unknown type"));
        } catch (...) {  // NOLINT(bugprone-empty-catch): no memory to describe it
        }
    }
    try {
        call.reset();  // the task's destructor runs here too, still inside the driver's thread
    } catch (...) {    // NOLINT(bugprone-empty-catch): destructors should not throw
    }
    inside = false;
}
}  // namespace

}  // namespace detail

void Stream::enqueue_host_task(std::unique_ptr<detail::HostTask> task) {
    // Note: a captured host function would run at every replay; its task is freed after one run.
    detail::refuse_in_capture("Stream::host_function",
                              "the graph would run the function at every replay, after its state is gone");
    detail::DeviceState& device = state_->device();
    auto call =
        std::make_unique<detail::HostCall>(detail::HostCall{std::move(task), device.shared_from_this()});
    const auto scope = device.bind();
    const sys::DriverApi& api = device.api();
    device.check(sys::require(api, api.launch_host_func, sys::Entry::launch_host_func)(
                     state_->handle(), &detail::run_host_call, call.get()),
                 sys::Entry::launch_host_func);
    static_cast<void>(call.release());  // the driver's thread owns it now
}

}  // namespace cudarc

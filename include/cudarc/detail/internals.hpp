// cudarc::detail::Internals — the library's one way into the private state of its public handles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "cudarc/detail/native_handles.hpp"

namespace cudarc {

class Device;
class Stream;
class Event;
class Function;
class Graph;
template <typename T>
class DeviceSlice;
template <typename T>
class DeviceView;
template <typename T>
class BorrowedSlice;

namespace detail {

class Buffer;
class BufferHandle;
class DeviceState;
class StreamState;
class GraphState;
struct FunctionRecord;

// Note [Internal access]
// The handles (Device, Stream, Event, Function, Graph, DeviceSlice, BorrowedSlice) keep their state and
// their state-taking constructors private: user code must not depend on them, since they change with the
// implementation. The library needs them: its sources, the templates and inline functions of its public
// headers (which compile into user code), and its tests. They all go through Internals, which every handle
// befriends; nothing else does. Not API: it may change in any release.
//
// Each function is declared here and defined next to its handle (in the handle's header), where the handle
// is complete: including a handle's header is what makes its accessors usable.
struct Internals {
    // Device: its shared state, and a handle to a state.
    [[nodiscard]] static const std::shared_ptr<DeviceState>& device_state(const Device& device) noexcept;
    [[nodiscard]] static Device make_device(std::shared_ptr<DeviceState> state) noexcept;

    // Stream: its state (always set), the shared pointer to it, and a stream made from states. `keep_alive`
    // is null for a device's own default stream; `parent` is set for a forked stream (joined on
    // destruction).
    [[nodiscard]] static StreamState& stream_state(const Stream& stream) noexcept;
    [[nodiscard]] static const std::shared_ptr<StreamState>& shared_stream_state(
        const Stream& stream) noexcept;
    [[nodiscard]] static Stream make_stream(std::shared_ptr<DeviceState> keep_alive,
                                            std::shared_ptr<StreamState> state,
                                            const std::shared_ptr<StreamState>& parent) noexcept;

    // Event: the serial number of the graph capture it was last recorded in (0: none).
    [[nodiscard]] static std::uint64_t recorded_in_capture(const Event& event) noexcept;

    // Function: the device the kernel lives on (the launch path compares it with the stream's), and a
    // function made from its record and handle.
    [[nodiscard]] static DeviceState* function_device(const Function& function) noexcept;
    [[nodiscard]] static Function make_function(std::shared_ptr<const FunctionRecord> record,
                                                ::CUfunc_st* handle, DeviceState* device) noexcept;

    // Graph: made from an instantiated capture. Defined in src/core/graph.cpp, where GraphState is complete.
    [[nodiscard]] static Graph make_graph(std::unique_ptr<GraphState> state) noexcept;

    // Slices and views: the buffer behind them (null: an empty slice; for a view, checked not to be gone
    // in a library built with CUDARC_DEBUG_VIEWS, Note [Stable buffers]), a view made from its parts, and
    // a borrowed slice over a buffer of `count` elements.
    template <typename T>
    [[nodiscard]] static Buffer* buffer(DeviceSlice<T>& slice) noexcept;
    template <typename T>
    [[nodiscard]] static BufferHandle& handle(DeviceSlice<T>& slice) noexcept;
    template <typename T>
    [[nodiscard]] static Buffer* buffer(BorrowedSlice<T>& slice) noexcept;
    template <typename T>
    [[nodiscard]] static Buffer* buffer(const DeviceView<T>& view);
    template <typename T>
    [[nodiscard]] static DeviceView<T> make_view(Buffer* buffer, DevicePtr ptr, std::size_t size,
                                                 std::uint64_t generation) noexcept;
    // The same memory as elements of type U, `count` of them (as_bytes).
    template <typename U, typename T>
    [[nodiscard]] static DeviceView<U> retype(const DeviceView<T>& view, std::size_t count);
    template <typename T>
    [[nodiscard]] static BorrowedSlice<T> make_borrowed(BufferHandle buffer, std::size_t count) noexcept;
};

}  // namespace detail
}  // namespace cudarc

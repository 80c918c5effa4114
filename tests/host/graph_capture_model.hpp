// A model of the driver's stream-capture rules, as measured on the H200 (CUDA 13.0, driver 580; see
// docs/graphs.md), behind a sys::DriverApi table, so that the capture logic runs in host tests.
//
// Device memory is host memory; work outside a capture runs at once, in order. Inside a capture (thread-
// local mode) every stream operation becomes a node whose dependencies follow the driver's rules: a stream's
// next node depends on its last node and on the nodes of the events it waited for; an event recorded inside
// the capture carries the recording stream's dependencies; a stream outside the capture that waits for such
// an event joins the capture. The calls the driver refuses are refused the same way, and logged as
// violations (which tests expect to be empty):
//  - from the capturing thread: a stream or event query or synchronize, a context synchronize, cuMemAlloc
//    and cuMemFree (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the capture is invalidated);
//  - a captured stream waiting for an event recorded outside the capture without CU_EVENT_WAIT_EXTERNAL
//    (CUDA_ERROR_STREAM_CAPTURE_ISOLATION, invalidated);
//  - a wait for, or query of, an event last recorded inside a capture that has ended
//    (CUDA_ERROR_INVALID_VALUE).
// Ending a capture while a member stream's work is not joined into the origin fails with
// CUDA_ERROR_STREAM_CAPTURE_UNJOINED (not a violation: abandoning a capture may do it on purpose).
// cuGraphExecUpdate succeeds when the two graphs have the same nodes (kinds and dependencies), else reports
// a topology change. Events can be held pending (queries answer "not ready") to model work still running.
#pragma once

#include <cstddef>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "sys/driver_api.hpp"

namespace cudarc::test::capture_model {

struct Node {
    int id = 0;
    int stream = 0;      // the model's stream id
    std::string kind;    // "memset", "memcpy_htod", "memcpy_dtoh", "memcpy_dtod", "wait_external", "graph"
    std::set<int> deps;  // node ids (in the same graph)
    std::function<void()> action;
};

// The driver table over the model (one per process; the model is global).
[[nodiscard]] const sys::DriverApi& api();

// Forgets the log, the violations and the held events (objects in use stay valid).
void reset();
// Calls the driver refused, in words. Empty when cudarc made no illegal call.
[[nodiscard]] std::vector<std::string> violations();
// The nodes of the last capture that ended successfully.
[[nodiscard]] std::vector<Node> last_graph();
// Whether node `ancestor` precedes node `node` in `graph` (through dependencies).
[[nodiscard]] bool precedes(const std::vector<Node>& graph, int ancestor, int node);
// The model's id for a stream handle (streams are numbered as they are created).
[[nodiscard]] int stream_id(sys::Stream stream);
// Whether the stream is being captured (in the model).
[[nodiscard]] bool capturing(sys::Stream stream);
// Events recorded from now on stay pending (queries answer "not ready") until release_events().
void hold_events();
void release_events();
// How many times each entry point was called since reset() ("cuStreamWaitEvent", "cuGraphLaunch", ...).
[[nodiscard]] int calls(const std::string& entry_point);

}  // namespace cudarc::test::capture_model

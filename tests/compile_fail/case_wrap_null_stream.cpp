// expect-error: deleted function
#include "prelude.hpp"

// The literal nullptr names the legacy stream: Stream::wrap(device, nullptr) is deleted (stream.hpp).
cudarc::Stream wrong(const cudarc::Device& device) {
    return cudarc::Stream::wrap(device, nullptr);
}

// expect-error: NCCL cannot move this element type
#include <cstdint>

#include "cudarc/nccl.hpp"

void wrong(cudarc::Stream& stream, cudarc::nccl::Communicator& comm, cudarc::DeviceSlice<std::int16_t>& x) {
    comm.send(stream, x, 0);  // NCCL has no 16-bit integers
}

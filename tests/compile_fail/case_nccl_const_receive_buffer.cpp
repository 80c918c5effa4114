// expect-error: the receive buffer must be writable
#include "cudarc/nccl.hpp"

void wrong(cudarc::Stream& stream, cudarc::nccl::Communicator& comm, cudarc::DeviceSlice<float>& x,
           const cudarc::DeviceSlice<float>& y) {
    comm.all_reduce(stream, x, y);  // y is const: it cannot receive
}

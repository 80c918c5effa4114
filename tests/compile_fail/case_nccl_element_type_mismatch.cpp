// expect-error: the send and receive buffers must have the same element type
#include "cudarc/nccl.hpp"

void wrong(cudarc::Stream& stream, cudarc::nccl::Communicator& comm, const cudarc::DeviceSlice<float>& x,
           cudarc::DeviceSlice<double>& y) {
    comm.all_gather(stream, x, y);
}

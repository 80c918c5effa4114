// expect-error: a temporary slice would be freed before the collective runs
#include "cudarc/nccl.hpp"

void wrong(cudarc::Stream& stream, cudarc::nccl::Communicator& comm) {
    comm.all_reduce(stream, cudarc::DeviceSlice<float>::zeros(stream, 16));
}

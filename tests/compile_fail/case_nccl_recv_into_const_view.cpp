// expect-error: recv needs a writable buffer
#include "cudarc/nccl.hpp"

void wrong(cudarc::Stream& stream, cudarc::nccl::Communicator& comm, cudarc::DeviceView<const float> x) {
    comm.recv(stream, x, 0);
}

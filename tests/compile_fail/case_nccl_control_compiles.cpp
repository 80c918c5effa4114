// expect: compiles
// The control for the nccl_* cases: every accepted way to pass buffers to a collective compiles.
#include <cstdint>

#include "cudarc/nccl.hpp"

void control(cudarc::Stream& stream, cudarc::nccl::Communicator& comm, cudarc::DeviceSlice<float>& y,
             const cudarc::DeviceSlice<float>& x, cudarc::DeviceView<const float> xv,
             cudarc::DeviceView<float> yv, cudarc::DeviceSlice<cudarc::optim::bf16_bits>& b,
             cudarc::DeviceSlice<cudarc::optim::half_bits>& h, cudarc::DeviceSlice<std::int64_t>& i,
             cudarc::DeviceSlice<std::uint8_t>& u) {
    comm.all_reduce(stream, x, y);                                 // slices
    comm.all_reduce(stream, xv, yv, cudarc::nccl::ReduceOp::avg);  // views
    comm.all_reduce(stream, y.view(0, 4), y.view(4, 4));           // temporary views
    comm.all_reduce(stream, y);                                    // in place
    comm.all_reduce(stream, yv, cudarc::nccl::ReduceOp::max);      // in place, a view
    comm.all_reduce(stream, b, cudarc::nccl::ReduceOp::sum);       // bf16
    comm.all_reduce(stream, h);                                    // fp16
    comm.all_reduce(stream, i, cudarc::nccl::ReduceOp::prod);      // int64
    comm.broadcast(stream, x, y, 0);
    comm.broadcast(stream, u, 0);
    comm.reduce(stream, xv, y, 0, cudarc::nccl::ReduceOp::min);
    comm.all_gather(stream, x, y);
    comm.reduce_scatter(stream, x, yv);
    comm.send(stream, x, 1);
    comm.send(stream, y, 1);  // a writable buffer may be sent
    comm.recv(stream, y, 0);
    cudarc::nccl::Group group;
    group.end();
}

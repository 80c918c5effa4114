// expect-error: cudarc::launch: read-only buffer passed for a parameter the kernel writes
#include "prelude.hpp"

void wrong(cudarc::Stream& stream, const compile_fail::Saxpy& saxpy, cudarc::BorrowedSlice<const float>& y,
           cudarc::BorrowedSlice<float>& x) {
    cudarc::launch(stream, cudarc::LaunchConfig{1, 256}, saxpy, y, x, 2.0f,
                   16u);  // y borrows read-only memory, saxpy writes it
}

// A test seam: the NCCL table that sys::nccl() hands out can be replaced, as the driver's can
// (sys/driver_override.hpp). Internal to cudarc; only tests and testing targets (testing/fake_driver's
// FakeNccl) use it. See Note [NCCL override] in nccl_loader.cpp.
#pragma once

#include "sys/nccl/nccl_api.hpp"

namespace cudarc::sys {

// From now on nccl() and nccl_if_loaded() return `*api` (nullptr: the loaded libnccl again), and
// nccl_load_failure() is empty while a table is installed. Returns the table installed before. Install it
// before any communicator is made and remove it only after every communicator is gone; `*api` must outlive
// that use.
const NcclApi* set_nccl_override(const NcclApi* api) noexcept;

}  // namespace cudarc::sys

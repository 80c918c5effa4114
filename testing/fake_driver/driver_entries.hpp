// Every entry point of sys::DriverApi, in the table's order: the driver list itself (Note [One driver
// list]). The fake driver implements each one and the fault injector wraps each one, through
// X(member, "cuName", ...) macros that take the list's first two columns.
#pragma once

#include "sys/driver_entries.hpp"

#define CUDARC_DRIVER_ENTRIES(X) CUDARC_SYS_DRIVER_ENTRIES(X)

// cudarc — the umbrella header.
#pragma once

#include "cudarc/copy.hpp"
#include "cudarc/counters.hpp"
#include "cudarc/device.hpp"
#include "cudarc/error.hpp"
#include "cudarc/event.hpp"
#include "cudarc/pinned.hpp"
#include "cudarc/slice.hpp"
#include "cudarc/stream.hpp"

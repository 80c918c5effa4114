// cudarc — the umbrella header.
#pragma once

#include "cudarc/copy.hpp"
#include "cudarc/counters.hpp"
#include "cudarc/device.hpp"
#include "cudarc/error.hpp"
#include "cudarc/event.hpp"
#include "cudarc/graph.hpp"
#include "cudarc/kernel.hpp"
#include "cudarc/launch.hpp"
#include "cudarc/launch_config.hpp"
#include "cudarc/module.hpp"
#include "cudarc/nccl.hpp"
#include "cudarc/optim/optimizer.hpp"
#include "cudarc/pinned.hpp"
#include "cudarc/slice.hpp"
#include "cudarc/stream.hpp"

// cudarc — the umbrella header. (cudarc/fmt.hpp, the fmt formatters, is opt-in and not included here.)
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
#include "cudarc/optim/optimizer.hpp"
#include "cudarc/pinned.hpp"
#include "cudarc/slice.hpp"
#include "cudarc/stream.hpp"
#include "cudarc/version.hpp"

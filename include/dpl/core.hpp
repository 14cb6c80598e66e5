#pragma once
// Umbrella header: errors, element types, devices (and CUDA device control), shapes, random
// numbers, threads, the clock.
#include "dpl/config.hpp"
#include "dpl/core/clock.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/core/device.hpp"
#include "dpl/core/dtype.hpp"
#include "dpl/core/error.hpp"
#include "dpl/core/random.hpp"
#include "dpl/core/shape.hpp"
#include "dpl/core/threads.hpp"

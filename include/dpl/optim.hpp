#pragma once
// Umbrella header: optimizers, gradient clipping, learning-rate schedules and mixed precision.
#include "dpl/optim/clipping.hpp"
#include "dpl/optim/mixed_precision.hpp"
#include "dpl/optim/optimizer.hpp"
#include "dpl/optim/rules.hpp"
#include "dpl/optim/schedule.hpp"

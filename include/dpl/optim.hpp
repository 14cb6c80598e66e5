#pragma once
// Umbrella header: optimizers, gradient clipping and learning-rate schedules.
#include "dpl/optim/clipping.hpp"
#include "dpl/optim/optimizer.hpp"
#include "dpl/optim/schedule.hpp"

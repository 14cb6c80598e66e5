#pragma once
// Umbrella header: optimizers and learning-rate schedules.
#include "dpl/optim/optimizer.hpp"
#include "dpl/optim/schedule.hpp"

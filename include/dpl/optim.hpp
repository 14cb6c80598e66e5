#pragma once
// Umbrella header: optimizers.
#include "dpl/optim/optimizer.hpp"

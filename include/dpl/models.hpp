#pragma once
// Umbrella header: ready-made models built from the nn layers.
#include "dpl/models/gpt2.hpp"
#include "dpl/models/resnet.hpp"

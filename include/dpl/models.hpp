#pragma once
// Umbrella header: ready-made models built from the nn layers.
#include "dpl/models/resnet.hpp"

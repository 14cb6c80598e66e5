#pragma once
// Umbrella header: safetensors files and model weights in them.
#include "dpl/serialize/safetensors.hpp"
#include "dpl/serialize/weights.hpp"

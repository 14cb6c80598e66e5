#pragma once
// Umbrella header: modules, layers and parameter arenas.
#include "dpl/autograd.hpp"
#include "dpl/nn/any_module.hpp"
#include "dpl/nn/activations.hpp"
#include "dpl/nn/arena.hpp"
#include "dpl/nn/conv.hpp"
#include "dpl/nn/embedding.hpp"
#include "dpl/nn/layers.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/nn/normalization.hpp"
#include "dpl/nn/options.hpp"
#include "dpl/nn/pooling.hpp"
#include "dpl/nn/summary.hpp"

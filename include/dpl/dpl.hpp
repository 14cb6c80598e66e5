#pragma once
// Everything dpl offers, in one include.
#include "dpl/autograd.hpp"
#include "dpl/core.hpp"
#include "dpl/nn.hpp"
#include "dpl/optim.hpp"
#include "dpl/tensor.hpp"

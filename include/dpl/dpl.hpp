#pragma once
// Everything dpl offers, in one include.
#include "dpl/autograd.hpp"
#include "dpl/comm.hpp"
#include "dpl/core.hpp"
#include "dpl/data.hpp"
#include "dpl/models.hpp"
#include "dpl/nn.hpp"
#include "dpl/optim.hpp"
#include "dpl/parallel.hpp"
#include "dpl/profile.hpp"
#include "dpl/serialize.hpp"
#include "dpl/tensor.hpp"
#include "dpl/train.hpp"

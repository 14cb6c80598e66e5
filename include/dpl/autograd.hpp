#pragma once
// Umbrella header: variables, define-by-run graph, differentiable ops.
#include "dpl/autograd/node.hpp"
#include "dpl/autograd/ops.hpp"
#include "dpl/autograd/variable.hpp"
#include "dpl/tensor.hpp"

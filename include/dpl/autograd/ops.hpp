#pragma once
// Differentiable ops, one header per family under dpl/autograd/ops/. Each op runs on the inputs'
// device and records itself for backward when an input requires a gradient. Shape or dtype
// mismatches throw dpl::Error naming the op, the operand and the expected and received values;
// operands are broadcast only where an op's doc says so (binary maps, where: PyTorch's rules).
//
// Float inputs may be float32, bfloat16 or float16, the same for every operand of an op; results
// and gradients have the inputs' dtype, and 16-bit math is computed in float32 and rounded once
// per kernel.

#include "dpl/autograd/ops/attention.hpp"
#include "dpl/autograd/ops/batch_norm.hpp"
#include "dpl/autograd/ops/checkpoint.hpp"
#include "dpl/autograd/ops/conv_pool.hpp"
#include "dpl/autograd/ops/elementwise.hpp"
#include "dpl/autograd/ops/indexing.hpp"
#include "dpl/autograd/ops/linear.hpp"
#include "dpl/autograd/ops/loss.hpp"
#include "dpl/autograd/ops/normalization.hpp"
#include "dpl/autograd/ops/reduction.hpp"
#include "dpl/autograd/ops/shape.hpp"

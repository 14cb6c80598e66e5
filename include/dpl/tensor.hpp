#pragma once
// Umbrella header: storage and tensors.
#include "dpl/core.hpp"
#include "dpl/tensor/storage.hpp"
#include "dpl/tensor/tensor.hpp"
#include "dpl/tensor/tensor_ops.hpp"

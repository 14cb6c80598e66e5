#pragma once
// Umbrella header: data-parallel training.
#include "dpl/comm.hpp"
#include "dpl/parallel/gradient_reducer.hpp"
#include "dpl/parallel/multi_node_optimizer.hpp"
#include "dpl/parallel/sync_batch_norm.hpp"
#include "dpl/profile.hpp"

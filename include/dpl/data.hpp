#pragma once
// Umbrella header: IDX/MNIST loading, in-memory data sets, scattering over ranks, mini-batches.
#include "dpl/data/batch_iterator.hpp"
#include "dpl/data/dataset.hpp"
#include "dpl/data/idx.hpp"
#include "dpl/data/scatter.hpp"

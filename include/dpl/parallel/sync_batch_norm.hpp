#pragma once
// Synchronised BatchNorm: the BatchNorm layers of a model normalise with the statistics of every
// rank's batch together (nn::BatchNormBase::synchronize_statistics over a communicator).

#include <cstddef>
#include <memory>

#include "dpl/comm/communicator.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::parallel {

/// Makes every BatchNorm1d and BatchNorm2d of model (at any depth) synchronise its training
/// statistics over comm's ranks, in place (PyTorch's convert_sync_batchnorm returns a new model;
/// here the layers keep their parameters, buffers and names, so weights and checkpoints load as
/// before). A null comm, or one rank, makes them local again. Returns how many layers it changed.
/// Every rank must convert the same model and then run the same forwards and backwards in the
/// same order: each training forward of such a layer is a collective (one sum of 2C+1 floats),
/// and so is its backward. Not for a step recorded in a CUDA graph, nor (yet) with the allreduce
/// overlapped with backward, whose worker thread would interleave its collectives with these.
std::size_t convert_sync_batchnorm(nn::Module& model, std::shared_ptr<comm::Communicator> comm);

}  // namespace dpl::parallel

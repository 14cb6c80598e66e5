#pragma once
// The optimizer state each rank keeps, printed by rank 0 once the optimizer is set up: with
// sharded state (--zero 1 or 2) about 1/p of one process's unsharded state per rank.

#include <cstdint>
#include <iostream>
#include <string>

#include "dpl/comm/communicator.hpp"
#include "dpl/parallel/multi_node_optimizer.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::examples {

/// Collective over the optimizer's communicator: rank 0 prints this rank's bytes of optimizer
/// state and all ranks' together, e.g. "optimizer state: 531288 bytes on rank 0, 1593856 on all 3
/// rank(s) together (sharded, ZeRO stage 1)".
inline void print_optimizer_state_bytes(const parallel::MultiNodeOptimizer& optimizer) {
  comm::Communicator& comm = optimizer.communicator();
  Tensor bytes = Tensor::from_vector<std::int64_t>({optimizer.optimizer_state_bytes()}, {1});
  const std::int64_t mine = bytes.to_vector<std::int64_t>()[0];
  comm.allreduce(bytes, comm::ReduceOp::kSum);
  if (comm.rank() == 0)
    std::cout << "optimizer state: " << mine << " bytes on rank 0, " << bytes.to_vector<std::int64_t>()[0] << " on all "
              << comm.size() << " rank(s) together ("
              << (optimizer.shards_optimizer_state() ? "sharded, ZeRO stage " + std::to_string(optimizer.zero_stage())
                                                     : std::string("a copy on each"))
              << ")" << std::endl;
}

}  // namespace dpl::examples

#!/usr/bin/env bash
# The main job: installs dependencies, builds dpl and trains the MNIST MLP on Fashion-MNIST
# with data-parallel Adam under mpiexec. Arguments go to train_mnist (default: 20 epochs).
# DPL_NP sets the number of processes (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
source scripts/env.sh
# Only the library and the example: the tests and benchmarks are scripts/test.sh's to build, and
# building them first is most of the wait for the first epoch on a fresh machine.
DPL_FETCH_CUDNN_FRONTEND=0 DPL_FETCH_CUTLASS=0 DPL_TARGETS=train_mnist bash scripts/build.sh
np=${DPL_NP:-2}
# --bind-to none: OpenMPI pins each rank to one core when -n <= 2, which would stop a rank's
# threads from spreading over the cores dpl assigns it.
exec mpiexec -n "$np" --bind-to none "$DPL_BUILD_DIR/examples/mnist/train_mnist" "$@"

# Sourced by the scripts: finds the CUDA compiler when the toolkit is installed off the PATH,
# lets mpiexec run as root (containers, CI) and picks the build folder.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
DPL_BUILD_DIR=${DPL_BUILD_DIR:-build}
DPL_JOBS=${DPL_JOBS:-$(nproc)}

# dpl_bench_setup <target> <folder>: for the benchmark scripts, brings one target of the existing
# build folder up to date (or fails saying how to make the folder) and creates OUT (default
# <build folder>/<folder>) for the logs.
dpl_bench_setup() {
  if [ ! -d "$DPL_BUILD_DIR" ]; then
    echo "$(basename "$0"): no build folder '$DPL_BUILD_DIR'; run scripts/build.sh first" >&2
    exit 1
  fi
  cmake --build "$DPL_BUILD_DIR" -j "$DPL_JOBS" --target "$1" >/dev/null
  OUT=${OUT:-$DPL_BUILD_DIR/$2}
  mkdir -p "$OUT"
}

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

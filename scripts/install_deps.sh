#!/usr/bin/env bash
# Installs what dpl needs to build, test and run its examples on Debian or Ubuntu.
# Safe to run again: packages already present are not touched. Needs root (or sudo).
# Arguments name further packages a script needs beyond these (clang for scripts/fuzz.sh).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libeigen3-dev libopenblas-openmp-dev zlib1g-dev libdnnl-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev
  libturbojpeg0-dev  # JPEG decoding for the image pipeline (optional: without it JPEG calls raise an error)
  libpng-dev  # PNG decoding for the image pipeline (optional: without it a PNG image raises an error)
  dataset-fashion-mnist
  python3 python3-numpy  # the safetensors test checks files against a reader and writer in numpy
  python3-pip  # fetches the headers of cuDNN's frontend (scripts/fetch_cudnn_frontend.sh) on machines with CUDA
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

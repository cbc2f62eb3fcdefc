#!/usr/bin/env bash
# Configures and builds posenc against one LibTorch into build/<flavour>.
#
#   scripts/build.sh debian|pip [extra CMake arguments...]
#
# Run scripts/setup.sh first. The pip build compiles CUDA code for TORCH_CUDA_ARCH_LIST (default
# here: 9.0, the H100/H200; a machine with a GPU may set it to its own architecture).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
flavour=${1:?usage: scripts/build.sh debian|pip [cmake args...]}
shift

args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DPOSENC_BUILD_TESTS=ON)
case "$flavour" in
  debian) args+=(-DPython3_EXECUTABLE=/usr/bin/python3) ;;
  pip)
    prefix=$("$root/.venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    args+=("-DCMAKE_PREFIX_PATH=$prefix" "-DPython3_EXECUTABLE=$root/.venv/bin/python")
    export PATH="$PATH:/usr/local/cuda/bin"
    export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
    ;;
  *) echo "build.sh: unknown flavour '$flavour' (expected debian or pip)" >&2; exit 2 ;;
esac

mkdir -p "$root/build"
cmake -S "$root" -B "$root/build/$flavour" "${args[@]}" "$@" >"$root/build/$flavour.configure.log" 2>&1 || {
  cat "$root/build/$flavour.configure.log"; exit 1; }
cmake --build "$root/build/$flavour" -j "$(nproc)"

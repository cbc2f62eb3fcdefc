#!/usr/bin/env bash
# Installs what posenc needs to build and test, on Debian 12 (as root, or with sudo).
#
#   scripts/setup.sh [debian] [pip]     (no argument: both)
#
# debian: Debian's LibTorch 1.13 (libtorch-dev, CPU only) and python3-torch for /usr/bin/python3.
# pip:    torch==2.11.0 from PyPI in the project-local virtual environment .venv (its LibTorch is
#         a CUDA build, so configuring against it needs the CUDA toolkit, i.e. nvcc, installed).
# Both:   the compilers and libraries of the build (CMake, Ninja, GoogleTest, Google Benchmark,
#         CLI11, cairo, Doxygen for the API reference, clang for the sanitizer and fuzzing
#         builds). Safe to run again: only what is missing is installed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
flavours=("$@")
[ ${#flavours[@]} -gt 0 ] || flavours=(debian pip)

common=(build-essential cmake ninja-build git pkg-config libcli11-dev libgtest-dev googletest
  libbenchmark-dev nlohmann-json3-dev libcairo2-dev libpng-dev doxygen clang libclang-rt-14-dev libomp-14-dev valgrind python3 python3-venv)
# OpenBLAS replaces the reference BLAS that libtorch-dev pulls in (update-alternatives): about 9x
# faster matrix products for Debian's LibTorch.
debian=(libtorch-dev libopenblas0-pthread python3-torch python3-numpy python3-pytest)

packages=("${common[@]}")
for flavour in "${flavours[@]}"; do
  case "$flavour" in
    debian) packages+=("${debian[@]}") ;;
    pip) ;;
    *) echo "setup.sh: unknown flavour '$flavour' (expected debian or pip)" >&2; exit 2 ;;
  esac
done

transformers_version=5.23.0
diffusers_version=0.42.1
timm_version=1.0.31
# safetensors: the reference of test_safetensors.py (the version transformers brings, pinned).
safetensors_version=0.8.0
# timm pulls torchvision; 0.26.0 is the one built for torch 2.11 (a newer one would upgrade torch)
torchvision_version=0.26.0
# ONNX export (posenc.onnx, test_onnx.py): onnxscript translates, ONNX Runtime is the reference runtime
onnx_version=1.23.2
onnxscript_version=0.7.2
onnxruntime_version=1.32.0
# builds the Python package (pip install --no-build-isolation ., pyproject.toml)
scikit_build_core_version=0.11.6
# Counts the lines of each function for scripts/check_function_length.py (ctest architecture.function_length).
lizard_version=1.24.3

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

for flavour in "${flavours[@]}"; do
  [ "$flavour" = pip ] || continue
  venv="$root/.venv"
  if ! "$venv/bin/python" -c "import sys, torch, numpy, pytest; sys.exit(torch.__version__.split('+')[0] != '2.11.0')" 2>/dev/null; then
    echo "setup: creating $venv with torch==2.11.0 (about 5 GB, a few minutes)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check torch==2.11.0 numpy pytest
  fi
  # The libraries posenc is compared with, pinned (their own code is the reference of the tests
  # that name them); torch is pinned alongside so that no dependency can upgrade it.
  if ! "$venv/bin/python" -c "import sys, transformers; sys.exit(transformers.__version__ != '$transformers_version')" 2>/dev/null; then
    echo "setup: installing transformers==$transformers_version"
    "$venv/bin/pip" install --quiet --disable-pip-version-check torch==2.11.0 "transformers==$transformers_version"
  fi
  if ! "$venv/bin/python" -c "import sys, diffusers, timm; sys.exit(diffusers.__version__ != '$diffusers_version' or timm.__version__ != '$timm_version')" 2>/dev/null; then
    echo "setup: installing diffusers==$diffusers_version timm==$timm_version torchvision==$torchvision_version"
    "$venv/bin/pip" install --quiet --disable-pip-version-check torch==2.11.0 "torchvision==$torchvision_version" \
      "diffusers==$diffusers_version" "timm==$timm_version"
  fi
  if ! "$venv/bin/python" -c "import sys, scikit_build_core as s; sys.exit(s.__version__ != '$scikit_build_core_version')" 2>/dev/null; then
    echo "setup: installing scikit-build-core==$scikit_build_core_version"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "scikit-build-core==$scikit_build_core_version"
  fi
  if ! "$venv/bin/python" -c "import sys, importlib.metadata as m; sys.exit([m.version(p) for p in ('onnx', 'onnxscript', 'onnxruntime')] != ['$onnx_version', '$onnxscript_version', '$onnxruntime_version'])" 2>/dev/null; then
    echo "setup: installing onnx==$onnx_version onnxscript==$onnxscript_version onnxruntime==$onnxruntime_version"
    "$venv/bin/pip" install --quiet --disable-pip-version-check torch==2.11.0 "onnx==$onnx_version" \
      "onnxscript==$onnxscript_version" "onnxruntime==$onnxruntime_version"
  fi
  if ! "$venv/bin/python" -c "import sys, importlib.metadata as m; sys.exit(m.version('lizard') != '$lizard_version')" 2>/dev/null; then
    echo "setup: installing lizard==$lizard_version"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "lizard==$lizard_version"
  fi
  if ! "$venv/bin/python" -c "import sys, importlib.metadata as m; sys.exit(m.version('safetensors') != '$safetensors_version')" 2>/dev/null; then
    echo "setup: installing safetensors==$safetensors_version"
    "$venv/bin/pip" install --quiet --disable-pip-version-check torch==2.11.0 "safetensors==$safetensors_version"
  fi
  "$venv/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '2.11.0')" || {
    echo "setup: torch in $venv is not 2.11.0 any more; remove $venv and run setup again" >&2; exit 1; }
  if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup: warning: no CUDA toolkit (nvcc) found; pip's LibTorch is a CUDA build and CMake needs the toolkit to use it" >&2
  fi
done
echo "setup: ready (${flavours[*]})"

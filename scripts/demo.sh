#!/usr/bin/env bash
# The main job: sets up the minimum (Debian's LibTorch), builds the posenc program and runs
# `posenc demo`: a small transformer trained to reverse sequences with no positional encoding and
# with the sinusoidal, learned and rotary ones, then the result table. The figures of the encoding
# go to build/figures. About 4 minutes on a fresh 2-core machine, 1 to 2 of them training.
#
#   scripts/demo.sh [posenc demo options, e.g. --seed 1 --steps 1500 --device cuda]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh" debian
mkdir -p "$root/build"
"$root/scripts/build.sh" debian -DPOSENC_BUILD_TESTS=OFF >/dev/null
"$root/build/debian/bin/posenc" demo --plots "$root/build/figures" "$@"

#!/usr/bin/env bash
# Sets up the minimum (Debian's LibTorch), builds the posenc program and runs the main job:
# the sinusoidal table of the first seed document (8 positions, width 6).
#
#   scripts/demo.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh" debian
mkdir -p "$root/build"
"$root/scripts/build.sh" debian -DPOSENC_BUILD_TESTS=OFF >/dev/null
"$root/build/debian/bin/posenc" table --max-len 8 --d-model 6

#!/usr/bin/env bash
# Sets everything up, builds posenc against both LibTorch versions and runs every test.
#
#   scripts/test.sh             # both: Debian's LibTorch 1.13 and pip's torch 2.11
#   scripts/test.sh debian      # only one of them
#
# Exits non-zero if any build or test fails. This is what CI runs (.ci/run).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
flavours=("$@")
[ ${#flavours[@]} -gt 0 ] || flavours=(debian pip)

"$root/scripts/setup.sh" "${flavours[@]}"
mkdir -p "$root/build"

summary=()
status=0
for flavour in "${flavours[@]}"; do
  echo "=== $flavour: build"
  start=$SECONDS
  "$root/scripts/build.sh" "$flavour"
  built=$((SECONDS - start))
  echo "=== $flavour: test"
  start=$SECONDS
  if ctest --test-dir "$root/build/$flavour" --output-on-failure -j "$(nproc)"; then
    result=passed
  else
    result=FAILED
    status=1
  fi
  summary+=("$flavour: build ${built}s, tests ${result} in $((SECONDS - start))s")
done

echo "=== summary"
printf '%s\n' "${summary[@]}"
exit $status

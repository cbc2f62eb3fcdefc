#!/usr/bin/env bash
# Sets everything up, builds posenc against both LibTorch versions, runs every test, then the
# reliability checks (sanitizers, fuzzing, valgrind; scripts/sanitize.sh).
#
#   scripts/test.sh                 # all: debian, pip, sanitize
#   scripts/test.sh debian          # some of them: debian (LibTorch 1.13), pip (torch 2.11),
#   scripts/test.sh pip sanitize    #   sanitize (the reliability checks, on Debian's LibTorch)
#
# Exits non-zero if any build or test fails. This is what CI runs (.ci/run).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
flavours=("$@")
[ ${#flavours[@]} -gt 0 ] || flavours=(debian pip sanitize)

setup=()
for flavour in "${flavours[@]}"; do
  case "$flavour" in
    debian|sanitize) setup+=(debian) ;;
    pip) setup+=(pip) ;;
    *) echo "test.sh: unknown flavour '$flavour' (expected debian, pip or sanitize)" >&2; exit 2 ;;
  esac
done
"$root/scripts/setup.sh" $(printf '%s\n' "${setup[@]}" | sort -u)
mkdir -p "$root/build"

summary=()
status=0
for flavour in "${flavours[@]}"; do
  start=$SECONDS
  if [ "$flavour" = sanitize ]; then
    echo "=== sanitize: ASan+UBSan suite, fuzzing, TSan, valgrind"
    if "$root/scripts/sanitize.sh"; then result=passed; else result=FAILED; status=1; fi
    summary+=("sanitize: ${result} in $((SECONDS - start))s")
    continue
  fi
  echo "=== $flavour: build"
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

#!/usr/bin/env bash
# Sets everything up, builds posenc against both LibTorch versions, runs every test, then the
# reliability checks (sanitizers, fuzzing, valgrind; scripts/sanitize.sh).
#
#   scripts/test.sh                 # all: debian, pip, newest, sanitize
#   scripts/test.sh debian          # some of them: debian (LibTorch 1.13), pip (torch 2.11),
#   scripts/test.sh pip sanitize    #   newest (the newest torch on PyPI: wheel, CMake package and
#                                   #   the test subset of scripts/torch_matrix.py, no CUDA toolkit),
#                                   #   sanitize (the reliability checks, on Debian's LibTorch)
#
# Exits non-zero if any build or test fails. This is what CI runs (.ci/run).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
flavours=("$@")
[ ${#flavours[@]} -gt 0 ] || flavours=(debian pip newest sanitize)

setup=()
for flavour in "${flavours[@]}"; do
  case "$flavour" in
    debian|sanitize) setup+=(debian) ;;
    pip|newest) setup+=(pip) ;;
    *) echo "test.sh: unknown flavour '$flavour' (expected debian, pip, newest or sanitize)" >&2; exit 2 ;;
  esac
done
start=$SECONDS
"$root/scripts/setup.sh" $(printf '%s\n' "${setup[@]}" | sort -u)
mkdir -p "$root/build"
summary=("setup: $((SECONDS - start))s")

status=0
for flavour in "${flavours[@]}"; do
  start=$SECONDS
  if [ "$flavour" = sanitize ]; then
    echo "=== sanitize: ASan+UBSan suite, fuzzing, TSan, valgrind"
    if "$root/scripts/sanitize.sh"; then result=passed; else result=FAILED; status=1; fi
    summary+=("sanitize: ${result} in $((SECONDS - start))s")
    continue
  fi
  if [ "$flavour" = newest ]; then
    # A torch release newer than the pinned one breaking the build shows at the next landing.
    echo "=== newest: the newest torch on PyPI (scripts/torch_matrix.py --versions newest --ci)"
    if python3 "$root/scripts/torch_matrix.py" --versions newest --routes no-toolkit --ci --upgrade; then
      result=passed
    else
      result=FAILED
      status=1
    fi
    summary+=("newest: ${result} in $((SECONDS - start))s")
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

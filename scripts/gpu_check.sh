#!/usr/bin/env bash
# Proves and measures posenc's CUDA path on a machine with an NVIDIA GPU, in one command
# (docs/gpu_check.md):
#
#   scripts/gpu_check.sh              # the check; the report in build/gpu_check/ (and $OUT/ if set)
#   scripts/gpu_check.sh --dry-run    # prints the steps it would run, runs nothing
#   scripts/gpu_check.sh --prepare    # on the development machine: fills .deps/ for the GPU machine
#
# The steps, ordered so that what matters most is done first should the time run out:
#   configure, build   the CUDA flavour into build/gpu (Release, tests on, TORCH_CUDA_ARCH_LIST from
#                      the GPU unless set; the C++ benchmark too where Google Benchmark is installed)
#   cuda-tests         the *_CUDA tests alone (ctest -R), the first proof
#   benchmark          bench/cuda_benchmark.py, with the GPU to itself
#   profile            Nsight Compute's reading of each posenc kernel and of copy_'s at the prefill
#                      shape (duration, DRAM and SM throughput as % of peak, registers), where ncu is
#                      installed
#   ctest              every test, side by side with
#   sanitizer-*        compute-sanitizer memcheck, racecheck and initcheck over the *_CUDA tests of
#                      each test binary that has them
#   cuda-tests-ran     fails if a *_CUDA test was skipped (or did not pass) in the full run
# all within GPU_CHECK_BUDGET_S seconds (default 570: the GPU machine runs one command for 10 minutes
# at most); a step that would start later is reported as not run.
#
# Exit status: 0 every step passed; 1 a step failed (build/gpu_check/report.md says which); 2 this
# machine cannot run the check (no GPU, no torch with CUDA, no nvcc, ...): one line says why, and
# nothing was built.
#
# What a GPU machine without Debian's packages lacks, the caller carries in .deps/ (git-ignored),
# filled by --prepare from this machine's Debian 12 packages (scripts/setup.sh installs them):
#   .deps/googletest   GoogleTest's sources (Debian's /usr/src/googletest), built with the tests
#   .deps/sysroot      CLI11 and nlohmann-json (headers and CMake packages), cairo (headers, library,
#                      the libraries it loads, a pkg-config file) and pkgconf: a build with tests
#                      needs all of them (src/CMakeLists.txt, src/io, test/CMakeLists.txt)
#   .deps/wheels       the reference libraries at the versions scripts/setup.sh pins (transformers,
#                      diffusers, timm: pure-Python wheels from PyPI); the check installs those whose
#                      version the machine lacks into build/gpu_check/site, on PYTHONPATH, so that
#                      the tests compare with what they are written against
# Of the carried shared libraries, only those the machine lacks go on LD_LIBRARY_PATH.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=check
case "${1:-}" in
  "") ;;
  --dry-run) mode=dry-run ;;
  --prepare) mode=prepare ;;
  *) echo "usage: scripts/gpu_check.sh [--dry-run | --prepare]" >&2; exit 2 ;;
esac
build="$root/build/gpu"
report_dir="$root/build/gpu_check"
deps="$root/.deps"
sysroot="$deps/sysroot"
jobs=$(nproc)
deadline=$((SECONDS + ${GPU_CHECK_BUDGET_S:-570}))

# --- --prepare: .deps/ from this machine's packages ----------------------------------------------

# Copies the shared libraries that each file loads (ldd) into the sysroot, except the C library's.
copy_libraries() {
  local file lib
  for file in "$@"; do
    ldd "$file" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
      case "${lib##*/}" in
        libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*) ;;
        *) cp -L "$lib" "$sysroot/lib/" ;;
      esac
    done
  done
}

prepare() {
  local libdir=/usr/lib/x86_64-linux-gnu path
  for path in /usr/src/googletest/CMakeLists.txt /usr/include/CLI/CLI.hpp /usr/share/cmake/CLI11 \
      /usr/include/nlohmann/json.hpp /usr/share/cmake/nlohmann_json /usr/include/cairo/cairo.h \
      "$libdir/libcairo.so.2" /usr/bin/pkgconf; do
    [ -e "$path" ] || { echo "gpu_check: $path is missing here; run scripts/setup.sh first" >&2; exit 2; }
  done
  rm -rf "$deps/googletest" "$sysroot"
  mkdir -p "$sysroot/include" "$sysroot/lib/pkgconfig" "$sysroot/share/cmake" "$sysroot/bin"
  # GoogleTest's sources as Debian installs them: the top CMakeLists.txt that
  # cmake/posencGTest.cmake adds (POSENC_GOOGLETEST_SOURCE_DIR), with googletest/ and googlemock/.
  cp -r /usr/src/googletest "$deps/googletest"
  # Header-only libraries; their CMake packages find the headers relative to themselves.
  cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/cairo "$sysroot/include/"
  cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$sysroot/share/cmake/"
  # cairo: the library, what it loads, and a pkg-config file of the library alone (Debian's
  # cairo.pc names a dozen -dev packages in Requires.private, needed for static links only).
  cp -L "$libdir/libcairo.so.2" "$sysroot/lib/"
  ln -s libcairo.so.2 "$sysroot/lib/libcairo.so"
  copy_libraries "$libdir/libcairo.so.2" /usr/bin/pkgconf
  cat >"$sysroot/lib/pkgconfig/cairo.pc" <<EOF
prefix=\${pcfiledir}/../..
includedir=\${prefix}/include
libdir=\${prefix}/lib

Name: cairo
Description: cairo from Debian 12, carried by scripts/gpu_check.sh --prepare
Version: $(pkg-config --modversion cairo)
Libs: -L\${libdir} -lcairo
Cflags: -I\${includedir}/cairo
EOF
  # pkgconf, for a machine without pkg-config (CMake's FindPkgConfig).
  cp /usr/bin/pkgconf "$sysroot/bin/pkg-config"
  # The pinned reference libraries, without their dependencies (a GPU machine has those).
  local pip_python=python3 pins=() package
  [ ! -x "$root/.venv/bin/python" ] || pip_python="$root/.venv/bin/python"
  for package in transformers diffusers timm; do
    pins+=("$package==$(sed -n "s/^${package}_version=//p" "$root/scripts/setup.sh")")
  done
  rm -rf "$deps/wheels"
  "$pip_python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$deps/wheels" "${pins[@]}"
  dpkg-query -W googletest libcli11-dev nlohmann-json3-dev libcairo2-dev pkgconf >"$deps/manifest.txt"
  printf '%s\n' "${pins[@]}" >>"$deps/manifest.txt"
  echo "gpu_check: .deps ready ($(du -sh "$deps" | cut -f1)): carry .deps to the GPU machine and run scripts/gpu_check.sh there"
}

if [ "$mode" = prepare ]; then
  prepare
  exit 0
fi

# --- what this machine has ---------------------------------------------------------------------

# The Python whose torch is a CUDA build: the project's .venv, else python3.
find_python() {
  local candidate
  for candidate in "$root/.venv/bin/python" python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
        "$candidate" -c 'import sys, torch; sys.exit(torch.version.cuda is None)' 2>/dev/null; then
      command -v "$candidate"
      return
    fi
  done
}

# The first of the arguments that is an executable file, or the command found on PATH.
find_tool() {
  local name=$1 candidate
  shift
  command -v "$name" 2>/dev/null && return
  for candidate in "$@"; do
    [ -x "$candidate" ] && { echo "$candidate"; return; }
  done
  return 0
}

# Whether a CMake package NAME is installed under the usual prefixes (lib/<arch>/cmake/NAME).
has_cmake_package() {
  find /usr/lib /usr/lib64 /usr/local/lib /usr/local/lib64 -maxdepth 4 -path "*/cmake/$1/*" \
    \( -name "$1Config.cmake" -o -name "$1-config.cmake" \) 2>/dev/null | grep -q .
}

# Whether the system has a shared library by this file name (the dynamic loader's cache or its
# usual folders).
system_has_library() {
  { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true; } | grep -q "^[[:space:]]*$1 " && return
  local dir
  for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /usr/local/lib; do
    [ -e "$dir/$1" ] && return
  done
  return 1
}

python=$(find_python)
nvcc=$(find_tool nvcc /usr/local/cuda/bin/nvcc)
# The toolkit's folder as nvcc itself names it (TOP), which holds for a wrapper script too.
cuda_home=""
if [ -n "$nvcc" ]; then
  cuda_home=$(readlink -f "$("$nvcc" --dryrun -c -x cu /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p')" || true)
  [ -n "$cuda_home" ] || cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
fi
ncu=$(find_tool ncu "$cuda_home/bin/ncu" /opt/nvidia/nsight-compute/*/ncu)
sanitizer=$(find_tool compute-sanitizer "$cuda_home/bin/compute-sanitizer" "$cuda_home/compute-sanitizer/compute-sanitizer")
# "name, compute capability" of the first GPU (nvidia-smi says "No devices were found" and fails
# where it has none).
gpu=""
if listing=$(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null); then
  gpu=$(echo "$listing" | grep -m 1 ', ' || true)
fi
if [ -z "$gpu" ] && [ -n "$python" ]; then
  gpu=$("$python" -c 'import torch
if torch.cuda.is_available():
    print(torch.cuda.get_device_name(), "%d.%d" % torch.cuda.get_device_capability(), sep=", ")' 2>/dev/null || true)
fi

# Why the check cannot run here (empty: it can), in the order a person would fix it.
reason=""
if [ -z "$gpu" ]; then
  reason="no NVIDIA GPU here (nvidia-smi lists none, and no torch sees one)"
elif [ -z "$python" ]; then
  reason="no Python with a CUDA build of torch (.venv/bin/python or python3)"
elif [ -z "$nvcc" ]; then
  reason="no CUDA toolkit (nvcc on PATH or in /usr/local/cuda/bin)"
elif ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
  reason="CMake and Ninja are needed"
elif [ ! -f "$deps/googletest/CMakeLists.txt" ] && [ ! -f /usr/src/googletest/CMakeLists.txt ] && ! has_cmake_package GTest; then
  reason="no GoogleTest: run scripts/gpu_check.sh --prepare on the development machine and carry .deps"
elif [ ! -d "$sysroot" ] && ! pkg-config --exists cairo 2>/dev/null; then
  reason="no cairo, CLI11, nlohmann-json: run scripts/gpu_check.sh --prepare on the development machine and carry .deps"
fi

# The build's settings.
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$(echo "$gpu" | awk -F', ' '{print $2}')}
gtest=()
if [ -f "$deps/googletest/CMakeLists.txt" ]; then
  gtest=(-DPOSENC_GTEST_FROM_SOURCE=ON "-DPOSENC_GOOGLETEST_SOURCE_DIR=$deps/googletest")
fi
prefix_path="<torch's CMake prefix>"
if [ -n "$python" ]; then
  prefix_path=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
fi
[ ! -d "$sysroot" ] || prefix_path="$prefix_path;$sysroot"
cpp_benchmark=OFF
has_cmake_package benchmark && cpp_benchmark=ON
configure=(cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPOSENC_BUILD_TESTS=ON -DPOSENC_TEST_PER_CASE=ON
  -DPOSENC_CUDA=ON "-DPOSENC_BUILD_BENCHMARKS=$cpp_benchmark" "-DCMAKE_PREFIX_PATH=$prefix_path"
  "-DPython3_EXECUTABLE=${python:-python3}" "-DCMAKE_CUDA_COMPILER=${nvcc:-nvcc}" "${gtest[@]}")

# --- running a step ----------------------------------------------------------------------------

# The words of a command as a shell would take them back (placeholders, <...>, as they are).
quote() {
  local word out=()
  for word in "$@"; do
    if [[ $word =~ ^[][A-Za-z0-9_./=:,+%@-]+$ || $word == \<* ]]; then
      out+=("$word")
    else
      out+=("$(printf '%q' "$word")")
    fi
  done
  echo "${out[*]}"
}

# In the background, except in a dry run (whose lines then come in order).
spawn() {
  if [ "$mode" = dry-run ]; then
    "$@"
  else
    "$@" &
  fi
}

# run NAME COMMAND...: runs one step within what is left of the time budget, its output in
# build/gpu_check/NAME.log, its outcome a line of steps.tsv. In a dry run it prints the command.
run() {
  local name=$1 status=0 start=$SECONDS
  shift
  if [ "$mode" = dry-run ]; then
    printf '  %-22s %s\n' "$name" "$(quote "$@")"
    return 0
  fi
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 15 ]; then
    record "$name" "not run (time budget spent)" 0 "$*"
    return 1
  fi
  echo "=== $name: $*"
  timeout --kill-after=10 "$left" "$@" >"$report_dir/$name.log" 2>&1 || status=$?
  local outcome=passed
  case $status in
    0) ;;
    124|137) outcome="timed out" ;;
    *) outcome="failed (exit $status)" ;;
  esac
  record "$name" "$outcome" $((SECONDS - start)) "$*"
  if [ "$status" -ne 0 ]; then
    tail -n 25 "$report_dir/$name.log"
  fi
  return "$status"
}

# record NAME OUTCOME SECONDS COMMAND: a line of steps.tsv, and of the console.
record() {
  printf '%s\t%s\t%d\t%s\n' "$@" >>"$report_dir/steps.tsv"
  echo "=== $1: $2 ($3 s)"
}

# The report (build/gpu_check/report.md and .json), copied into $OUT where that is set.
finish() {
  trap - EXIT
  local status=0
  "${python:-python3}" "$root/scripts/gpu_check_report.py" report "$report_dir" || status=$?
  if compgen -G "$report_dir/sanitizer-*.log" >/dev/null; then
    cat "$report_dir"/sanitizer-*.log >"$report_dir/sanitizers.log"
  fi
  if [ -n "${OUT:-}" ]; then
    local file
    mkdir -p "$OUT"
    for file in report.md report.json cuda_benchmark.json benchmark.log profile.log build.log ctest.log sanitizers.log; do
      [ ! -f "$report_dir/$file" ] || cp "$report_dir/$file" "$OUT/"
    done
  fi
  cat "$report_dir/report.md"
  echo "gpu_check: $([ $status -eq 0 ] && echo passed || echo FAILED) in $SECONDS s; report: build/gpu_check/report.md"
  exit $status
}

# --- the check ---------------------------------------------------------------------------------

if [ "$mode" = dry-run ]; then
  echo "gpu_check --dry-run: what a run would do here"
  echo "  GPU:                  ${gpu:-none found}"
  echo "  python:               ${python:-none with a CUDA build of torch}"
  echo "  nvcc:                 ${nvcc:-not found} (CUDA toolkit: ${cuda_home:-?})"
  echo "  compute-sanitizer:    ${sanitizer:-not found}"
  echo "  ncu:                  ${ncu:-not found (the profile step is left out)}"
  echo "  TORCH_CUDA_ARCH_LIST: ${TORCH_CUDA_ARCH_LIST:-from the GPU}"
  echo "  GoogleTest:           $([ ${#gtest[@]} -gt 0 ] && echo "$deps/googletest" || echo "an installed package or /usr/src/googletest")"
  echo "  carried libraries:    $([ -d "$sysroot" ] && echo "$sysroot" || echo "none (.deps/sysroot missing)")"
  echo "  C++ benchmark:        $cpp_benchmark (Google Benchmark $([ $cpp_benchmark = ON ] && echo found || echo "not installed"))"
  if [ -n "$reason" ]; then
    echo "  a run would exit 2 here: $reason"
  fi
  echo "steps (<binary>: each test binary that has *_CUDA tests, as ctest lists them after the build):"
else
  if [ -n "$reason" ]; then
    echo "gpu_check: cannot run here: $reason" >&2
    exit 2
  fi
  rm -rf "$report_dir"
  mkdir -p "$report_dir"
  trap finish EXIT
  export CUDA_HOME=$cuda_home CUDACXX=$nvcc PATH="$cuda_home/bin:$PATH"
  notes="$report_dir/notes.txt"
  if [ -d "$sysroot" ]; then
    # Carried libraries this machine lacks, on the library path of the linker and the tests.
    mkdir -p "$report_dir/lib"
    for lib in "$sysroot"/lib/*.so.*; do
      system_has_library "${lib##*/}" || ln -s "$lib" "$report_dir/lib/${lib##*/}"
    done
    export LD_LIBRARY_PATH="$report_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    command -v pkg-config >/dev/null || export PATH="$sysroot/bin:$PATH"
    pkg-config --exists cairo || export PKG_CONFIG_PATH="$sysroot/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    lacked=$(find "$report_dir/lib" -mindepth 1 -printf '%f ')
    echo "carried from .deps/sysroot: CLI11, nlohmann-json, cairo's headers; of its libraries, this machine lacked: ${lacked:-none}" >>"$notes"
  fi
  [ ${#gtest[@]} -eq 0 ] || echo "GoogleTest built from the carried sources in .deps/googletest" >>"$notes"
  # The pinned reference libraries this machine has at another version (or not at all).
  wheels=()
  for wheel in "$deps"/wheels/*.whl; do
    [ -f "$wheel" ] || continue
    name=${wheel##*/}
    version=${name#*-}
    version=${version%%-*}
    have=$("$python" -c "import importlib.metadata as m; print(m.version('${name%%-*}'))" 2>/dev/null || echo none)
    [ "$have" = "$version" ] || wheels+=("$wheel")
  done
  if [ ${#wheels[@]} -gt 0 ]; then
    "$python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile \
      --target "$report_dir/site" "${wheels[@]}"
    export PYTHONPATH="$report_dir/site${PYTHONPATH:+:$PYTHONPATH}"
    echo "carried from .deps/wheels (scripts/setup.sh's pins, which this machine had at other versions): $(printf '%s ' "${wheels[@]##*/}")" >>"$notes"
  fi
  [ -n "$ncu" ] || echo "ncu (Nsight Compute) not found: the profile step was left out" >>"$notes"
  [ -n "$sanitizer" ] || echo "compute-sanitizer not found (PATH, $cuda_home/bin, $cuda_home/compute-sanitizer): the sanitizer steps fail" >>"$notes"
  pinned=$(sed -n 's/^transformers_version=//p' "$root/scripts/setup.sh")
  here=$("$python" -c 'import transformers; print(transformers.__version__)' 2>/dev/null || echo "not installed")
  [ "$here" = "$pinned" ] || echo "transformers here: $here; scripts/setup.sh pins $pinned (the benchmark's and the Python tests' reference is this machine's)" >>"$notes"
  if [ "$cpp_benchmark" = OFF ]; then
    echo "C++ benchmark (bench/posenc_benchmark.cpp) not built: Google Benchmark is not installed here; its cases are CPU-only, the CUDA cases are bench/cuda_benchmark.py's" >>"$notes"
  else
    echo "C++ benchmark built, not run: its cases are CPU-only; the CUDA cases are bench/cuda_benchmark.py's" >>"$notes"
  fi
  {
    echo "GPU: $gpu"
    echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 || echo unknown)"
    echo "nvcc: $nvcc ($("$nvcc" --version | grep -o 'release [^,]*, V[0-9.]*' || echo "version unknown"))"
    echo "compute-sanitizer: ${sanitizer:-not found}"
    echo "python: $python ($("$python" -c 'import sys, torch; print("Python %d.%d.%d" % sys.version_info[:3], "torch", torch.__version__, "CUDA", torch.version.cuda)'))"
    echo "transformers: $here"
    echo "TORCH_CUDA_ARCH_LIST: $TORCH_CUDA_ARCH_LIST"
    echo "cmake: $(cmake --version | head -n 1)"
    echo "cores: $jobs"
    echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo " with local changes")"
  } >"$report_dir/environment.txt"
  cat "$report_dir/environment.txt"
fi

built=yes
run configure "${configure[@]}" && run build cmake --build "$build" -j "$jobs" || built=no
if [ "$built" = yes ]; then
  run cuda-tests ctest --test-dir "$build" -R '_CUDA$' -j "$jobs" --output-on-failure --output-junit "$report_dir/cuda_tests.xml" || true
  run benchmark "${python:-python3}" "$root/bench/cuda_benchmark.py" --library "$build/src/libposenc.so" \
    --output "$report_dir/cuda_benchmark.json" --markdown "$report_dir/cuda_benchmark.md" || true
  # One call of each posenc case and of copy_ at the prefill shape, read by Nsight Compute at the
  # clocks the benchmark ran at (--clock-control none); the kernels in the order of
  # profiled_cases.json. In a dry run, shown whether or not ncu is installed.
  if [ -n "$ncu" ] || [ "$mode" = dry-run ]; then
    run profile "${ncu:-ncu}" --profile-from-start off --clock-control none --csv --metrics \
      gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,dram__bytes_read.sum,dram__bytes_write.sum \
      "${python:-python3}" "$root/bench/cuda_benchmark.py" --profile --library "$build/src/libposenc.so" \
      --output "$report_dir/profiled_cases.json" || true
  fi
  # The whole suite and the sanitizers side by side: both only check, and the GPU can take both.
  # ctest stops its tests in time to write its JUnit file before the budget runs out.
  stop_time=$(date -u -d "+$((deadline - SECONDS - 20)) seconds" '+%H:%M:%S +0000')
  # Two intra-op threads a test: with one test a core, LibTorch's default of one thread a core gave
  # 16 x 16 threads on a 16-core machine, and a training test that takes 1.4 s alone (2 cores
  # here) took 298 s there (H200 machine, 2026-11-26).
  spawn run ctest env "OMP_NUM_THREADS=${GPU_CHECK_TEST_THREADS:-2}" ctest --test-dir "$build" -j "$jobs" \
    --output-on-failure --stop-time "$stop_time" --output-junit "$report_dir/ctest.xml"
  binaries=("<binary>")
  graph_binaries=("<binary>")
  if [ "$mode" = check ]; then
    mapfile -t binaries < <("$python" "$root/scripts/gpu_check_report.py" cuda-binaries "$build")
    [ ${#binaries[@]} -gt 0 ] || record sanitizers "failed (no test program lists a *_CUDA test)" 0 "-"
    # the programs with a *CudaGraph*_CUDA test (a filter that matches nothing makes
    # compute-sanitizer fail: the program ends before any CUDA call)
    mapfile -t graph_binaries < <("$python" "$root/scripts/gpu_check_report.py" cuda-binaries "$build" 'CudaGraph.*_CUDA$')
  fi
  for tool in memcheck racecheck initcheck; do
    for binary in "${binaries[@]}"; do
      # Without PyTorch's caching allocator every tensor is an allocation of its own, so that
      # memcheck sees an access past its end. A CUDA graph cannot be captured that way (cudaMalloc
      # is not permitted while a stream captures): the *CudaGraph* tests run apart, below.
      spawn run "sanitizer-$tool-${binary##*/}" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${sanitizer:-compute-sanitizer}" \
        --tool "$tool" --error-exitcode 1 "$binary" '--gtest_filter=*_CUDA*:-*CudaGraph*'
    done
  done
  for binary in "${graph_binaries[@]}"; do
    spawn run "sanitizer-memcheck_graphs-${binary##*/}" "${sanitizer:-compute-sanitizer}" \
      --tool memcheck --error-exitcode 1 "$binary" '--gtest_filter=*CudaGraph*_CUDA'
  done
  wait
  run cuda-tests-ran "${python:-python3}" "$root/scripts/gpu_check_report.py" cuda-tests "$report_dir/ctest.xml" || true
fi
if [ "$mode" = dry-run ]; then
  run report "${python:-python3}" "$root/scripts/gpu_check_report.py" report "$report_dir"
  exit 0
fi
finish

#!/usr/bin/env bash
# Runs posenc's benchmarks and writes the report: docs/benchmarks.md and docs/benchmarks.png.
#
#   scripts/bench.sh                   # writes docs/benchmarks.{md,png,json}
#   scripts/bench.sh --compare FILE    # then compares the ratios with FILE (a benchmarks.json of an
#                                      # earlier run, e.g. docs/benchmarks.json as committed) and
#                                      # fails if one got more than 15% worse (scripts/bench_compare.py)
#
# One run measures posenc's C++ paths, the formulations they replace, copy_ of the same bytes
# (Google Benchmark, against pip's LibTorch 2.11) and the Python reference module (with pip's torch
# 2.11); on a machine with a CUDA GPU, the GPU cases as well. Takes a few minutes.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
baseline=""
if [ "${1:-}" = "--compare" ]; then
  [ -f "${2:-}" ] || { echo "bench.sh: --compare needs a benchmarks.json, got '${2:-}'" >&2; exit 2; }
  baseline=$(mktemp)
  cp "$2" "$baseline"   # before this run overwrites docs/benchmarks.json
elif [ $# -gt 0 ]; then
  echo "bench.sh: unknown argument '$1' (expected --compare FILE)" >&2; exit 2
fi
"$root/scripts/setup.sh" pip
"$root/.venv/bin/python" -c "import matplotlib" 2>/dev/null || "$root/.venv/bin/pip" install --quiet matplotlib
"$root/scripts/build.sh" pip -DPOSENC_BUILD_BENCHMARKS=ON
out="$root/build/bench"
mkdir -p "$out"
"$root/build/pip/bin/posenc_benchmark" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_min_time=0.1 --benchmark_format=console --benchmark_out_format=json --benchmark_out="$out/cpp.json"
# The large out-of-place rows again with transparent huge pages for PyTorch's CPU allocator.
THP_MEM_ALLOC_ENABLE=1 "$root/build/pip/bin/posenc_benchmark" --benchmark_filter='rope_qk/' --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_min_time=0.1 --benchmark_format=console --benchmark_out_format=json \
  --benchmark_out="$out/cpp_thp.json"
"$root/.venv/bin/python" "$root/bench/python_benchmark.py" --library "$root/build/pip/src/libposenc.so" --output "$out/python.json"
"$root/.venv/bin/python" "$root/scripts/bench_report.py" "$out/cpp.json" "$out/python.json" "$root/docs" "$out/cpp_thp.json"
echo "report: docs/benchmarks.md, docs/benchmarks.png, docs/benchmarks.json"
if [ -n "$baseline" ]; then
  "$root/.venv/bin/python" "$root/scripts/bench_compare.py" "$baseline" "$root/docs/benchmarks.json"
fi

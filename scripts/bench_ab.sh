#!/usr/bin/env bash
# Compares this work tree's C++ benchmarks with those of an earlier commit on the same machine, in
# the same session: the two binaries run alternately, four rounds each, so that a drift of the
# machine (another host, a busy neighbour) shows in both. Prints the median of each side and
# new/base. Not part of CI (minutes of build and measurement).
#
#   scripts/bench_ab.sh REV [FILTER]     # e.g. scripts/bench_ab.sh 7eed64d 'decode_checks/'
#
# REV is built with its own benchmarks into a worktree (build/ab-<rev>); this tree's are built into
# build/pip with -DPOSENC_BUILD_BENCHMARKS=ON (scripts/build.sh). FILTER: Google Benchmark's
# --benchmark_filter (default: the decode step, its checks, and the in-place add and rotary rows).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rev=$(git -C "$root" rev-parse --short "${1:?usage: scripts/bench_ab.sh REV [FILTER]}")
filter=${2:-'decode_checks/|rope_decode/(posenc_qk_inplace_cached|roofline_copy)/(1|64)x1x32q8kx128/float32/threads:1|add/(posenc_inplace|posenc_out|posenc_module|roofline_copy)/(1x1x512|64x512x768)/(float32|bfloat16)/threads:1|rope/(posenc_fused_inplace|roofline_copy)/8x2048x1024/float32/threads:1'}
base="$root/build/ab-$rev"
out=$(mktemp -d)

"$root/scripts/build.sh" pip -DPOSENC_BUILD_BENCHMARKS=ON
if [ ! -x "$base/build/bin/posenc_benchmark" ]; then
  git -C "$root" worktree add -f "$base" "$rev"
  prefix=$("$root/.venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  PATH="$PATH:/usr/local/cuda/bin" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" \
    cmake -S "$base" -B "$base/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPOSENC_BUILD_TESTS=OFF \
    -DPOSENC_BUILD_BENCHMARKS=ON "-DCMAKE_PREFIX_PATH=$prefix" "-DPython3_EXECUTABLE=$root/.venv/bin/python" >/dev/null
  PATH="$PATH:/usr/local/cuda/bin" cmake --build "$base/build" --target posenc_benchmark -j "$(nproc)"
fi

# (the side that runs first alternates: a machine that is faster for whichever binary runs first
# in a round would otherwise favour one side; the copy_ rows, the same code in both, show the rest)
for round in 1 2 3 4; do
  sides="base new"
  [ $((round % 2)) -eq 0 ] && sides="new base"
  for side in $sides; do
    bin="$base/build/bin/posenc_benchmark"
    [ "$side" = new ] && bin="$root/build/pip/bin/posenc_benchmark"
    "$bin" --benchmark_filter="$filter" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
      --benchmark_min_time=0.1 --benchmark_format=json >"$out/${side}_${round}.json" 2>/dev/null
  done
done

"$root/.venv/bin/python" - "$out" "$rev" <<'PY'
import collections, json, pathlib, statistics, sys
out, rev = pathlib.Path(sys.argv[1]), sys.argv[2]
scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
times = collections.defaultdict(lambda: collections.defaultdict(list))
for side in ("base", "new"):
    for path in sorted(out.glob(f"{side}_*.json")):
        for b in json.loads(path.read_text())["benchmarks"]:
            if b.get("aggregate_name") == "median":
                times[b["run_name"]][side].append(b["real_time"] * scale[b["time_unit"]])
print(f"{'benchmark (median of 4 rounds of 5)':80s} {rev:>10s} {'this tree':>10s} {'ratio':>6s}")
for name in sorted(times):
    base, new = (statistics.median(times[name][s]) for s in ("base", "new"))
    unit, div = ("us", 1e3) if base < 1e6 else ("ms", 1e6)
    print(f"{name:80s} {base / div:8.3f}{unit} {new / div:8.3f}{unit} {new / base:6.3f}")
PY

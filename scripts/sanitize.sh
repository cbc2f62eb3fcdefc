#!/usr/bin/env bash
# The reliability checks, against Debian's LibTorch 1.13 with clang:
#
#   1. the whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (preset "sanitize"),
#      which also replays the fuzz seeds and every input that ever crashed the fuzzer;
#   2. a bounded libFuzzer run (POSENC_FUZZ_SECONDS, default 60) from those seeds;
#   3. the reliability suite (threads, hostile files, properties) under ThreadSanitizer (preset "tsan");
#   4. valgrind memcheck on a representative subset of the release build in build/debian
#      (built by scripts/build.sh debian first if missing).
#
#   scripts/sanitize.sh            # all four
#   scripts/sanitize.sh asan fuzz  # some of them: asan, fuzz, tsan, valgrind
#
# Run scripts/setup.sh debian first. Exits non-zero on the first failing step.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(asan fuzz tsan valgrind)
cd "$root"
supp="$root/test/sanitizers/lsan.supp"

for step in "${steps[@]}"; do
  start=$SECONDS
  case "$step" in
    asan)
      echo "=== sanitize: ASan+UBSan build and tests (build/sanitize)"
      cmake --preset sanitize >build/sanitize.configure.log 2>&1 || { cat build/sanitize.configure.log; exit 1; }
      cmake --build build/sanitize -j "$(nproc)"
      ctest --test-dir build/sanitize --output-on-failure -j "$(nproc)"
      ;;
    fuzz)
      seconds=${POSENC_FUZZ_SECONDS:-60}
      echo "=== sanitize: libFuzzer, ${seconds}s"
      [ -x build/sanitize/fuzz/posenc_fuzzer ] || "$0" asan
      corpus=$(mktemp -d)
      artifacts=build/sanitize/fuzz/artifacts/
      mkdir -p "$artifacts"
      # -timeout: one input running over 10 s is a hang; -rss_limit_mb: one allocating over 4 GiB
      # is a missed size check. Both are reported as failures, like crashes.
      log=build/sanitize/fuzz/fuzz.log
      status=0
      LSAN_OPTIONS="suppressions=$supp" UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        build/sanitize/fuzz/posenc_fuzzer -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
        -print_final_stats=1 -artifact_prefix="$artifacts" "$corpus" fuzz/seeds >"$log" 2>&1 || status=$?
      rm -rf "$corpus"
      if [ "$status" -ne 0 ]; then
        tail -60 "$log"
        echo "sanitize: the fuzzer found a failing input (in $artifacts); fix it and add it to fuzz/regressions" >&2
        exit 1
      fi
      grep -E '^(#[0-9]+|Done )' "$log" | tail -2 || true
      grep '^stat::' "$log" || true
      ;;
    tsan)
      echo "=== sanitize: ThreadSanitizer, reliability suite (build/tsan)"
      cmake --preset tsan >build/tsan.configure.log 2>&1 || { cat build/tsan.configure.log; exit 1; }
      cmake --build build/tsan -j "$(nproc)" --target reliability_test
      # Archer (LLVM's OpenMP tool for TSan) tells TSan about the synchronization inside the OpenMP
      # runtime that at::parallel_for uses; without it every parallel region is a false report.
      OMP_TOOL_LIBRARIES=/usr/lib/llvm-14/lib/libarcher.so \
        TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/test/sanitizers/tsan.supp" \
        build/tsan/test/reliability_test
      ;;
    valgrind)
      echo "=== sanitize: valgrind memcheck (build/debian)"
      [ -x build/debian/test/errors_test ] || "$root/scripts/build.sh" debian
      # Definite and indirect leaks fail; LibTorch's own static allocations ("possibly" and
      # "still reachable") are not posenc's.
      memcheck=(valgrind --tool=memcheck --error-exitcode=1 --leak-check=full
        --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect
        --suppressions="$root/test/sanitizers/valgrind.supp" --quiet)
      export OMP_NUM_THREADS=1
      # One process per core (each runs on one thread): the four executables side by side.
      logs=$(mktemp -d)
      pids=()
      for executable in sinusoidal_table_test errors_test positional_encoding_test kernels_test; do
        "${memcheck[@]}" "build/debian/test/$executable" --gtest_brief=1 --gtest_filter='-*CUDA*' \
          >"$logs/$executable.log" 2>&1 &
        pids+=("$!")
        while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do sleep 1; done
      done
      failed=0
      for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
      if [ "$failed" -ne 0 ]; then
        tail -n 40 "$logs"/*.log
        rm -rf "$logs"
        echo "sanitize: valgrind reported errors (above)" >&2
        exit 1
      fi
      rm -rf "$logs"
      ;;
    *) echo "sanitize.sh: unknown step '$step' (expected asan, fuzz, tsan or valgrind)" >&2; exit 2 ;;
  esac
  echo "=== sanitize: $step passed in $((SECONDS - start))s"
done

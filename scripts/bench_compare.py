"""Compares two benchmark runs by their ratios (never absolute times, which depend on the machine):
flags every ratio that got more than `tolerance` (default 15%) worse.

    python scripts/bench_compare.py OLD.json NEW.json [--tolerance 0.15]

The files are the benchmarks.json that scripts/bench_report.py writes beside docs/benchmarks.md:
{"ratios": {name: {"value": v, "better": "lower" | "higher"}}}. A "lower" ratio (time / copy_
time) is worse when it grows, a "higher" one (a speed-up) when it shrinks. Ratios in only one of
the files are listed, not flagged. Exit status 1 when anything got worse (scripts/bench.sh
--compare FILE runs it after a run).
"""

import argparse
import json
import sys


def regressions(old, new, tolerance):
    """(name, old value, new value, change) of every ratio worse by more than `tolerance`."""
    worse = []
    for name, before in old.items():
        after = new.get(name)
        if after is None or before["value"] <= 0 or after["value"] <= 0:
            continue
        if before["better"] != after["better"]:
            raise ValueError(f"{name}: 'better' is {before['better']} in one file, {after['better']} in the other")
        change = after["value"] / before["value"] if before["better"] == "lower" else before["value"] / after["value"]
        if change > 1 + tolerance:
            worse.append((name, before["value"], after["value"], change))
    return worse


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--tolerance", type=float, default=0.15, help="relative worsening flagged (default 0.15)")
    args = parser.parse_args(argv)
    with open(args.old) as f:
        old = json.load(f)["ratios"]
    with open(args.new) as f:
        new = json.load(f)["ratios"]
    worse = regressions(old, new, args.tolerance)
    only_old = sorted(set(old) - set(new))
    only_new = sorted(set(new) - set(old))
    print(f"{len(set(old) & set(new))} ratios compared, {len(worse)} worse by more than {args.tolerance:.0%}")
    for name, before, after, change in worse:
        print(f"  WORSE {name}: {before:.3f} -> {after:.3f} ({change - 1:+.0%} worse)")
    for name in only_old:
        print(f"  only in {args.old}: {name}")
    for name in only_new:
        print(f"  only in {args.new}: {name}")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())

"""Attention with posenc's biases on the CPU: materialized (the module's forward as SDPA's attn_mask)
against FlexAttention (the module's score_mod, flex_attention compiled by torch.compile), at
L = 2048 and 8192. Each case runs in a fresh process, which reports its peak resident memory
(ru_maxrss) and its times; compile time is reported apart from the steady-state time.

    .venv/bin/python bench/flex_attention_benchmark.py --library build/pip/src/libposenc.so [--lengths 2048 8192]

Not part of CI (minutes per case on a 2-core machine); the figures are quoted in
docs/attention_biases.md with the machine and torch they came from.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))


def case(library, bias, form, length, heads, head_dim, repeats):
    import torch

    os.environ["POSENC_LIBRARY"] = library
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import posenc

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, length, head_dim) for _ in range(3))
    module = posenc.nn.ALiBi(heads) if bias == "alibi" else posenc.nn.RelativePositionBias(heads)
    causal = bias == "alibi"
    result = {"bias": bias, "form": form, "length": length, "heads": heads, "head_dim": head_dim,
              "torch": torch.__version__, "threads": torch.get_num_threads()}
    with torch.no_grad():
        if form == "materialized":
            def run():
                mask = module(length, length, None, True) if causal else module(length, length)
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            from torch.nn.attention.flex_attention import flex_attention

            compiled = torch.compile(flex_attention, dynamic=False)
            mods = {"score_mod": module.score_mod(length, length)}
            if causal:
                mods["block_mask"] = module.causal_block_mask(length, length)

            def run():
                return compiled(q, k, v, **mods)

            start = time.perf_counter()
            run()
            result["compile_s"] = time.perf_counter() - start
        run()  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
    result["median_ms"] = sorted(times)[len(times) // 2] * 1e3
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", required=True)
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", help="a JSON file for the results")
    parser.add_argument("--case", nargs=3, metavar=("BIAS", "FORM", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        bias, form, length = args.case
        return case(args.library, bias, form, int(length), args.heads, args.head_dim, args.repeats)
    results = []
    for length in args.lengths:
        for bias in ["alibi", "t5"]:
            for form in ["materialized", "flex"]:
                out = subprocess.run([sys.executable, __file__, "--library", args.library, "--heads", str(args.heads),
                                      "--head-dim", str(args.head_dim), "--repeats", str(args.repeats),
                                      "--case", bias, form, str(length)], capture_output=True, text=True)
                if out.returncode != 0:
                    print(f"{bias} {form} L={length}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
                    continue
                row = json.loads(out.stdout.strip().splitlines()[-1])
                results.append(row)
                print(f"{bias:6} {form:12} L={length:5}: {row['median_ms']:10.1f} ms, peak RSS {row['peak_rss_mib']:8.0f} MiB"
                      + (f", compile {row['compile_s']:.1f} s" if "compile_s" in row else ""), flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

"""The transformers drop-in on the CPU, one model of each rotation form posenc's discovery serves:
prefill (one forward of --prompt tokens) and greedy decoding (--tokens tokens after a 32-token
prompt, KV cache), unpatched and patched with posenc.integrations.transformers.apply_posenc_rope
alternately in one process (the best of --repeats each), and the share of a prefill forward spent
in the rotary function (the model's own, then posenc's), timed around each call.

    POSENC_LIBRARY=$PWD/build/pip/src/libposenc.so .venv/bin/python bench/transformers_forms_benchmark.py \\
        [--threads 2] [--prompt 512] [--tokens 32] [--repeats 3] [--json out.json]

Random weights, float32, eager attention; sizes: hidden 512, 4 layers, 8 query and 2 key/value
heads of 64 (the MLA model: 8 heads, rope part 32). Not part of CI (minutes); the figures are
quoted in docs/models.md with the machine and torch they came from.
"""

import argparse
import json
import os
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

BASE = dict(vocab_size=8000, hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
            num_key_value_heads=2, head_dim=64, max_position_embeddings=4096, pad_token_id=0, bos_token_id=1,
            eos_token_id=2)
# (model type, config beyond BASE, the form discovery finds)
MODELS = [
    ("llama", {}, "halves, whole head"),
    ("phi3", dict(partial_rotary_factor=0.5), "halves, first half of the head"),
    ("cohere", {}, "pairs (2i, 2i + 1), cos repeat-interleaved"),
    ("glm", dict(partial_rotary_factor=0.5), "pairs from cat(freqs, freqs), half of the head"),
    ("gptj", dict(rotary_dim=64, n_embd=512, n_layer=4, n_head=8), "one tensor per call, [B, L, H, D]"),
    ("gpt_oss", dict(num_local_experts=4, num_experts_per_tok=2), "halves, cos/sin once"),
    ("llama4_text", dict(intermediate_size_mlp=1024, num_local_experts=2), "complex freqs_cis"),
    ("deepseek_v3", dict(num_key_value_heads=8, qk_rope_head_dim=32, qk_nope_head_dim=32, v_head_dim=64,
                         kv_lora_rank=128, q_lora_rank=256, n_routed_experts=4, num_experts_per_tok=2,
                         moe_intermediate_size=256, first_k_dense_replace=1, n_group=1, topk_group=1, head_dim=32),
     "MLA, de-interleaved"),
]


def build(model_type, extra):
    import torch
    import transformers

    config = transformers.AutoConfig.for_model(model_type, **{**BASE, **extra})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def best(function, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


class RotationTimer:
    """Wall time spent inside the rotary functions of the patched or unpatched layers' modules."""

    def __init__(self, modules):
        self.modules, self.total, self.saved = modules, 0.0, []

    def __enter__(self):
        for module, name in self.modules:
            original = module.__dict__[name]

            def timed(*args, _original=original, **kwargs):
                start = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.total += time.perf_counter() - start

            self.saved.append((module, name, original))
            module.__dict__[name] = timed
        return self

    def __exit__(self, *exc):
        for module, name, original in self.saved:
            module.__dict__[name] = original


def measure(model_type, extra, arguments):
    import torch
    import posenc.integrations.transformers as hf

    reference = build(model_type, extra)
    patched = hf.apply_posenc_rope(build(model_type, extra))
    described = hf.describe_posenc_rope(reference)
    own = [(sys.modules[module], name) for module, name, _, _ in described]
    ours = [(sys.modules[hf.PATCHED_MODULE_PREFIX + module.rsplit(".", 1)[-1]], name)
            for module, name, _, _ in described]
    torch.manual_seed(1)
    prompt = torch.randint(3, BASE["vocab_size"], (1, arguments.prompt))
    short = prompt[:, :32]
    kwargs = dict(max_new_tokens=arguments.tokens, min_new_tokens=arguments.tokens, do_sample=False, pad_token_id=0)
    row = {"model_type": model_type}
    with torch.no_grad():
        for name, model in (("transformers", reference), ("posenc", patched)):
            model(prompt)  # warm-up
        for _ in range(arguments.repeats):  # alternately, so that both see the same machine state
            for name, model in (("transformers", reference), ("posenc", patched)):
                prefill = best(lambda: model(prompt), 1)
                row[f"{name}_prefill_s"] = min(row.get(f"{name}_prefill_s", float("inf")), prefill)
                decode = best(lambda: model.generate(short, **kwargs), 1)
                row[f"{name}_tokens_per_s"] = max(row.get(f"{name}_tokens_per_s", 0.0), arguments.tokens / decode)
        for name, model, modules in (("transformers", reference, own), ("posenc", patched, ours)):
            with RotationTimer(modules) as timer:
                start = time.perf_counter()
                model(prompt)
                total = time.perf_counter() - start
            row[f"{name}_rotation_share"] = timer.total / total
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json")
    arguments = parser.parse_args()
    import warnings

    import torch
    import transformers

    torch.set_num_threads(arguments.threads)
    warnings.simplefilter("ignore")
    rows = []
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {arguments.threads} threads, "
          f"prefill {arguments.prompt} tokens, decode {arguments.tokens} tokens")
    print("| model (form) | prefill, transformers | prefill, + posenc | speed-up | decode tok/s, transformers | "
          "decode tok/s, + posenc | speed-up | rotation share of prefill, transformers | + posenc |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model_type, extra, form in MODELS:
        row = measure(model_type, extra, arguments)
        row["form"] = form
        rows.append(row)
        print(f"| `{model_type}` ({form}) | {row['transformers_prefill_s'] * 1e3:.0f} ms | "
              f"{row['posenc_prefill_s'] * 1e3:.0f} ms | "
              f"{row['transformers_prefill_s'] / row['posenc_prefill_s']:.2f}x | "
              f"{row['transformers_tokens_per_s']:.1f} | {row['posenc_tokens_per_s']:.1f} | "
              f"{row['posenc_tokens_per_s'] / row['transformers_tokens_per_s']:.2f}x | "
              f"{row['transformers_rotation_share'] * 100:.1f}% | {row['posenc_rotation_share'] * 100:.1f}% |",
              flush=True)
    if arguments.json:
        with open(arguments.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()

"""Whole-model speed on the CPU: a LLaMA-architecture model (random weights, written by transformers'
save_pretrained) run by
  * transformers, eager (its default SDPA attention), unpatched and patched with
    posenc.integrations.transformers.apply_posenc_rope, alternately in one process (the
    difference is small: RoPE is a small share of a model's time; separate processes differ by
    more than that), and the q+k rotation alone at the model's decode and prefill shapes;
  * transformers with torch.compile (forward compiled, static KV cache, the setup transformers
    documents for compiled generation), unpatched and patched; compile time reported apart;
  * posenc's C++ decoder (examples/llama_decoder, `llama_decoder generate`), when --decoder is given;
timing the prefill forward of one long prompt and greedy generation (tokens per second, the best of
--repeats). The compiled models and the C++ decoder run in fresh processes, so that none
inherits another's compiled graphs.

    .venv/bin/python bench/llm_benchmark.py --library build/pip/src/libposenc.so \\
        [--decoder build/llama/llama_decoder] [--threads 2] [--dtype bfloat16]

--dtype bfloat16 casts transformers' model (model.to(torch.bfloat16)) and runs the decoder with
--dtype bfloat16 (its rotary tables stay float32, as posenc's modules keep them).

Not part of CI (minutes on a 2-core machine); the figures are quoted in docs/models.md with the
machine and torch they came from.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))

CONFIG = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
              num_key_value_heads=4, max_position_embeddings=4096, rope_theta=500000.0, tie_word_embeddings=False)


def make_model(directory):
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
    model.save_pretrained(directory)


def best_time(function, repeats):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def rotation_alone(arguments, modeling, posenc_hf):
    """transformers' apply_rotary_pos_emb against the function apply_posenc_rope puts in its place,
    at this model's decode (1 token) and prefill shapes, q and k as the attention makes them."""
    import torch

    heads, kv_heads = CONFIG["num_attention_heads"], CONFIG["num_key_value_heads"]
    head_dim = CONFIG["hidden_size"] // heads
    replacement = posenc_hf.replacement_for(modeling.apply_rotary_pos_emb)
    rows = []
    for length in (1, arguments.prefill_length):
        dtype = getattr(torch, arguments.dtype)
        q = torch.randn(1, length, heads, head_dim).to(dtype).transpose(1, 2)
        k = torch.randn(1, length, kv_heads, head_dim).to(dtype).transpose(1, 2)
        angles = torch.arange(length, dtype=torch.float32)[:, None] * torch.rand(head_dim // 2)
        cos = torch.cat([angles.cos(), angles.cos()], -1)[None].to(dtype)  # (transformers' cos/sin: the model's dtype)
        sin = torch.cat([angles.sin(), angles.sin()], -1)[None].to(dtype)
        number = 2000 if length == 1 else 10
        for name, call in (("transformers", lambda: modeling.apply_rotary_pos_emb(q, k, cos, sin)),
                           ("posenc", lambda: replacement(q, k, cos, sin))):
            call()
            rows.append({"rotation": name, "length": length,
                         "us": best_time(lambda: [call() for _ in range(number)], 5) / number * 1e6})
    return rows


def run_transformers(arguments, compiled):
    """Eager: the unpatched and the patched model alternately in one process (apply/remove), so that
    both see the same machine state; compiled: one of them per process (--case)."""
    import torch
    import transformers

    torch.set_num_threads(arguments.threads)
    os.environ["POSENC_LIBRARY"] = arguments.library
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import posenc.integrations.transformers as posenc_hf
    from transformers.models.llama import modeling_llama

    model = transformers.AutoModelForCausalLM.from_pretrained(arguments.model).to(getattr(torch, arguments.dtype)).eval()
    common = {"torch": torch.__version__, "transformers": transformers.__version__, "threads": torch.get_num_threads(),
              "dtype": arguments.dtype}
    prompt = torch.randint(3, CONFIG["vocab_size"], (1, arguments.prompt_length), generator=torch.Generator().manual_seed(0))
    long_prompt = torch.randint(3, CONFIG["vocab_size"], (1, arguments.prefill_length), generator=torch.Generator().manual_seed(1))
    kwargs = dict(max_new_tokens=arguments.tokens, min_new_tokens=arguments.tokens, do_sample=False, pad_token_id=0)
    results = []
    with torch.no_grad():
        if compiled is not None:
            patched = compiled == "patched"
            if patched:
                posenc_hf.apply_posenc_rope(model)
            model.generation_config.cache_implementation = "static"
            model.forward = torch.compile(model.forward)
            start = time.perf_counter()
            model.generate(prompt, **kwargs)
            model(long_prompt)
            result = {"implementation": "transformers" + (" + posenc" if patched else "") + " compiled",
                      "compile_s": time.perf_counter() - start, **common}
            result["prefill_s"] = best_time(lambda: model(long_prompt), arguments.repeats)
            result["generate_s"] = best_time(lambda: model.generate(prompt, **kwargs), arguments.repeats)
            results.append(result)
        else:
            times = {False: {"prefill_s": [], "generate_s": []}, True: {"prefill_s": [], "generate_s": []}}
            for patched in (False, True):  # warm-up
                (posenc_hf.apply_posenc_rope if patched else posenc_hf.remove_posenc_rope)(model)
                model.generate(prompt, max_new_tokens=2, do_sample=False, pad_token_id=0)
            for _ in range(arguments.repeats):
                for patched in (False, True):
                    (posenc_hf.apply_posenc_rope if patched else posenc_hf.remove_posenc_rope)(model)
                    times[patched]["prefill_s"].append(best_time(lambda: model(long_prompt), 1))
                    times[patched]["generate_s"].append(best_time(lambda: model.generate(prompt, **kwargs), 1))
            for patched in (False, True):
                results.append({"implementation": "transformers" + (" + posenc" if patched else ""), **common,
                                **{key: min(values) for key, values in times[patched].items()}})
            results.append({"rotation_alone": rotation_alone(arguments, modeling_llama, posenc_hf)})
    for result in results:
        if "generate_s" in result:
            result["tokens_per_second"] = arguments.tokens / result["generate_s"]
    return results


def run_decoder(arguments):
    output = subprocess.run([arguments.decoder, "--threads", str(arguments.threads), "--dtype", arguments.dtype,
                             "generate", arguments.model,
                             "--prompt-length", str(arguments.prompt_length), "--tokens", str(arguments.tokens),
                             "--repeats", str(arguments.repeats)], check=True, capture_output=True, text=True).stdout
    result = json.loads(output.strip().splitlines()[-1])
    result["generate_s"] = result.pop("seconds")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", required=True)
    parser.add_argument("--decoder", help="examples/llama_decoder's program")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--prompt-length", type=int, default=128)
    parser.add_argument("--prefill-length", type=int, default=2048)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.case:
        print(json.dumps(run_transformers(arguments, None if arguments.case == "eager" else arguments.case)))
        return
    with tempfile.TemporaryDirectory() as directory:
        make_model(directory)
        results = []
        for case in ("eager", "unpatched", "patched"):
            command = [sys.executable, __file__, *sys.argv[1:], "--case", case, "--model", directory]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            results += json.loads(output.strip().splitlines()[-1])
            print(output.strip().splitlines()[-1], flush=True)
        if arguments.decoder:
            arguments.model = directory
            results.append(run_decoder(arguments))
            print(json.dumps(results[-1]), flush=True)
    print(f"\nLLaMA {CONFIG['num_hidden_layers']} layers, hidden {CONFIG['hidden_size']}, "
          f"{CONFIG['num_attention_heads']}/{CONFIG['num_key_value_heads']} heads, vocab {CONFIG['vocab_size']}, {arguments.dtype}; "
          f"greedy {arguments.tokens} tokens after {arguments.prompt_length}; prefill {arguments.prefill_length} tokens; "
          f"{arguments.threads} threads\n")
    print("| implementation | tokens/s | prefill (s) | compile (s) |")
    print("|---|---:|---:|---:|")
    for result in results:
        if "rotation_alone" in result:
            continue
        prefill = f"{result['prefill_s']:.3f}" if "prefill_s" in result else "-"
        compile_s = f"{result['compile_s']:.1f}" if "compile_s" in result else "-"
        print(f"| {result['implementation']} | {result['tokens_per_second']:.1f} | {prefill} | {compile_s} |")
    rotation = next(result["rotation_alone"] for result in results if "rotation_alone" in result)
    print("\n| q+k rotation alone | tokens | transformers (us) | posenc (us) | speed-up |")
    print("|---|---:|---:|---:|---:|")
    for length in sorted({row["length"] for row in rotation}):
        theirs = next(r["us"] for r in rotation if r["length"] == length and r["rotation"] == "transformers")
        ours = next(r["us"] for r in rotation if r["length"] == length and r["rotation"] == "posenc")
        print(f"| one layer | {length} | {theirs:.1f} | {ours:.1f} | {theirs / ours:.2f}x |")

if __name__ == "__main__":
    main()

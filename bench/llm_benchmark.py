"""Whole-model speed on the CPU: a LLaMA-architecture model (random weights, written by transformers'
save_pretrained) run by
  * transformers, eager (its default SDPA attention), unpatched and patched with
    posenc.integrations.transformers.apply_posenc_rope;
  * transformers with torch.compile (forward compiled, static KV cache, the setup transformers
    documents for compiled generation), unpatched and patched; compile time reported apart;
  * posenc's C++ decoder (examples/llama_decoder, `llama_decoder generate`), when --decoder is given;
timing the prefill forward of one long prompt and greedy generation (tokens per second, the best of
--repeats). Each implementation runs in a fresh process, so no one inherits another's threads,
caches or compiled graphs.

    .venv/bin/python bench/llm_benchmark.py --library build/pip/src/libposenc.so \\
        [--decoder build/llama/llama_decoder] [--threads 2]

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


def run_transformers(arguments, patched, compiled):
    import torch
    import transformers

    torch.set_num_threads(arguments.threads)
    os.environ["POSENC_LIBRARY"] = arguments.library
    sys.path.insert(0, os.path.join(ROOT, "python"))
    model = transformers.AutoModelForCausalLM.from_pretrained(arguments.model).eval()
    if patched:
        import posenc.integrations.transformers as posenc_hf

        posenc_hf.apply_posenc_rope(model)
    result = {"implementation": "transformers" + (" + posenc" if patched else "") + (" compiled" if compiled else ""),
              "torch": torch.__version__, "transformers": transformers.__version__, "threads": torch.get_num_threads()}
    prompt = torch.randint(3, CONFIG["vocab_size"], (1, arguments.prompt_length), generator=torch.Generator().manual_seed(0))
    long_prompt = torch.randint(3, CONFIG["vocab_size"], (1, arguments.prefill_length), generator=torch.Generator().manual_seed(1))
    kwargs = dict(max_new_tokens=arguments.tokens, min_new_tokens=arguments.tokens, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        if compiled:
            model.generation_config.cache_implementation = "static"
            model.forward = torch.compile(model.forward)
            start = time.perf_counter()
            model.generate(prompt, **kwargs)
            model(long_prompt)
            result["compile_s"] = time.perf_counter() - start
        else:
            model.generate(prompt, max_new_tokens=2, do_sample=False, pad_token_id=0)
            model(long_prompt)
        result["prefill_s"] = best_time(lambda: model(long_prompt), arguments.repeats)
        seconds = best_time(lambda: model.generate(prompt, **kwargs), arguments.repeats)
    result["generate_s"] = seconds
    result["tokens_per_second"] = arguments.tokens / seconds
    return result


def run_decoder(arguments):
    output = subprocess.run([arguments.decoder, "--threads", str(arguments.threads), "generate", arguments.model,
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
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.case:
        patched, compiled = (part == "1" for part in arguments.case.split(","))
        print(json.dumps(run_transformers(arguments, patched, compiled)))
        return
    with tempfile.TemporaryDirectory() as directory:
        make_model(directory)
        results = []
        for case in ("0,0", "1,0", "0,1", "1,1"):
            command = [sys.executable, __file__, *sys.argv[1:], "--case", case, "--model", directory]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            results.append(json.loads(output.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
        if arguments.decoder:
            arguments.model = directory
            results.append(run_decoder(arguments))
            print(json.dumps(results[-1]), flush=True)
    print(f"\nLLaMA {CONFIG['num_hidden_layers']} layers, hidden {CONFIG['hidden_size']}, "
          f"{CONFIG['num_attention_heads']}/{CONFIG['num_key_value_heads']} heads, vocab {CONFIG['vocab_size']}, float32; "
          f"greedy {arguments.tokens} tokens after {arguments.prompt_length}; prefill {arguments.prefill_length} tokens; "
          f"{arguments.threads} threads\n")
    print("| implementation | tokens/s | prefill (s) | compile (s) |")
    print("|---|---:|---:|---:|")
    for result in results:
        prefill = f"{result['prefill_s']:.3f}" if "prefill_s" in result else "-"
        compile_s = f"{result['compile_s']:.1f}" if "compile_s" in result else "-"
        print(f"| {result['implementation']} | {result['tokens_per_second']:.1f} | {prefill} | {compile_s} |")


if __name__ == "__main__":
    main()

"""Writes small random transformers models and what transformers computes with them, for
`llama_decoder check` (main.cpp): for each model, a directory with config.json and model.safetensors
(transformers' save_pretrained) and reference.safetensors:

  prompts        int64 [2, 24]       two random prompts
  logits         float32 [2, 24, V]  the model's logits for them (eager attention, float32)
  logits_bfloat16 float32 [2, 24, V] the same model's logits in bfloat16 (its weights cast by
                                     model.to(torch.bfloat16), its rotary frequencies kept
                                     float32), the yardstick of `llama_decoder --dtype bfloat16 check`
  generated      int64 [1, 16 + 32]  the first prompt's first 16 tokens and the 32 tokens that
                                     model.generate(do_sample=False) appends
  prompt_length  int64 [1]           16

Three rotary setups, two families: LLaMA with the default rope; Qwen2 (biases on q, k, v; tied
embeddings) with yarn scaling, whose attention factor multiplies cos and sin; LLaMA with llama3
scaling, an explicit head_dim (not hidden_size / heads) and attention biases. Nothing is downloaded.

    python make_models.py --output-dir out

Greedy decoding compares argmaxes, so every generated token's margin (its logit over the runner-up)
is checked to be far above float32 rounding: a model whose greedy tokens could flip by rounding is
refused here, never passed on as a flaky reference.
"""

import argparse
import copy
import os

import torch
import transformers
from safetensors.torch import save_file

PROMPT_LENGTH = 16
NEW_TOKENS = 32

MODELS = {
    "llama": transformers.LlamaConfig(
        vocab_size=512, hidden_size=128, intermediate_size=352, num_hidden_layers=3, num_attention_heads=8,
        num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False),
    "qwen2_yarn": transformers.Qwen2Config(
        vocab_size=512, hidden_size=128, intermediate_size=352, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="yarn", rope_theta=1000000.0, factor=4.0, original_max_position_embeddings=32)),
    "llama3_head_dim": transformers.LlamaConfig(
        vocab_size=512, hidden_size=128, intermediate_size=352, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=48, attention_bias=True, max_position_embeddings=256,
        rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=32)),
}


def write(name, config, directory, seed):
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    # transformers initialises with std 0.02: logits would be nearly flat and greedy tokens near ties.
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 1.0 / parameter.shape[-1] ** 0.5)
    model.save_pretrained(directory)
    prompts = torch.randint(3, config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        logits = model(prompts).logits
        output = model.generate(prompts[:1, :PROMPT_LENGTH], max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                do_sample=False, eos_token_id=None, pad_token_id=0, output_scores=True,
                                return_dict_in_generate=True)
        # (Module.to casts every floating buffer, the rotary frequencies inv_freq among them: they
        # are set back to float32, so that the yardstick is bfloat16 arithmetic with the model's
        # own rotation, not a rotation by bfloat16-rounded frequencies)
        model_bfloat16 = copy.deepcopy(model).to(torch.bfloat16)
        for name, buffer in model.named_buffers():
            if name.endswith("inv_freq"):
                owner, _, attribute = name.rpartition(".")
                setattr(model_bfloat16.get_submodule(owner), attribute, buffer.detach().clone())
        logits_bfloat16 = model_bfloat16(prompts).logits
    generated = output.sequences
    assert generated.shape == (1, PROMPT_LENGTH + NEW_TOKENS), generated.shape
    margins = []
    for scores in output.scores:
        top = scores[0].topk(2).values
        margins.append((top[0] - top[1]).item() / scores[0].abs().max().item())
    if min(margins) < 1e-4:
        raise SystemExit(f"{name}: a greedy token wins by {min(margins):.2e} of the largest logit, too close to "
                         "float32 rounding for an exact comparison; change the seed")
    save_file({"prompts": prompts, "logits": logits.float().contiguous(), "generated": generated,
               "logits_bfloat16": logits_bfloat16.float().contiguous(),
               "prompt_length": torch.tensor([PROMPT_LENGTH])}, os.path.join(directory, "reference.safetensors"))
    print(f"{name}: {type(model).__name__}, rope {config.rope_parameters.get('rope_type')}, "
          f"smallest greedy margin {min(margins):.2e} of the largest logit -> {directory}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    arguments = parser.parse_args()
    for name in arguments.models:  # each model's seed is its place in MODELS, whichever are written
        write(name, MODELS[name], os.path.join(arguments.output_dir, name), list(MODELS).index(name))


if __name__ == "__main__":
    main()

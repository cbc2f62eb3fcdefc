"""posenc.integrations.transformers: apply_posenc_rope(model) against the unpatched model, with
transformers' own model code (pinned 5.23.0, scripts/setup.sh) on both sides.

Every supported model type is built small and random from its own config class (real field names
and defaults), once unpatched and once patched, and compared:
* logits, float32: equal within 1e-6 of the largest logit. The rotation is the same arithmetic
  (q cos - q' sin, each output rounded once to float32 on both sides here), so the logits come out
  equal (0 difference is what the CPU gives); the margin only allows a fused multiply-add on a
  machine whose compiler contracts one side, a few float32 ulps propagated through two layers;
* a training step's gradients of every parameter, float32: the same margin, relative to each
  gradient's largest entry (posenc's backward is the inverse rotation of the output gradient, the
  arithmetic of autograd through transformers' formula);
* greedy generation of 12 tokens with the KV cache (rotations at decoding offsets): equal tokens;
* that posenc's operator ran, once per attention layer and call.
bfloat16: posenc computes in float32 and rounds once; transformers rounds each product and the sum
in bfloat16. Tested on the rotation itself: posenc's error against a float64 rotation is never
larger than transformers' (elementwise: within one bfloat16 ulp of the result).
"""

import copy
import os
import sys

import pytest
import torch

from conftest import requires_torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

transformers = pytest.importorskip("transformers")
pytestmark = requires_torch(2, 4, "transformers 5")
sys.path.insert(0, os.path.dirname(__file__))
from transformers_sweep import CountPosencCalls  # noqa: E402  (counts posenc::apply_rotary* calls)

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)

# (model type, config fields beyond SMALL): every supported type with its defaults, then the rotary
# setups that differ: partial rotation, the scaled rope types, per-layer-type rope parameters.
VARIANTS = [(model_type, {}) for model_type in (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
    "granite", "starcoder2", "olmo", "olmo2", "smollm3", "stablelm", "phi", "persimmon", "gpt_neox", "phi3",
    "cohere")] + [
    ("stablelm", dict(partial_rotary_factor=0.25)),
    ("phi", dict(partial_rotary_factor=0.5)),
    ("persimmon", dict(partial_rotary_factor=0.5)),
    ("gpt_neox", dict(rotary_pct=0.25)),
    ("phi3", dict(partial_rotary_factor=0.5)),
    ("llama", dict(rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                                        high_freq_factor=4.0, original_max_position_embeddings=32))),
    ("qwen2", dict(rope_parameters=dict(rope_type="yarn", rope_theta=1000000.0, factor=4.0,
                                        original_max_position_embeddings=16))),
    ("mistral", dict(rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0))),
    ("llama", dict(rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0),
                   max_position_embeddings=16)),
    ("phi3", dict(max_position_embeddings=64, original_max_position_embeddings=16,
                  rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, short_factor=[1.0] * 8,
                                       long_factor=[1.0 + i / 4 for i in range(8)]))),
] + [
    # One model of each form beyond the three above (discovery: none of these is named in posenc).
    ("glm", {}),  # interleaved pairs, cos as cat(freqs, freqs), half of each head
    ("helium", dict(head_dim=16)),  # interleaved pairs from cat(freqs, freqs), whole heads
    ("ernie4_5", {}),  # the same, computed in float32
    ("gptj", dict(rotary_dim=8)),  # one tensor per call, [B, L, H, D], the R/2 values once
    ("gpt_oss", dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16)),  # halves, R/2 values once
    ("nanochat", {}),  # the inverse direction
    ("llama4_text", dict(intermediate_size_mlp=96, num_local_experts=2, head_dim=16)),  # complex freqs_cis
    ("gemma3n_text", dict(head_dim=16, vocab_size_per_layer_input=128, hidden_size_per_layer_input=8,
                          num_kv_shared_layers=0)),  # one tensor per call, cos as cat(freqs, freqs)
    ("deepseek_v4", {}),  # one tensor per call, the last R channels of each head, pairs (2i, 2i + 1)
    ("deepseek_v3", dict(num_key_value_heads=4, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
                         kv_lora_rank=16, q_lora_rank=24, n_routed_experts=4, num_experts_per_tok=2,
                         moe_intermediate_size=32, first_k_dense_replace=1, head_dim=8, n_group=1,
                         topk_group=1)),  # MLA
]
# posenc calls per attention layer and forward: q and k in one call, but two for one-tensor forms
# (DeepSeek-V4: three, q, the shared key/value, and the output turned back by -sin).
CALLS_PER_LAYER = {"gptj": 2, "gemma3n_text": 2, "deepseek_v4": 3}


def variant_id(variant):
    model_type, extra = variant
    rope = extra.get("rope_parameters", {}).get("rope_type")
    partial = extra.get("partial_rotary_factor", extra.get("rotary_pct"))
    return model_type + (f"-{rope}" if rope else "") + (f"-partial{partial}" if partial else "")


@pytest.fixture(scope="module")
def hf(posenc_ops):  # the fixture checks POSENC_LIBRARY is set (the package reads it)
    import posenc.integrations.transformers as integration

    return integration


def small_model(model_type, extra=None, seed=0):
    config = transformers.AutoConfig.for_model(model_type, **{**SMALL, **(extra or {})})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def assert_close_to(actual, expected, margin):
    scale = expected.abs().max().item()
    difference = (actual - expected).abs().max().item()
    assert difference <= margin * max(scale, 1e-30), f"max difference {difference} for largest value {scale}"


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_patched_model_equals_its_unpatched_self(hf, variant):
    model_type, extra = variant
    reference = small_model(model_type, extra)
    patched = hf.apply_posenc_rope(small_model(model_type, extra))
    assert hf.is_patched(patched) and not hf.is_patched(reference)
    torch.manual_seed(1)
    tokens = torch.randint(3, SMALL["vocab_size"], (2, 23))

    # Forward: logits, and posenc's operator once per layer.
    counter = CountPosencCalls()
    with torch.no_grad(), counter:
        logits = patched(tokens).logits
    with torch.no_grad():
        expected = reference(tokens).logits
    assert counter.calls == SMALL["num_hidden_layers"] * CALLS_PER_LAYER.get(model_type, 1)
    assert_close_to(logits, expected, 1e-6)

    # A training step: the loss's gradient of every parameter.
    for model in (reference, patched):
        model.train()
        model(tokens, labels=tokens).loss.backward()
    for (name, parameter), (_, expected_parameter) in zip(patched.named_parameters(), reference.named_parameters()):
        if expected_parameter.grad is None:
            assert parameter.grad is None, name
            continue
        assert_close_to(parameter.grad, expected_parameter.grad, 1e-5)

    # Greedy generation with the KV cache: one token per call at growing offsets.
    for model in (reference, patched):
        model.eval()
    prompt = tokens[:1, :9]
    kwargs = dict(max_new_tokens=12, do_sample=False, min_new_tokens=12, pad_token_id=0)
    counter = CountPosencCalls()
    with counter:
        generated = patched.generate(prompt, **kwargs)
    assert torch.equal(generated, reference.generate(prompt, **kwargs))
    assert counter.calls >= 12 * SMALL["num_hidden_layers"]


def modeling_of(model):
    import importlib

    return importlib.import_module(type(model).__module__)


@pytest.mark.parametrize("model_type", ["llama", "phi3", "cohere", "glm"])
def test_bfloat16_rotation_is_never_less_exact_than_transformers(hf, model_type):
    partial = {"partial_rotary_factor": 0.5, "head_dim": 16}
    model = small_model(model_type, partial if model_type in ("phi3", "glm") else {})
    modeling = modeling_of(model)
    torch.manual_seed(2)
    q = torch.randn(2, 4, 37, 16, dtype=torch.bfloat16)
    k = torch.randn(2, 2, 37, 16, dtype=torch.bfloat16)
    positions = torch.arange(100, 137).expand(2, 37)
    cos, sin = model.model.rotary_emb(q, positions)
    assert cos.dtype == torch.bfloat16
    theirs = modeling.apply_rotary_pos_emb(q, k, cos, sin)
    ours = hf.replacement_for(modeling.apply_rotary_pos_emb)(q, k, cos, sin)
    exact = modeling.apply_rotary_pos_emb(q.double(), k.double(), cos.double(), sin.double())
    for their, our, truth in zip(theirs, ours, exact):
        assert our.dtype == torch.bfloat16
        our_error = (our.double() - truth).abs()
        their_error = (their.double() - truth).abs()
        # Rounded from float32: within one bfloat16 ulp of the exact value everywhere (half an ulp
        # but where float32's rounding meets a bfloat16 tie), and never worse than theirs.
        ulp = torch.finfo(torch.bfloat16).eps * truth.abs().clamp_min(torch.finfo(torch.bfloat16).tiny)
        assert bool((our_error <= ulp).all())
        assert our_error.max() <= their_error.max()


def recording_inductor(graphs):
    """Inductor, recording the code of every graph it compiles (to see posenc's operator in it)."""
    inductor = torch._dynamo.lookup_backend("inductor")

    def backend(graph_module, example_inputs):
        graphs.append(graph_module.code)
        return inductor(graph_module, example_inputs)

    return backend


def test_compiled_patched_model(hf):
    patched = hf.apply_posenc_rope(small_model("llama"))
    reference = small_model("llama")
    tokens = torch.randint(3, SMALL["vocab_size"], (2, 17))
    torch._dynamo.reset()
    graphs = []
    # fullgraph: posenc's operator breaks no graph; the graph calls it once per layer
    compiled = torch.compile(patched, fullgraph=True, backend=recording_inductor(graphs))
    with torch.no_grad():
        assert_close_to(compiled(tokens).logits, reference(tokens).logits, 1e-5)  # Inductor reorders float32 sums
    assert len(graphs) == 1 and graphs[0].count("posenc.apply_rotary_qk") == SMALL["num_hidden_layers"], graphs


def test_save_pretrained_and_reload(hf, tmp_path):
    patched = hf.apply_posenc_rope(small_model("qwen2"))
    patched.save_pretrained(tmp_path)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert not hf.is_patched(reloaded)
    assert patched.state_dict().keys() == reloaded.state_dict().keys()
    tokens = torch.randint(3, SMALL["vocab_size"], (1, 11))
    with torch.no_grad():
        assert_close_to(patched(tokens).logits, reloaded(tokens).logits, 1e-6)


def test_patches_one_instance_once_and_can_be_removed(hf):
    model, other = small_model("llama"), small_model("llama")
    tokens = torch.randint(3, SMALL["vocab_size"], (1, 7))
    original = type(model.model.layers[0].self_attn)
    assert hf.apply_posenc_rope(model) is model
    hf.apply_posenc_rope(model)  # patching twice changes nothing
    patched = [m for m in model.modules() if type(m) is not original and isinstance(m, original)]
    assert len(patched) == SMALL["num_hidden_layers"]
    assert {type(m).__name__ for m in patched} == {"Posenc" + original.__name__}
    assert type(patched[0]).__bases__ == (original,)
    assert not hf.is_patched(other) and type(other.model.layers[0].self_attn) is original
    counter = CountPosencCalls()
    with torch.no_grad(), counter:
        other(tokens)
    assert counter.calls == 0
    for copied in (copy.deepcopy(model), model._replicate_for_data_parallel()):  # (what nn.DataParallel makes)
        assert hf.is_patched(copied)
        counter = CountPosencCalls()
        with torch.no_grad(), counter:
            assert torch.equal(copied(tokens).logits, model(tokens).logits)
        assert counter.calls == 2 * SMALL["num_hidden_layers"]
    hf.remove_posenc_rope(model)
    assert not hf.is_patched(model) and type(model.model.layers[0].self_attn) is original
    counter = CountPosencCalls()
    with torch.no_grad(), counter:
        model(tokens)
    assert counter.calls == 0


def test_a_pickled_patched_model_loads_patched_in_a_fresh_process(hf, tmp_path):
    import pickle
    import subprocess

    model = hf.apply_posenc_rope(small_model("qwen2"))
    tokens = torch.randint(3, SMALL["vocab_size"], (1, 9))
    with torch.no_grad():
        expected = model(tokens).logits
    torch.save({"model": model, "tokens": tokens, "logits": expected}, tmp_path / "model.pt")
    assert hf.is_patched(pickle.loads(pickle.dumps(model)))
    check = f"""
import sys, torch
sys.path.insert(0, {os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")!r})
saved = torch.load({str(tmp_path / "model.pt")!r}, weights_only=False)
import posenc.integrations.transformers as hf
model = saved["model"]
assert hf.is_patched(model), [type(m).__name__ for m in model.modules()]
assert type(model.model.layers[0].self_attn).__name__ == "PosencQwen2Attention"
with torch.no_grad():
    assert torch.equal(model(saved["tokens"]).logits, saved["logits"])
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-3000:]


def test_instance_forwards_are_refused_unchanged(hf):
    model = small_model("llama")
    attention = model.model.layers[1].self_attn
    attention.forward = lambda *args, **kwargs: type(attention).forward(attention, *args, **kwargs)
    with pytest.raises(ValueError, match="has a forward of its own"):
        hf.apply_posenc_rope(model)
    assert not hf.is_patched(model)


def test_unsupported_models_are_refused_unchanged(hf, monkeypatch):
    # A rotary function whose arguments are none of posenc's calls (CLVP rotates v too).
    def apply_rotary_pos_emb_qkv(q, k, v, cos, sin, position_ids=None, unsqueeze_dim=1):
        return q, k, v

    model = small_model("llama")
    with monkeypatch.context() as patch:
        patch.setattr(modeling_of(model), "apply_rotary_pos_emb", apply_rotary_pos_emb_qkv)
        with pytest.raises(ValueError, match=r"apply_rotary_pos_emb_qkv cannot be replaced: its arguments \(q, k, v, "
                                             r"cos, sin, position_ids, unsqueeze_dim\) are none of the calls"):
            hf.apply_posenc_rope(model)
    assert not hf.is_patched(model)
    with pytest.raises(ValueError, match="takes a transformers model"):
        hf.apply_posenc_rope(torch.nn.Linear(2, 2))
    bert = transformers.BertModel(transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                          intermediate_size=32, vocab_size=32))
    with pytest.raises(ValueError, match="no module of this 'bert' model .* calls a rotary function"):
        hf.apply_posenc_rope(bert)

    # A transformers whose apply_rotary_pos_emb or rotate_half means something else is refused, not
    # patched: in a generated copy (mistral) and in the files the forms come from (llama, gpt_neox).
    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        return q * cos, k * cos

    def rotate_half(x):
        return x

    for model_type, name, function in [("mistral", "apply_rotary_pos_emb", apply_rotary_pos_emb),
                                       ("llama", "apply_rotary_pos_emb", apply_rotary_pos_emb),
                                       ("gpt_neox", "apply_rotary_pos_emb", apply_rotary_pos_emb),
                                       ("llama", "rotate_half", rotate_half)]:
        model = small_model(model_type)
        with monkeypatch.context() as patch:
            patch.setattr(modeling_of(model), name, function)
            with pytest.raises(ValueError, match="cannot be replaced: it computes none of the rotations posenc"):
                hf.apply_posenc_rope(model)
        assert not hf.is_patched(model)
    # ... and served again once the file is what it was (the probe's cache follows the globals).
    assert hf.is_patched(hf.apply_posenc_rope(small_model("llama")))


def test_a_rotary_embedding_in_another_layout_is_refused(hf, monkeypatch):
    """LLaMA's function reads cos as cat(freqs, freqs); a rotary embedding that makes another
    layout would be rotated by other angles, so the model is refused at patching."""
    model = small_model("llama")
    rotary = type(model.model.rotary_emb)
    original = rotary.forward

    def forward(self, x, position_ids):
        cos, sin = original(self, x, position_ids)
        half = cos.shape[-1] // 2
        return cos[..., :half].repeat_interleave(2, dim=-1), sin[..., :half].repeat_interleave(2, dim=-1)

    monkeypatch.setattr(rotary, "forward", forward)
    with pytest.raises(ValueError, match="reads cos and sin as 'cat' .* its rotary embedding model.rotary_emb makes "
                                         "them otherwise"):
        hf.apply_posenc_rope(model)
    assert not hf.is_patched(model)


# (modeling file, function, what the probe must find): one function of every form 5.23.0 uses.
FORMS = [
    ("llama", "apply_rotary_pos_emb", "halves pairs, cos/sin cat, first R channels (whole heads), call qk"),
    ("phi3", "apply_rotary_pos_emb", "halves pairs, cos/sin cat, first R channels (R may be less than the head), "
                                     "call qk"),
    ("cohere", "apply_rotary_pos_emb", "interleaved pairs, cos/sin repeat, first R channels (whole heads), call qk"),
    ("glm", "apply_rotary_pos_emb", "interleaved pairs, cos/sin cat, first R channels (R may be less than the head), "
                                    "call qk"),
    ("gpt_oss", "apply_rotary_pos_emb", "halves pairs, cos/sin half, first R channels (whole heads), call qk"),
    ("deepseek_v3", "apply_rotary_pos_emb_interleave", "interleaved pairs, cos/sin cat, first R channels (whole "
                                                       "heads), written de-interleaved, call qk"),
    ("gemma4", "apply_rotary_pos_emb", "halves pairs, cos/sin cat, first R channels (whole heads), call x"),
    ("gptj", "apply_rotary_pos_emb", "interleaved pairs, cos/sin half, first R channels (whole heads), call x, "
                                     "q and k [B, L, H, D]"),
    ("deepseek_v4", "apply_rotary_pos_emb", "interleaved pairs, cos/sin half, last R channels (R may be less than "
                                            "the head), call x"),
    ("nanochat", "apply_rotary_pos_emb", "inverse halves pairs, cos/sin cat, first R channels (whole heads), "
                                         "call qk"),
    ("llama4", "apply_rotary_emb", "interleaved pairs, cos/sin half, first R channels (whole heads), call complex, "
                                   "q and k [B, L, H, D]"),
    ("deepseek_v2", "apply_rotary_emb", "interleaved pairs, cos/sin half, first R channels (whole heads), call "
                                        "complex, q and k [B, H, L, D]"),
]


@pytest.mark.parametrize("folder, name, expected", FORMS, ids=[f"{f}.{n}" for f, n, _ in FORMS])
def test_the_probe_finds_each_form_and_the_replacement_computes_it(hf, folder, name, expected):
    import importlib

    function = getattr(importlib.import_module(f"transformers.models.{folder}.modeling_{folder}"), name)
    form = hf.rotation_form(function)
    assert hf._describe_form(form) == expected
    # The replacement against the function on inputs the probe never saw: longer, other heads,
    # per-sequence rows, a 64-wide head (and 32 of it where the form rotates part of a head).
    generator = torch.Generator().manual_seed(7)
    for width in (64, 32) if form.partial else (64,):
        heads_first = form.heads_first if form.heads_first is not None else True
        shape = (3, 5, 29, 64) if heads_first else (3, 29, 5, 64)
        q = torch.randn(shape, generator=generator)
        k = torch.randn(shape[:1] + ((1, 29) if heads_first else (29, 1)) + (64,), generator=generator)
        angles = torch.rand(3, 29, width // 2, generator=generator) * 40
        laid = {"cat": lambda a: torch.cat((a, a), -1), "repeat": lambda a: a.repeat_interleave(2, -1),
                "half": lambda a: a}[form.layout]
        cos, sin = laid(angles.cos()), laid(angles.sin())
        extra = {} if form.heads_first is not None else {"unsqueeze_dim": 1}
        ours = hf.replacement_for(function)
        if form.call == "complex":
            freqs = torch.polar(torch.ones_like(angles), angles)
            pairs = zip(ours(q, k, freqs), function(q, k, freqs))
        elif form.call == "qk":
            pairs = zip(ours(q, k, cos, sin, **extra), function(q, k, cos, sin, **extra))
        else:
            pairs = [(ours(t, cos, sin, **extra), function(t, cos, sin, **extra)) for t in (q, k)]
        for our, their in pairs:
            assert our.shape == their.shape
            assert_close_to(our, their, 1e-6)


def test_calls_outside_the_supported_form_are_refused(hf):
    import importlib

    def replacement(folder):
        modeling = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
        return hf.replacement_for(modeling.apply_rotary_pos_emb), modeling

    rotate, _ = replacement("llama")
    q, k = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 5, 16)
    cos, sin = torch.randn(1, 5, 16), torch.randn(1, 5, 16)
    with pytest.raises(ValueError, match="unsqueeze_dim must be 1"):
        rotate(q, k, cos, sin, unsqueeze_dim=0)
    with pytest.raises(ValueError, match="must have one width"):
        rotate(q, k, cos[..., :8], sin[..., :8])
    with pytest.raises(ValueError, match="must have one width"):
        replacement("cohere")[0](q, k, cos[..., :8], sin[..., :8])
    with pytest.raises(ValueError, match=r"must be \[B, L, R\] or \[1, L, R\]"):
        rotate(q, k, cos[:, :4], sin[:, :4])
    with pytest.raises(ValueError, match="must not require grad"):
        rotate(q, k, cos.requires_grad_(), sin)
    with pytest.raises(TypeError, match="unexpected or repeated argument 'scale'"):
        rotate(q, k, cos, sin, scale=2)
    # [B, L, H, D] with unsqueeze_dim=2, and a partial rotation, are what transformers computes.
    partial, modeling = replacement("phi3")
    q2, k2 = q.transpose(1, 2), k.transpose(1, 2)
    c, s = cos.detach()[..., :4].repeat(1, 1, 2), sin[..., :4].repeat(1, 1, 2)  # as models make them
    for ours, theirs in zip(partial(q2, k2, c, s, unsqueeze_dim=2),
                            modeling.apply_rotary_pos_emb(q2, k2, c, s, unsqueeze_dim=2)):
        assert_close_to(ours, theirs, 1e-6)


@requires_torch(2, 5, "torch.compile of transformers 5 models")
def test_compiled_generation(hf):
    patched = hf.apply_posenc_rope(small_model("llama"))
    reference = small_model("llama")
    prompt = torch.randint(3, SMALL["vocab_size"], (1, 5))
    torch._dynamo.reset()
    graphs = []
    patched.forward = torch.compile(patched.forward, backend=recording_inductor(graphs))
    kwargs = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(patched.generate(prompt, **kwargs), reference.generate(prompt, **kwargs))
    assert graphs and all(code.count("posenc.apply_rotary_qk") == SMALL["num_hidden_layers"] for code in graphs
                          if "apply_rotary" in code), graphs
    assert any("posenc.apply_rotary_qk" in code for code in graphs)


def test_left_padded_batch_generation(hf):
    """generate with a left-padded batch: per-sequence position ids, [B, L, R] cos and sin, while
    prefilling and decoding."""
    reference = small_model("llama")
    patched = hf.apply_posenc_rope(small_model("llama"))
    ids = torch.randint(3, SMALL["vocab_size"], (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    ids[1, :3], mask[1, :3] = 0, 0
    kwargs = dict(attention_mask=mask, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(patched.generate(ids, **kwargs), reference.generate(ids, **kwargs))


@pytest.mark.parametrize("model_type", ["llama", "gpt_neox"])
def test_per_sequence_position_ids(hf, model_type):
    """Position ids that differ per sequence (left padding, packed or continued sequences): cos and
    sin are [B, L, R], one row per token."""
    reference = small_model(model_type)
    patched = hf.apply_posenc_rope(small_model(model_type))
    tokens = torch.randint(3, SMALL["vocab_size"], (3, 10))
    position_ids = torch.stack([torch.arange(10), torch.arange(5, 15), torch.tensor([0, 1, 2, 0, 1, 2, 3, 4, 0, 1])])
    counter = CountPosencCalls()
    with torch.no_grad(), counter:
        logits = patched(tokens, position_ids=position_ids).logits
    assert counter.calls == SMALL["num_hidden_layers"]
    with torch.no_grad():
        assert_close_to(logits, reference(tokens, position_ids=position_ids).logits, 1e-6)


def test_q_only_calls_answer_as_the_models_function(hf):
    """k=None: Qwen4-exp's function returns q alone, Mistral Large 4's (its shared-KV layers) the
    pair (q, None); DeepSeek-V3's takes no k=None. The probe finds which, the replacement answers
    the same, and a function that takes no k=None is not called with one."""
    import importlib

    torch.manual_seed(4)
    q = torch.randn(2, 4, 5, 16)
    angles = torch.rand(2, 5, 8) * 30
    cos, sin = torch.cat((angles.cos(), angles.cos()), -1), torch.cat((angles.sin(), angles.sin()), -1)
    for folder, name, kind in [("qwen4_exp", "apply_rotary_pos_emb", "q"),
                               ("mistral_large4", "apply_rotary_pos_emb_interleave", "pair"),
                               ("deepseek_v3", "apply_rotary_pos_emb_interleave", None)]:
        function = getattr(importlib.import_module(f"transformers.models.{folder}.modeling_{folder}"), name)
        assert hf.rotation_form(function).k_none == kind, folder
        ours = hf.replacement_for(function)
        if kind is None:
            with pytest.raises(ValueError, match="k must be a tensor"):
                ours(q, None, cos, sin)
            continue
        theirs, mine = function(q, None, cos, sin), ours(q, None, cos, sin)
        if kind == "pair":
            assert mine[1] is None and theirs[1] is None
            theirs, mine = theirs[0], mine[0]
        assert isinstance(mine, torch.Tensor) and mine.shape == theirs.shape
        assert_close_to(mine, theirs, 1e-6)


def test_cos_cut_along_its_last_axis_at_a_call_is_refused(hf):
    """MiniMax M3's indexer passes cos[..., :index_head_dim] to the rotary function: the layout
    checked on the rotary embedding's tables is not what reaches the function (with an index head
    narrower than the rotary, posenc would read other values), so such a call is refused."""
    sys.path.insert(0, os.path.dirname(__file__))
    import transformers_sweep

    config = transformers_sweep.small_config("minimax_m3_vl_text", layer_types=["minimax_m3_sparse", "full_attention"],
                                             num_hidden_layers=2, index_head_dim=8)
    from transformers.models.minimax_m3_vl import modeling_minimax_m3_vl as modeling

    model = modeling.MiniMaxM3VLTextModel(config).eval()
    with pytest.raises(ValueError, match=r"MiniMaxM3VLIndexer.forward passes cos\[\.\.\., :self.head_dim\] to "
                                         "apply_rotary_pos_emb: cos/sin cut along their last axis"):
        hf.apply_posenc_rope(model)
    assert not hf.is_patched(model)


def test_a_model_without_weights_is_refused(hf):
    with torch.device("meta"):
        model = small_model("llama")
    with pytest.raises(ValueError, match="on the meta device .* patch the model once its weights are loaded"):
        hf.apply_posenc_rope(model)
    assert not hf.is_patched(model)


def test_a_patched_module_makes_a_class_it_lacks_on_first_use(hf):
    """A process that has patched other classes of a modeling file (or none of this one) still
    unpickles a model whose layers are another class of it: the patched module makes the class
    when pickle asks for it."""
    import pickle

    model = hf.apply_posenc_rope(small_model("mistral"))
    data = pickle.dumps(model)
    module = sys.modules[hf.PATCHED_MODULE_PREFIX + "modeling_mistral"]
    del module.__dict__["PosencMistralAttention"]
    restored = pickle.loads(data)
    assert type(restored.model.layers[0].self_attn).__name__ == "PosencMistralAttention" and hf.is_patched(restored)
    tokens = torch.randint(3, SMALL["vocab_size"], (1, 7))
    with torch.no_grad():
        assert torch.equal(restored(tokens).logits, model(tokens).logits)
    with pytest.raises(AttributeError, match="has no attribute 'PosencNoSuchClass'"):
        getattr(module, "PosencNoSuchClass")

"""posenc's RoPE scaling variants against Hugging Face transformers' own code (pinned in
scripts/setup.sh): the frequencies and attention factors of `ROPE_INIT_FUNCTIONS` (and the
models' default), and the queries/keys that `LlamaRotaryEmbedding` + `apply_rotary_pos_emb` rotate,
at positions near the end of the range, for configs in both forms (transformers 4's
`rope_theta` + `rope_scaling`, transformers 5's `rope_parameters`).

posenc's side is the real path a user takes: config.json -> posenc::io::read_hf_rope_config ->
RotaryEmbedding -> `posenc export --hf-config` (TorchScript), loaded here with torch.jit.load.

Tolerances. HF computes frequencies in float32 (`base ** (arange / dim)` in float32) and angles in
float32 (`inv_freq @ position_ids` under `.float()`): at position p its angle error is about
p * 2^-24 radians, i.e. ~1e-3 near position 16k. posenc computes both in float64 and rounds
cos/sin once. So each comparison is made against a float64 evaluation of HF's own functions
(`ROPE_INIT_FUNCTIONS` run with torch.float/torch.float32 mapped to float64), and asserts that
posenc's error is no larger than HF's (plus one float32 ulp of the output), and that posenc and HF
differ by no more than the sum of both errors.
"""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is installed in the pip test environment only (scripts/setup.sh)")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb  # noqa: E402

from model_types import float64_everywhere  # noqa: E402,F401  (transformers' float32 read as float64)

HEAD_DIM = 64
HEADS = 4
MAX_POS = 2048
ORIGINAL = 512


def longrope_factors(scale, pairs=HEAD_DIM // 2):
    return [1.0 + scale * i / pairs for i in range(pairs)]


# name -> (rope type, its parameters), for max_position_embeddings MAX_POS
VARIANTS = {
    "default": ("default", {}),
    "linear": ("linear", {"factor": 4.0}),
    "dynamic": ("dynamic", {"factor": 2.0}),
    "yarn": ("yarn", {"factor": 4.0, "original_max_position_embeddings": ORIGINAL}),
    "yarn_no_truncate": ("yarn", {"factor": 4.0, "original_max_position_embeddings": ORIGINAL, "truncate": False, "beta_fast": 16, "beta_slow": 2}),
    "yarn_deepseek": ("yarn", {"factor": 4.0, "original_max_position_embeddings": ORIGINAL, "mscale": 0.707, "mscale_all_dim": 1.0}),
    "yarn_attention_factor": ("yarn", {"factor": 4.0, "original_max_position_embeddings": ORIGINAL, "attention_factor": 1.25}),
    "longrope": ("longrope", {"short_factor": longrope_factors(0.5), "long_factor": longrope_factors(8.0), "original_max_position_embeddings": ORIGINAL}),
    "llama3": ("llama3", {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": ORIGINAL}),
    # Llama 4 Scout: low_freq_factor == high_freq_factor (one bound, no smoothing band)
    "llama3_one_bound": ("llama3", {"factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0, "original_max_position_embeddings": ORIGINAL}),
    # Gemma 4's full-attention layers: a quarter of the pairs turn, the others not at all
    "proportional": ("proportional", {"partial_rotary_factor": 0.25, "factor": 2.0}),
}


def config_dict(name, form, theta=500000.0, partial=None):
    rope_type, parameters = VARIANTS[name]
    config = {"hidden_size": HEAD_DIM * HEADS, "num_attention_heads": HEADS, "num_key_value_heads": 2,
              "max_position_embeddings": MAX_POS, "intermediate_size": 64, "num_hidden_layers": 1}
    if partial is not None:
        config["partial_rotary_factor"] = partial
        if rope_type == "longrope":  # one factor per rotated pair
            pairs = int(HEAD_DIM * partial) // 2
            parameters = {**parameters, "short_factor": longrope_factors(0.5, pairs), "long_factor": longrope_factors(8.0, pairs)}
    if form == "v4":
        config["rope_theta"] = theta
        if rope_type != "default":
            config["rope_scaling"] = {"rope_type": rope_type, **parameters}
    else:
        config["rope_parameters"] = {"rope_type": rope_type, "rope_theta": theta, **parameters}
    return config


def hf_config(config):
    return LlamaConfig(**json.loads(json.dumps(config)))


def hf_frequencies(config, seq_len=None):
    """inv_freq and attention factor from transformers' own functions."""
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":
        return LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    return ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)


def hf_frequencies_float64(config, seq_len=None):
    with float64_everywhere():
        inv_freq, factor = hf_frequencies(config, seq_len)
    assert inv_freq.dtype == torch.float64
    return inv_freq, factor


def export(posenc_cli, tmp_path, config, *extra):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "rope.pt"
    result = subprocess.run([posenc_cli, "export", "--module", "rotary", "--hf-config", str(path), "--heads-first", "-o", str(out), *extra],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return torch.jit.load(str(out))


def rotate_reference(q, k, positions, inv_freq64, factor):
    """HF's apply_rotary_pos_emb on float64 inputs with float64 cos/sin of float64 angles."""
    angles = positions.to(torch.float64)[:, None] * inv_freq64[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    cos = (emb.cos() * factor)[None]
    sin = (emb.sin() * factor)[None]
    q_rot = q.to(torch.float64)
    k_rot = k.to(torch.float64)
    rotary = cos.shape[-1]
    q_out, k_out = apply_rotary_pos_emb(q_rot[..., :rotary], k_rot[..., :rotary], cos, sin)
    return torch.cat((q_out, q_rot[..., rotary:]), -1), torch.cat((k_out, k_rot[..., rotary:]), -1)


def hf_rotate(module, q, k, positions):
    cos, sin = module(q, positions[None])
    rotary = cos.shape[-1]
    q_out, k_out = apply_rotary_pos_emb(q[..., :rotary], k[..., :rotary], cos, sin)
    return torch.cat((q_out, q[..., rotary:]), -1), torch.cat((k_out, k[..., rotary:]), -1)


def max_error(value, reference):
    return (value.to(torch.float64) - reference).abs().max().item()


@pytest.mark.parametrize("form", ["v4", "v5"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_frequencies_and_attention_factor_match_transformers(posenc_cli, tmp_path, name, form):
    config = config_dict(name, form)
    exported = export(posenc_cli, tmp_path, config)
    hf = hf_config(config)
    inv_freq, factor = hf_frequencies(hf)
    inv_freq64, factor64 = hf_frequencies_float64(hf)
    ours = exported.inv_freq
    assert ours.dtype == torch.float64 and ours.shape == inv_freq64.shape
    # posenc is float64 throughout: a few ulp from HF's functions evaluated in float64.
    torch.testing.assert_close(ours, inv_freq64, rtol=1e-14, atol=0)
    # HF's float32 frequencies: within float32 rounding of a pow (a few ulp of float32).
    torch.testing.assert_close(ours.float(), inv_freq, rtol=4e-7, atol=0)
    assert (ours - inv_freq64).abs().max() <= (inv_freq.double() - inv_freq64).abs().max()
    # The attention factor: cos/sin carry it (the cache's first cos is the factor itself).
    assert math.isclose(factor, factor64, rel_tol=1e-15)
    assert math.isclose(exported.attention_factor, factor, rel_tol=1e-15)
    assert math.isclose(exported.cos[0, 0].item(), factor, rel_tol=1e-7)


@pytest.mark.parametrize("form", ["v4", "v5"])
@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("partial", [None, 0.5])
def test_rotated_queries_and_keys_match_transformers_near_the_end(posenc_cli, tmp_path, name, form, partial):
    if name == "default" and partial is not None:
        pytest.skip("LLaMA's default RoPE ignores partial_rotary_factor (models with partial rotary define their own default)")
    config = config_dict(name, form, partial=partial)
    exported = export(posenc_cli, tmp_path, config)
    hf = hf_config(config)
    q, k, offset, hf_qk, reference = near_the_end(hf)
    assert_not_worse_than_transformers((exported(q, offset), exported(k, offset)), hf_qk, reference)


def near_the_end(hf, length=16):
    """Random q [2, HEADS, L, D] and k [2, 2, L, D] at the last `length` positions of the context,
    rotated by LlamaRotaryEmbedding + apply_rotary_pos_emb and by the float64 reference."""
    torch.manual_seed(0)
    q = torch.randn(2, HEADS, length, HEAD_DIM)
    k = torch.randn(2, 2, length, HEAD_DIM)
    offset = MAX_POS - length
    positions = torch.arange(offset, offset + length)
    inv_freq64, factor = hf_frequencies_float64(hf, seq_len=offset + length)
    return (q, k, offset, hf_rotate(LlamaRotaryEmbedding(hf), q, k, positions),
            rotate_reference(q, k, positions, inv_freq64, factor))


def assert_not_worse_than_transformers(ours_qk, hf_qk, reference_qk):
    for ours, theirs, reference in zip(ours_qk, hf_qk, reference_qk):
        ulp = 2 ** -23 * reference.abs().max().item()
        ours_error, hf_error = max_error(ours, reference), max_error(theirs, reference)
        assert ours_error <= hf_error + ulp, f"posenc's error {ours_error:.3g} exceeds HF's {hf_error:.3g}"
        assert ours_error <= 4 * ulp
        assert max_error(ours, theirs.double()) <= ours_error + hf_error + 1e-12


@pytest.fixture(scope="module")
def posenc_package(posenc_ops):  # (the fixture checks POSENC_LIBRARY, which the package reads)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
    import posenc

    return posenc


@pytest.mark.parametrize("name", list(VARIANTS))
def test_python_module_from_a_transformers_config_matches_transformers(posenc_package, name):
    """posenc.nn.RotaryEmbedding.from_hf_config(transformers.LlamaConfig): the config as
    transformers holds it (to_json_string), read by posenc's reader, rotating as transformers."""
    hf = hf_config(config_dict(name, "v5", partial=None if name == "default" else 0.5))
    module = posenc_package.nn.RotaryEmbedding.from_hf_config(hf, heads_first=True)
    q, k, offset, hf_qk, reference = near_the_end(hf)
    assert_not_worse_than_transformers(module.forward_qk(q, k, offset), hf_qk, reference)


@pytest.mark.parametrize("max_len", [2 * MAX_POS, None])
@pytest.mark.parametrize("name", ["dynamic", "longrope"])
def test_prefill_past_the_context_then_decoding_matches_transformers(posenc_cli, tmp_path, name, max_len):
    """dynamic and longrope frequencies follow the call's length: a prefill past the context and
    then single-token decoding steps, as HF's stateful module sees them (its sequence only grows,
    where posenc's stateless rule and HF's agree). Exported with caches past the context, and with
    none (max_len None: the config's max_position_embeddings): past it the rows are computed per
    call by default, as extending the context is what these types are for."""
    config = config_dict(name, "v5")
    exported = export(posenc_cli, tmp_path, config, *([] if max_len is None else ["--max-len", str(max_len)]))
    hf = hf_config(config)
    module = LlamaRotaryEmbedding(hf)
    torch.manual_seed(1)
    prefill = MAX_POS + 100
    q = torch.randn(1, HEADS, prefill + 2, HEAD_DIM)
    k = torch.randn(1, 2, prefill + 2, HEAD_DIM)
    steps = [(0, prefill), (prefill, prefill + 1), (prefill + 1, prefill + 2)]
    for start, end in steps:
        positions = torch.arange(start, end)
        q_step, k_step = q[:, :, start:end], k[:, :, start:end]
        q_hf, k_hf = hf_rotate(module, q_step, k_step, positions)
        inv_freq64, factor = hf_frequencies_float64(hf, seq_len=end)
        q_ref, k_ref = rotate_reference(q_step, k_step, positions, inv_freq64, factor)
        q_ours, k_ours = exported(q_step, start), exported(k_step, start)
        for ours, theirs, reference in ((q_ours, q_hf, q_ref), (k_ours, k_hf, k_ref)):
            ulp = 2 ** -23 * reference.abs().max().item()
            ours_error, hf_error = max_error(ours, reference), max_error(theirs, reference)
            assert ours_error <= hf_error + ulp
            assert ours_error <= 4 * ulp


def test_an_exported_config_of_a_fixed_rope_type_refuses_past_its_context(posenc_cli, tmp_path):
    """The fixed rope types keep the refusal past max_position_embeddings (a model trained to that
    length) unless --extrapolate is given; dynamic and longrope extend (above)."""
    config = config_dict("linear", "v5")
    q = torch.randn(1, HEADS, 4, HEAD_DIM)
    with pytest.raises((RuntimeError, torch.jit.Error), match="max_len"):  # (TorchScript's error type)
        export(posenc_cli, tmp_path, config)(q, MAX_POS - 2)
    assert export(posenc_cli, tmp_path, config, "--extrapolate")(q, MAX_POS - 2).shape == q.shape


def test_rope_command_prints_transformers_frequencies(posenc_cli, tmp_path):
    config = config_dict("llama3", "v4")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = subprocess.run([posenc_cli, "rope", "--hf-config", str(path), "--format", "csv"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    rows = [line.split(",") for line in result.stdout.splitlines()[1:] if not line.startswith("#")]
    printed = torch.tensor([float(row[1]) for row in rows], dtype=torch.float64)
    inv_freq64, _ = hf_frequencies_float64(hf_config(config))
    torch.testing.assert_close(printed, inv_freq64, rtol=1e-15, atol=0)
    wavelengths = torch.tensor([float(row[2]) for row in rows], dtype=torch.float64)
    torch.testing.assert_close(wavelengths, 2 * math.pi / inv_freq64, rtol=1e-15, atol=0)
    assert result.stdout.splitlines()[-1] == "# attention_factor,1"


# --- settings given twice: read with transformers 5.23's precedence ----------------------------

BASE = {"hidden_size": HEAD_DIM * HEADS, "num_attention_heads": HEADS, "num_key_value_heads": 2,
        "max_position_embeddings": MAX_POS, "intermediate_size": 64, "num_hidden_layers": 1}
TWICE = {
    # a non-empty rope_scaling wins over rope_parameters (convert_rope_params_to_dict: `rope_scaling or ...`)
    "both_forms": {"rope_theta": 500000.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0},
                   "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}},
    # an empty rope_scaling does not, nor any other value Python reads as false
    "empty_rope_scaling": {"rope_scaling": {}, "rope_parameters": {"rope_type": "linear", "factor": 3.0, "rope_theta": 20000.0}},
    "false_rope_scaling": {"rope_scaling": False, "rope_parameters": {"rope_type": "linear", "factor": 3.0, "rope_theta": 20000.0}},
    # rope_type over type
    "rope_type_and_type": {"rope_parameters": {"rope_type": "linear", "type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}},
    # rope_theta inside the block over the one beside it
    "theta_twice": {"rope_theta": 10000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}},
    # a top-level original_max_position_embeddings over the block's
    "original_twice": {"original_max_position_embeddings": 256, "rope_parameters": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024, "rope_theta": 500000.0}},
    # head_dim over hidden_size / num_attention_heads
    "head_dim_twice": {"head_dim": 32, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}},
}


@pytest.mark.parametrize("name", list(TWICE))
def test_settings_given_twice_are_read_as_transformers_reads_them(posenc_cli, tmp_path, name):
    """A config.json that holds a setting in two forms with different values: posenc's reader
    (through the CLI export) gives the frequencies of transformers' own reading of that config."""
    config = {**BASE, **TWICE[name]}
    exported = export(posenc_cli, tmp_path, config)
    hf = hf_config(config)
    inv_freq64, factor64 = hf_frequencies_float64(hf)
    assert exported.inv_freq.shape == inv_freq64.shape
    torch.testing.assert_close(exported.inv_freq, inv_freq64, rtol=1e-14, atol=0)
    assert math.isclose(exported.attention_factor, factor64, rel_tol=1e-15)


# --- the audit: what posenc did with each key -----------------------------------------------------

def audit(posenc_cli, path, *extra):
    result = subprocess.run([posenc_cli, "rope", "--hf-config", str(path), "--audit", "--format", "csv", *extra],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    import csv
    import io
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    return {row["key"]: row for row in rows}, result.stderr


# model type -> the keys of transformers' own default config that posenc must report as not applied
# (the rule each stands for is in the model's code); none left among these: Llama 4's pairs
# (2i, 2i + 1), its layers without rotary and their query temperature are applied
NOT_APPLIED = {
    "deepseek_v3": [],  # MLA's width and regrouping are applied (test_rope_model_types.py)
    "llama4_text": [],  # its pairs, layers without rotary and query temperature are applied
    "ministral3": [],  # its query temperature (llama_4_scaling_beta) is applied
    "smollm3": [],  # its layers without rotary are listed (HfRopeConfig::rotary_layers)
    "cohere": [],  # its pairing is applied (test_model_types_that_pair_neighbours_...)
    "glm4": [],
    "llama": [],
    "qwen2": [],
}


@pytest.mark.parametrize("model_type", list(NOT_APPLIED))
def test_audit_names_the_rules_of_transformers_default_configs(posenc_cli, tmp_path, model_type):
    from transformers import AutoConfig
    path = tmp_path / "config.json"
    AutoConfig.for_model(model_type).to_json_file(str(path))
    rows, stderr = audit(posenc_cli, path)
    flagged = sorted(key for key, row in rows.items() if row["status"] in ("ignored", "unknown") and
                     "does not read it" not in row["reason"] and "wins" not in row["reason"] and
                     "gives the head width" not in row["reason"] and "is read" not in row["reason"])
    assert flagged == sorted(NOT_APPLIED[model_type]), rows
    for key in NOT_APPLIED[model_type]:
        assert key in stderr, stderr  # the warning names it
    assert ("Warning" in stderr) == bool(NOT_APPLIED[model_type])
    for row in rows.values():
        assert row["status"] in ("used", "default", "ignored", "unknown") and row["reason"], row
    strict = subprocess.run([posenc_cli, "rope", "--hf-config", str(path), "--strict"], capture_output=True, text=True)
    assert (strict.returncode == 0) == (not NOT_APPLIED[model_type]), strict.stderr
    if NOT_APPLIED[model_type]:
        assert "posenc does not apply " + NOT_APPLIED[model_type][0] in strict.stderr, strict.stderr


def test_audit_follows_transformers_precedence_and_defaults(posenc_cli, tmp_path):
    config = config_dict("yarn", "v4")
    config["rope_parameters"] = {"rope_type": "linear", "factor": 9.0}  # rope_scaling wins (5.23)
    config["rope_scaling"]["mystery"] = 1
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    rows, stderr = audit(posenc_cli, path)
    assert rows["rope_scaling"]["status"] == "used"
    assert rows["rope_parameters"]["status"] == "ignored" and "rope_scaling or rope_parameters" in rows["rope_parameters"]["reason"]
    assert rows["rope_scaling.factor"]["status"] == "used" and rows["rope_scaling.factor"]["value"] == "4.0"
    assert rows["rope_scaling.beta_fast"] == {"key": "rope_scaling.beta_fast", "status": "default", "value": "32.0",
                                              "reason": "absent: transformers' default"}
    assert rows["rope_scaling.mystery"]["status"] == "unknown"
    assert "rope_scaling.mystery" in stderr
    # and transformers itself reads the same: yarn with factor 4
    hf = hf_config(config)
    assert hf.rope_parameters["rope_type"] == "yarn" and hf.rope_parameters["factor"] == 4.0


# --- model types whose code pairs (2i, 2i + 1) ------------------------------------------------------

INTERLEAVED_TYPES = ["cohere", "cohere2", "cohere2_moe", "ernie4_5", "ernie4_5_moe", "glm", "glm4", "helium"]


@pytest.mark.parametrize("model_type", INTERLEAVED_TYPES)
def test_model_types_that_pair_neighbours_rotate_as_their_own_code(posenc_cli, tmp_path, model_type):
    """The pairing is in these models' code, not in their config.json: posenc's reader sets it from
    model_type. transformers' default config of the type (small sizes; GLM's partial rotation kept),
    its own rotary class and apply_rotary_pos_emb against the exported module, near the end of the
    context. Tolerance as above: posenc no further from the float64 evaluation of the same code than
    transformers' float32."""
    import importlib
    from transformers import AutoConfig
    config = AutoConfig.for_model(model_type, hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                  max_position_embeddings=512, num_hidden_layers=1, intermediate_size=64)
    path = tmp_path / "config.json"
    config.to_json_file(str(path))
    out = tmp_path / "rope.pt"
    result = subprocess.run([posenc_cli, "export", "--module", "rotary", "--hf-config", str(path), "--heads-first", "-o", str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr  # nothing left unapplied
    exported = torch.jit.load(str(out))
    modeling = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    rotary_class = next(getattr(modeling, name) for name in dir(modeling) if name.endswith("RotaryEmbedding"))
    torch.manual_seed(0)
    length, offset = 16, 512 - 16
    q, k = torch.randn(2, 4, length, 32), torch.randn(2, 2, length, 32)
    positions = torch.arange(offset, offset + length)[None].expand(2, length)
    cos, sin = rotary_class(config=config)(q, positions)
    q_hf, k_hf = modeling.apply_rotary_pos_emb(q, k, cos, sin)
    with float64_everywhere():  # the same code in float64: the reference
        cos64, sin64 = rotary_class(config=config)(q.double(), positions)
    q_ref, k_ref = modeling.apply_rotary_pos_emb(q.double(), k.double(), cos64.double(), sin64.double())
    for ours, theirs, reference in ((exported(q, offset), q_hf, q_ref), (exported(k, offset), k_hf, k_ref)):
        ulp = 2 ** -23 * reference.abs().max().item()
        ours_error, hf_error = max_error(ours, reference), max_error(theirs, reference)
        assert ours_error <= hf_error + ulp, f"posenc's error {ours_error:.3g} exceeds HF's {hf_error:.3g}"
        assert ours_error <= 4 * ulp
    # --pairing still chooses, and the halves differ from the model's rotation
    subprocess.run([posenc_cli, "export", "--module", "rotary", "--hf-config", str(path), "--heads-first", "--pairing",
                    "half_split", "-o", str(out)], check=True, capture_output=True)
    assert max_error(torch.jit.load(str(out))(q, offset), q_ref) > 0.1


# --- each model type's own defaults -------------------------------------------------------------------

def transformers_defaults():
    """(model type, rope_theta, partial_rotary_factor, head width) that transformers takes for a
    config.json of that type giving none of them (its configuration class's default_theta, the
    share its __init__ sets by default, its head_dim default), for every model type it registers whose config takes
    num_attention_heads, hidden_size and max_position_embeddings and holds one set of rope
    parameters."""
    import warnings
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    cases = []
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        fields = dict(num_attention_heads=4, hidden_size=128, max_position_embeddings=512)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                config = AutoConfig.for_model(model_type, **fields)
                text = config.get_text_config()
        except Exception:  # composite or encoder configs that take other fields
            continue
        parameters = getattr(text, "rope_parameters", None)
        if (text is not config or not isinstance(parameters, dict) or "rope_theta" not in parameters
                or any(getattr(text, name, None) != value for name, value in fields.items())):
            continue
        head_dim = getattr(text, "head_dim", None) or fields["hidden_size"] // fields["num_attention_heads"]
        cases.append((model_type, float(parameters["rope_theta"]), float(parameters.get("partial_rotary_factor") or 1.0), head_dim))
    return cases


def test_every_model_types_default_base_and_share_are_transformers(posenc_package, posenc_cli, tmp_path):
    """A config.json that names its model type and leaves out rope_theta and partial_rotary_factor
    (as many on the Hub do), and head_dim, is read with that type's own defaults, for every model
    type of transformers 5.23.0 that such a config can describe (more than two hundred; MiniMax's
    base 5e6, Helium's 1e5, GLM's share 0.5, Gemma's head 256, Zamba2's 2 * hidden / heads, ...):
    each by posenc's C++ reader in this process (posenc.nn.read_hf_rope_config), and every eighth by
    `posenc rope --hf-config` (the same reader; a process each, about 0.5 s), which must print what
    the reader read."""
    import re
    import warnings
    from concurrent.futures import ThreadPoolExecutor
    cases = transformers_defaults()
    assert len(cases) > 200, len(cases)
    assert len({case[1:] for case in cases}) > 10, cases  # (types with defaults of their own among them)

    def config(model_type):
        return {"model_type": model_type, "num_attention_heads": 4, "hidden_size": 128, "max_position_embeddings": 512}

    def expected(case):
        model_type, theta, partial, head_dim = case
        if int(head_dim * partial) % 2:  # an odd rotated width (Moonshine-Streaming's 0.8 of 32): refused
            return "must be even"
        return theta, head_dim, int(head_dim * partial)  # the rotated width: int(head_dim * partial)

    def read(case):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = posenc_package.nn.read_hf_rope_config(config(case[0]))["module"]
        except ValueError as error:
            return "must be even" if "must be even" in str(error) else str(error)[-200:]
        return module["base"], module["head_dim"], module["rotary_dim"]

    mismatches = [(case[0], ours, expected(case)) for case, ours in zip(cases, map(read, cases)) if ours != expected(case)]
    assert not mismatches, mismatches

    def printed(case):
        path = tmp_path / f"{case[0]}.json"
        path.write_text(json.dumps(config(case[0])))
        result = subprocess.run([posenc_cli, "rope", "--hf-config", str(path)], capture_output=True, text=True)
        if result.returncode != 0:
            return "must be even" if "must be even" in result.stderr else result.stderr.strip()[-200:]
        match = re.search(r"rope_theta (\S+), head_dim (\d+), rotary_dim (\d+)", result.stdout)
        return float(match.group(1)), int(match.group(2)), int(match.group(3))

    sample = cases[::8] + [case for case in cases if expected(case) == "must be even"][:1]
    with ThreadPoolExecutor(4) as pool:
        different = [(case[0], ours, expected(case)) for case, ours in zip(sample, pool.map(printed, sample))
                     if ours != expected(case)]
    assert not different, different


HUNYUAN_ROPE = {"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0, "rope_theta": 10000.0, "beta_fast": 32, "beta_slow": 1,
                "mscale": 1.0, "mscale_all_dim": 1.0}  # Hunyuan-A13B's block, as its config.json holds it


@pytest.mark.parametrize("model_type, rotary_name", [("hunyuan_v1_dense", "HunYuanDenseV1RotaryEmbedding"),
                                                     ("hunyuan_v1_moe", "HunYuanMoEV1RotaryEmbedding")])
def test_hunyuan_reads_dynamic_with_alpha_as_ntk_alpha(posenc_package, posenc_cli, tmp_path, model_type, rotary_name):
    """Hunyuan's checkpoints say "dynamic" with a fixed alpha; their rotary class reads it as
    NTK-alpha (base * alpha^(R / (R - 2)) at every length). posenc reads it the same way from the
    model type (rope type ntk_alpha), through the CLI export and Python, against the model's own
    rotary class and apply_rotary_pos_emb at positions near and past max_position_embeddings."""
    import importlib
    modeling = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    rotary_class = getattr(modeling, rotary_name)
    config = {"model_type": model_type, "hidden_size": HEAD_DIM * HEADS, "num_attention_heads": HEADS, "num_key_value_heads": 2,
              "head_dim": HEAD_DIM, "max_position_embeddings": MAX_POS, "rope_parameters": HUNYUAN_ROPE}
    hf = transformers.AutoConfig.for_model(**json.loads(json.dumps(config)))
    theirs = rotary_class(hf)
    assert theirs.rope_type == "ntk_alpha"
    with float64_everywhere():
        inv_freq64, factor = rotary_class.compute_ntk_alpha_rope_parameters(hf)
    exported = export(posenc_cli, tmp_path, config, "--max-len", str(2 * MAX_POS))
    module = posenc_package.nn.RotaryEmbedding.from_hf_config(hf, heads_first=True, max_len=2 * MAX_POS)
    assert module.rope_type == "ntk_alpha" and module._long_inv_freq is None
    torch.testing.assert_close(exported.inv_freq, inv_freq64, rtol=1e-14, atol=0)
    torch.testing.assert_close(module.inv_freq, inv_freq64, rtol=1e-14, atol=0)
    assert exported.switch_len == -1 and factor == 1.0  # fixed frequencies: no switch by length
    torch.manual_seed(0)
    length = 16
    q = torch.randn(2, HEADS, length, HEAD_DIM)
    k = torch.randn(2, 2, length, HEAD_DIM)
    for offset in (MAX_POS - length, 2 * MAX_POS - length):  # near the context, and past it
        positions = torch.arange(offset, offset + length)
        cos, sin = theirs(q, positions[None])
        hf_qk = modeling.apply_rotary_pos_emb(q, k, cos, sin)
        reference = rotate_reference(q, k, positions, inv_freq64, factor)
        assert_not_worse_than_transformers((exported(q, offset), exported(k, offset)), hf_qk, reference)
        assert_not_worse_than_transformers(module.forward_qk(q, k, offset), hf_qk, reference)
    # The audit says why; another model type keeps transformers' dynamic (alpha not read).
    read = posenc_package.nn.read_hf_rope_config(config)
    assert {e["key"]: e["status"] for e in read["audit"]}["rope_parameters.alpha"] == "used"
    assert "ntk_alpha" in {e["key"]: e["reason"] for e in read["audit"]}["model_type"]
    llama = posenc_package.nn.read_hf_rope_config({**config, "model_type": "llama"})
    assert llama["module"]["rope_scaling"]["rope_type"] == "dynamic"
    assert {e["key"]: e["status"] for e in llama["audit"]}["rope_parameters.alpha"] == "ignored"


# Model types whose config.json holds one set of rope parameters per layer type (transformers 5),
# each with a small config of the type; the rotary class takes the layer type in its forward.
PER_LAYER_TYPES = {
    "gemma3_text": ("gemma3", "Gemma3RotaryEmbedding", {}),
    "gemma3n_text": ("gemma3n", "Gemma3nRotaryEmbedding", {}),
    "olmo3": ("olmo3", "Olmo3RotaryEmbedding", {}),
    "modernbert": ("modernbert", "ModernBertRotaryEmbedding", {}),
    # Gemma 4: proportional RoPE on full layers, whose head_dim comes from per_layer_config
    "gemma4_text": ("gemma4", "Gemma4TextRotaryEmbedding", {}),
}


@pytest.mark.parametrize("model_type", list(PER_LAYER_TYPES))
def test_per_layer_rope_parameters_follow_each_layer(posenc_package, posenc_cli, tmp_path, model_type):
    """Per-layer-type rope_parameters: the rotary embedding of each layer (posenc export/rope
    --layer N, Python from_hf_config(layer=N)) against the model's own rotary class for that
    layer's type and apply_rotary_pos_emb, at positions near the end of the context."""
    import importlib
    import inspect
    package, rotary_name, extra = PER_LAYER_TYPES[model_type]
    modeling = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    hf = transformers.AutoConfig.for_model(model_type, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                                           head_dim=32, num_hidden_layers=12, max_position_embeddings=512,
                                           intermediate_size=64, **extra)
    path = tmp_path / "config.json"
    hf.to_json_file(str(path))
    rotary = getattr(modeling, rotary_name)(hf)
    layer_types = hf.layer_types
    assert len(set(layer_types)) == 2, layer_types
    # Without a layer: refused, naming the layer types.
    result = subprocess.run([posenc_cli, "rope", "--hf-config", str(path)], capture_output=True, text=True)
    assert result.returncode != 0 and "one set per layer type" in result.stderr, result.stderr
    for layer in (layer_types.index("sliding_attention"), layer_types.index("full_attention")):
        layer_type = layer_types[layer]
        saved = json.loads(path.read_text())
        per_layer = saved.get("per_layer_config") or {}
        # (keys as transformers writes them: zero-padded with 10 or more layers, "05")
        head_dim = next((fields["head_dim"] for key, fields in per_layer.items() if int(key) == layer and "head_dim" in fields),
                        saved["head_dim"])
        exported = export(posenc_cli, tmp_path, saved, "--layer", str(layer))
        module = posenc_package.nn.RotaryEmbedding.from_hf_config(hf, layer=layer, heads_first=True)
        assert module.head_dim == head_dim
        torch.manual_seed(layer)
        length = 8
        q = torch.randn(1, 4, length, head_dim)
        k = torch.randn(1, 2, length, head_dim)
        offset = 512 - length
        positions = torch.arange(offset, offset + length)
        cos, sin = rotary(q, positions[None], layer_type)
        apply = modeling.apply_rotary_pos_emb
        if list(inspect.signature(apply).parameters)[:3] == ["x", "cos", "sin"]:  # Gemma 3n / 4: one tensor at a time
            hf_qk = apply(q, cos, sin), apply(k, cos, sin)
        else:
            hf_qk = apply(q, k, cos, sin)
        rope_config = hf.per_layer_config[layer_type] if per_layer else hf  # (Gemma 4: the layer type's view)
        with float64_everywhere():
            inv_freq64, factor = (type(rotary).compute_default_rope_parameters(rope_config, "cpu", layer_type=layer_type)
                                  if rotary.rope_type[layer_type] == "default" else
                                  ROPE_INIT_FUNCTIONS[rotary.rope_type[layer_type]](rope_config, "cpu", layer_type=layer_type))
        reference = rotate_reference(q, k, positions, inv_freq64, factor)
        assert_not_worse_than_transformers((exported(q, offset), exported(k, offset)), hf_qk, reference)
        assert_not_worse_than_transformers(module.forward_qk(q, k, offset), hf_qk, reference)
        read = posenc_package.nn.read_hf_rope_config(hf, layer=layer)
        assert read["layer_type"] == layer_type and read["layer_types"] == layer_types
        by_type = posenc_package.nn.read_hf_rope_config(hf, layer_type=layer_type) if not per_layer else read
        assert by_type["module"] == read["module"]

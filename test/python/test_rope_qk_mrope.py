"""Queries and keys in one call (posenc::apply_rotary_qk / apply_rotary_qk_, an exported module's
forward_qk) and multimodal RoPE (posenc::multimodal_rotary_tables, [3, B, L] positions) against
Hugging Face transformers' own code (pinned in scripts/setup.sh): LLaMA's `LlamaRotaryEmbedding` +
`apply_rotary_pos_emb` with grouped-query heads, Qwen2-VL's `Qwen2VLRotaryEmbedding` (M-RoPE
sections) and Qwen3-VL's `Qwen3VLTextRotaryEmbedding` (interleaved), each with its model's
`apply_rotary_pos_emb`. Plus opcheck and torch.compile of the new operators.

Tolerances, as in test_rope_hf.py: HF's angles are float32 (an error of about p * 2^-24 radians at
position p); posenc's are float64, rounded once. Each result is compared with HF's functions run
in float64, and posenc's error must not exceed HF's (plus one float32 ulp of the output).
"""

import json
import subprocess

import pytest
import torch

from conftest import TORCH_VERSION

transformers = pytest.importorskip("transformers", reason="transformers is installed in the pip test environment only (scripts/setup.sh)")
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig  # noqa: E402
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding  # noqa: E402
from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb as qwen2_apply  # noqa: E402
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb as qwen3_apply  # noqa: E402

from test_rope_hf import (  # noqa: E402
    HEAD_DIM, HEADS, MAX_POS, VARIANTS, config_dict, export, float64_everywhere, hf_config,
    hf_frequencies_float64, hf_rotate, max_error, posenc_package, rotate_reference)


def assert_no_worse_than_hf(ours, theirs, reference):
    ulp = 2 ** -23 * reference.abs().max().item()
    ours_error, hf_error = max_error(ours, reference), max_error(theirs, reference)
    assert ours_error <= hf_error + ulp, f"posenc's error {ours_error:.3g} exceeds HF's {hf_error:.3g}"
    assert max_error(ours, theirs.double()) <= ours_error + hf_error + 1e-12


# --- queries and keys in one call -------------------------------------------------------------

@pytest.mark.parametrize("name", list(VARIANTS))
def test_qk_in_one_call_matches_transformers_with_grouped_query_heads(posenc_ops, posenc_cli, tmp_path, name):
    config = config_dict(name, "v5")  # HEADS query heads, 2 key/value heads
    exported = export(posenc_cli, tmp_path, config)
    hf = hf_config(config)
    torch.manual_seed(0)
    length = 16
    offset = MAX_POS - length
    positions = torch.arange(offset, offset + length)
    q = torch.randn(2, HEADS, length, HEAD_DIM)
    k = torch.randn(2, 2, length, HEAD_DIM)
    inv_freq64, factor = hf_frequencies_float64(hf, seq_len=offset + length)
    q_ref, k_ref = rotate_reference(q, k, positions, inv_freq64, factor)
    q_hf, k_hf = hf_rotate(LlamaRotaryEmbedding(hf), q, k, positions)
    # The operator on the exported caches (heads first, as HF's layout), the exported module's
    # forward_qk, and in place on the views of one fused qkv projection ([B, L, Hq + 2 Hk, D]).
    # The caches for this call from the operators (longrope past its original context: the long
    # frequencies), as a Python user builds them.
    rope_type, parameters = VARIANTS[name]
    inv_freq, factor = posenc_ops.rope_frequencies(
        HEAD_DIM, 500000.0, json.dumps({"rope_type": rope_type, "max_position_embeddings": MAX_POS, **parameters}),
        seq_len=offset + length)
    cos, sin = posenc_ops.rotary_tables(MAX_POS, inv_freq, factor.item())
    q_op, k_op = posenc_ops.apply_rotary_qk(q, k, cos, sin, offset, None, False, True)
    q_ts, k_ts = exported.forward_qk(q, k, offset)
    qkv = torch.cat([q.transpose(1, 2), k.transpose(1, 2), torch.randn(2, length, 2, HEAD_DIM)], 2)
    v_before = qkv[:, :, HEADS + 2:].clone()
    q_view, k_view = qkv[:, :, :HEADS], qkv[:, :, HEADS:HEADS + 2]
    posenc_ops.apply_rotary_qk_(q_view, k_view, cos, sin, offset)
    assert torch.equal(qkv[:, :, HEADS + 2:], v_before)
    for ours in ((q_op, k_op), (q_ts, k_ts), (q_view.transpose(1, 2), k_view.transpose(1, 2))):
        assert_no_worse_than_hf(ours[0], q_hf, q_ref)
        assert_no_worse_than_hf(ours[1], k_hf, k_ref)
    assert torch.equal(q_op, q_ts) and torch.equal(k_op, k_ts)
    assert torch.equal(q_view.transpose(1, 2), q_op) and torch.equal(k_view.transpose(1, 2), k_op)


def test_qk_gradients_and_opcheck(posenc_ops):
    torch.manual_seed(1)
    cos = torch.randn(32, 4, dtype=torch.float64)
    sin = torch.randn(32, 4, dtype=torch.float64)
    q = torch.randn(2, 5, 4, 10, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, 1, 10, dtype=torch.float64, requires_grad=True)
    positions = torch.tensor([[0, 3, -1, 31, 2], [1, 1, 1, 1, 1]])
    assert torch.autograd.gradcheck(lambda a, b: posenc_ops.apply_rotary_qk(a, b, cos, sin, 0, positions, True), (q, k))
    if TORCH_VERSION < (2, 4):
        pytest.skip("torch.library.opcheck needs PyTorch >= 2.4")
    q32, k32 = q.detach().float(), k.detach().float()
    c32, s32 = cos.float(), sin.float()
    torch.library.opcheck(posenc_ops.apply_rotary_qk.default, (q32, k32, c32, s32), {"offset": 3})
    torch.library.opcheck(posenc_ops.apply_rotary_qk.default, (q32, k32, c32, s32), {"positions": positions, "interleaved": True})
    torch.library.opcheck(posenc_ops.apply_rotary_qk_.default, (q32.clone(), k32.clone(), c32, s32), {"offset": 3})


@pytest.mark.skipif(TORCH_VERSION < (2, 4), reason="torch.compile of custom operators needs PyTorch >= 2.4")
def test_qk_and_multimodal_under_torch_compile(posenc_ops):
    torch.manual_seed(2)
    cos, sin = torch.randn(64, 8), torch.randn(64, 8)

    def attention_inputs(q, k, positions):
        c, s = posenc_ops.multimodal_rotary_tables(cos, sin, positions, [2, 3, 3], True)
        index = torch.arange(q.size(0) * q.size(1)).view(q.size(0), q.size(1))
        return posenc_ops.apply_rotary_qk(q, k, c.flatten(0, 1), s.flatten(0, 1), 0, index)

    q, k = torch.randn(2, 6, 4, 16), torch.randn(2, 6, 2, 16)
    positions = torch.randint(0, 64, (3, 2, 6))
    compiled = torch.compile(attention_inputs, backend="aot_eager", fullgraph=True)
    for ours, eager in zip(compiled(q, k, positions), attention_inputs(q, k, positions)):
        assert torch.equal(ours, eager)


# --- multimodal RoPE ----------------------------------------------------------------------------

MROPE_MODELS = {
    # name: (config class, rotary embedding, apply, rope parameters, head_dim)
    "qwen2_vl": (Qwen2VLTextConfig, Qwen2VLRotaryEmbedding, qwen2_apply, {"rope_type": "default", "type": "mrope", "mrope_section": [8, 12, 12]}, 64),
    "qwen3_vl": (Qwen3VLTextConfig, Qwen3VLTextRotaryEmbedding, qwen3_apply, {"rope_type": "default", "mrope_section": [12, 10, 10], "mrope_interleaved": True}, 64),
}


def mrope_config(name, form):
    _, _, _, parameters, head_dim = MROPE_MODELS[name]
    config = {"hidden_size": head_dim * 4, "head_dim": head_dim, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 4096}
    if form == "v4":
        config["rope_theta"] = 1000000.0
        config["rope_scaling"] = {key: value for key, value in parameters.items() if key != "rope_type"}
        config["rope_scaling"].setdefault("type", "default")
    else:
        config["rope_parameters"] = {**parameters, "rope_theta": 1000000.0}
    return config


def hf_mrope(name, config, q, k, position_ids, float64=False):
    config_class, rotary_class, apply, _, _ = MROPE_MODELS[name]
    text = {key: value for key, value in config.items() if key not in ("rope_theta", "rope_scaling", "rope_parameters")}
    parameters = config.get("rope_parameters") or {**config["rope_scaling"], "rope_theta": config["rope_theta"]}
    if "rope_type" not in parameters:
        parameters = {**parameters, "rope_type": "default"}
    if float64:
        with float64_everywhere():
            rotary = rotary_class(config_class(**text, rope_parameters=dict(parameters)))
            cos, sin = rotary(q.double(), position_ids)
        return apply(q.double(), k.double(), cos, sin)
    rotary = rotary_class(config_class(**text, rope_parameters=dict(parameters)))
    cos, sin = rotary(q, position_ids)
    return apply(q, k, cos, sin)


def grid_positions(batch, length=12):
    """Qwen2-VL's get_rope_index: text tokens share one position on all axes, image tokens have
    (t, h, w) grid positions; here a text run, an image grid near the end of the range, text."""
    position_ids = torch.empty(3, batch, length, dtype=torch.long)
    for b in range(batch):
        start = 4000 + 20 * b
        position_ids[:, b, :3] = torch.arange(start, start + 3)
        grid = torch.stack(torch.meshgrid(torch.arange(2), torch.arange(3), indexing="ij"), 0).reshape(2, -1)
        position_ids[0, b, 3:9] = start + 3
        position_ids[1, b, 3:9] = start + 3 + grid[0]
        position_ids[2, b, 3:9] = start + 3 + grid[1]
        position_ids[:, b, 9:] = torch.arange(start + 6, start + 9)
    return position_ids


@pytest.mark.parametrize("name, model_type, parameters, head_dim", [
    # no mrope_interleaved: Qwen3-VL's code interleaves the sections anyway
    ("qwen3_vl", "qwen3_vl_text", {"rope_type": "default", "mrope_section": [12, 10, 10]}, 64),
    # mrope_interleaved: true, which Qwen2-VL's code does not read (its sections stay contiguous)
    ("qwen2_vl", "qwen2_vl_text", {"rope_type": "default", "mrope_section": [8, 12, 12], "mrope_interleaved": True}, 64),
    # no mrope_section: the code's own sections
    ("qwen2_vl", "qwen2_vl_text", {"rope_type": "default"}, 128),
    ("qwen3_vl", "qwen3_vl_text", {"rope_type": "default"}, 128),
])
def test_multimodal_rules_of_the_models_code(posenc_cli, tmp_path, name, model_type, parameters, head_dim):
    """M-RoPE settings that the model's code, not its config, decides (posenc's reader applies
    them from model_type): against the model's own rotary class and apply function."""
    config = {"hidden_size": head_dim * 4, "head_dim": head_dim, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 4096, "rope_parameters": {**parameters, "rope_theta": 1000000.0}}
    exported = export(posenc_cli, tmp_path, {"model_type": model_type, **config})
    torch.manual_seed(5)
    position_ids = grid_positions(2)
    q = torch.randn(2, 4, 12, head_dim)
    k = torch.randn(2, 2, 12, head_dim)
    q_hf, k_hf = hf_mrope(name, config, q, k, position_ids)
    q_ref, k_ref = hf_mrope(name, config, q, k, position_ids, float64=True)
    q_ours, k_ours = exported.forward_qk_positions(q, k, position_ids)
    assert_no_worse_than_hf(q_ours, q_hf, q_ref)
    assert_no_worse_than_hf(k_ours, k_hf, k_ref)


@pytest.mark.parametrize("model_type, rotary_name", [("qwen2_5_omni", "Qwen2_5OmniRotaryEmbedding"),
                                                     ("qwen3_omni_moe", "Qwen3OmniMoeThinkerTextRotaryEmbedding")])
def test_omni_models_are_read_from_the_thinkers_text_config(posenc_cli, tmp_path, model_type, rotary_name):
    """Qwen2.5-Omni / Qwen3-Omni: the language model's RoPE is in thinker_config.text_config (with the
    M-RoPE sections its code takes); transformers' own config of the type, its rotary class and
    apply_rotary_pos_emb with image-grid positions."""
    import importlib
    modeling = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    text = {"hidden_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
            "num_hidden_layers": 1, "intermediate_size": 64}
    hf = transformers.AutoConfig.for_model(model_type, thinker_config={"text_config": text})
    path = tmp_path / "config.json"
    hf.to_json_file(str(path))
    out = tmp_path / "rope.pt"
    result = subprocess.run([posenc_cli, "export", "--module", "rotary", "--hf-config", str(path), "--heads-first", "-o", str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    exported = torch.jit.load(str(out))
    text_config = hf.thinker_config.text_config
    torch.manual_seed(7)
    position_ids = grid_positions(2)
    head_dim = 128
    q = torch.randn(2, 4, 12, head_dim)
    k = torch.randn(2, 2, 12, head_dim)
    rotary = getattr(modeling, rotary_name)(text_config)
    cos, sin = rotary(q, position_ids)
    q_hf, k_hf = modeling.apply_rotary_pos_emb(q, k, cos, sin)
    with float64_everywhere():
        rotary64 = getattr(modeling, rotary_name)(text_config)
        cos, sin = rotary64(q.double(), position_ids)
    q_ref, k_ref = modeling.apply_rotary_pos_emb(q.double(), k.double(), cos, sin)
    q_ours, k_ours = exported.forward_qk_positions(q, k, position_ids)
    assert_no_worse_than_hf(q_ours, q_hf, q_ref)
    assert_no_worse_than_hf(k_ours, k_hf, k_ref)


@pytest.mark.parametrize("form", ["v4", "v5"])
@pytest.mark.parametrize("name", list(MROPE_MODELS))
def test_multimodal_rope_matches_transformers(posenc_ops, posenc_cli, tmp_path, name, form):
    config = mrope_config(name, form)
    exported = export(posenc_cli, tmp_path, config)  # heads first, like HF
    _, _, _, parameters, head_dim = MROPE_MODELS[name]
    torch.manual_seed(3)
    batch, length = 2, 12
    position_ids = grid_positions(batch, length)
    q = torch.randn(batch, 4, length, head_dim)
    k = torch.randn(batch, 2, length, head_dim)
    q_hf, k_hf = hf_mrope(name, config, q, k, position_ids)
    q_ref, k_ref = hf_mrope(name, config, q, k, position_ids, float64=True)
    # The exported module (config.json -> posenc export), and the operators on its caches.
    q_ts, k_ts = exported.forward_qk_positions(q, k, position_ids)
    section = parameters["mrope_section"]
    c, s = posenc_ops.multimodal_rotary_tables(exported.cos, exported.sin, position_ids, section,
                                               parameters.get("mrope_interleaved", False))
    index = torch.arange(batch * length).view(batch, length)
    q_op, k_op = posenc_ops.apply_rotary_qk(q, k, c.flatten(0, 1), s.flatten(0, 1), 0, index, False, True)
    for q_ours, k_ours in ((q_ts, k_ts), (q_op, k_op)):
        assert_no_worse_than_hf(q_ours, q_hf, q_ref)
        assert_no_worse_than_hf(k_ours, k_hf, k_ref)
    assert torch.equal(q_ts, q_op) and torch.equal(k_ts, k_op)
    # Text-only positions ([B, L], or the three axes equal) are plain RoPE.
    text = position_ids[0]
    q_text, _ = exported.forward_qk_positions(q, k, text.unsqueeze(0).expand(3, -1, -1))
    assert torch.equal(q_text, exported.forward_positions(q, text))


def test_multimodal_opcheck_and_errors(posenc_ops):
    cos, sin = torch.randn(16, 4), torch.randn(16, 4)
    positions = torch.randint(0, 16, (3, 2, 5))
    if TORCH_VERSION >= (2, 4):
        torch.library.opcheck(posenc_ops.multimodal_rotary_tables.default, (cos, sin, positions, [2, 1, 1]), {"interleaved": True})
    inv_freq = torch.rand(4, dtype=torch.float64)
    far = positions + 100
    c, _ = posenc_ops.multimodal_rotary_tables(cos, sin, far, [2, 1, 1], False, inv_freq)
    expected = torch.cos(far[0, :, :, None].double() * inv_freq)[..., :2]
    torch.testing.assert_close(c[..., :2], expected.float(), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="sum to rotary_dim / 2 = 4"):
        posenc_ops.multimodal_rotary_tables(cos, sin, positions, [2, 2, 2])
    with pytest.raises(RuntimeError, match=r"must be \[3, B, L\] or \[3, L\]"):
        posenc_ops.multimodal_rotary_tables(cos, sin, positions[:2], [2, 1, 1])
    with pytest.raises(RuntimeError, match="must be >= 0"):
        posenc_ops.multimodal_rotary_tables(cos, sin, positions - 20, [2, 1, 1])


def test_rope_command_reads_multimodal_configs(posenc_cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(mrope_config("qwen3_vl", "v4")))
    result = subprocess.run([posenc_cli, "rope", "--hf-config", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "mrope_section=[12, 10, 10]" in result.stdout and "mrope_interleaved=true" in result.stdout


# --- RoPE variants through the operators ---------------------------------------------------------

@pytest.mark.parametrize("name", list(VARIANTS))
def test_rope_frequencies_operator_matches_transformers(posenc_ops, name):
    """torch.ops.posenc.rope_frequencies with HF's parameter names, against ROPE_INIT_FUNCTIONS
    evaluated in float64; rotary_tables from them are the exported module's caches."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: F401 (used by hf_frequencies)
    config = config_dict(name, "v5")
    rope_type, parameters = VARIANTS[name]
    hf = hf_config(config)
    inv_freq64, factor64 = hf_frequencies_float64(hf)
    # the rope_parameters block of the config, as transformers holds it, passed to the operator as is
    inv_freq, factor = posenc_ops.rope_frequencies(HEAD_DIM, 500000.0, json.dumps({**hf.rope_parameters, "max_position_embeddings": MAX_POS}))
    assert inv_freq.dtype == torch.float64
    torch.testing.assert_close(inv_freq, inv_freq64, rtol=1e-14, atol=0)
    assert abs(factor.item() - factor64) <= 1e-15 * factor64
    cos, sin = posenc_ops.rotary_tables(MAX_POS, inv_freq, factor.item())
    angles = torch.arange(MAX_POS, dtype=torch.float64)[:, None] * inv_freq64
    torch.testing.assert_close(cos, (angles.cos() * factor64).float(), rtol=0, atol=2 ** -24 * factor64 * 2)
    torch.testing.assert_close(sin, (angles.sin() * factor64).float(), rtol=0, atol=2 ** -24 * factor64 * 2)


@pytest.mark.skipif(TORCH_VERSION < (2, 4), reason="torch.export of custom operators with Meta kernels needs PyTorch >= 2.4")
def test_multimodal_qk_through_torch_export(posenc_ops):
    """A Qwen2-VL-style attention front end (caches from rope_frequencies + rotary_tables as
    buffers, multimodal tables, q+k in one call) exported with torch.export."""
    inv_freq, factor = posenc_ops.rope_frequencies(16, 1000000.0)
    cos, sin = posenc_ops.rotary_tables(64, inv_freq, factor.item())

    class Front(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cos", cos)
            self.register_buffer("sin", sin)

        def forward(self, q, k, position_ids):
            c, s = posenc_ops.multimodal_rotary_tables(self.cos, self.sin, position_ids, [2, 3, 3])
            index = torch.arange(q.size(0) * q.size(1)).view(q.size(0), q.size(1))
            return posenc_ops.apply_rotary_qk(q, k, c.flatten(0, 1), s.flatten(0, 1), 0, index)

    torch.manual_seed(4)
    q, k = torch.randn(2, 6, 4, 16), torch.randn(2, 6, 2, 16)
    position_ids = torch.randint(0, 64, (3, 2, 6))
    model = Front().eval()
    exported = torch.export.export(model, (q, k, position_ids))
    targets = {str(node.target) for node in exported.graph.nodes}
    assert any("multimodal_rotary_tables" in t for t in targets) and any("apply_rotary_qk" in t for t in targets)
    for ours, eager in zip(exported.module()(q, k, position_ids), model(q, k, position_ids)):
        assert torch.equal(ours, eager)


# --- the position ids of multimodal inputs (get_rope_index) -----------------------------------------

def multimodal_batch(frames_apart=False):
    """Two rows: left padding, text, an image (grid 1 x 4 x 6), text, a video (3 x 4 x 4), text;
    and text, a video (2 x 6 x 4), text, an image (2 x 8 x 4), text, right padding. Merge size 2.
    `frames_apart`: two text tokens (Qwen3-VL's timestamp) before each frame of a video."""
    image_a, image_b = [1, 4, 6], [2, 8, 4]
    video_a, video_b = [3, 4, 4], [2, 6, 4]
    tokens = lambda grid: grid[0] * grid[1] // 2 * grid[2] // 2  # noqa: E731

    def video(grid):
        if not frames_apart:
            return [2] * tokens(grid)
        return ([0] * 2 + [2] * tokens([1, *grid[1:]])) * grid[0]

    rows = [[0] * 4 + [1] * tokens(image_a) + [0] * 2 + video(video_a) + [0] * 5,
            [0] * 2 + video(video_b) + [0] * 3 + [1] * tokens(image_b) + [0] * 1]
    length = max(len(row) for row in rows) + 3
    rows = [[-1] * (length - len(rows[0])) + rows[0], rows[1] + [-1] * (length - len(rows[1]))]
    types = torch.tensor(rows)
    mask = (types >= 0).long()
    return (types.clamp(min=0), torch.tensor([image_a, image_b]), torch.tensor([video_a, video_b]), mask)


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_multimodal_position_ids_are_transformers_get_rope_index(posenc_package, name):
    """posenc.nn.mrope_position_ids against the model's own get_rope_index (called on a stand-in
    for the model that holds its config): equal, padding and deltas included. Qwen2.5-VL's videos
    are spaced by tokens_per_second * second_per_grid_ts (0.5 and 1.25 s: fractional intervals,
    floored); Qwen3-VL's frames are grids of their own."""
    import importlib
    import types as pytypes
    posenc_nn = posenc_package.nn
    modeling = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    model_class = next(getattr(modeling, n) for n in dir(modeling)
                       if n.endswith("Model") and hasattr(getattr(modeling, n), "get_rope_index"))
    config = transformers.AutoConfig.for_model(name)
    config.vision_config.spatial_merge_size = 2
    stand_in = pytypes.SimpleNamespace(config=config)
    stand_in.get_vision_position_ids = pytypes.MethodType(model_class.get_vision_position_ids, stand_in)
    types, images, videos, mask = multimodal_batch(frames_apart=name == "qwen3_vl")
    input_ids = torch.arange(types.numel()).reshape(types.shape)
    extra, ours_extra = {}, {}
    if name == "qwen2_5_vl":
        seconds = torch.tensor([0.5, 1.25])
        extra["second_per_grid_ts"] = seconds
        ours_extra["video_time_intervals"] = (config.vision_config.tokens_per_second * seconds).tolist()
    if name == "qwen3_vl":
        ours_extra["frames_apart"] = True
    expected, expected_deltas = model_class.get_rope_index(stand_in, input_ids, types, images, videos.clone(),
                                                           attention_mask=mask, **extra)
    ours, deltas = posenc_nn.mrope_position_ids(types, images, videos, mask, spatial_merge_size=2, **ours_extra)
    assert torch.equal(ours, expected)
    assert torch.equal(deltas, expected_deltas.reshape(-1, 1).long())
    if name == "qwen2_5_vl":  # the spacing is in effect: frames 0.5 s apart are 12 positions apart here
        assert not torch.equal(ours, posenc_nn.mrope_position_ids(types, images, videos, mask)[0])


def test_multimodal_position_ids_say_what_does_not_match(posenc_package):
    posenc_nn = posenc_package.nn
    types, images, videos, mask = multimodal_batch()
    with pytest.raises(ValueError, match="does not match its grids"):
        posenc_nn.mrope_position_ids(types, images, videos, mask, spatial_merge_size=1)
    with pytest.raises(ValueError, match="more image tokens than image_grid_thw has grids"):
        posenc_nn.mrope_position_ids(types, images[:1], videos, mask)
    with pytest.raises(ValueError, match="image_grid_thw has 3 grids, but the tokens use 2"):
        posenc_nn.mrope_position_ids(types, torch.cat([images, images[:1]]), videos, mask)
    with pytest.raises(ValueError, match="one interval per video"):
        posenc_nn.mrope_position_ids(types, images, videos, mask, video_time_intervals=[1.0])
    with pytest.raises(ValueError, match=r"0 \(text\), 1 \(image\) or 2 \(video\)"):
        posenc_nn.mrope_position_ids(types * 3, images, videos, mask)
    # text only: positions 0.. on all axes, delta 0 (transformers' text-only numbering)
    text = torch.zeros(2, 5, dtype=torch.long)
    positions, deltas = posenc_nn.mrope_position_ids(text)
    assert torch.equal(positions, torch.arange(5).expand(3, 2, 5)) and torch.equal(deltas, torch.zeros(2, 1, dtype=torch.long))


def test_multimodal_position_ids_are_one_operator(posenc_package):
    """posenc.nn.mrope_position_ids is the posenc::mrope_position_ids operator (the C++ functional
    form's): equal results; opcheck (schema, fake-tensor shapes through its Meta kernel); and a
    torch.compile(fullgraph=True) graph that holds the operator and feeds a multimodal
    RotaryEmbedding, equal to eager."""
    posenc_nn = posenc_package.nn
    types, images, videos, mask = multimodal_batch()
    ours = posenc_nn.mrope_position_ids(types, images, videos, mask, video_time_intervals=[0.5, 2.0])
    direct = torch.ops.posenc.mrope_position_ids(types, images, videos, mask, video_time_intervals=[0.5, 2.0])
    assert all(torch.equal(a, b) for a, b in zip(ours, direct))
    torch.library.opcheck(torch.ops.posenc.mrope_position_ids.default, (types, images, videos, mask),
                          {"spatial_merge_size": 2, "video_time_intervals": [0.5, 2.0]},
                          test_utils=("test_schema", "test_faketensor"))
    rope = posenc_nn.RotaryEmbedding(16, 64, mrope_section=[4, 2, 2])

    def rotate(x, types, images, videos, mask):
        positions, _ = posenc_nn.mrope_position_ids(types, images, videos, mask)
        return rope.forward_positions(x, positions)

    x = torch.randn(*types.shape, 2, 16)
    compiled = torch.compile(rotate, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x, types, images, videos, mask), rotate(x, types, images, videos, mask))

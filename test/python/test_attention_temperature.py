"""Query temperatures by position against transformers' own attention code (pinned in
scripts/setup.sh): Llama 4's attention temperature tuning (`Llama4TextAttention`, the layers
without rotary, `attn_temperature_tuning` / `floor_scale` / `attn_scale`) and Ministral 3's and
Mistral 4's `llama_4_scaling_beta` (`Ministral3Attention`, `Mistral4Attention`, every layer after
the rotation). Each attention layer runs with its own weights; the queries it hands to its
attention function are caught there, once with the temperature and once without it (tuning off,
or beta 0, whose scale is exactly 1), and posenc's module, built from the same config with
`AttentionTemperature.from_hf_config`, must turn the second into the first bit for bit: it forms
the scale with transformers' float32 operations in their order, so no tolerance is needed. Run at
positions that cross floor_scale's steps, near Llama 4's 8192 and at 10 million (a KV cache that
says how many tokens it holds), in float32 and bfloat16, and through the C++ module's TorchScript
export and the operator (the three front ends equal)."""

import os
import sys

import pytest
import torch

from conftest import skip_unless_pinned

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

transformers = pytest.importorskip("transformers", reason="transformers is installed in the pip test environment only (scripts/setup.sh)")
try:
    from transformers import AttentionInterface, AutoConfig
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention
    from transformers.models.ministral3.modeling_ministral3 import Ministral3Attention, Ministral3RotaryEmbedding
    from transformers.models.mistral4.modeling_mistral4 import Mistral4Attention, Mistral4RotaryEmbedding
except ImportError as error:
    skip_unless_pinned(transformers, error)


@pytest.fixture(scope="module")
def posenc(posenc_ops):  # the fixture checks POSENC_LIBRARY is set (the package reads it)
    import posenc
    return posenc


class _Caught(Exception):
    pass


def _catch(module, query, key, value, attention_mask, **kwargs):
    raise _Caught(query)


AttentionInterface.register("posenc_catch_query", _catch)


def caught_query(attention, *args, **kwargs):
    """The queries `attention` gives its attention function ([B, H, L, D])."""
    attention.config._attn_implementation = "posenc_catch_query"
    with pytest.raises(_Caught) as caught, torch.no_grad():
        attention(*args, **kwargs)
    return caught.value.args[0]


class SeenTokens:
    """A KV cache that holds `length` tokens (only the count is read: Llama 4's positions start there)."""

    def __init__(self, length):
        self.length = length

    def get_seq_length(self, layer_idx=0):
        return self.length

    def update(self, key, value, layer_idx, *args, **kwargs):
        return key, value


def llama4_config(**overrides):
    return AutoConfig.for_model("llama4_text", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                head_dim=16, num_hidden_layers=4, intermediate_size=64, intermediate_size_mlp=64,
                                **overrides)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("floor_scale, seen", [(4, 0), (4, 9), (8192, 8180), (8192, 10_000_000 - 5)])
def test_llama4_temperature_equals_llama4_attention(posenc, dtype, floor_scale, seen):
    config = llama4_config(floor_scale=floor_scale, attn_scale=0.1)
    assert config.no_rope_layers[3] == 0 and config.no_rope_layers[2] == 1  # layer 3 has no rotary
    torch.manual_seed(0)
    attention = Llama4TextAttention(config, layer_idx=3).to(dtype).eval()
    hidden = torch.randn(2, 12, 64, dtype=dtype)
    scaled = caught_query(attention, hidden, None, None, past_key_values=SeenTokens(seen))
    attention.attn_temperature_tuning = False
    plain = caught_query(attention, hidden, None, None, past_key_values=SeenTokens(seen))
    assert not torch.equal(scaled, plain) or floor_scale > seen + 12

    temperature = posenc.nn.AttentionTemperature.from_hf_config(config, layer=3, heads_first=True)
    assert (temperature.form, temperature.floor_scale, temperature.attn_scale) == ("llama4", floor_scale, 0.1)
    assert torch.equal(temperature(plain, seen), scaled)
    # [B, L, H, D], Llama 4's own layout where it scales; explicit positions
    tokens_first = posenc.nn.AttentionTemperature.from_hf_config(config, layer=3)
    assert torch.equal(tokens_first(plain.transpose(1, 2), seen).transpose(1, 2), scaled)
    positions = torch.arange(seen, seen + 12)
    assert torch.equal(temperature.forward_positions(plain, positions), scaled)
    assert torch.equal(temperature.forward_positions(plain, positions.expand(2, 12)), scaled)
    # a layer that rotates has no temperature; by layer type: the full-attention layers have no
    # rotary, the chunked ones rotate
    assert posenc.nn.AttentionTemperature.from_hf_config(config, layer=2) is None
    assert config.layer_types[2:] == ["chunked_attention", "full_attention"]
    assert posenc.nn.AttentionTemperature.from_hf_config(config, layer_type="chunked_attention") is None
    by_type = posenc.nn.AttentionTemperature.from_hf_config(config, layer_type="full_attention", heads_first=True)
    assert torch.equal(by_type(plain, seen), scaled)


def test_llama4_nested_config_reads_its_text_config(posenc):
    """A whole Llama 4 config (vision and text): the text model's layers and keys."""
    config = AutoConfig.for_model("llama4", text_config=dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                                             head_dim=16, num_hidden_layers=4, floor_scale=16))
    read = posenc.nn.read_hf_rope_config(config, layer=3)
    assert read["attention_temperature"]["floor_scale"] == 16
    assert {entry["key"]: entry["status"] for entry in read["audit"]}["text_config.attn_temperature_tuning"] == "used"
    assert posenc.nn.read_hf_rope_config(config, layer=0)["attention_temperature"] is None
    # the keys of a layer that rotates are named as not applied, with the reason
    audit = {entry["key"]: entry for entry in posenc.nn.read_hf_rope_config(config, layer=0)["audit"]}
    assert audit["text_config.floor_scale"]["status"] == "ignored"
    assert "only the layers without rotary" in audit["text_config.floor_scale"]["reason"]


def test_llama4_temperature_off_and_the_config_forms(posenc):
    assert posenc.nn.AttentionTemperature.from_hf_config(llama4_config(attn_temperature_tuning=False), layer=3) is None
    # a config.json without the keys: Llama 4's configuration class's defaults (on, 8192, 0.1)
    config = llama4_config().to_dict()
    for key in ("attn_temperature_tuning", "floor_scale", "attn_scale"):
        config.pop(key)
    read = posenc.nn.read_hf_rope_config(config, layer=3)
    assert read["attention_temperature"] == {"floor_scale": 8192.0, "attn_scale": 0.1, "form": "llama4",
                                             "heads_first": False}
    audit = {entry["key"]: entry for entry in read["audit"]}
    assert audit["attn_temperature_tuning"]["status"] == "default"
    assert audit["floor_scale"]["status"] == "default" and audit["floor_scale"]["value"] == "8192"
    # no warning names it any more (it is applied)
    assert "attn_temperature_tuning" not in " ".join(read.get("warnings", []))
    with pytest.raises(ValueError, match="floor_scale must be finite and > 0"):
        posenc.nn.read_hf_rope_config({**config, "floor_scale": 0}, layer=3)
    with pytest.raises(ValueError, match="attn_temperature_tuning must be true or false"):
        posenc.nn.read_hf_rope_config({**config, "attn_temperature_tuning": "yes"}, layer=3)
    # another model type's code does not read it: ignored, said so
    llama = AutoConfig.for_model("llama", hidden_size=64, num_attention_heads=4).to_dict()
    read = posenc.nn.read_hf_rope_config({**llama, "attn_temperature_tuning": True})
    assert read["attention_temperature"] is None
    assert [entry["status"] for entry in read["audit"] if entry["key"] == "attn_temperature_tuning"] == ["ignored"]


def ministral3_config(beta, original):
    config = AutoConfig.for_model("ministral3", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                  head_dim=16, num_hidden_layers=2, intermediate_size=64)
    config.rope_parameters.update(original_max_position_embeddings=original, llama_4_scaling_beta=beta)
    return config


def mistral4_config(beta, original):
    config = AutoConfig.for_model("mistral4", hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                                  q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
                                  v_head_dim=8, head_dim=16, num_hidden_layers=2, intermediate_size=64,
                                  moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2)
    config.rope_parameters.update(original_max_position_embeddings=original, llama_4_scaling_beta=beta)
    return config


@pytest.mark.parametrize("model", ["ministral3", "mistral4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("original, start", [(4, 0), (16384, 16380), (16384, 10_000_000 - 5)])
def test_llama_4_scaling_beta_equals_mistral_attention(posenc, model, dtype, original, start):
    make, attention_class, rotary_class = {
        "ministral3": (ministral3_config, Ministral3Attention, Ministral3RotaryEmbedding),
        "mistral4": (mistral4_config, Mistral4Attention, Mistral4RotaryEmbedding),
    }[model]
    config = make(0.1, original)
    torch.manual_seed(0)
    attention = attention_class(config, layer_idx=0).to(dtype).eval()
    hidden = torch.randn(2, 12, 64, dtype=dtype)
    # each sequence its own positions, as position_ids [B, L]
    position_ids = torch.stack([torch.arange(start, start + 12), torch.arange(start + 3, start + 15)])
    cos, sin = rotary_class(config)(hidden, position_ids)
    scaled = caught_query(attention, hidden, (cos, sin), None, position_ids=position_ids)
    config.rope_parameters["llama_4_scaling_beta"] = 0.0  # a scale of exactly 1: the rotated queries
    plain = caught_query(attention, hidden, (cos, sin), None, position_ids=position_ids)

    config.rope_parameters["llama_4_scaling_beta"] = 0.1
    temperature = posenc.nn.AttentionTemperature.from_hf_config(config)  # [B, H, L, D], as their code scales
    assert (temperature.form, temperature.floor_scale, temperature.attn_scale) == ("ministral3", original, 0.1)
    assert temperature.heads_first
    assert torch.equal(temperature.forward_positions(plain, position_ids), scaled)
    # the first sequence's positions start at `start`: an offset, or transformers' default [1, L] position_ids
    assert torch.equal(temperature(plain[:1], start), scaled[:1])
    assert torch.equal(temperature.forward_positions(plain[:1], position_ids[:1]), scaled[:1])
    shared = caught_query(attention, hidden, rotary_class(config)(hidden, position_ids[:1]), None,
                          position_ids=position_ids[:1])
    config.rope_parameters["llama_4_scaling_beta"] = 0.0
    shared_plain = caught_query(attention, hidden, rotary_class(config)(hidden, position_ids[:1]), None,
                                position_ids=position_ids[:1])
    assert torch.equal(temperature.forward_positions(shared_plain, position_ids[:1]), shared)
    read = posenc.nn.read_hf_rope_config(config)
    assert [entry["status"] for entry in read["audit"] if entry["key"].endswith("llama_4_scaling_beta")] == ["used"]


def test_llama_4_scaling_beta_counts_in_the_context_transformers_fills_in(posenc):
    """A yarn block without original_max_position_embeddings: transformers' standardize_rope_params
    fills it from max_position_embeddings, and the temperature counts in that."""
    given = ministral3_config(0.1, 16384).to_dict()
    del given["rope_parameters"]["original_max_position_embeddings"]
    config = AutoConfig.for_model("ministral3", **{key: value for key, value in given.items()
                                                   if key not in ("model_type", "transformers_version")})
    read = posenc.nn.read_hf_rope_config(given)
    assert read["attention_temperature"]["floor_scale"] == config.rope_parameters["original_max_position_embeddings"]


def test_llama_4_scaling_beta_needs_its_original_context(posenc):
    config = ministral3_config(0.1, 16384).to_dict()
    del config["rope_parameters"]["original_max_position_embeddings"]
    config["rope_parameters"]["rope_type"] = "default"
    for key in ("factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"):
        config["rope_parameters"].pop(key, None)
    with pytest.raises(ValueError, match="original_max_position_embeddings is missing"):
        posenc.nn.read_hf_rope_config(config)


@pytest.mark.parametrize("form", ["llama4", "ministral3"])
def test_front_ends_are_equal(posenc, posenc_ops, test_tool, tmp_path, form):
    """posenc.nn's module, the operator and the C++ module's TorchScript export (posenc_test_tool
    export-attention temperature) give the same queries, bit for bit, and the export loads in plain
    PyTorch."""
    path = tmp_path / "temperature.pt"
    test_tool("export-attention", "temperature", "--form", form, "--floor-scale", 8, "--attn-scale", 0.25,
              "--heads-first", path)
    exported = torch.jit.load(str(path))
    module = posenc.nn.AttentionTemperature(floor_scale=8, attn_scale=0.25, form=form, heads_first=True)
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        q = torch.randn(2, 3, 20, 8, dtype=dtype)
        for offset in (0, 5, 10_000_000):
            expected = posenc_ops.attention_temperature(q, None, offset, 8.0, 0.25, True, form)
            assert torch.equal(module(q, offset), expected)
            assert torch.equal(exported(q, offset), expected)
        positions = torch.randint(0, 50, (2, 20))
        positions[0, 3], positions[1, 0], positions[1, 7] = -1, -1, -5
        expected = posenc_ops.attention_temperature(q, positions, 0, 8.0, 0.25, True, form)
        assert torch.equal(module.forward_positions(q, positions), expected)
        assert torch.equal(exported.forward_positions(q, positions), expected)
        assert torch.equal(exported.forward_positions(q, positions[:1]), module.forward_positions(q, positions[:1]))
        # padding (negative positions) is not scaled
        padding = positions < 0
        assert torch.equal(expected.transpose(1, 2)[padding], q.transpose(1, 2)[padding])
        assert not torch.equal(expected.transpose(1, 2)[~padding], q.transpose(1, 2)[~padding])


def test_gradients_compile_and_export(posenc, posenc_ops):
    """Differentiable (the scale times the incoming gradient), and traced by torch.compile and
    torch.export as the ATen operations it is made of (no graph break)."""
    temperature = posenc.nn.AttentionTemperature(floor_scale=4)
    q = torch.randn(1, 9, 2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: temperature(x, 3), (q,))
    x = torch.randn(2, 9, 2, 4)
    compiled = torch.compile(lambda t: temperature(t, 5), fullgraph=True, backend="eager")
    assert torch.equal(compiled(x), temperature(x, 5))
    exported = torch.export.export(temperature, (x, 5))
    assert torch.equal(exported.module()(x, 5), temperature(x, 5))


def test_cli_names_the_temperature_of_a_layer(posenc_cli, tmp_path):
    """posenc rope --hf-config [--layer N] says where queries are scaled, and with what."""
    import subprocess
    path = tmp_path / "config.json"
    llama4_config(floor_scale=8192, attn_scale=0.1).to_json_file(str(path))
    nope = subprocess.run([posenc_cli, "rope", "--hf-config", str(path), "--layer", "3"], capture_output=True, text=True)
    assert nope.returncode == 0, nope.stderr
    assert "layer 3 has no rotary: its attention takes no positions but scales its queries by position" in nope.stdout
    assert "query temperature: form llama4, floor_scale 8192, attn_scale 0.1" in nope.stdout
    rotating = subprocess.run([posenc_cli, "rope", "--hf-config", str(path), "--layer", "2"], capture_output=True, text=True)
    assert rotating.returncode == 0 and "query temperature" not in rotating.stdout, rotating.stdout
    ministral_path = tmp_path / "ministral3.json"
    ministral3_config(0.1, 16384).to_json_file(str(ministral_path))
    every = subprocess.run([posenc_cli, "rope", "--hf-config", str(ministral_path)], capture_output=True, text=True)
    assert every.returncode == 0, every.stderr
    assert "query temperature: form ministral3, floor_scale 16384, attn_scale 0.1 (every layer" in every.stdout

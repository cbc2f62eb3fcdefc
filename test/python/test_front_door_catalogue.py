"""A catalogue of bad, hostile and extreme inputs to posenc's front doors that take input from users
and from other libraries (issue 61): the JSON texts posenc.nn sends (``check_module_options`` for
every module it knows, ``rotary_embedding_call`` / ``rotary_embedding_call_qk`` /
``rotary_embedding_frequencies`` with a RotaryEmbedding's options as text, ``rope_frequencies``'
``rope_parameters``), the config.json reader (``posenc.nn.read_hf_rope_config``,
``RotaryEmbedding.from_hf_config``, ``AttentionTemperature.from_hf_config`` and ``posenc rope
--hf-config``) on hostile files, ``AttentionTemperature`` and its operator at extreme scales,
``mrope_position_ids`` across devices and at extreme grids, fake tensors and ``torch.export``, the
transformers drop-in ``posenc.integrations.transformers``, ``posenc.onnx.export`` and the
``POSENC_LIBRARY`` / ``POSENC_IO_LIBRARY`` loads of ``import posenc``.

Each row is one call and its expected outcome, never "whatever it does now":
* ``err``: a clean exception, of a type and with distinctive parts of a message that names the
  problem;
* ``ok``: a result that a check accepts, against an independent reference (float64 formulas written
  here, transformers' own code, Python's json module) or an invariant (finite, unchanged model);
* ``crash``: a call that may take the interpreter down today (JSON nested deeper than posenc reads,
  in the main thread and in a thread with a 1 MB stack): run in a worker process, which must
  report the expected exception and live on (a row that kills it is reported with its signal; the
  rows after it run in a fresh worker);
* ``load``: ``import posenc`` with ``POSENC_LIBRARY`` / ``POSENC_IO_LIBRARY`` set (a second copy of
  the library aborts a process that registers its operators twice): a process of its own each,
  which must exit normally with the expected outcome;
* ``cli``: the ``posenc`` program on a hostile config.json: an exit status (never a signal) and a
  part of its stderr, or its output against a float64 reference.

Limits these rows assume (docs/reliability.md): posenc reads JSON texts of at most 64 levels of
objects and arrays ("nests deeper than"), option texts and rope_parameters of at most 1 MiB and
config.json files of at most 64 MiB ("bytes"), each checked before the text is parsed.

The other catalogue (test_catalogue.py) covers every operator's size, dtype and device arguments;
this one the surfaces above, with rows of its own.
"""

import copy
import importlib.util
import json
import math
import os
import pickle
import subprocess
import sys
import textwrap
import types

import pytest
import torch

from conftest import TORCH_VERSION

pytestmark = pytest.mark.skipif(TORCH_VERSION < (2, 6), reason="the front-door catalogue runs with torch >= 2.6 "
                                "(the pip environment: FakeTensorMode, torch.export, transformers 5)")

SOURCE_ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON_DIR = os.path.join(SOURCE_ROOT, "python")
sys.path.insert(0, PYTHON_DIR)

I64 = 2**63 - 1
MIB = 1 << 20
f32, f64, f16, i64 = torch.float32, torch.float64, torch.float16, torch.int64
DEEP = 200_000  # levels of nesting that exhaust the main thread's stack where a tree of them is recursed
THREAD_DEEP = 10_000  # ... and a thread's of 1 MB
LIMIT = 64  # the deepest JSON posenc reads


# --- the context a row's call gets ------------------------------------------------------------


class Ctx:
    """What a row's call may use: ``o`` the operators, ``n`` posenc.nn, ``p`` the package, ``hf`` the
    transformers drop-in, ``onnx`` posenc.onnx, ``file(name, data)`` a file in the row's own
    temporary directory (str: UTF-8 text; bytes as they are) and ``path(name)`` a path there."""

    def __init__(self, package, tmp):
        self.p, self.o, self.n, self.tmp = package, package.ops, package.nn, tmp

    def file(self, name, data):
        path = self.tmp / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        return str(path)

    def path(self, name):
        return str(self.tmp / name)

    @property
    def hf(self):
        import posenc.integrations.transformers as integration

        return integration

    @property
    def onnx(self):
        import posenc.onnx as onnx

        return onnx


@pytest.fixture(scope="module")
def posenc(posenc_ops):  # the fixture checks POSENC_LIBRARY is set (the package reads it)
    import posenc as package

    return package


@pytest.fixture
def c(posenc, tmp_path):
    return Ctx(posenc, tmp_path)


def err(id, fn, exc, *messages, marks=()):
    """``fn(c)`` must raise ``exc`` (a type or a tuple of types) with every one of ``messages`` in
    its message."""
    return pytest.param(fn, ("raises", exc, messages), id=id, marks=marks)


def ok(id, fn, check, marks=()):
    """``fn(c)`` must return a result ``check(result, c)`` accepts (it asserts)."""
    return pytest.param(fn, ("returns", check), id=id, marks=marks)


# --- independent references: float64 formulas and Python's own readers ---------------------------


def inv_freq64(rotary_dim, base=10000.0):
    """RoPE's frequencies base^(-2i / R), i < R/2, in float64."""
    return torch.tensor([base ** (-(2.0 * i) / rotary_dim) for i in range(rotary_dim // 2)], dtype=f64)


def llama3_inv_freq64(rotary_dim, base, factor, low, high, original):
    """Llama 3.1's frequency scaling (transformers' _compute_llama3_parameters), in float64."""
    out = []
    for f in inv_freq64(rotary_dim, base).tolist():
        wavelength = 2 * math.pi / f
        if wavelength < original / high:
            out.append(f)
        elif wavelength > original / low:
            out.append(f / factor)
        else:
            smooth = (original / wavelength - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=f64)


def rotate64(x, positions, inv_freq, pairing="half_split", rotary_dim=None, heads_first=False, factor=1.0):
    """The rotation of x ([B, L, H, D], or [B, H, L, D] heads first) by angle position * inv_freq,
    in float64: pairs (i, i + R/2) ("half_split") or (2i, 2i + 1) ("interleaved") of the first R
    channels, the rest passed through; cos and sin times ``factor``."""
    x64 = x.double().transpose(1, 2) if heads_first else x.double()
    rotary = rotary_dim or x64.shape[-1]
    angles = torch.as_tensor(positions).double()[..., None] * torch.as_tensor(inv_freq).double()
    if angles.dim() == 2:
        angles = angles[None]
    cos, sin = (angles.cos() * factor)[:, :, None, :], (angles.sin() * factor)[:, :, None, :]
    turned, rest = x64[..., :rotary], x64[..., rotary:]
    if pairing == "half_split":
        a, b = turned[..., : rotary // 2], turned[..., rotary // 2:]
        out = torch.cat([a * cos - b * sin, b * cos + a * sin], -1)
    else:
        a, b = turned[..., 0::2], turned[..., 1::2]
        out = torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(-2)
    out = torch.cat([out, rest], -1)
    return out.transpose(1, 2) if heads_first else out


def close64(expected, rtol=1e-13):
    """A check: a float64 tensor equal to ``expected`` within rtol (a few float64 ulps)."""

    def check(result, c):
        assert result.dtype == f64, result.dtype
        torch.testing.assert_close(result, expected() if callable(expected) else expected, rtol=rtol, atol=0)

    return check


def rotated_like(x, positions, inv_freq, **kwargs):
    """A check: a float32 rotation of x equal to the float64 one within float32 rounding (the cos /
    sin tables rounded once, each product and sum once: a few 2^-24 of |x|)."""

    def check(result, c):
        assert result.dtype == x.dtype and result.shape == x.shape, (result.dtype, result.shape)
        expected = rotate64(x, positions, inv_freq, **kwargs)
        torch.testing.assert_close(result.double(), expected, rtol=0, atol=8 * 2.0**-24 * max(1.0, x.abs().max().item()))

    return check


def is_none(result, c):
    assert result is None, result


def equals(expected):
    def check(result, c):
        assert result == expected, (result, expected)

    return check


def finite_or_refused(build, run, option):
    """A row's call: ``build()`` either refuses with a ValueError naming ``option`` or gives a module
    whose ``run(module)`` is finite everywhere (never NaN or inf where the options were accepted)."""

    def fn(c):
        try:
            module = build(c)
        except ValueError as error:
            assert option in str(error), error
            return "refused"
        out = run(module)
        assert torch.isfinite(out).all(), f"accepted {module} but computed {out.flatten()[:8].tolist()}"
        return "finite"

    return fn


def accepted(result, c):
    assert result in ("refused", "finite"), result


# --- check_module_options: every module's options as JSON text ---------------------------------

CMO = "check_module_options"


def cmo(module, options):
    text = options if isinstance(options, str) else json.dumps(options)
    return lambda c: c.o.check_module_options(module, text)


def cmo_err(id, module, options, *messages, marks=()):
    return err(f"{CMO}-{module}-{id}", cmo(module, options), RuntimeError, *messages, marks=marks)


def cmo_ok(id, module, options):
    return ok(f"{CMO}-{module}-{id}", cmo(module, options), is_none)


CHECK_MODULE_OPTIONS_ROWS = [
    # the operator's own arguments: the module's name and a text that is a JSON object
    err(f"{CMO}-module-lowercase", cmo("alibi", {"num_heads": 4}), RuntimeError, "module must name a posenc module with options", "but got 'alibi'"),
    err(f"{CMO}-module-empty", cmo("", {}), RuntimeError, "module must name a posenc module with options", "but got ''"),
    err(f"{CMO}-module-RotaryEmbedding", cmo("RotaryEmbedding", {"head_dim": 8, "max_len": 8}), RuntimeError, "RotaryEmbedding's are checked by rotary_embedding_frequencies"),
    err(f"{CMO}-module-trailing-NUL", cmo("ALiBi\0", {"num_heads": 4}), RuntimeError, "module must name a posenc module with options"),
    err(f"{CMO}-module-trailing-space", cmo("ALiBi ", {"num_heads": 4}), RuntimeError, "module must name a posenc module with options", "but got 'ALiBi '"),
    err(f"{CMO}-options-empty-text", cmo("ALiBi", ""), RuntimeError, "options must be a JSON object of ALiBi's keyword arguments"),
    err(f"{CMO}-options-null", cmo("TimestepEmbedder", "null"), RuntimeError, "options must be a JSON object of TimestepEmbedder's keyword arguments"),
    err(f"{CMO}-options-string", cmo("ALiBi", '"{\\"num_heads\\": 4}"'), RuntimeError, "options must be a JSON object of ALiBi's keyword arguments"),
    err(f"{CMO}-options-number", cmo("Timesteps", "8"), RuntimeError, "options must be a JSON object of Timesteps's keyword arguments"),
    err(f"{CMO}-options-trailing-text", cmo("ALiBi", '{"num_heads": 4} {}'), RuntimeError, "options must be a JSON object of ALiBi's keyword arguments"),
    err(f"{CMO}-options-NaN-literal", cmo("ALiBi", '{"num_heads": 4, "max_bias": NaN}'), RuntimeError, "options must be a JSON object of ALiBi's keyword arguments"),
    err(f"{CMO}-options-raw-NUL-in-key", cmo("ALiBi", '{"num_\0heads": 4}'), RuntimeError, "options must be a JSON object of ALiBi's keyword arguments"),
    err(f"{CMO}-options-escaped-NUL-in-key", cmo("ALiBi", '{"num_heads\\u0000": 4}'), RuntimeError, "ALiBi has no option"),
    err(f"{CMO}-options-lone-surrogate", cmo("ALiBi", '{"num_heads": 4, "\\ud800": 1}'), RuntimeError, "options must be a JSON object of ALiBi's keyword arguments"),
    err(f"{CMO}-options-over-1MiB", cmo("ALiBi", '{"num_heads": 4' + " " * MIB + "}"), RuntimeError, "bytes"),
    err(f"{CMO}-options-2MiB-of-brackets", cmo("PositionalEncoding", "[" * (2 * MIB)), RuntimeError, "bytes"),
    ok(f"{CMO}-options-exactly-1MiB", cmo("ALiBi", '{"num_heads": 4' + " " * (MIB - 16) + "}"), is_none),
    ok(f"{CMO}-options-duplicate-key-last-wins", cmo("ALiBi", '{"num_heads": 0, "num_heads": 4}'), is_none),
    err(f"{CMO}-options-duplicate-key-last-refused", cmo("ALiBi", '{"num_heads": 4, "num_heads": 0}'), RuntimeError, "ALiBi: num_heads must be in [1, 2^28]", "but got 0"),
    ok(f"{CMO}-options-unicode-escaped-key", cmo("ALiBi", '{"num\\u005fheads": 4}'), is_none),
    # PositionalEncoding
    cmo_err("d_model=-1", "PositionalEncoding", {"d_model": -1, "max_len": 8}, "PositionalEncoding: d_model must be >= 1"),
    cmo_err("max_len-as-text", "PositionalEncoding", {"d_model": 4, "max_len": "8"}, "PositionalEncoding: max_len must be an integer", '"8"'),
    cmo_err("layout-capitalised", "PositionalEncoding", {"d_model": 4, "max_len": 8, "layout": "Interleaved"}, "PositionalEncoding: layout must be one of", "Interleaved"),
    cmo_err("base-spelled-minus-inf", "PositionalEncoding", {"d_model": 4, "max_len": 8, "base": "-inf"}, "PositionalEncoding: base must be finite"),
    cmo_err("dropout-just-above-1", "PositionalEncoding", {"d_model": 4, "max_len": 8, "dropout": 1.0000001}, "PositionalEncoding: dropout must be in [0, 1]"),
    cmo_err("scale-spelled-nan", "PositionalEncoding", {"d_model": 4, "max_len": 8, "scale": "nan"}, "PositionalEncoding: scale must be finite"),
    cmo_err("key-misspelt", "PositionalEncoding", {"d_modle": 4, "max_len": 8}, "PositionalEncoding has no option 'd_modle'"),
    cmo_err("inplace-as-text", "PositionalEncoding", {"d_model": 4, "max_len": 8, "inplace": "true"}, "PositionalEncoding: inplace must be True or False"),
    cmo_err("table-over-limit", "PositionalEncoding", {"d_model": 2**14, "max_len": 2**14 + 1}, "PositionalEncoding:", "over posenc's limit"),
    cmo_err("null-base", "PositionalEncoding", {"d_model": 4, "max_len": 8, "base": None}, "PositionalEncoding: base must not be None"),
    cmo_ok("every-enumeration", "PositionalEncoding", {"d_model": 6, "max_len": 3, "layout": "concatenated", "spacing": "tensor2tensor", "beyond_max_len": "extrapolate"}),
    # LearnedPositionalEmbedding
    cmo_err("init_std-negative", "LearnedPositionalEmbedding", {"d_model": 4, "max_len": 8, "init_std": -0.02}, "LearnedPositionalEmbedding: init_std must be finite and >= 0"),
    cmo_err("init_std-spelled-inf", "LearnedPositionalEmbedding", {"d_model": 4, "max_len": 8, "init_std": "inf"}, "LearnedPositionalEmbedding: init_std must be finite and >= 0"),
    cmo_err("base-is-not-an-option", "LearnedPositionalEmbedding", {"d_model": 4, "max_len": 8, "base": 10000.0}, "LearnedPositionalEmbedding has no option 'base'"),
    cmo_err("max_len=0", "LearnedPositionalEmbedding", {"d_model": 4, "max_len": 0}, "LearnedPositionalEmbedding: max_len must be >= 1"),
    cmo_err("d_model-as-bool", "LearnedPositionalEmbedding", {"d_model": True, "max_len": 8}, "LearnedPositionalEmbedding: d_model must be an integer"),
    # TokenAndPositionEmbedding
    cmo_err("vocab_size=0", "TokenAndPositionEmbedding", {"vocab_size": 0, "d_model": 4, "max_len": 8}, "TokenAndPositionEmbedding: vocab_size must be >= 1"),
    cmo_err("padding_idx=vocab_size", "TokenAndPositionEmbedding", {"vocab_size": 10, "d_model": 4, "max_len": 8, "padding_idx": 10}, "TokenAndPositionEmbedding: padding_idx must be in [0, vocab_size) = [0, 10)"),
    cmo_err("learned-cannot-extrapolate", "TokenAndPositionEmbedding", {"vocab_size": 10, "d_model": 4, "max_len": 8, "positions": "learned", "beyond_max_len": "extrapolate"}, "TokenAndPositionEmbedding: learned positions cannot extrapolate past max_len", "positions='sinusoidal'"),
    cmo_err("positions-rotary", "TokenAndPositionEmbedding", {"vocab_size": 10, "d_model": 4, "max_len": 8, "positions": "rotary"}, "TokenAndPositionEmbedding: positions must be one of", "rotary"),
    cmo_err("token-table-over-limit", "TokenAndPositionEmbedding", {"vocab_size": 2**20, "d_model": 2**9, "max_len": 8}, "TokenAndPositionEmbedding:", "vocab_size"),
    cmo_ok("scale-null-is-sqrt-d_model", "TokenAndPositionEmbedding", {"vocab_size": 10, "d_model": 4, "max_len": 8, "scale": None, "padding_idx": None}),
    # Timesteps
    cmo_err("embedding_dim=0", "Timesteps", {"embedding_dim": 0}, "Timesteps:", "embedding_dim"),
    cmo_err("max_period=0", "Timesteps", {"embedding_dim": 8, "max_period": 0}, "Timesteps:", "max_period"),
    cmo_err("downscale_freq_shift-spelled-nan", "Timesteps", {"embedding_dim": 8, "downscale_freq_shift": "nan"}, "Timesteps:", "downscale_freq_shift"),
    cmo_err("flip_sin_to_cos-as-number", "Timesteps", {"embedding_dim": 8, "flip_sin_to_cos": 1}, "Timesteps: flip_sin_to_cos must be True or False"),
    # TimestepEmbedder
    cmo_err("hidden_size=0", "TimestepEmbedder", {"hidden_size": 0}, "TimestepEmbedder: hidden_size must be >= 1"),
    cmo_err("hidden_size-squared-over-limit", "TimestepEmbedder", {"hidden_size": 2**15}, "TimestepEmbedder:", "hidden_size * hidden_size"),
    cmo_err("frequency_embedding_size-as-list", "TimestepEmbedder", {"hidden_size": 8, "frequency_embedding_size": [256]}, "TimestepEmbedder: frequency_embedding_size must be an integer"),
    # AxialRotaryEmbedding
    cmo_err("axes_dim-empty", "AxialRotaryEmbedding", {"axes_dim": []}, "AxialRotaryEmbedding:", "axes_dim"),
    cmo_err("axes_dim-odd", "AxialRotaryEmbedding", {"axes_dim": [4, 3]}, "AxialRotaryEmbedding:", "axes_dim"),
    cmo_err("theta=0", "AxialRotaryEmbedding", {"axes_dim": [4], "theta": 0}, "AxialRotaryEmbedding:", "theta"),
    cmo_err("pairing-unknown", "AxialRotaryEmbedding", {"axes_dim": [4], "pairing": "neox"}, "AxialRotaryEmbedding: pairing must be one of", "neox"),
    cmo_err("axes_dim-nested-list", "AxialRotaryEmbedding", {"axes_dim": [[4]]}, "AxialRotaryEmbedding: axes_dim must be an integer"),
    # VisionRotaryEmbedding
    cmo_err("dim=0", "VisionRotaryEmbedding", {"dim": 0}, "VisionRotaryEmbedding:", "dim"),
    cmo_err("num_prefix_tokens=-1", "VisionRotaryEmbedding", {"dim": 8, "num_prefix_tokens": -1}, "VisionRotaryEmbedding: num_prefix_tokens must be in [0, 2^28]"),
    cmo_err("grid_indexing-capitalised", "VisionRotaryEmbedding", {"dim": 8, "grid_indexing": "IJ"}, "VisionRotaryEmbedding: grid_indexing must be one of 'ij', 'xy'"),
    cmo_err("ref_feat_shape-zero", "VisionRotaryEmbedding", {"dim": 8, "ref_feat_shape": [0, 0]}, "VisionRotaryEmbedding:", "ref_feat_shape"),
    cmo_ok("ref_feat_shape-null", "VisionRotaryEmbedding", {"dim": 8, "ref_feat_shape": None, "grid_indexing": "xy"}),
    # ALiBi
    cmo_err("first_head=num_heads", "ALiBi", {"num_heads": 8, "first_head": 8}, "ALiBi: first_head must be in [0, num_heads) = [0, 8)"),
    cmo_err("heads=0", "ALiBi", {"num_heads": 8, "heads": 0}, "ALiBi:", "heads"),
    cmo_err("max_bias=0", "ALiBi", {"num_heads": 8, "max_bias": 0}, "ALiBi: max_bias must be in (0, 64]"),
    cmo_err("max_bias-just-above-64", "ALiBi", {"num_heads": 8, "max_bias": 64.000001}, "ALiBi: max_bias must be in (0, 64]"),
    cmo_ok("shard-of-heads", "ALiBi", {"num_heads": 12, "first_head": 4, "heads": 8, "max_bias": 64}),
    # AttentionTemperature (also below: bounds of the float32 result)
    cmo_err("floor_scale-spelled-minus-inf", "AttentionTemperature", {"floor_scale": "-inf"}, "AttentionTemperature: floor_scale must be finite and > 0"),
    cmo_err("heads_first-as-text", "AttentionTemperature", {"heads_first": "yes"}, "AttentionTemperature: heads_first must be True or False"),
    cmo_err("attn_scale=1e39", "AttentionTemperature", {"attn_scale": 1e39}, "AttentionTemperature:", "attn_scale"),
    cmo_err("floor_scale=1e-50", "AttentionTemperature", {"floor_scale": 1e-50}, "AttentionTemperature:", "floor_scale"),
    cmo_ok("ministral3", "AttentionTemperature", {"form": "ministral3", "floor_scale": 16384, "attn_scale": 0.1, "heads_first": True}),
    # RelativePositionBias
    cmo_err("num_buckets=3-bidirectional", "RelativePositionBias", {"num_heads": 2, "num_buckets": 3}, "RelativePositionBias: num_buckets must be >= 4 when bidirectional"),
    cmo_err("max_distance-past-2^27", "RelativePositionBias", {"num_heads": 2, "max_distance": 2**27 + 1}, "RelativePositionBias: max_distance must be <= 2^27"),
    cmo_err("num_heads=0", "RelativePositionBias", {"num_heads": 0}, "RelativePositionBias: num_heads must be >= 1"),
    cmo_ok("unidirectional-2-buckets", "RelativePositionBias", {"num_heads": 2, "num_buckets": 2, "max_distance": 2, "bidirectional": False}),
    # RelPositionalEncoding
    cmo_err("d_model=0", "RelPositionalEncoding", {"d_model": 0}, "RelPositionalEncoding:", "d_model"),
    cmo_err("dropout-negative", "RelPositionalEncoding", {"d_model": 4, "dropout": -0.1}, "RelPositionalEncoding: dropout must be in [0, 1]"),
    cmo_err("legacy-table-over-limit", "RelPositionalEncoding", {"d_model": 2**14, "max_len": 2**14 + 1, "legacy": True}, "RelPositionalEncoding:", "over posenc's limit"),
    cmo_err("scale_input-as-null-string", "RelPositionalEncoding", {"d_model": 4, "scale_input": "null"}, "RelPositionalEncoding: scale_input must be True or False"),
    # RelPositionMultiheadAttention
    cmo_err("embed_dim-not-multiple", "RelPositionMultiheadAttention", {"embed_dim": 10, "num_heads": 3}, "RelPositionMultiheadAttention: embed_dim must be a positive multiple of num_heads", "embed_dim = 10 and num_heads = 3"),
    cmo_err("num_heads=0", "RelPositionMultiheadAttention", {"embed_dim": 8, "num_heads": 0}, "RelPositionMultiheadAttention: embed_dim must be a positive multiple of num_heads"),
    cmo_err("dropout-spelled-nan", "RelPositionMultiheadAttention", {"embed_dim": 8, "num_heads": 2, "dropout": "nan"}, "RelPositionMultiheadAttention: dropout must be in [0, 1]"),
]


# --- RotaryEmbedding's options as JSON text: rotary_embedding_frequencies / _call / _call_qk -------


def rope_text(head_dim=8, max_len=16, **options):
    """A RotaryEmbedding's options text as posenc.nn's RotaryEmbedding sends it (any key may be
    given; ``rope_parameters`` as transformers' block)."""
    return json.dumps({"head_dim": head_dim, "max_len": max_len, **options})


def frequencies(text):
    return lambda c: c.o.rotary_embedding_frequencies(text if isinstance(text, str) else json.dumps(text))


def transformers_inv_freq(rope_parameters, head_dim=8, max_position_embeddings=64, seq_len=None):
    """transformers' own frequencies (and attention factor) of a rope type (modeling_rope_utils)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, max_position_embeddings=max_position_embeddings,
                         rope_parameters=dict(rope_parameters))
    return ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]](config, "cpu", seq_len=seq_len)


def frequencies_like(inv_freq, long_inv_freq=None, factor=1.0, rtol=1e-13):
    def check(result, c):
        got, got_long, got_factor = result
        assert got.dtype == f64
        torch.testing.assert_close(got, inv_freq() if callable(inv_freq) else inv_freq, rtol=rtol, atol=0)
        if long_inv_freq is None:
            assert got_long.numel() == 0, got_long
        else:
            torch.testing.assert_close(got_long, long_inv_freq, rtol=rtol, atol=0)
        assert abs(got_factor.item() - factor) <= 1e-12 * factor, (got_factor.item(), factor)

    return check


def like_transformers(rope_parameters, head_dim=8, max_position_embeddings=64):
    """A check: posenc's float64 frequencies and factor equal transformers' within float32 rounding
    (transformers computes them in float32)."""

    def check(result, c):
        theirs, factor = transformers_inv_freq(rope_parameters, head_dim, max_position_embeddings)
        got, _, got_factor = result
        torch.testing.assert_close(got.float(), theirs, rtol=2**-22, atol=0)
        assert abs(got_factor.item() - factor) <= 1e-6 * factor, (got_factor.item(), factor)

    return check


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}

ROTARY_FREQUENCY_ROWS = [
    ok("frequencies-default", frequencies(rope_text(8, 16, base=500000.0)), frequencies_like(inv_freq64(8, 500000.0))),
    ok("frequencies-partial-rotary_dim", frequencies(rope_text(16, 16, rotary_dim=6)), frequencies_like(inv_freq64(6))),
    ok("frequencies-linear", frequencies(rope_text(8, 16, rope_parameters={"rope_type": "linear", "factor": 4.0})), frequencies_like(inv_freq64(8) / 4)),
    ok("frequencies-llama3", frequencies(rope_text(8, 64, base=500000.0, rope_parameters=LLAMA3)), frequencies_like(llama3_inv_freq64(8, 500000.0, 8.0, 1.0, 4.0, 16))),
    ok("frequencies-yarn-against-transformers", frequencies(rope_text(8, 64, rope_parameters=YARN)), like_transformers({**YARN, "rope_theta": 10000.0})),
    ok("frequencies-freq_factors", frequencies(rope_text(8, 16, freq_factors=[1.0, 2.0, 4.0, 8.0])), frequencies_like(inv_freq64(8) / torch.tensor([1.0, 2.0, 4.0, 8.0], dtype=f64))),
    ok("frequencies-longrope-long-factors", frequencies(rope_text(8, 64, rope_parameters={"rope_type": "longrope", "original_max_position_embeddings": 16, "short_factor": [1, 1, 1, 1], "long_factor": [1, 2, 3, 4]})),
       frequencies_like(inv_freq64(8), inv_freq64(8) / torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=f64), factor=math.sqrt(1 + math.log(4) / math.log(16)))),
    ok("frequencies-rope_parameters-null", frequencies(rope_text(8, 16, rope_parameters=None)), frequencies_like(inv_freq64(8))),
    ok("frequencies-mrope_section", frequencies(rope_text(16, 16, mrope_section=[2, 3, 3])), frequencies_like(inv_freq64(16))),
    ok("frequencies-pretty-printed-text", frequencies(json.dumps({"head_dim": 8, "max_len": 16, "base": 100.0}, indent=8)), frequencies_like(inv_freq64(8, 100.0))),
    err("frequencies-text-not-json", frequencies("head_dim=8"), RuntimeError, "module must be a JSON object of a RotaryEmbedding's options"),
    err("frequencies-text-list", frequencies("[8, 16]"), RuntimeError, "module must be a JSON object of a RotaryEmbedding's options"),
    err("frequencies-text-empty", frequencies(""), RuntimeError, "module must be a JSON object of a RotaryEmbedding's options"),
    err("frequencies-text-over-1MiB", frequencies(rope_text(8, 16)[:-1] + " " * MIB + "}"), RuntimeError, "bytes"),
    err("frequencies-head_dim-missing", frequencies('{"max_len": 16}'), RuntimeError, "RotaryEmbedding: head_dim must be >= 2"),
    err("frequencies-head_dim-odd", frequencies(rope_text(7)), RuntimeError, "RotaryEmbedding: the rotated width must be even"),
    err("frequencies-rotary_dim-above-head_dim", frequencies(rope_text(8, rotary_dim=10)), RuntimeError, "RotaryEmbedding:", "rotary_dim"),
    err("frequencies-cached_len=0", frequencies(rope_text(8, cached_len=0)), RuntimeError, "RotaryEmbedding: cached_len must be in [1, max_len = 16]"),
    err("frequencies-pairing-unknown", frequencies(rope_text(8, pairing="gptj")), RuntimeError, "RotaryEmbedding: pairing must be one of", "gptj"),
    err("frequencies-unknown-key", frequencies(rope_text(8, theta=10000.0)), RuntimeError, "RotaryEmbedding has no option 'theta'"),
    err("frequencies-base-spelled-nan", frequencies(rope_text(8, base="nan")), RuntimeError, "RotaryEmbedding:", "base must be finite"),
    err("frequencies-rope_parameters-string", frequencies(rope_text(8, rope_parameters="linear")), RuntimeError, "RotaryEmbedding:", "rope_parameters"),
    err("frequencies-rope_type-uppercase", frequencies(rope_text(8, rope_parameters={"rope_type": "YARN", "factor": 2.0})), RuntimeError, "rope_type 'YARN'"),
    err("frequencies-mrope_section-wrong-sum", frequencies(rope_text(16, mrope_section=[2, 2, 2])), RuntimeError, "RotaryEmbedding:", "mrope_section"),
    err("frequencies-freq_factors-wrong-length", frequencies(rope_text(8, freq_factors=[1.0, 1.0])), RuntimeError, "freq_factors must be empty or hold one divisor per frequency (R / 2 = 4)"),
]


def rope_call(text, x, offset=0, positions=None, base=10000.0, rotary_dim=None, rows=16, qk=None, factor=1.0):
    """rotary_embedding_call(_qk) with caches of ``rows`` rows computed here (float64 angles
    rounded once) for the options text."""

    def fn(c):
        rotary = rotary_dim or x.shape[-1]
        inv = inv_freq64(rotary, base)
        cos, sin = c.o.rotary_tables(rows, inv, factor)
        if qk is None:
            return c.o.rotary_embedding_call(x, cos, sin, inv, None, text, offset, positions)
        return c.o.rotary_embedding_call_qk(x, qk, cos, sin, inv, None, text, offset, positions)

    return fn


torch.manual_seed(61)
XQ = torch.randn(2, 5, 3, 8)  # [B, L, H, D]
XK = torch.randn(2, 5, 1, 8)  # one key/value head (GQA)
XW = torch.randn(1, 4, 2, 12)  # a head wider than the rotated 8 channels
POS_BL = torch.tensor([[0, 3, 1, 15, 2], [7, 7, 0, 1, 14]])


def pair_rotated(q, k, positions, inv):
    def check(result, c):
        rotated_like(q, positions, inv)(result[0], c)
        rotated_like(k, positions, inv)(result[1], c)

    return check


ROTARY_CALL_ROWS = [
    ok("call-half_split-offset", rope_call(rope_text(8, 16), XQ, offset=9), rotated_like(XQ, torch.arange(9, 14), inv_freq64(8))),
    ok("call-interleaved", rope_call(rope_text(8, 16, pairing="interleaved"), XQ, offset=2), rotated_like(XQ, torch.arange(2, 7), inv_freq64(8), pairing="interleaved")),
    ok("call-heads-first", rope_call(rope_text(8, 16, heads_first=True), XQ.transpose(1, 2).contiguous(), offset=1), rotated_like(XQ.transpose(1, 2).contiguous(), torch.arange(1, 6), inv_freq64(8), heads_first=True)),
    ok("call-positions-per-row", rope_call(rope_text(8, 16), XQ, positions=POS_BL), rotated_like(XQ, POS_BL, inv_freq64(8))),
    ok("call-partial-rotation", rope_call(rope_text(12, 16, rotary_dim=8, base=500.0), XW, offset=4, base=500.0, rotary_dim=8), rotated_like(XW, torch.arange(4, 8), inv_freq64(8, 500.0), rotary_dim=8)),
    ok("call-uncached-rows-computed", rope_call(rope_text(8, 4096, cached_len=4), XQ, offset=4000, rows=4), rotated_like(XQ, torch.arange(4000, 4005), inv_freq64(8))),
    ok("call-qk-gqa", rope_call(rope_text(8, 16), XQ, offset=3, qk=XK), pair_rotated(XQ, XK, torch.arange(3, 8), inv_freq64(8))),
    err("call-text-not-json", rope_call("{head_dim: 8}", XQ), RuntimeError, "module must be a JSON object of a RotaryEmbedding's options"),
    err("call-text-over-1MiB", rope_call(rope_text(8, 16, pad=" " * MIB), XQ), RuntimeError, "bytes"),
    err("call-unknown-key", rope_call(rope_text(8, 16, interleaved=True), XQ), RuntimeError, "RotaryEmbedding has no option 'interleaved'"),
    err("call-offset-past-max_len", rope_call(rope_text(8, 16), XQ, offset=12), RuntimeError, "RotaryEmbedding:", "max_len (16)"),
    err("call-positions-past-max_len", rope_call(rope_text(8, 16), XQ, positions=torch.tensor([0, 1, 2, 3, 16])), RuntimeError, "RotaryEmbedding:", "max_len"),
    err("call-head-narrower-than-rotation", rope_call(rope_text(8, 16), XQ[..., :6], rotary_dim=8), RuntimeError, "RotaryEmbedding:", "rotated width 8"),
    err("call-int-input", rope_call(rope_text(8, 16), torch.zeros(1, 2, 1, 8, dtype=i64)), RuntimeError, "RotaryEmbedding:", "floating-point"),
    err("call-qk-widths-differ", rope_call(rope_text(8, 16), XQ, qk=XK[..., :6]), RuntimeError, "RotaryEmbedding:"),
    err("call-qk-offset=i64max", rope_call(rope_text(8, 16), XQ, offset=I64, qk=XK), RuntimeError, "RotaryEmbedding:", "offset"),
]


# --- rope_frequencies(rotary_dim, base, rope_parameters=JSON text) --------------------------------


def rope_frequencies(parameters, rotary_dim=8, base=10000.0, **kwargs):
    text = parameters if isinstance(parameters, str) else json.dumps(parameters)
    return lambda c: c.o.rope_frequencies(rotary_dim, base, text, **kwargs)


def inv_like(expected, factor=1.0, rtol=1e-13):
    def check(result, c):
        torch.testing.assert_close(result[0], expected() if callable(expected) else expected, rtol=rtol, atol=0)
        assert abs(result[1].item() - factor) <= 1e-12 * factor, result[1]

    return check


def dynamic_reference(rotary_dim, base, factor, original, seq_len):
    scaled = base * ((factor * seq_len / original) - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))
    return inv_freq64(rotary_dim, scaled)


ROPE_FREQUENCIES_ROWS = [
    ok("rope_frequencies-duplicate-factor-last-wins", rope_frequencies('{"rope_type": "linear", "factor": 2.0, "factor": 8.0}'), inv_like(inv_freq64(8) / 8)),
    ok("rope_frequencies-unicode-escaped-type", rope_frequencies('{"rope_type": "\\u006c\\u0069near", "factor": 2.0}'), inv_like(inv_freq64(8) / 2)),
    ok("rope_frequencies-newlines-and-tabs", rope_frequencies('\n\t{\n\t"rope_type":\t"linear",\r\n"factor": 4}\n'), inv_like(inv_freq64(8) / 4)),
    ok("rope_frequencies-dynamic-past-original", rope_frequencies({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16, "max_position_embeddings": 16}, seq_len=100),
       inv_like(dynamic_reference(8, 10000.0, 2.0, 16, 100), rtol=1e-12)),
    ok("rope_frequencies-llama3", rope_frequencies(LLAMA3, 16, 500000.0), inv_like(llama3_inv_freq64(16, 500000.0, 8.0, 1.0, 4.0, 16))),
    err("rope_frequencies-rope_type-trailing-space", rope_frequencies({"rope_type": "linear ", "factor": 2.0}), RuntimeError, "rope_type 'linear '"),
    err("rope_frequencies-factor-bool", rope_frequencies({"rope_type": "linear", "factor": True}), RuntimeError, "rope_parameters.factor must be a number"),
    err("rope_frequencies-factor-spelled-minus-inf", rope_frequencies({"rope_type": "linear", "factor": "-inf"}), RuntimeError, "rope_parameters.factor must be finite"),
    err("rope_frequencies-factor-object", rope_frequencies({"rope_type": "linear", "factor": {"value": 2}}), RuntimeError, "rope_parameters.factor must be a number"),
    err("rope_frequencies-over-1MiB", rope_frequencies('{"rope_type": "linear", "factor": 2.0' + " " * MIB + "}"), RuntimeError, "bytes"),
    err("rope_frequencies-text-is-array-of-object", rope_frequencies('[{"rope_type": "linear", "factor": 2.0}]'), RuntimeError, "rope_parameters must be a JSON object"),
    err("rope_frequencies-two-objects", rope_frequencies('{"rope_type": "linear", "factor": 2.0}{}'), RuntimeError, "rope_parameters must be a JSON object"),
    ok("rope_frequencies-llama3-no-smoothing-band", rope_frequencies({**LLAMA3, "low_freq_factor": 4.0, "high_freq_factor": 4.0}, 16, 500000.0),
       inv_like(llama3_inv_freq64(16, 500000.0, 8.0, 4.0, 4.0, 16))),
    err("rope_frequencies-yarn-beta_fast-nan", rope_frequencies({**YARN, "beta_fast": "nan"}), RuntimeError, "beta_fast"),
]


# --- the config.json reader: read_hf_rope_config, from_hf_config (paths, dicts, configs) ----------


def config(**fields):
    """A small Llama config.json (head_dim 16, 8 frequencies), fields replaced or (None) removed."""
    base = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 128, "rope_theta": 10000.0}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None})


def lazy(data):
    """A row's data, made when the row runs (``data`` a function) rather than at collection."""
    return data() if callable(data) else data


def read_file(data, name="config.json", **kwargs):
    return lambda c: c.n.read_hf_rope_config(c.file(name, lazy(data)), **kwargs)


def from_file(data, name="config.json", **kwargs):
    return lambda c: c.n.RotaryEmbedding.from_hf_config(c.file(name, lazy(data)), **kwargs)


def reads(base=10000.0, head_dim=16, max_len=128, heads=4):
    """A check of read_hf_rope_config's result: the options of the small Llama config."""

    def check(result, c):
        module = result["module"]
        assert (module["head_dim"], module["max_len"], module["base"], result["num_attention_heads"]) == \
            (head_dim, max_len, base, heads), result

    return check


def module_turns_like(base=10000.0, head_dim=16):
    """A check of a RotaryEmbedding: frequencies equal to the float64 formula's."""

    def check(result, c):
        torch.testing.assert_close(result.inv_freq, inv_freq64(head_dim, base), rtol=1e-13, atol=0)

    return check


class NotAConfig:
    """A stand-in for a PretrainedConfig (read through to_json_string) that returns given text."""

    def __init__(self, text):
        self.text = text

    def to_json_string(self, use_diff=True):
        return self.text


BOM = b"\xef\xbb\xbf"
LATIN1 = config().encode().replace(b'"llama"', b'"llam\xe9"')  # a Latin-1 byte, not UTF-8


def label_map_8mib():
    """The small config with an 8 MiB id2label map (as classification heads of thousands of labels have)."""
    filled = json.loads(config())
    filled["id2label"] = {str(i): "label_%07d" % i for i in range(8 * MIB // 24)}
    return json.dumps(filled)


def padded(size):
    """The small config padded with spaces to exactly ``size`` bytes."""
    text = config()
    return text[:-1] + " " * (size - len(text)) + "}"


def llama4(**fields):
    base = {"model_type": "llama4_text", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "num_hidden_layers": 4, "max_position_embeddings": 256, "rope_theta": 500000.0,
            "no_rope_layers": [1, 1, 1, 0], "attn_temperature_tuning": True, "floor_scale": 8192, "attn_scale": 0.1}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def transformers_llama_inv_freq(**fields):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    return LlamaRotaryEmbedding(LlamaConfig(**fields)).inv_freq


def equal_to_transformers(**fields):
    def check(result, c):
        torch.testing.assert_close(result.inv_freq.float(), transformers_llama_inv_freq(**fields), rtol=2**-22, atol=0)

    return check


CONFIG_ROWS = [
    err("config-empty-file", read_file(b""), ValueError, "config.json: not valid JSON"),
    err("config-only-whitespace", read_file(" \n\t\r\n"), ValueError, "not valid JSON"),
    err("config-null", read_file("null"), ValueError, "expected a JSON object (a model's config.json)"),
    err("config-string", read_file('"llama"'), ValueError, "expected a JSON object (a model's config.json)"),
    err("config-number", read_file("4096"), ValueError, "expected a JSON object (a model's config.json)"),
    ok("config-utf8-bom-read-as-without", read_file(BOM + config().encode()), reads()),
    err("config-latin1-byte", read_file(LATIN1), ValueError, "UTF-8"),
    err("config-utf16", read_file(config().encode("utf-16")), ValueError, "UTF-8"),
    err("config-NaN-literal", read_file(config(rope_theta=1.5).replace("1.5", "NaN")), ValueError, "not valid JSON"),
    err("config-Infinity-literal", read_file(config(rope_theta=1.5).replace("1.5", "Infinity")), ValueError, "not valid JSON"),
    err("config-minus-Infinity-literal", read_file(config(max_position_embeddings=7).replace("7", "-Infinity")), ValueError, "not valid JSON"),
    err("config-rope_theta-spelled-nan", read_file(config(rope_theta="nan")), ValueError, "rope_theta must be a number, but is a string"),
    err("config-rope_theta=1e999", read_file(config(rope_theta=1.5).replace("1.5", "1e999")), ValueError, "not valid JSON"),
    ok("config-duplicate-key-last-wins-as-json-module", read_file(config(rope_theta=1.5).replace('"rope_theta": 1.5', '"rope_theta": 1.5, "rope_theta": 500000.0')),
       reads(base=json.loads('{"rope_theta": 1.5, "rope_theta": 500000.0}')["rope_theta"])),
    ok("config-duplicate-heads-last-wins", read_file(config().replace('"num_attention_heads": 4', '"num_attention_heads": 2, "num_attention_heads": 4')), reads()),
    err("config-hidden_size-bool", read_file(config(hidden_size=True)), ValueError, "hidden_size must be a number, but is a boolean"),
    err("config-heads-fractional", read_file(config(num_attention_heads=4.5)), ValueError, "num_attention_heads must be a whole number"),
    err("config-heads-as-text", read_file(config(num_attention_heads="4")), ValueError, "num_attention_heads must be a number, but is a string"),
    err("config-rope_parameters-string", read_file(config(rope_parameters="yarn")), ValueError, "rope_parameters"),
    err("config-rope_scaling-list", read_file(config(rope_scaling=[{"rope_type": "linear", "factor": 2.0}])), ValueError, "rope_scaling"),
    err("config-max_position_embeddings-past-2^53", read_file(config(max_position_embeddings=2**53 + 2)), ValueError, "max_position_embeddings"),
    err("config-head_dim=-2", read_file(config(head_dim=-2)), ValueError, "the head width must be >= 2"),
    err("config-trailing-garbage", read_file(config() + " ,"), ValueError, "not valid JSON"),
    err("config-two-objects", read_file(config() + config()), ValueError, "not valid JSON"),
    err("config-raw-NUL-byte", read_file(config().replace('"llama"', '"lla\0ma"')), ValueError, "not valid JSON"),
    err("config-escaped-NUL-hides-hidden_size", read_file(config(hidden_size=None, **{"hidden_size\u0000": 64})), ValueError, "head_dim or hidden_size is needed"),
    err("config-lone-surrogate", read_file(config(model_type="\ud800")), ValueError, "not valid JSON"),
    ok("config-8MiB-label-map", read_file(label_map_8mib), reads()),
    ok("config-exactly-64MiB", read_file(lambda: padded(64 * MIB)), reads()),
    err("config-64MiB-and-1-byte", read_file(lambda: padded(64 * MIB + 1)), ValueError, "bytes"),
    err("config-dev-zero", lambda c: c.n.read_hf_rope_config("/dev/zero"), ValueError, "bytes"),
    err("config-dev-null", lambda c: c.n.read_hf_rope_config("/dev/null"), ValueError, "not valid JSON"),
    err("config-directory", lambda c: c.n.read_hf_rope_config(str(c.tmp)), IsADirectoryError, str(os.sep)),
    err("config-missing-path", lambda c: c.n.read_hf_rope_config(c.path("missing.json")), FileNotFoundError, "missing.json"),
    err("config-int", lambda c: c.n.read_hf_rope_config(42), TypeError, "config must be a path, a dict or a transformers.PretrainedConfig", "int"),
    err("config-None", lambda c: c.n.RotaryEmbedding.from_hf_config(None), TypeError, "config must be a path, a dict or a transformers.PretrainedConfig", "NoneType"),
    err("config-bytes-path", lambda c: c.n.read_hf_rope_config(c.file("config.json", config()).encode()), TypeError, "bytes"),
    err("config-dict-NaN", lambda c: c.n.read_hf_rope_config(json.loads(config(rope_theta=math.nan))), ValueError, "not valid JSON"),
    err("config-dict-with-set", lambda c: c.n.read_hf_rope_config({**json.loads(config()), "layers": {1, 2}}), TypeError, "not JSON serializable"),
    ok("config-dict-int-keys", lambda c: c.n.read_hf_rope_config({**json.loads(config()), 7: "seven"}), reads()),
    err("config-object-not-json", lambda c: c.n.read_hf_rope_config(NotAConfig("{'model_type': 'llama'}")), ValueError, "not valid JSON"),
    err("config-object-over-64MiB", lambda c: c.n.read_hf_rope_config(NotAConfig(padded(64 * MIB + 7))), ValueError, "bytes"),
    ok("from_hf_config-path", from_file(config(rope_theta=250000.0)), module_turns_like(250000.0)),
    ok("from_hf_config-bom", from_file(BOM + config(rope_theta=250000.0).encode()), module_turns_like(250000.0)),
    ok("from_hf_config-transformers-config", lambda c: c.n.RotaryEmbedding.from_hf_config(__import__("transformers").LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 123456.0})),
       equal_to_transformers(hidden_size=64, num_attention_heads=4, max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 123456.0})),
    err("from_hf_config-latin1", from_file(LATIN1), ValueError, "UTF-8"),
    err("from_hf_config-theta-zero", from_file(config(rope_theta=0)), ValueError, "rope_theta"),
    err("AttentionTemperature.from_hf_config-attn_scale=1e39", lambda c: c.n.AttentionTemperature.from_hf_config(llama4(attn_scale=1e39), layer=3), ValueError, "attn_scale"),
    err("AttentionTemperature.from_hf_config-floor_scale=1e-50", lambda c: c.n.AttentionTemperature.from_hf_config(llama4(floor_scale=1e-50), layer=3), ValueError, "floor_scale"),
    ok("AttentionTemperature.from_hf_config-llama4", lambda c: c.n.AttentionTemperature.from_hf_config(llama4(floor_scale=4, attn_scale=0.5), layer=3),
       lambda m, c: (m.floor_scale, m.attn_scale, m.form) == (4.0, 0.5, "llama4") or pytest.fail(repr(m))),
]


# --- AttentionTemperature and its operator at extreme scales -------------------------------------


def temperature64(positions, floor_scale, attn_scale, form="llama4"):
    p = torch.as_tensor(positions, dtype=f64)
    if form == "llama4":
        return torch.log1p(torch.floor((p.clamp_min(-1) + 1) / floor_scale)) * attn_scale + 1
    return 1 + attn_scale * torch.log(1 + torch.floor(p.clamp_min(0) / floor_scale))


def scaled_like(query, positions, floor_scale, attn_scale, form="llama4"):
    """A check: query [B, L, H, D] scaled by the float64 temperature of each position (float32
    rounding of the scale and the product: 2^-22 relative)."""

    def check(result, c):
        scales = temperature64(positions, floor_scale, attn_scale, form)
        expected = query.double() * scales.reshape(*([1] if scales.dim() == 1 else [scales.shape[0]]), -1, 1, 1)
        assert result.dtype == query.dtype
        torch.testing.assert_close(result.double(), expected, rtol=2**-21, atol=0)

    return check


Q = torch.rand(2, 4, 3, 2) + 0.5


def only_row(row, special, rest):
    """A check: the tokens at `row` (dim 1) of a scaled Q are all `special` (torch.isnan,
    torch.isinf); the others pass `rest`, a check of Q scaled at positions that put 0 at `row`
    (whose scale is 1 in both forms: the row is put back to Q's)."""
    def check(result, c):
        if not special(result[:, row]).all():
            pytest.fail(f"row {row} is not all {special.__name__}: {result[:, row]}")
        others = result.clone()
        others[:, row] = Q[:, row]
        return rest(others, c)
    return check


def temperature(floor_scale=8192.0, attn_scale=0.1, **kw):
    return lambda c: c.n.AttentionTemperature(floor_scale=floor_scale, attn_scale=attn_scale, **kw)


def run_at(offset, positions=None):
    def run(module):
        if positions is not None:
            return module.forward_positions(Q, positions)
        return module(Q, offset)

    return run


TEMPERATURE_ROWS = [
    err("AttentionTemperature-attn_scale=1e39", temperature(attn_scale=1e39), ValueError, "AttentionTemperature:", "attn_scale"),
    err("AttentionTemperature-attn_scale=-1e39", temperature(attn_scale=-1e39), ValueError, "AttentionTemperature:", "attn_scale"),
    err("AttentionTemperature-floor_scale=1e-50", temperature(floor_scale=1e-50), ValueError, "AttentionTemperature:", "floor_scale"),
    err("AttentionTemperature-floor_scale=denormal64", temperature(floor_scale=5e-324), ValueError, "AttentionTemperature:", "floor_scale"),
    err("AttentionTemperature-ministral3-attn_scale=1e39", temperature(16384.0, 1e39, form="ministral3"), ValueError, "AttentionTemperature:", "attn_scale"),
    ok("AttentionTemperature-attn_scale=3e38-at-2^40-finite-or-refused", finite_or_refused(temperature(1.0, 3e38), run_at(2**40), "attn_scale"), accepted),
    ok("AttentionTemperature-floor_scale=1e-40-finite-or-refused", finite_or_refused(temperature(1e-40, 0.1), run_at(0), "floor_scale"), accepted),
    ok("AttentionTemperature-attn_scale=1e36-at-2^62-finite-or-refused", finite_or_refused(temperature(1.0, 1e36), run_at(2**62), "attn_scale"), accepted),
    ok("AttentionTemperature-ministral3-attn_scale=-3e38-finite-or-refused", finite_or_refused(temperature(1.0, -3e38, form="ministral3"), run_at(2**30), "attn_scale"), accepted),
    ok("AttentionTemperature-floor_scale=1e300-scales-by-1", lambda c: c.n.AttentionTemperature(floor_scale=1e300, attn_scale=5.0)(Q, 2**62), lambda r, c: torch.equal(r, Q) or pytest.fail("changed")),
    ok("AttentionTemperature-llama4-crosses-floor", lambda c: c.n.AttentionTemperature(floor_scale=8192, attn_scale=0.1)(Q, 8190), scaled_like(Q, torch.arange(8190, 8194), 8192, 0.1)),
    ok("AttentionTemperature-ministral3-positions", lambda c: c.n.AttentionTemperature(floor_scale=16, attn_scale=0.5, form="ministral3").forward_positions(Q, torch.tensor([0, 5, 16, 2**40])),
       scaled_like(Q, torch.tensor([0, 5, 16, 2**40]), 16, 0.5, "ministral3")),
    ok("AttentionTemperature-padding-scaled-by-1", lambda c: c.n.AttentionTemperature(floor_scale=1, attn_scale=3.0).forward_positions(Q, torch.tensor([[-1, 0, 1, 2], [3, -1, -1, 9]])),
       scaled_like(Q, torch.tensor([[-1, 0, 1, 2], [3, -1, -1, 9]]), 1, 3.0)),
    err("attention_temperature-op-floor_scale=1e-50", lambda c: c.o.attention_temperature(Q, None, 0, 1e-50, 0.1), RuntimeError, "floor_scale"),
    err("attention_temperature-op-attn_scale=1e39", lambda c: c.o.attention_temperature(Q, None, 0, 8192.0, 1e39), RuntimeError, "attn_scale"),
    # A NaN or infinite position scales its token's queries by NaN or inf, as transformers' own
    # formula does (the scales are computed on the device, where no value is read, so that the
    # call stays traceable); every other token is scaled as usual.
    ok("attention_temperature-op-positions-nan-propagates", lambda c: c.o.attention_temperature(Q, torch.tensor([0.0, math.nan, 1.0, 2.0])),
       only_row(1, torch.isnan, scaled_like(Q, torch.tensor([0, 0, 1, 2]), 8192, 0.1))),
    ok("attention_temperature-op-positions-inf-propagates", lambda c: c.o.attention_temperature(Q, torch.tensor([0.0, math.inf, 1.0, 2.0]), 0, 8192.0, 0.1, False, "ministral3"),
       only_row(1, torch.isinf, scaled_like(Q, torch.tensor([0, 0, 1, 2]), 8192, 0.1, "ministral3"))),
    err("attention_temperature-op-positions-on-meta", lambda c: c.o.attention_temperature(Q, torch.arange(4, device="meta")), RuntimeError, "meta"),
    err("attention_temperature-op-form-empty", lambda c: c.o.attention_temperature(Q, None, 0, 8192.0, 0.1, False, ""), RuntimeError, "form must be"),
]


# --- mrope_position_ids ------------------------------------------------------------------------


def mrope64(token_types, grids, merge=2, intervals=None):
    """Qwen2-VL's get_rope_index (transformers 5.23.0) for one row, written here: text counts up on
    all axes; a run of image (1) or video (2) tokens is one grid (t, h, w) numbered start +
    int(frame * interval), start + row, start + column, and the next token starts at start +
    max(h, w) / merge; the delta is the largest position + 1 - the row's length."""
    positions, start, g, i = [[], [], []], 0, 0, 0
    while i < len(token_types):
        if token_types[i] == 0:
            for axis in positions:
                axis.append(start)
            start, i = start + 1, i + 1
            continue
        t, h, w = grids[g]
        interval = (intervals or [1.0] * len(grids))[g]
        h, w = h // merge, w // merge
        for frame in range(t):
            for row in range(h):
                for column in range(w):
                    positions[0].append(start + int(frame * interval))
                    positions[1].append(start + row)
                    positions[2].append(start + column)
        count = t * h * w
        start += max(h, w)
        i, g = i + count, g + 1
    positions = torch.tensor(positions, dtype=i64)[:, None, :]
    return positions, positions.max().item() + 1 - len(token_types)


def numbered_like(tokens, grids, merge=2, intervals=None):
    def check(result, c):
        expected, delta = mrope64(tokens, grids, merge, intervals)
        assert torch.equal(result[0], expected), (result[0], expected)
        assert result[1].tolist() == [[delta]], (result[1], delta)

    return check


def mrope(tokens, image=None, video=None, mask=None, **kwargs):
    return lambda c: c.o.mrope_position_ids(tokens() if callable(tokens) else tokens,
                                            image() if callable(image) else image,
                                            video() if callable(video) else video,
                                            mask() if callable(mask) else mask, **kwargs)


TT = torch.tensor([[0, 0, 1, 1, 1, 1, 0, 0]])
TT_LIST = TT[0].tolist()
GRID = torch.tensor([[1, 4, 4]])
MROPE = "mrope_position_ids"

MROPE_ROWS = [
    err(f"{MROPE}-image-grid-on-meta", mrope(TT, GRID.to("meta")), RuntimeError, "image_grid_thw", "meta"),
    err(f"{MROPE}-video-grid-on-meta", mrope(torch.full((1, 4), 2), None, lambda: GRID.to("meta")), RuntimeError, "video_grid_thw", "meta"),
    err(f"{MROPE}-mask-on-meta", mrope(TT, GRID, None, lambda: torch.ones(1, 8, device="meta")), RuntimeError, "attention_mask", "meta"),
    err(f"{MROPE}-meta-grid-under-cpu-mask", mrope(TT, GRID.to("meta"), None, torch.ones(1, 8, dtype=i64)), RuntimeError, "image_grid_thw", "meta"),
    ok(f"{MROPE}-all-on-meta-shapes", mrope(lambda: TT.to("meta"), lambda: GRID.to("meta")), lambda r, c: (r[0].shape, r[1].shape, r[0].device.type) == ((3, 1, 8), (1, 1), "meta") or pytest.fail(repr(r))),
    ok(f"{MROPE}-image-run", mrope(TT, GRID), numbered_like(TT_LIST, [(1, 4, 4)])),
    ok(f"{MROPE}-int32-grid", mrope(TT, GRID.int()), numbered_like(TT_LIST, [(1, 4, 4)])),
    ok(f"{MROPE}-video-interval-2.5", mrope(torch.tensor([[0, 2, 2, 2, 2, 2, 2, 0]]), None, torch.tensor([[3, 2, 4]]), video_time_intervals=[2.5]),
       numbered_like([0, 2, 2, 2, 2, 2, 2, 0], [(3, 2, 4)], intervals=[2.5])),
    ok(f"{MROPE}-merge-size-1", mrope(torch.tensor([[1, 1, 1, 1, 1, 1, 0]]), torch.tensor([[1, 2, 3]]), spatial_merge_size=1), numbered_like([1, 1, 1, 1, 1, 1, 0], [(1, 2, 3)], merge=1)),
    ok(f"{MROPE}-float-mask-of-ones", mrope(TT, GRID, None, torch.ones(1, 8)), numbered_like(TT_LIST, [(1, 4, 4)])),
    ok(f"{MROPE}-empty-batch-with-grids-given-none-used", mrope(torch.zeros(0, 6, dtype=i64), torch.zeros(0, 3, dtype=i64)), lambda r, c: (r[0].shape, r[1].shape) == ((3, 0, 6), (0, 1)) or pytest.fail(repr(r))),
    err(f"{MROPE}-grid-bool", mrope(TT, GRID.bool()), RuntimeError, "image_grid_thw must be [N, 3] (t, h, w) integers"),
    err(f"{MROPE}-grid-N-by-4", mrope(TT, torch.tensor([[1, 4, 4, 1]])), RuntimeError, "image_grid_thw must be [N, 3] (t, h, w) integers", "[1, 4]"),
    err(f"{MROPE}-token_types-bool", mrope(TT.bool()), RuntimeError, "token_types must be [B, L] integers"),
    err(f"{MROPE}-token_types-3d", mrope(TT[None]), RuntimeError, "token_types must be [B, L] integers"),
    err(f"{MROPE}-mask-transposed", mrope(TT, GRID, None, torch.ones(8, 1, dtype=i64)), RuntimeError, "attention_mask must have token_types' shape"),
    err(f"{MROPE}-grid-2^20-squared", mrope(torch.ones(1, 4, dtype=i64), torch.tensor([[1, 2**20, 2**20]])), RuntimeError, "more than 2^28 tokens"),
    err(f"{MROPE}-grid-t=2^40", mrope(torch.full((1, 4), 2), None, torch.tensor([[2**40, 4, 4]])), RuntimeError, "more than 2^28 tokens"),
    err(f"{MROPE}-merge-3-on-even-grid", mrope(TT, GRID, spatial_merge_size=3), RuntimeError, "multiples of spatial_merge_size = 3"),
    err(f"{MROPE}-interval-nan", mrope(torch.full((1, 4), 2), None, torch.tensor([[1, 4, 4]]), video_time_intervals=[math.nan]), RuntimeError, "video_time_intervals must be finite and >= 0"),
    err(f"{MROPE}-intervals-count", mrope(torch.full((1, 4), 2), None, torch.tensor([[1, 4, 4]]), video_time_intervals=[1.0, 1.0]), RuntimeError, "video_time_intervals must give one interval per video (1), but gives 2"),
    err(f"{MROPE}-more-image-tokens-than-grids", mrope(torch.tensor([[1, 1, 1, 1, 0, 1, 1, 1, 1]]), GRID), RuntimeError, "image_grid_thw"),
]


# --- fake tensors and torch.export: refuse what eager refuses --------------------------------


def fake_like_eager(build, make_input, call=lambda m, x: m(x)):
    """A row's call: ``call(build(c), x)`` raises in eager mode; under FakeTensorMode (what
    torch.export and torch.compile trace with) it must raise the same exception type with the
    same message. Returns the fake error's message."""

    def fn(c):
        from torch._subclasses.fake_tensor import FakeTensorMode

        module = build(c)
        with pytest.raises(Exception) as eager:
            call(module, make_input())
        with FakeTensorMode(allow_non_fake_inputs=True):
            x = make_input()
            try:
                out = call(module, x)
            except Exception as error:  # noqa: BLE001 (compared with eager's below)
                fake = error
            else:
                pytest.fail(f"eager refuses ({eager.value}), FakeTensorMode returned {getattr(out, 'shape', out)}")
        first = str(eager.value).split("\n")[0]
        assert isinstance(fake, type(eager.value)) and first in str(fake), f"eager: {first}\nfake: {fake}"
        return first

    return fn


def export_refuses(build, make_input, message):
    """torch.export of ``build(c)`` on an example eager refuses: raises, naming ``message``."""

    def fn(c):
        module = build(c)
        with pytest.raises(Exception) as raised:
            torch.export.export(module, (make_input(),))
        assert any(message in text for text in chain(raised.value)), chain(raised.value)
        return message

    return fn


def fake_shape(build, make_input, shape, call=lambda m, x: m(x)):
    def fn(c):
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

        module = build(c)
        with FakeTensorMode(allow_non_fake_inputs=True):
            out = call(module, make_input())
        assert isinstance(out, FakeTensor) and tuple(out.shape) == shape, (type(out), out.shape)
        return out.shape

    return fn


def returned(result, c):
    assert result is not None


FAKE_ROWS = [
    ok("fake-LearnedPositionalEmbedding-width-32-of-64", fake_like_eager(lambda c: c.n.LearnedPositionalEmbedding(64, 16), lambda: torch.empty(1, 4, 32)), returned),
    ok("fake-LearnedPositionalEmbedding-seq-first-width", fake_like_eager(lambda c: c.n.LearnedPositionalEmbedding(8, 16, batch_first=False), lambda: torch.empty(4, 1, 16)), returned),
    ok("fake-PositionalEncoding-width-32-of-64", fake_like_eager(lambda c: c.n.PositionalEncoding(64, 16), lambda: torch.empty(1, 4, 32)), returned),
    ok("fake-PositionalEncoding-past-max_len", fake_like_eager(lambda c: c.n.PositionalEncoding(8, 16), lambda: torch.empty(1, 4, 8), lambda m, x: m(x, 13)), returned),
    ok("fake-TokenAndPositionEmbedding-float-ids", fake_like_eager(lambda c: c.n.TokenAndPositionEmbedding(10, 8, 16), lambda: torch.empty(1, 4)), returned),
    ok("fake-RotaryEmbedding-head-narrower", fake_like_eager(lambda c: c.n.RotaryEmbedding(8, 16), lambda: torch.empty(1, 4, 2, 6)), returned),
    ok("fake-RotaryEmbedding-past-max_len", fake_like_eager(lambda c: c.n.RotaryEmbedding(8, 16), lambda: torch.empty(1, 4, 2, 8), lambda m, x: m(x, 14)), returned),
    ok("fake-RotaryEmbedding-qk-widths-differ", fake_like_eager(lambda c: c.n.RotaryEmbedding(8, 16), lambda: torch.empty(1, 4, 2, 8), lambda m, x: m.forward_qk(x, x[..., :6])), returned),
    ok("fake-AttentionTemperature-3d-query", fake_like_eager(lambda c: c.n.AttentionTemperature(), lambda: torch.empty(4, 2, 8)), returned),
    ok("fake-LearnedPositionalEmbedding-valid", fake_shape(lambda c: c.n.LearnedPositionalEmbedding(64, 16), lambda: torch.empty(1, 4, 64), (1, 4, 64)), returned),
    ok("fake-RotaryEmbedding-valid-heads-first", fake_shape(lambda c: c.n.RotaryEmbedding(8, 16, heads_first=True), lambda: torch.empty(1, 2, 4, 8), (1, 2, 4, 8)), returned),
    ok("export-LearnedPositionalEmbedding-width-32-of-64", export_refuses(lambda c: c.n.LearnedPositionalEmbedding(64, 16), lambda: torch.randn(1, 4, 32), "d_model"), returned),
    ok("export-RotaryEmbedding-head-narrower", export_refuses(lambda c: c.n.RotaryEmbedding(8, 16), lambda: torch.randn(1, 4, 2, 6), "rotated width 8"), returned),
]


# --- the transformers drop-in ------------------------------------------------------------------

SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def tiny(model_type="llama", seed=0, **extra):
    import transformers

    config = transformers.AutoConfig.for_model(model_type, **{**SMALL, **extra})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def snapshot(model):
    return ({k: v.clone() for k, v in model.state_dict().items()}, [type(m) for m in model.modules()],
            dict(vars(model.config)))


def refused_unchanged(make, call, exc, *messages):
    """A row's call: ``call(c, model)`` on ``make()`` must raise ``exc`` naming ``messages`` and leave
    the model as it was (state dict, module classes, config)."""

    def fn(c):
        model = make()
        before = snapshot(model)
        with pytest.raises(exc) as raised:
            call(c, model)
        for message in messages:
            assert message in str(raised.value), raised.value
        after = snapshot(model)
        assert before[0].keys() == after[0].keys() and all(torch.equal(before[0][k], after[0][k]) for k in before[0])
        assert before[1] == after[1], "module classes changed"
        assert before[2].keys() == after[2].keys(), "config changed"
        assert not c.hf.is_patched(model)
        return "unchanged"

    return fn


def with_model_type(value, model_type="llama"):
    def make():
        model = tiny(model_type)
        model.config.model_type = value
        return model

    return make


def apply(c, model):
    return c.hf.apply_posenc_rope(model)


def odd_width(folder, width=5):
    def fn(c):
        import importlib

        q, k = torch.randn(1, 2, 3, width), torch.randn(1, 1, 3, width)
        cos, sin = torch.randn(1, 3, width), torch.randn(1, 3, width)
        modeling = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
        return c.hf.replacement_for(modeling.apply_rotary_pos_emb)(q, k, cos, sin)

    return fn


def served_as_its_code(make):
    """A model whose config names another (or no known) model type is served by what its code
    computes: discovery reads the modeling file's functions, not the type's name."""

    def fn(c):
        tokens = torch.randint(3, SMALL["vocab_size"], (1, 7), generator=torch.Generator().manual_seed(5))
        reference, patched = make(), c.hf.apply_posenc_rope(make())
        with torch.no_grad():
            return patched(tokens).logits, reference(tokens).logits

    return fn


def patched_equals_transformers(model_type):
    def fn(c):
        tokens = torch.randint(3, SMALL["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(5))
        reference, patched = tiny(model_type, 3), c.hf.apply_posenc_rope(tiny(model_type, 3))
        with torch.no_grad():
            return patched(tokens).logits, reference(tokens).logits

    return fn


def logits_match(result, c):
    ours, theirs = result
    assert (ours - theirs).abs().max() <= 1e-6 * theirs.abs().max(), (ours - theirs).abs().max()


class WithConfig(torch.nn.Module):
    def __init__(self, model_type):
        super().__init__()
        self.config = types.SimpleNamespace(model_type=model_type)
        self.linear = torch.nn.Linear(2, 2)


def own_forward(model):
    attention = model.model.layers[0].self_attn
    attention.forward = attention.forward  # a bound method set on the instance (as a hook library does)
    return model


DROP_IN_ROWS = [
    err("drop-in-apply-None", lambda c: c.hf.apply_posenc_rope(None), ValueError, "takes a transformers model", "NoneType"),
    err("drop-in-apply-str", lambda c: c.hf.apply_posenc_rope("llama"), ValueError, "takes a transformers model", "str"),
    err("drop-in-apply-model-class", lambda c: c.hf.apply_posenc_rope(__import__("transformers").LlamaForCausalLM), ValueError, "takes a transformers model"),
    err("drop-in-apply-module-without-config", lambda c: c.hf.apply_posenc_rope(torch.nn.Sequential(torch.nn.Linear(2, 2))), ValueError, "takes a transformers model", "Sequential"),
    err("drop-in-remove-None", lambda c: c.hf.remove_posenc_rope(None), (TypeError, ValueError), "NoneType"),
    err("drop-in-is_patched-None", lambda c: c.hf.is_patched(None), (TypeError, ValueError), "NoneType"),
    err("drop-in-remove-str", lambda c: c.hf.remove_posenc_rope("model"), (TypeError, ValueError), "str"),
    err("drop-in-is_patched-int", lambda c: c.hf.is_patched(3), (TypeError, ValueError), "int"),
    ok("drop-in-is_patched-plain-module", lambda c: c.hf.is_patched(torch.nn.Linear(2, 2)), equals(False)),
    ok("drop-in-remove-unpatched-changes-nothing", lambda c: (lambda m: (snapshot(m), c.hf.remove_posenc_rope(m), snapshot(m)))(tiny()),
       lambda r, c: (r[0][1] == r[2][1] and all(torch.equal(r[0][0][k], r[2][0][k]) for k in r[0][0])) or pytest.fail("changed")),
    ok("drop-in-model_type-list", refused_unchanged(with_model_type(["llama"]), apply, ValueError, "['llama']"), equals("unchanged")),
    ok("drop-in-model_type-tuple", refused_unchanged(with_model_type(("llama",)), apply, ValueError, "('llama',)"), equals("unchanged")),
    ok("drop-in-model_type-int", refused_unchanged(with_model_type(7), apply, ValueError, "7"), equals("unchanged")),
    ok("drop-in-model_type-None", refused_unchanged(with_model_type(None), apply, ValueError, "LlamaForCausalLM"), equals("unchanged")),
    ok("drop-in-model_type-empty", served_as_its_code(with_model_type("")), logits_match),
    ok("drop-in-model_type-uppercase", served_as_its_code(with_model_type("LLAMA")), logits_match),
    ok("drop-in-model_type-falcon", served_as_its_code(with_model_type("falcon")), logits_match),
    ok("drop-in-llama-claiming-mistral", served_as_its_code(with_model_type("mistral")), logits_match),
    ok("drop-in-bert", refused_unchanged(lambda: __import__("transformers").BertModel(__import__("transformers").BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, vocab_size=32)),
                                         apply, ValueError, "'bert'"), equals("unchanged")),
    ok("drop-in-instance-forward-qwen2", refused_unchanged(lambda: own_forward(tiny("qwen2")), apply, ValueError, "has a forward of its own"), equals("unchanged")),
    err("drop-in-rotation_form-None", lambda c: c.hf.rotation_form(None), TypeError, "rotation_form takes a rotary function", "NoneType"),
    err("drop-in-replacement_for-int", lambda c: c.hf.replacement_for(3), TypeError, "rotation_form takes a rotary function", "int"),
    err("drop-in-rotation_form-builtin", lambda c: c.hf.rotation_form(len), ValueError, "len cannot be replaced", "its arguments (obj)"),
    err("drop-in-rotation_form-identity", lambda c: c.hf.rotation_form(lambda q, k, cos, sin, unsqueeze_dim=1: (q, k)), ValueError, "cannot be replaced: it computes none of the rotations"),
    err("drop-in-describe-None", lambda c: c.hf.describe_posenc_rope(None), ValueError, "takes a transformers model", "NoneType"),
    err("drop-in-config-but-no-attention", lambda c: c.hf.apply_posenc_rope(WithConfig("llama")), ValueError, "no module of this 'llama' model (WithConfig) calls"),
    err("drop-in-partial-odd-width", odd_width("phi3"), ValueError, "5"),
    err("drop-in-halves-odd-width", odd_width("llama"), ValueError, "5"),
    ok("drop-in-patched-llama-equals-transformers", patched_equals_transformers("llama"), logits_match),
    ok("drop-in-patched-twice-one-class", lambda c: (lambda m: {type(l.self_attn) for l in c.hf.apply_posenc_rope(c.hf.apply_posenc_rope(m)).model.layers})(tiny("qwen2")),
       lambda r, c: (len(r) == 1 and next(iter(r)).__name__ == "PosencQwen2Attention") or pytest.fail(repr(r))),
    ok("drop-in-patched-deepcopy-pickles", lambda c: pickle.loads(pickle.dumps(copy.deepcopy(c.hf.apply_posenc_rope(tiny("mistral"))))),
       lambda r, c: c.hf.is_patched(r) or pytest.fail("not patched")),
]


# --- posenc.onnx.export ------------------------------------------------------------------------

OLD = b"the previous file, which a failed export must leave as it was\n"


def onnx_export(module, shape, target=None, keep=False, inputs=None, **kwargs):
    """posenc.onnx.export(module(c), (randn(shape),) or inputs(), f): f is ``target`` in the row's
    directory (which, with ``keep``, already holds OLD). Returns (result or exception, file bytes
    or None, f)."""

    def fn(c):
        f = None
        if target is not None:
            f = c.path(target)
            if keep:
                c.file(target, OLD)
        try:
            result = c.onnx.export(module(c), inputs() if inputs else (torch.randn(shape),), f, **kwargs)
        except Exception as error:  # noqa: BLE001 (the rows check it)
            result = error
        return result, (open(f, "rb").read() if f and os.path.isfile(f) else None), f

    return fn


def chain(error):
    """The messages of an exception and of the exceptions it was raised from."""
    texts = []
    while error is not None and len(texts) < 20:
        texts.append(str(error))
        error = error.__cause__ or error.__context__
    return texts


def export_refused(exc, message, file_kept=None):
    def check(result, c):
        error, data, f = result
        assert isinstance(error, exc), repr(error)
        assert any(message in text for text in chain(error)), chain(error)
        if file_kept is True:
            assert data == OLD, f"the previous file was changed ({None if data is None else len(data)} bytes)"
        elif file_kept is False:
            assert data is None, "a file was left at the destination"
        leftovers = [name for name in os.listdir(c.tmp) if name not in ("old.onnx", "m.onnx")]
        assert not leftovers, f"files left beside the destination: {leftovers}"

    return check


def export_wrote(result, c):
    """The export replaced the file with a model ONNX loads (with its external data file, which
    the exporter writes beside it), and left nothing else there."""
    program, data, f = result
    assert not isinstance(program, Exception), repr(program)
    import onnx

    assert data != OLD
    model = onnx.load(f)
    assert {node.domain for node in model.graph.node} <= {"", "ai.onnx"} and model.graph.initializer
    name = os.path.basename(f)
    assert set(os.listdir(c.tmp)) <= {name, name + ".data"}, os.listdir(c.tmp)


DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}
LONGROPE = {"rope_type": "longrope", "original_max_position_embeddings": 8, "short_factor": [1.0] * 4, "long_factor": [1.0, 1.5, 2.0, 3.0]}

ONNX_ROWS = [
    err("onnx-Method-unknown", lambda c: c.onnx.Method(c.n.RotaryEmbedding(8, 16), "forward_kq"), ValueError, "has no method 'forward_kq'"),
    err("onnx-Method-no-arguments", lambda c: c.onnx.Method(c.n.RotaryEmbedding(8, 16), "extra_repr"), ValueError, "takes 0 required arguments"),
    ok("onnx-dynamic-ntk-refused", onnx_export(lambda c: c.n.RotaryEmbedding(8, 32, rope_scaling=DYNAMIC).eval(), (1, 4, 2, 8)), export_refused(Exception, "cannot be exported to ONNX")),
    ok("onnx-dynamic-ntk-refused-keeps-file", onnx_export(lambda c: c.n.RotaryEmbedding(8, 32, rope_scaling=DYNAMIC).eval(), (1, 4, 2, 8), "old.onnx", keep=True), export_refused(Exception, "cannot be exported to ONNX", file_kept=True)),
    ok("onnx-longrope-refused", onnx_export(lambda c: c.n.RotaryEmbedding(8, 32, rope_scaling=LONGROPE).eval(), (1, 4, 2, 8)), export_refused(Exception, "cannot be exported to ONNX")),
    ok("onnx-extrapolate-refused-keeps-file", onnx_export(lambda c: c.n.RotaryEmbedding(8, 32, beyond_max_len="extrapolate").eval(), (1, 4, 2, 8), "old.onnx", keep=True), export_refused(Exception, "cannot be exported to ONNX", file_kept=True)),
    ok("onnx-fractional-positions-refused", onnx_export(lambda c: c.onnx.Method(c.n.RotaryEmbedding(8, 32).eval(), "forward_positions"), None,
                                                         inputs=lambda: (torch.randn(1, 4, 2, 8), torch.tensor([0.0, 0.5, 1.5, 3.0]))),
       export_refused(Exception, "fractional positions")),
    ok("onnx-wrong-width-refused-writes-nothing", onnx_export(lambda c: c.n.PositionalEncoding(8, 16).eval(), (1, 4, 6), "m.onnx"), export_refused(Exception, "d_model", file_kept=False)),
    ok("onnx-replaces-a-file", onnx_export(lambda c: c.n.PositionalEncoding(8, 16).eval(), (1, 4, 8), "old.onnx", keep=True), export_wrote),
    ok("onnx-into-missing-directory", onnx_export(lambda c: c.n.PositionalEncoding(8, 16).eval(), (1, 4, 8), "missing/m.onnx"), export_refused(OSError, "missing")),
]


# --- in-process rows ---------------------------------------------------------------------------

NEEDS_TRANSFORMERS = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="transformers is installed in the pip test environment only (scripts/setup.sh)")


def needing_transformers(rows, ids=None):
    """The rows (those of ``ids``, or all) marked to skip where transformers is not installed."""
    return [pytest.param(*row.values, id=row.id, marks=[*row.marks, NEEDS_TRANSFORMERS])
            if ids is None or row.id in ids else row for row in rows]


ROTARY_FREQUENCY_ROWS = needing_transformers(ROTARY_FREQUENCY_ROWS, {"frequencies-yarn-against-transformers"})
CONFIG_ROWS = needing_transformers(CONFIG_ROWS, {"from_hf_config-transformers-config"})
DROP_IN_ROWS = needing_transformers(DROP_IN_ROWS)

ROWS = (CHECK_MODULE_OPTIONS_ROWS + ROTARY_FREQUENCY_ROWS + ROTARY_CALL_ROWS + ROPE_FREQUENCIES_ROWS + CONFIG_ROWS
        + TEMPERATURE_ROWS + MROPE_ROWS + FAKE_ROWS + DROP_IN_ROWS)


@pytest.mark.parametrize("fn, expected", ROWS)
def test_front_door(c, fn, expected):
    """One call and its expected outcome: a clean error naming the problem, or a checked result."""
    if expected[0] == "raises":
        _, exc, messages = expected
        with pytest.raises(exc) as raised:
            fn(c)
        for message in messages:
            assert message in str(raised.value), f"{message!r} not in {str(raised.value)[:2000]!r}"
    else:
        expected[1](fn(c), c)


@pytest.mark.skipif(TORCH_VERSION < (2, 9), reason="posenc.onnx needs torch >= 2.9")
@pytest.mark.parametrize("fn, expected", ONNX_ROWS)
def test_onnx_front_door(c, fn, expected):
    pytest.importorskip("onnxscript")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        test_front_door(c, fn, expected)


# --- rows that may crash the interpreter: run by a worker process --------------------------------

WORKER = r'''
import json, math, os, shutil, sys, threading
MODE, TMP, PYTHON_DIR = sys.argv[1], sys.argv[2], sys.argv[4]
sys.path.insert(0, PYTHON_DIR)
import torch
if MODE == "crash":
    import posenc
    o, n = posenc.ops, posenc.nn
ORIGINAL, IO = os.environ.get("POSENC_TEST_ORIGINAL"), os.environ.get("POSENC_TEST_IO")


def arrays(levels, inner="1"):
    return "[" * levels + inner + "]" * levels


def objects(levels, inner="1"):
    return '{"":' * levels + inner + "}" * levels


def nested_dict(levels):
    value = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def nested_list(levels):
    value = 4
    for _ in range(levels):
        value = [value]
    return value


def write(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def config(**fields):
    base = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 128,
            "rope_theta": 10000.0}
    base.update(fields)
    return json.dumps(base)


def rope_text(**fields):
    return json.dumps({"head_dim": 8, "max_len": 16, **fields})


def in_thread(fn, stack_size=1 << 20):
    """fn() in a thread with a stack of stack_size bytes; its exception re-raised here."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as error:  # noqa: BLE001
            box["error"] = error

    previous = threading.stack_size(stack_size)
    try:
        thread = threading.Thread(target=target)
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")


def call_tensors():
    inv = torch.tensor([10000.0 ** (-i / 4) for i in range(4)], dtype=torch.float64)
    cos, sin = o.rotary_tables(16, inv)
    return torch.randn(1, 3, 2, 8), cos, sin, inv


class NotAConfig:
    def __init__(self, text):
        self.text = text

    def to_json_string(self, use_diff=True):
        return self.text


rows = json.load(open(sys.argv[3]))
for row_id, code, env, where in rows:
    print("@@START " + row_id, flush=True)
    saved = dict(os.environ)
    if MODE == "load":  # (each row imports posenc afresh, with its own variables)
        for name in [m for m in sys.modules if m == "posenc" or m.startswith("posenc.")]:
            del sys.modules[name]
        for name in ("POSENC_LIBRARY", "POSENC_IO_LIBRARY"):
            os.environ.pop(name, None)
        os.environ.update(env)
    try:
        exec(code, dict(globals(), TMP=where or TMP))
        result = {"kind": "returned"}
    except BaseException as error:  # noqa: BLE001 (reported to the test)
        result = {"kind": "raised", "types": [k.__name__ for k in type(error).__mro__], "message": str(error)[:4000]}
    os.environ.clear()
    os.environ.update(saved)
    print("@@RESULT " + json.dumps([row_id, result]), flush=True)
'''


def crash(id, code, exc, *messages):
    """A call run by the worker process (``code``, with the worker's helpers): it must raise an
    exception of type name ``exc`` with ``messages`` (``exc`` None: return), and the worker must
    live on."""
    return pytest.param(id, textwrap.dedent(code), exc, messages, id=id)


MODULE_OPTIONS_65 = {
    "PositionalEncoding": "d_model", "LearnedPositionalEmbedding": "max_len", "TokenAndPositionEmbedding": "vocab_size",
    "Timesteps": "embedding_dim", "TimestepEmbedder": "hidden_size", "AxialRotaryEmbedding": "axes_dim",
    "VisionRotaryEmbedding": "ref_feat_shape", "ALiBi": "num_heads", "AttentionTemperature": "floor_scale",
    "RelativePositionBias": "num_heads", "RelPositionalEncoding": "d_model", "RelPositionMultiheadAttention": "embed_dim",
}

CRASH_ROWS = [
    crash("deep-check_module_options-200k-arrays", f"o.check_module_options('PositionalEncoding', '{{\"d_model\": ' + arrays({DEEP}) + '}}')", "RuntimeError", "nests deeper"),
    crash("deep-check_module_options-200k-objects", f"o.check_module_options('ALiBi', '{{\"num_heads\": ' + objects({DEEP}) + '}}')", "RuntimeError", "nests deeper"),
    crash("deep-check_module_options-10k-in-1MB-thread", f"in_thread(lambda: o.check_module_options('RelativePositionBias', '{{\"num_heads\": ' + arrays({THREAD_DEEP}) + '}}'))", "RuntimeError", "nests deeper"),
    crash("deep-check_module_options-unclosed-200k", f"o.check_module_options('Timesteps', '[' * {DEEP})", "RuntimeError", "nests deeper"),
    crash("deep-check_module_options-brackets-in-strings-are-text", f"o.check_module_options('ALiBi', json.dumps({{'num_heads': 4, 'max_bias': '[' * {DEEP}}}))", "RuntimeError", "ALiBi: max_bias must be a number"),
] + [
    crash(f"deep-check_module_options-65-levels-{module}", f"o.check_module_options('{module}', '{{\"{key}\": ' + arrays(64) + '}}')", "RuntimeError", "nests deeper")
    for module, key in MODULE_OPTIONS_65.items()
] + [
    crash("deep-check_module_options-64-levels-read", "o.check_module_options('ALiBi', '{\"num_heads\": ' + arrays(63, '4') + '}')", "RuntimeError", "ALiBi: num_heads must be an integer"),
    crash("deep-rotary_embedding_frequencies-200k", f"o.rotary_embedding_frequencies(rope_text()[:-1] + ', \"rope_parameters\": ' + arrays({DEEP}) + '}}')", "RuntimeError", "nests deeper"),
    crash("deep-rotary_embedding_frequencies-rope_parameters-10k-in-thread", f"in_thread(lambda: o.rotary_embedding_frequencies(rope_text()[:-1] + ', \"rope_parameters\": {{\"rope_type\": \"linear\", \"factor\": ' + objects({THREAD_DEEP}) + '}}}}'))", "RuntimeError", "nests deeper"),
    crash("deep-rotary_embedding_frequencies-65", "o.rotary_embedding_frequencies(rope_text()[:-1] + ', \"freq_factors\": ' + arrays(64) + '}')", "RuntimeError", "nests deeper"),
    crash("deep-rotary_embedding_call-200k", f"x, cos, sin, inv = call_tensors(); o.rotary_embedding_call(x, cos, sin, inv, None, rope_text()[:-1] + ', \"mrope_section\": ' + arrays({DEEP}) + '}}', 0, None)", "RuntimeError", "nests deeper"),
    crash("deep-rotary_embedding_call-10k-in-thread", f"x, cos, sin, inv = call_tensors(); in_thread(lambda: o.rotary_embedding_call(x, cos, sin, inv, None, arrays({THREAD_DEEP}), 0, None))", "RuntimeError", "nests deeper"),
    crash("deep-rotary_embedding_call_qk-200k", f"x, cos, sin, inv = call_tensors(); o.rotary_embedding_call_qk(x, x, cos, sin, inv, None, objects({DEEP}), 0, None)", "RuntimeError", "nests deeper"),
    crash("deep-rope_frequencies-200k", f"o.rope_frequencies(8, 10000.0, '{{\"rope_type\": \"linear\", \"factor\": ' + arrays({DEEP}) + '}}')", "RuntimeError", "nests deeper"),
    crash("deep-rope_frequencies-10k-in-thread", f"in_thread(lambda: o.rope_frequencies(8, 10000.0, objects({THREAD_DEEP})))", "RuntimeError", "nests deeper"),
    crash("deep-rope_frequencies-65", "o.rope_frequencies(8, 10000.0, objects(65))", "RuntimeError", "nests deeper"),
    crash("deep-rope_frequencies-64-read", "o.rope_frequencies(8, 10000.0, '{\"rope_type\": \"linear\", \"factor\": ' + arrays(63) + '}')", "RuntimeError", "rope_parameters.factor must be a number"),
    crash("deep-read_hf_rope_config-200k-file", f"n.read_hf_rope_config(write('deep.json', config()[:-1] + ', \"id2label\": ' + arrays({DEEP}) + '}}'))", "ValueError", "nests deeper"),
    crash("deep-from_hf_config-200k-objects-file", f"n.RotaryEmbedding.from_hf_config(write('deep.json', config()[:-1] + ', \"rope_scaling\": ' + objects({DEEP}) + '}}'))", "ValueError", "nests deeper"),
    crash("deep-from_hf_config-10k-file-in-thread", f"in_thread(lambda: n.RotaryEmbedding.from_hf_config(write('deep.json', arrays({THREAD_DEEP}))))", "ValueError", "nests deeper"),
    crash("deep-AttentionTemperature.from_hf_config-200k", f"n.AttentionTemperature.from_hf_config(write('deep.json', config()[:-1] + ', \"text_config\": ' + objects({DEEP}) + '}}'))", "ValueError", "nests deeper"),
    crash("deep-read_hf_rope_config-object-200k", f"n.read_hf_rope_config(NotAConfig(arrays({DEEP})))", "ValueError", "nests deeper"),
    crash("deep-read_hf_rope_config-65-in-ignored-key", "n.read_hf_rope_config(write('c.json', config()[:-1] + ', \"id2label\": ' + arrays(64) + '}'))", "ValueError", "nests deeper"),
    crash("deep-read_hf_rope_config-64-in-ignored-key", "assert n.read_hf_rope_config(write('c.json', config()[:-1] + ', \"id2label\": ' + arrays(63) + '}'))['module']['head_dim'] == 16", None),
    crash("deep-read_hf_rope_config-dict-100", "n.read_hf_rope_config({**json.loads(config()), 'extra': nested_dict(100)})", "ValueError", "nests deeper"),
    crash("deep-RotaryEmbedding-rope_scaling-dict-100", "n.RotaryEmbedding(8, 16, rope_scaling={'rope_type': 'linear', 'factor': 2.0, 'note': nested_dict(100)})", "ValueError", "nests deeper"),
    crash("deep-ALiBi-num_heads-list-100", "n.ALiBi(num_heads=nested_list(100))", "ValueError", "nests deeper"),
    crash("deep-AxialRotaryEmbedding-axes_dim-list-100", "n.AxialRotaryEmbedding(nested_list(100))", "ValueError", "nests deeper"),
]


def run_worker(mode, rows, tmp, environment):
    """Runs ``rows`` ([id, code, env, directory]) in worker processes of ``mode``, in order; a
    worker that dies (or hangs past 300 s) marks the row it was running, and a fresh one goes on
    with the rest. {id: result}."""
    script = tmp / "worker.py"
    script.write_text(WORKER)
    environment = dict(environment, PYTHONPATH=os.pathsep.join([PYTHON_DIR, environment.get("PYTHONPATH", "")]))
    results, pending = {}, list(rows)
    while pending:
        spec = tmp / "rows.json"
        spec.write_text(json.dumps(pending))
        try:
            run = subprocess.run([sys.executable, str(script), mode, str(tmp), str(spec), PYTHON_DIR],
                                 capture_output=True, text=True, timeout=300, env=environment)
            stdout, stderr, status = run.stdout, run.stderr, run.returncode
        except subprocess.TimeoutExpired as expired:
            out = expired.stdout or ""
            stdout, stderr, status = out.decode() if isinstance(out, bytes) else out, "", "hung (killed after 300 s)"
        started = None
        for line in stdout.splitlines():
            if line.startswith("@@START "):
                started = line[len("@@START "):]
            elif line.startswith("@@RESULT "):
                row_id, result = json.loads(line[len("@@RESULT "):])
                results[row_id] = result
                started = None
        if started is None and status == 0 and all(row[0] in results for row in pending):
            break
        if started is None:  # died outside any row: the rows left fail with its output
            for row in pending:
                results.setdefault(row[0], {"kind": "crashed", "status": status, "stderr": stderr[-3000:]})
            break
        results[started] = {"kind": "crashed", "status": status, "stderr": stderr[-3000:]}
        index = [row[0] for row in pending].index(started)
        pending = [row for row in pending[index + 1:] if row[0] not in results]
    return results


def check_worker_result(result, exc, messages):
    assert result["kind"] != "crashed", (f"the worker process died running this row (status {result['status']}: "
                                         f"a negative status is the signal that killed it)\n{result['stderr']}")
    if exc is None:
        assert result["kind"] == "returned", result
        return
    assert result["kind"] == "raised", f"expected {exc}, but the call returned"
    assert exc in result["types"], result
    for message in messages:
        assert message in result["message"], result["message"][:2000]


@pytest.fixture(scope="module")
def worker_results(request, tmp_path_factory, posenc_ops):
    """The CRASH_ROWS this session selected, run by worker processes. {id: result}."""
    selected = {item.callspec.params["row_id"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_may_crash" and hasattr(item, "callspec")}
    rows = [[p.values[0], p.values[1], {}, None] for p in CRASH_ROWS if p.values[0] in selected]
    return run_worker("crash", rows, tmp_path_factory.mktemp("worker"), dict(os.environ))


@pytest.mark.parametrize("row_id, code, exc, messages", CRASH_ROWS)
def test_may_crash(worker_results, row_id, code, exc, messages):
    """JSON nested deeper than posenc reads, through every front door that reads JSON: a clean
    error (the worker process lives on), never a crash."""
    check_worker_result(worker_results[row_id], exc, messages)


# --- import posenc with POSENC_LIBRARY / POSENC_IO_LIBRARY --------------------------------------
# Run by a worker process of their own ("load" mode: posenc not imported first), in order, each
# with its environment variables set and posenc's modules removed before it: the rows that load
# nothing come first, then those that load this build's library themselves; a row that kills the
# worker (a second libposenc registering its operators again aborts) is reported with its signal.
# A process imports posenc completely once (its fake kernels are registered once): the second row
# whose import succeeds has a worker of its own.


def load(id, code, exc, *messages, env=None):
    """``code`` (with ORIGINAL the library of this build, IO its config reader, TMP a directory of
    the row's own) with ``env`` set (``{tmp}``: TMP, ``{c10}``: torch's libc10.so) and both library
    variables unset otherwise."""
    return pytest.param(id, textwrap.dedent(code), exc, messages, env or {}, id=id)


LOAD_ROWS = [
    load("POSENC_LIBRARY-missing-file", "import posenc", "ImportError", "POSENC_LIBRARY", env={"POSENC_LIBRARY": "{tmp}/libposenc_missing.so"}),
    load("POSENC_LIBRARY-text-file", "open(os.environ['POSENC_LIBRARY'], 'w').write('not a library')\nimport posenc", "ImportError", "POSENC_LIBRARY", env={"POSENC_LIBRARY": "{tmp}/libposenc.so"}),
    load("POSENC_LIBRARY-directory", "import posenc", "ImportError", "POSENC_LIBRARY", env={"POSENC_LIBRARY": "{tmp}"}),
    load("POSENC_LIBRARY-another-library", "import posenc", "ImportError", "POSENC_LIBRARY", env={"POSENC_LIBRARY": "{c10}"}),
    load("POSENC_LIBRARY-the-one-loaded", """
         import torch
         torch.ops.load_library(ORIGINAL)
         os.environ["POSENC_LIBRARY"] = ORIGINAL
         import posenc
         assert posenc.ops.sinusoidal_table(2, 2).shape == (2, 2)
         """, None),
    load("POSENC_LIBRARY-symlink-to-the-one-loaded-alone", """
         import torch
         torch.ops.load_library(ORIGINAL)
         os.symlink(ORIGINAL, os.path.join(TMP, "libposenc_link.so"))
         os.environ["POSENC_LIBRARY"] = os.path.join(TMP, "libposenc_link.so")
         import posenc
         assert posenc.ops.alibi_slopes(4).shape == (4,)
         """, None),
    load("POSENC_IO_LIBRARY-copy-elsewhere", """
         shutil.copy(IO, os.path.join(TMP, "libposenc_io.so"))
         os.environ["POSENC_LIBRARY"] = ORIGINAL
         os.environ["POSENC_IO_LIBRARY"] = os.path.join(TMP, "libposenc_io.so")
         import posenc
         """, "ImportError", "POSENC_IO_LIBRARY"),
    load("POSENC_LIBRARY-second-copy-after-one-loaded", """
         import torch
         torch.ops.load_library(ORIGINAL)
         shutil.copy(ORIGINAL, os.path.join(TMP, "libposenc_copy.so"))
         os.environ["POSENC_LIBRARY"] = os.path.join(TMP, "libposenc_copy.so")
         import posenc
         """, "ImportError", "POSENC_LIBRARY"),
]


@pytest.fixture(scope="module")
def load_results(request, tmp_path_factory, posenc_ops):
    selected = {item.callspec.id for item in request.session.items
                if getattr(item, "originalname", None) == "test_library_load" and hasattr(item, "callspec")}
    tmp = tmp_path_factory.mktemp("load")
    original = os.path.realpath(os.environ["POSENC_LIBRARY"])
    io = os.path.realpath(os.environ.get("POSENC_IO_LIBRARY") or os.path.join(os.path.dirname(original), "io", "libposenc_io.so"))
    c10 = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")
    rows = []
    for row in LOAD_ROWS:
        row_id, code, _, _, env = row.values
        if row_id in selected:
            where = tmp / row_id
            where.mkdir()
            rows.append([row_id, code, {k: v.format(tmp=where, c10=c10) for k, v in env.items()}, str(where)])
    environment = {k: v for k, v in os.environ.items() if k not in ("POSENC_LIBRARY", "POSENC_IO_LIBRARY")}
    environment.update(POSENC_TEST_ORIGINAL=original, POSENC_TEST_IO=io)
    alone = [row for row in rows if row[0].endswith("-alone")]
    results = run_worker("load", [row for row in rows if row not in alone], tmp, environment)
    for row in alone:
        results.update(run_worker("load", [row], tmp, environment))
    return results


@pytest.mark.parametrize("row_id, code, exc, messages, env", LOAD_ROWS)
def test_library_load(load_results, row_id, code, exc, messages, env):
    """import posenc with the library variables set: a clean ImportError that names the variable
    and what to do, or a working import; the process lives on (never aborts)."""
    check_worker_result(load_results[row_id], exc, messages)


# --- posenc rope --hf-config FILE / posenc export --hf-config FILE -------------------------------


def cli(id, data, expected, args=("rope",), exit_ok=False, name="config.json"):
    """``posenc ARGS --hf-config FILE`` with FILE holding ``data`` (a path starting with / is used
    as it is): a positive exit status and ``expected`` on stderr, or (``exit_ok``) a check of stdout."""
    return pytest.param(data, list(args), expected, exit_ok, name, id=id)


def csv_frequencies(base, head_dim=16):
    """A check of `posenc rope --format csv`: the frequencies equal the float64 formula's."""

    def check(stdout):
        rows = [line.split(",") for line in stdout.splitlines() if line and line[0].isdigit()]
        got = torch.tensor([float(r[1]) for r in rows], dtype=f64)
        torch.testing.assert_close(got, inv_freq64(head_dim, base), rtol=1e-15, atol=0)

    return check


CLI_ROWS = [
    cli("cli-empty", b"", "not valid JSON"),
    cli("cli-bom", BOM + config(rope_theta=250000.0).encode(), csv_frequencies(250000.0), ("rope", "--format", "csv"), exit_ok=True),
    cli("cli-utf16", config().encode("utf-16"), "not valid JSON"),
    cli("cli-latin1", LATIN1, "not valid JSON"),
    cli("cli-NUL-byte", config().replace('"llama"', '"lla\0ma"').encode(), "not valid JSON"),
    cli("cli-duplicate-theta-last-wins", config(rope_theta=1.5).replace('"rope_theta": 1.5', '"rope_theta": 1.5, "rope_theta": 50000.0').encode(), csv_frequencies(50000.0), ("rope", "--format", "csv"), exit_ok=True),
    cli("cli-theta-spelled-nan", config(rope_theta="nan").encode(), "rope_theta must be a number, but is a string"),
    cli("cli-64MiB-and-1-byte", lambda: padded(64 * MIB + 1).encode(), "bytes"),
    cli("cli-dev-zero", "/dev/zero", "bytes"),
    cli("cli-200k-levels", (config()[:-1] + ', "id2label": ' + "[" * DEEP + "]" * DEEP + "}").encode(), "nests deeper"),
    cli("cli-200k-unclosed", ("[" * DEEP).encode(), "nests deeper"),
    cli("cli-65-levels", (config()[:-1] + ', "id2label": ' + "[" * 64 + "]" * 64 + "}").encode(), "nests deeper"),
    cli("cli-64-levels", (config(rope_theta=20000.0)[:-1] + ', "id2label": ' + "[" * 63 + "]" * 63 + "}").encode(), csv_frequencies(20000.0), ("rope", "--format", "csv"), exit_ok=True),
    cli("cli-audit-200k", ("{" + '"a": {' * DEEP + "}" * DEEP + "}").encode(), "nests deeper", ("rope", "--audit")),
    cli("cli-export-200k-writes-nothing", (config()[:-1] + ', "rope_scaling": ' + "[" * DEEP + "]" * DEEP + "}").encode(), "nests deeper", ("export", "--module", "rotary", "-o", "{tmp}/rope.pt")),
]


@pytest.mark.parametrize("data, args, expected, exit_ok, name", CLI_ROWS)
def test_cli_config(posenc_cli, tmp_path, data, args, expected, exit_ok, name):
    """The posenc program on a hostile config.json: an exit status and a message, never a signal."""
    data = lazy(data)
    path = data if isinstance(data, str) else str(tmp_path / name)
    if not isinstance(data, str):
        (tmp_path / name).write_bytes(data)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    run = subprocess.run([posenc_cli, *argv, "--hf-config", path], capture_output=True, timeout=120)
    stdout, stderr = run.stdout.decode(errors="replace"), run.stderr.decode(errors="replace")
    if exit_ok:
        assert run.returncode == 0, stderr[-3000:]
        expected(stdout)
        return
    assert run.returncode > 0, f"status {run.returncode} (negative: killed by a signal)\n{stderr[-3000:]}"
    assert expected in stderr, stderr[-3000:]
    assert not os.path.exists(tmp_path / "rope.pt")


@pytest.mark.skipif(TORCH_VERSION < (2, 9), reason="posenc export --format onnx needs torch >= 2.9")
def test_cli_onnx_refusal_keeps_the_previous_file(posenc_cli, tmp_path):
    """`posenc export --format onnx` of a dynamic-NTK RoPE read from a config.json: refused (its
    frequencies depend on each call's length, which a graph of fixed tables cannot hold), with the
    file already at the output path left as it was and nothing beside it."""
    pytest.importorskip("onnxscript")
    path = tmp_path / "config.json"
    path.write_text(config(rope_scaling=DYNAMIC, max_position_embeddings=32))
    out = tmp_path / "rope.onnx"
    out.write_bytes(OLD)
    environment = dict(os.environ, POSENC_PYTHON=sys.executable,
                       PYTHONPATH=os.pathsep.join([PYTHON_DIR, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([posenc_cli, "export", "--module", "rotary", "--hf-config", str(path), "--format", "onnx",
                          "-o", str(out)], capture_output=True, text=True, timeout=300, env=environment)
    assert run.returncode > 0, f"status {run.returncode}\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
    assert "cannot be exported to ONNX" in run.stderr, run.stderr[-3000:]
    assert out.read_bytes() == OLD, "the previous file was changed"
    assert sorted(os.listdir(tmp_path)) == ["config.json", "rope.onnx"]

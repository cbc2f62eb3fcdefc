"""Fractional (floating-point) positions -- position interpolation, continuous coordinates such as
Flux's image ids -- through the operators, against the libraries' own code (pinned in
scripts/setup.sh): diffusers' `get_1d_sincos_pos_embed_from_grid` and `get_1d_rotary_pos_embed`
(both of which accept float positions), and transformers' `LlamaRotaryEmbedding` called with float
`position_ids`. Plus errors, autograd, opcheck and torch.compile.

Tolerances. diffusers computes both functions in float64 here (`dtype=None` -> float64 on CPU;
`freqs_dtype=torch.float64`) and rounds cos/sin once to float32, as posenc does, so the two agree to
one float32 ulp (2^-24 for values below 1; a float64 angle may round differently in its last bit)
and to 1e-12 where both stay in float64. transformers computes angles in float32 (`inv_freq @
position_ids` under `.float()`), an error of about p * 2^-24 at position p: posenc's error against
a float64 truth must be no larger than that, and the two agree within it plus one ulp."""

import json
import math

import pytest
import torch

from conftest import requires_torch

diffusers = pytest.importorskip("diffusers", reason="diffusers is installed in the pip test environment only (scripts/setup.sh)")
transformers = pytest.importorskip("transformers", reason="transformers is installed in the pip test environment only (scripts/setup.sh)")
from diffusers.models.embeddings import get_1d_rotary_pos_embed, get_1d_sincos_pos_embed_from_grid  # noqa: E402
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

ULP = 2.0 ** -24  # one float32 ulp of a value in [0.5, 1)
POSITIONS = torch.tensor([0.0, 0.5, 1.25, 17.75, 255.5, 1000.125, 4095.875], dtype=torch.float64)


def inv_freq(posenc_ops, dim, base=10000.0, **scaling):
    return posenc_ops.rope_frequencies(dim, base, json.dumps(scaling))[0]


def rotary_cos_sin(posenc_ops, positions, frequencies, interleaved):
    """posenc's cos/sin at `positions`, read off the rotation of unit vectors: a pair (1, 0) turns
    into (cos, sin) exactly."""
    half = frequencies.numel()
    x = torch.zeros(1, len(positions), 1, 2 * half)
    if interleaved:
        x[..., 0::2] = 1
    else:
        x[..., :half] = 1
    cos, sin = posenc_ops.rotary_tables(1, frequencies)  # one row: positions are computed from inv_freq
    y = posenc_ops.apply_rotary(x, cos, sin, 0, positions, interleaved, False, False, frequencies)[0, :, 0]
    if interleaved:
        return y[:, 0::2], y[:, 1::2]
    return y[:, :half], y[:, half:]


@pytest.mark.parametrize("dim", [8, 64, 256])
def test_sinusoidal_against_diffusers_1d_grid(posenc_ops, dim):
    # diffusers: [sin | cos] of pos * 10000^(-2i/D) in float64 -- posenc's concatenated layout.
    theirs = get_1d_sincos_pos_embed_from_grid(dim, POSITIONS)
    assert theirs.dtype == torch.float64
    x = torch.zeros(1, len(POSITIONS), dim, dtype=torch.float64)
    ours = posenc_ops.add_positional_encoding(x, positions=POSITIONS, channels="concatenated")[0]
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    # float32 inputs: the float64 rows rounded once, and float32 positions read exactly.
    ours32 = posenc_ops.add_positional_encoding(x.float(), positions=POSITIONS.float(), channels="concatenated")[0]
    torch.testing.assert_close(ours32.double(), theirs, rtol=0, atol=ULP)
    # A table operator with the column plan of the table: the same rows, at any position.
    table = posenc_ops.sinusoidal_table(16, dim, channels="concatenated")
    half = dim // 2
    frequency = torch.tensor([10000.0 ** (-2 * i / dim) for i in range(half)], dtype=torch.float64)
    columns = torch.stack([torch.cat([frequency, frequency]), torch.cat([torch.zeros(half), torch.ones(half)]).double()])
    through_table = posenc_ops.add_position_table(x.float(), table, 0, True, POSITIONS, 1.0, columns)[0]
    torch.testing.assert_close(through_table.double(), theirs, rtol=0, atol=ULP)


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("dim,theta", [(16, 10000.0), (56, 10000.0), (128, 500000.0)])
def test_rotary_against_diffusers_1d_rope(posenc_ops, dim, theta, interleaved):
    # Flux / HunyuanDiT / CogVideoX (repeat_interleave_real) and Stable Audio (concatenated) forms.
    cos_d, sin_d = get_1d_rotary_pos_embed(dim, POSITIONS, theta, use_real=True, repeat_interleave_real=interleaved,
                                           freqs_dtype=torch.float64)
    cos_d, sin_d = (cos_d[:, 0::2], sin_d[:, 0::2]) if interleaved else (cos_d[:, :dim // 2], sin_d[:, :dim // 2])
    cos, sin = rotary_cos_sin(posenc_ops, POSITIONS, inv_freq(posenc_ops, dim, theta), interleaved)
    torch.testing.assert_close(cos.double(), cos_d.double(), rtol=0, atol=ULP)
    torch.testing.assert_close(sin.double(), sin_d.double(), rtol=0, atol=ULP)
    # And rotating real inputs: the same as applying diffusers' cos/sin in float64.
    torch.manual_seed(0)
    x = torch.randn(2, len(POSITIONS), 3, dim)
    frequencies = inv_freq(posenc_ops, dim, theta)
    cos1, sin1 = posenc_ops.rotary_tables(1, frequencies)
    ours = posenc_ops.apply_rotary(x, cos1, sin1, 0, POSITIONS.float(), interleaved, False, False, frequencies)
    xd = x.double()
    c, s = cos_d.double()[None, :, None], sin_d.double()[None, :, None]
    if interleaved:
        a, b = xd[..., 0::2], xd[..., 1::2]
        expected = torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2)
    else:
        a, b = xd[..., :dim // 2], xd[..., dim // 2:]
        expected = torch.cat([a * c - b * s, a * s + b * c], -1)
    # one float32 ulp of each cos/sin times |x| <~ 5, plus the float32 rounding of the products
    torch.testing.assert_close(ours.double(), expected, rtol=0, atol=2e-6)


@pytest.mark.parametrize("factor", [1.0, 4.0])
def test_rotary_against_transformers_with_float_position_ids(posenc_ops, factor):
    """Position interpolation by hand: fractional position_ids into LlamaRotaryEmbedding."""
    parameters = {"rope_type": "default", "rope_theta": 10000.0} if factor == 1.0 else \
        {"rope_type": "linear", "rope_theta": 10000.0, "factor": factor}
    config = LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=4096, intermediate_size=64,
                         num_hidden_layers=1, rope_parameters=parameters)
    module = LlamaRotaryEmbedding(config)
    x = torch.zeros(1, len(POSITIONS), 64)
    cos_hf, sin_hf = module(x, POSITIONS.float()[None])
    half = 32
    frequencies = inv_freq(posenc_ops, 64, 10000.0, rope_type="linear" if factor != 1.0 else "default",
                           factor=factor if factor != 1.0 else None)
    truth = POSITIONS[:, None] * frequencies[None, :]
    cos, sin = rotary_cos_sin(posenc_ops, POSITIONS, frequencies, interleaved=False)
    for ours, theirs, exact in ((cos, cos_hf[0, :, :half], truth.cos()), (sin, sin_hf[0, :, :half], truth.sin())):
        our_error = (ours.double() - exact).abs().max().item()
        their_error = (theirs.double() - exact).abs().max().item()
        assert our_error <= max(their_error, ULP / 2), f"posenc {our_error} > transformers' {their_error}"
        assert our_error <= ULP / 2 + 1e-12  # rounded once from float64
        torch.testing.assert_close(ours.double(), theirs.double(), rtol=0, atol=their_error + ULP)


def test_integer_valued_floats_equal_integer_positions(posenc_ops):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 12)
    positions = torch.tensor([[0, 3, 9, 1, 2], [4, 4, 4, 8, 0]])
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        assert torch.equal(posenc_ops.add_positional_encoding(x, positions=positions.to(dtype)),
                           posenc_ops.add_positional_encoding(x, positions=positions))
    frequencies = inv_freq(posenc_ops, 8)
    cos, sin = posenc_ops.rotary_tables(16, frequencies)
    q = torch.randn(2, 5, 3, 8)
    assert torch.equal(posenc_ops.apply_rotary(q, cos, sin, 0, positions.double(), False, False, False, frequencies),
                       posenc_ops.apply_rotary(q, cos, sin, 0, positions))


def test_errors(posenc_ops):
    x = torch.randn(1, 3, 8)
    table = posenc_ops.sinusoidal_table(16, 8)
    with pytest.raises(RuntimeError, match=r"floating-point positions \(Float\) are computed from the encoding's definition, which this call lacks \(a learned table has none\): pass columns"):
        posenc_ops.add_position_table(x, table, positions=torch.tensor([0.5, 1.0, 2.0]))
    cos, sin = posenc_ops.rotary_tables(16, inv_freq(posenc_ops, 8))
    with pytest.raises(RuntimeError, match="which this call lacks \\(a learned table has none\\): pass inv_freq"):
        posenc_ops.apply_rotary(torch.randn(1, 3, 1, 8), cos, sin, positions=torch.tensor([0.5, 1.0, 2.0]))
    for bad in (math.nan, math.inf, -math.inf, -0.25, 2.0 ** 63):
        with pytest.raises(RuntimeError, match=r"floating-point positions must be finite and in \[0, 2\^63\), but got .* at index 1; replace NaN/Inf"):
            posenc_ops.add_positional_encoding(x, positions=torch.tensor([0.0, bad, 1.0], dtype=torch.float64))
    # The meta kernels reject what the CPU kernels reject.
    meta = torch.randn(1, 3, 8, device="meta")
    with pytest.raises(RuntimeError, match="which this call lacks \\(a learned table has none\\): pass columns"):
        posenc_ops.add_position_table(meta, table.to("meta"), positions=torch.tensor([0.5, 1.0, 2.0], device="meta"))


def test_autograd(posenc_ops):
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    positions = torch.tensor([0.5, 7.25, 100.75], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: posenc_ops.add_positional_encoding(t, positions=positions, scale=2.0), (x,))
    frequencies = inv_freq(posenc_ops, 8)
    cos, sin = posenc_ops.rotary_tables(4, frequencies, dtype=torch.float64)
    q = torch.randn(1, 3, 2, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda t: posenc_ops.apply_rotary(t, cos, sin, 0, positions, False, False, False, frequencies), (q,))
    # A trainable table cannot get a gradient from rows computed from the definition: refused.
    table = torch.zeros(4, 8, dtype=torch.float64, requires_grad=True)
    columns = torch.tensor([[1.0] * 8, [0.0, 1.0] * 4], dtype=torch.float64)
    with pytest.raises(RuntimeError, match="a table extended past its end by `columns` gets no gradient"):
        posenc_ops.add_position_table(x, table, 0, True, positions, 1.0, columns)


@requires_torch(2, 4, "torch.library.opcheck")
def test_opcheck_and_compile(posenc_ops):
    x = torch.randn(2, 3, 8)
    positions = torch.tensor([[0.5, 1.5, 20.25], [3.0, 0.0, 1.75]])
    torch.library.opcheck(posenc_ops.add_positional_encoding.default, (x, 0, 10000.0, True, positions, 1.0, "interleaved", "paper"))
    table = posenc_ops.sinusoidal_table(4, 8)
    columns = torch.tensor([[1.0, 1.0, 0.1, 0.1, 0.01, 0.01, 0.001, 0.001], [0.0, 1.0] * 4], dtype=torch.float64)
    torch.library.opcheck(posenc_ops.add_position_table.default, (x, table, 0, True, positions, 1.0, columns))
    frequencies = inv_freq(posenc_ops, 8)
    cos, sin = posenc_ops.rotary_tables(4, frequencies)
    q = torch.randn(2, 3, 2, 8)
    torch.library.opcheck(posenc_ops.apply_rotary.default, (q, cos, sin, 0, positions, False, False, False, frequencies, 1.0))

    def step(q, positions):
        return posenc_ops.apply_rotary(q, cos, sin, 0, positions * 0.5, False, False, False, frequencies)

    compiled = torch.compile(step, fullgraph=True)
    assert torch.equal(compiled(q, positions), step(q, positions))

"""Rotary embeddings against HF LLaMA's (half-split) and torchtune's (interleaved) definitions,
written here from those definitions; through the exported module and the operator."""

import subprocess

import pytest
import torch

from conftest import requires_torch
from reference import rope_cos_sin, rope_half_split, rope_interleaved

REFERENCES = {"half_split": rope_half_split, "interleaved": rope_interleaved}


def export_rotary(posenc_cli, path, *args):
    subprocess.run([posenc_cli, "export", "--module", "rotary", *map(str, args), "-o", str(path)], check=True, capture_output=True)
    return torch.jit.load(str(path))


@pytest.mark.parametrize("pairing", ["half_split", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [64, 32])
def test_matches_reference_definitions(posenc_cli, tmp_path, pairing, rotary_dim):
    torch.manual_seed(0)
    module = export_rotary(posenc_cli, tmp_path / "rope.pt", "--max-len", 4096, "--head-dim", 64, "--rotary-dim", rotary_dim, "--pairing", pairing)
    x = torch.randn(2, 7, 4, 64)
    offset = 3000
    y = module(x, offset)
    cos, sin = rope_cos_sin(torch.arange(offset, offset + 7), rotary_dim)
    expected = REFERENCES[pairing](x.double(), cos, sin, rotary_dim)
    # Each output is a*cos - b*sin with float32 cos/sin (error <= 2^-25 each) and float32 rounding
    # of the products and the sum: within 4 * 2^-24 * (|a| + |b|) of the float64 value.
    bound = 4 * 2.0 ** -24 * (x.abs().max().item() * 2) + 2 * 2.0 ** -25 * x.abs().max().item()
    assert (y.double() - expected).abs().max().item() <= bound


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_dtype_is_preserved(posenc_cli, tmp_path, dtype):
    module = export_rotary(posenc_cli, tmp_path / "rope.pt", "--max-len", 128, "--head-dim", 16)
    x = torch.randn(1, 5, 2, 16).to(dtype)
    y = module(x, 9)
    assert y.dtype == dtype
    cos, sin = rope_cos_sin(torch.arange(9, 14), 16)
    expected = rope_half_split(x.double(), cos, sin, 16)
    tolerance = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float64: 2.0 ** -23}[dtype]
    assert ((y.double() - expected).abs() <= tolerance * (expected.abs() + 2 * x.double().abs().max()) ).all()


def test_kv_cache_positions_and_heads_first(posenc_cli, tmp_path):
    module = export_rotary(posenc_cli, tmp_path / "rope.pt", "--max-len", 256, "--head-dim", 8, "--heads-first")
    q = torch.randn(3, 2, 1, 8)  # [B, H, L=1, Dh]: one new token per sequence
    positions = torch.tensor([[4], [100], [255]])
    y = module.forward_positions(q, positions)
    for row, position in enumerate(positions.flatten().tolist()):
        assert torch.equal(y[row], module(q[row:row + 1], position)[0])


def test_extrapolation(posenc_cli, tmp_path):
    small = export_rotary(posenc_cli, tmp_path / "small.pt", "--max-len", 8, "--head-dim", 8, "--extrapolate")
    x = torch.randn(1, 4, 1, 8)
    cos, sin = rope_cos_sin(torch.arange(1000, 1004), 8)
    assert (small(x, 1000).double() - rope_half_split(x.double(), cos, sin, 8)).abs().max().item() < 1e-6


def test_operator_gradcheck_and_errors(posenc_ops):
    cos, sin = rope_cos_sin(torch.arange(20), 6)
    x = torch.randn(2, 3, 2, 8, dtype=torch.float64, requires_grad=True)
    for interleaved in (False, True):
        assert torch.autograd.gradcheck(lambda a: posenc_ops.apply_rotary(a, cos, sin, 4, None, interleaved, False, False), (x,))
        assert torch.autograd.gradgradcheck(lambda a: posenc_ops.apply_rotary(a, cos, sin, 0, torch.tensor([[1, 2, -1], [0, 19, 3]]), interleaved, False, False), (x,))
    with pytest.raises(RuntimeError, match="cos and sin are fixed tables"):
        posenc_ops.apply_rotary(x, cos.requires_grad_(), sin)


def test_inverse_undoes_rotation(posenc_ops):
    cos, sin = rope_cos_sin(torch.arange(32), 16)
    x = torch.randn(2, 5, 3, 16, dtype=torch.float64)
    y = posenc_ops.apply_rotary(x, cos, sin, 7)
    assert torch.allclose(posenc_ops.apply_rotary(y, cos, sin, 7, inverse=True), x, atol=1e-12)


@requires_torch(2, 4, "torch.library.opcheck")
@pytest.mark.parametrize("interleaved", [False, True])
def test_opcheck(posenc_ops, interleaved):
    cos, sin = (t.float() for t in rope_cos_sin(torch.arange(16), 8))
    torch.library.opcheck(posenc_ops.apply_rotary.default, (torch.randn(2, 4, 3, 12, requires_grad=True), cos, sin, 5, None, interleaved, False, False))
    torch.library.opcheck(posenc_ops.apply_rotary.default, (torch.randn(2, 3, 4, 8).bfloat16(), cos, sin, 0, torch.tensor([[0, 1, 2, 15], [3, 3, -1, 3]]), interleaved, True, False))


@requires_torch(2, 1, "torch.compile")
def test_compile_attention_with_rotary(posenc_ops):
    cos, sin = (t.float() for t in rope_cos_sin(torch.arange(64), 16))

    def attention(q, k, v, offset: int):
        q = torch.ops.posenc.apply_rotary(q, cos, sin, offset)
        k = torch.ops.posenc.apply_rotary(k, cos, sin, offset)
        return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))

    q, k, v = (torch.randn(2, 10, 4, 16) for _ in range(3))
    compiled = torch.compile(attention, fullgraph=True, backend="aot_eager")
    assert torch.allclose(compiled(q, k, v, 3), attention(q, k, v, 3), atol=1e-6)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("head_dim", [8, 16, 64])
def test_float64_rotation_rounds_each_product(posenc_ops, interleaved, head_dim):
    # Every kernel computes a*c - b*s and a*s + b*c with each product and sum rounded once (no
    # fused multiply-add), so a float64 rotation by float32 caches is exactly these float64
    # operations. GCC 12's vectorizer once fused them into fmaddsub in the AVX2/AVX-512 clones of
    # the CPU loops (1 ulp off, interleaved pairs); compared here without tolerance.
    torch.manual_seed(0)
    inv_freq, _ = torch.ops.posenc.rope_frequencies(8)
    cos, sin = torch.ops.posenc.rotary_tables(64, inv_freq)
    x = torch.randn(3, 5, 4, head_dim, dtype=torch.float64)
    positions = torch.randint(0, 64, (3, 5))
    rotated = torch.ops.posenc.apply_rotary(x, cos, sin, positions=positions, interleaved=interleaved)
    c = cos.double()[positions][:, :, None]
    s = sin.double()[positions][:, :, None]
    a, b = (x[..., 0:8:2], x[..., 1:8:2]) if interleaved else (x[..., 0:4], x[..., 4:8])
    first, second = (rotated[..., 0:8:2], rotated[..., 1:8:2]) if interleaved else (rotated[..., 0:4], rotated[..., 4:8])
    assert torch.equal(first, a * c - b * s)
    assert torch.equal(second, a * s + b * c)
    assert torch.equal(rotated[..., 8:], x[..., 8:])

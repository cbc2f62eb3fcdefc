"""Positions beyond the basics, against references written from each library's definition:
channel layouts and tensor2tensor/fairseq spacing, explicit positions, padding, extrapolation,
scale; the learned and token+position modules through their TorchScript export."""

import subprocess

import pytest
import torch

from conftest import requires_torch
from reference import (assert_within_bound, expected_exact, marian_table, reference_table,
                       tensor2tensor_signal)


def export(posenc_cli, path, *args):
    subprocess.run([posenc_cli, "export", *map(str, args), "-o", str(path)], check=True, capture_output=True)
    return torch.jit.load(str(path))


@pytest.mark.parametrize("channels", [6, 7, 512, 3])
def test_tensor2tensor_and_fairseq_tables(posenc_ops, channels):
    table = posenc_ops.sinusoidal_table(300, channels, 10000.0, 0, "concatenated", "tensor2tensor", dtype=torch.float64)
    assert (table - tensor2tensor_signal(300, channels)).abs().max().item() < 1e-12
    # fairseq numbers positions from padding_idx + 1: the same table read with an offset.
    fairseq = posenc_ops.sinusoidal_table(10, channels, 10000.0, 2, "concatenated", "tensor2tensor", dtype=torch.float64)
    assert (fairseq - tensor2tensor_signal(10, channels, start_index=2)).abs().max().item() < 1e-12


@pytest.mark.parametrize("dim", [8, 9])
def test_marian_table(posenc_ops, dim):
    table = posenc_ops.sinusoidal_table(100, dim, channels="concatenated", dtype=torch.float64)
    assert (table - marian_table(100, dim)).abs().max().item() < 1e-12


def test_bad_channel_and_frequency_names(posenc_ops):
    with pytest.raises(RuntimeError, match='channels must be "interleaved" or "concatenated", but got "blocked"'):
        posenc_ops.sinusoidal_table(4, 4, channels="blocked")
    with pytest.raises(RuntimeError, match='frequencies must be "paper" or "tensor2tensor", but got "fairseq"'):
        posenc_ops.sinusoidal_table(4, 4, frequencies="fairseq")


def padded_batch(batch_first):
    """Two sequences, left- and right-padded, and their mask (True = padding)."""
    torch.manual_seed(0)
    mask = torch.tensor([[True, True, False, False, False, False], [False, False, False, False, True, True]])
    x = torch.randn(2, 6, 16)
    if not batch_first:
        return x.transpose(0, 1).contiguous(), mask.t().contiguous()
    return x, mask


@pytest.mark.parametrize("batch_first", [True, False])
def test_exported_padding_matches_reference(posenc_cli, tmp_path, batch_first):
    args = ["--max-len", 32, "--d-model", 16] + ([] if batch_first else ["--seq-first"])
    module = export(posenc_cli, tmp_path / "pe.pt", *args)
    x, mask = padded_batch(batch_first)
    y = module.forward_padded(x, mask)
    seq_dim = 1 if batch_first else 0
    real = (~mask).long()
    positions = (real.cumsum(seq_dim) - 1).masked_fill(mask, -1)
    table = reference_table(32, 16)
    expected = x.double() + table[positions.clamp(min=0)].masked_fill(mask.unsqueeze(-1), 0.0)
    assert (y.double() - expected).abs().max().item() <= 2.0 ** -25 + 2.0 ** -24 * expected.abs().max().item()
    assert torch.equal(y[mask], x[mask])


def test_exported_explicit_positions_for_kv_cache_decoding(posenc_cli, tmp_path):
    """One decoding step per sequence, each at its own position."""
    module = export(posenc_cli, tmp_path / "pe.pt", "--max-len", 128, "--d-model", 8)
    x = torch.randn(3, 1, 8)
    lengths = torch.tensor([[5], [17], [120]])
    y = module.forward_positions(x, lengths)
    for row, length in enumerate(lengths.flatten().tolist()):
        assert torch.equal(y[row], module(x[row:row + 1], length)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_exported_extrapolation_and_scale(posenc_cli, tmp_path, dtype):
    module = export(posenc_cli, tmp_path / "pe.pt", "--max-len", 16, "--d-model", 32, "--extrapolate", "--scale", 2.0)
    x = torch.randn(2, 10, 32).to(dtype)
    y = module(x, 1000)
    assert module.pe.shape == (1, 16, 32)
    rows = reference_table(10, 32, offset=1000)
    exact = x.double() * 2.0 + rows.unsqueeze(0)
    assert_within_bound(y, exact, dtype)


def paper_rows(positions, d_model=4):
    """PE at float positions, float64, from the paper's definition."""
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angle = positions.double()[:, None] * 10000.0 ** (-2 * i / d_model)[None, :]
    return torch.stack([angle.sin(), angle.cos()], -1).flatten(1)


def test_exported_errors_for_positions(posenc_cli, tmp_path):
    module = export(posenc_cli, tmp_path / "pe.pt", "--max-len", 8, "--d-model", 4)
    x = torch.zeros(1, 3, 4)
    with pytest.raises(torch.jit.Error, match="positions must be < max_len \\(8\\), but got 9"):
        module.forward_positions(x, torch.tensor([0, 1, 9]))
    with pytest.raises(torch.jit.Error, match="positions must be an integer tensor \\(int64 or int32\\) or a floating-point one, but got Bool"):
        module.forward_positions(x, torch.zeros(3, dtype=torch.bool))
    with pytest.raises(torch.jit.Error, match="floating-point positions must be finite and in \\[0, 2\\^63\\), but got nan at index 1"):
        module.forward_positions(x, torch.tensor([0.0, float("nan"), 1.0]))
    # Fractional positions (past max_len too): the module's rows, computed from its column plan.
    fractional = torch.tensor([0.5, 7.25, 300.75])
    expected = paper_rows(fractional)
    torch.testing.assert_close(module.forward_positions(x, fractional)[0].double(), expected, rtol=0, atol=2.0 ** -24)
    with pytest.raises(torch.jit.Error, match="positions must be >= -1"):
        module.forward_positions(x, torch.tensor([0, -2, 1]))


def test_ops_with_positions_and_scale(posenc_ops):
    torch.manual_seed(0)
    table = posenc_ops.sinusoidal_table(64, 8)
    x = torch.randn(2, 3, 8)
    positions = torch.tensor([[0, 5, -1], [63, 2, 2]])
    y = posenc_ops.add_position_table(x, table, positions=positions, scale=0.5)
    expected = x * 0.5 + table[positions.clamp(min=0)].masked_fill((positions < 0).unsqueeze(-1), 0)
    assert torch.allclose(y, expected, atol=1e-7)
    z = posenc_ops.add_positional_encoding(x, positions=positions, scale=0.5)
    assert torch.equal(y, z)


def test_gradcheck_with_positions(posenc_ops):
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    table = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    positions = torch.tensor([[0, 5, 5], [-1, 2, 0]])
    assert torch.autograd.gradcheck(lambda a, t: posenc_ops.add_position_table(a, t, 0, True, positions, 1.5), (x, table))
    shared = torch.tensor([4, 1])  # [L] with L = x.size(0) = 2 (batch_first=False)
    assert torch.autograd.gradgradcheck(lambda a, t: posenc_ops.add_position_table(a, t, 0, False, shared, 1.0), (x, table))


@requires_torch(2, 4, "torch.library.opcheck")
def test_opcheck_with_positions(posenc_ops):
    table = torch.randn(1, 10, 4, requires_grad=True)
    positions = torch.tensor([[0, 9, -1], [1, 1, 1]])
    torch.library.opcheck(posenc_ops.add_position_table.default, (torch.randn(2, 3, 4, requires_grad=True), table, 0, True, positions, 2.0))
    torch.library.opcheck(posenc_ops.add_positional_encoding.default, (torch.randn(3, 2, 5), 0, 100.0, False, positions.t().contiguous(), 1.0, "concatenated", "tensor2tensor"))
    torch.library.opcheck(posenc_ops._add_position_table_backward.default, (torch.randn(2, 3, 4), table.detach(), 0, True, positions))


def test_learned_export_matches_its_weights(test_tool, tmp_path):
    test_tool("export-learned", "--d-model", 6, "--max-len", 20, "--seed", 3, tmp_path / "learned.pt")
    module = torch.jit.load(str(tmp_path / "learned.pt"))
    assert list(dict(module.named_parameters())) == ["weight"]
    x = torch.randn(2, 4, 6)
    assert torch.equal(module(x, 7), x + module.weight[7:11].unsqueeze(0))
    positions = torch.tensor([[0, 19, -1, 3], [2, 2, 2, 2]])
    expected = x + module.weight[positions.clamp(min=0)].masked_fill((positions < 0).unsqueeze(-1), 0)
    assert torch.equal(module.forward_positions(x, positions), expected)


@pytest.mark.parametrize("learned", [False, True])
def test_token_and_position_export(test_tool, tmp_path, learned):
    args = ["export-token", "--vocab", 30, "--d-model", 8, "--max-len", 16, "--padding-idx", 0] + (["--learned"] if learned else [])
    test_tool(*args, tmp_path / "token.pt")
    module = torch.jit.load(str(tmp_path / "token.pt"))
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 0, 0]])
    y = module(ids)
    weight = module.tokens.weight
    assert torch.equal(weight[0], torch.zeros(8)), "the padding embedding starts at zero"
    positions = torch.tensor([[-1, -1, 0, 1, 2], [0, 1, 2, -1, -1]])
    table = module.positions.weight if learned else module.positions.pe[0]
    rows = table[positions.clamp(min=0)].masked_fill((positions < 0).unsqueeze(-1), 0)
    expected = weight[ids] * 8 ** 0.5 + rows
    assert torch.allclose(y, expected, atol=1e-6)
    with pytest.raises(torch.jit.Error, match="token ids must lie in \\[0, vocab_size\\) = \\[0, 30\\)"):
        module(torch.tensor([[1, 30]]))

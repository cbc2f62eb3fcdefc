"""torch.export with a dynamic sequence length (or batch of timesteps / tokens) through posenc's
operators: their Meta kernels keep symbolic sizes symbolic (no specialization to the example's
length), and the exported program run at other lengths equals eager. This is what AOTInductor
export of a model that uses posenc needs."""

import pytest
import torch

from conftest import TORCH_VERSION

pytestmark = pytest.mark.skipif(TORCH_VERSION < (2, 6), reason="torch.export with Dim needs torch >= 2.6 (this is the LibTorch 1.13 environment)")


class Call(torch.nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x):
        return self.function(x)


def cases(ops):
    cos, sin = ops.rotary_tables(64, ops.rope_frequencies(16)[0])
    table = torch.randn(64, 32)
    weight = torch.randn(50, 32)
    qk = lambda x: x.view(x.shape[0], x.shape[1], 2, 16)  # noqa: E731  [B, L, H, Dh]
    return {
        # name: (function, example inputs, dimension of the first input that varies, other sizes)
        "add_positional_encoding": (lambda x: ops.add_positional_encoding(x), (torch.randn(2, 9, 32),), 1, [1, 40]),
        "add_position_table": (lambda x: ops.add_position_table(x, table), (torch.randn(2, 9, 32),), 1, [1, 64]),
        "apply_rotary": (lambda x: ops.apply_rotary(qk(x), cos, sin), (torch.randn(2, 9, 32),), 1, [1, 64]),
        "apply_rotary_qk": (lambda x: ops.apply_rotary_qk(qk(x), qk(x * 2), cos, sin)[1], (torch.randn(2, 9, 32),), 1, [1, 64]),
        "token_and_position_embedding": (lambda t: ops.token_and_position_embedding(t, weight, table)[0],
                                         (torch.randint(0, 50, (2, 9)),), 1, [1, 64]),
        "timestep_embedding": (lambda t: ops.timestep_embedding(t, 64, True, 0.0), (torch.rand(9) * 1000,), 0, [1, 300]),
        "axial_rotary_tables": (lambda ids: ops.axial_rotary_tables(ids, [4, 6, 6])[0], (torch.randn(9, 3),), 0, [1, 300]),
        # M-RoPE's [3, B, L] positions (Qwen2-VL), L dynamic
        "multimodal_rotary_tables": (lambda p: ops.multimodal_rotary_tables(cos, sin, p, [2, 3, 3])[0],
                                     (torch.randint(0, 64, (3, 2, 9)),), 2, [1, 64]),
    }


@pytest.mark.parametrize("name", ["add_positional_encoding", "add_position_table", "apply_rotary", "apply_rotary_qk",
                                  "token_and_position_embedding", "timestep_embedding", "axial_rotary_tables",
                                  "multimodal_rotary_tables"])
def test_export_keeps_the_length_dynamic(posenc_ops, name):
    function, example, dim, others = cases(posenc_ops)[name]
    length = torch.export.Dim("length", min=1, max=others[-1])
    program = torch.export.export(Call(function), example, dynamic_shapes=({dim: length},))
    for size in others:
        shape = list(example[0].shape)
        shape[dim] = size
        x = torch.randint(0, 50, shape) if example[0].dtype == torch.int64 else torch.randn(shape)
        if name == "multimodal_rotary_tables":
            x = torch.randint(0, 64, shape)
        if name == "timestep_embedding":
            x = x.abs() * 1000
        assert torch.equal(program.module()(x), function(x)), size


def length_cases(ops):
    """Operators whose lengths are arguments (`SymInt` in their schemas), given the length of the
    input: under torch.export the length stays a symbol instead of being fixed to the example's."""
    slopes = ops.alibi_slopes(4)
    weight = torch.randn(32, 4)
    inv_freq = ops.rope_frequencies(16)[0]
    grid_table = torch.randn(1, 17, 8)
    return {
        # name: function of x [B, L, D]
        "sinusoidal_table": lambda x: x + ops.sinusoidal_table(x.shape[1], x.shape[2]),
        "alibi_bias": lambda x: ops.alibi_bias(slopes, x.shape[1], x.shape[1]),
        "alibi_bias_offset": lambda x: ops.alibi_bias(slopes, x.shape[1], x.shape[1] + 3, x.shape[1] - 1, True),
        "alibi_causal_bias": lambda x: ops.alibi_causal_bias(slopes, x.shape[1]),
        "relative_position_bias": lambda x: ops.relative_position_bias(weight, x.shape[1], x.shape[1] + 2),
        "relative_position_bias_offset": lambda x: ops.relative_position_bias(weight, 1, x.shape[1], True, 128,
                                                                              x.shape[1] - 1),
        "relative_sinusoidal_table": lambda x: ops.relative_sinusoidal_table(x.shape[1], x.shape[2]),
        "rotary_tables": lambda x: ops.rotary_tables(x.shape[1], inv_freq)[1],
        "context_parallel_positions": lambda x: ops.context_parallel_positions(4 * x.shape[1], 2, 1, True),
        # grid sizes (SymInt[]): a dynamic resolution
        "sincos_2d_table": lambda x: ops.sincos_2d_table(16, [x.shape[1], x.shape[1] + 1], True, 1),
        "sincos_2d_grid_table": lambda x: ops.sincos_2d_grid_table([x.shape[1], 3], 16),
        "sincos_3d_table": lambda x: ops.sincos_3d_table(16, [x.shape[1], 2], x.shape[1] + 1),
        "grid_ids": lambda x: ops.grid_ids([x.shape[1], 4]),
        # a 4 x 4 grid (and a class token) resampled to the input's: at length 2, 4 x 4 itself
        "resample_position_table": lambda x: ops.resample_position_table(grid_table, [x.shape[1] + 2, x.shape[1] + 2]),
        "resample_position_table_bilinear": lambda x: ops.resample_position_table(
            grid_table, [x.shape[1], 5], [], 1, "bilinear", False),
    }


@pytest.mark.parametrize("name", ["sinusoidal_table", "alibi_bias", "alibi_bias_offset", "alibi_causal_bias",
                                  "relative_position_bias", "relative_position_bias_offset",
                                  "relative_sinusoidal_table", "rotary_tables", "context_parallel_positions",
                                  "sincos_2d_table", "sincos_2d_grid_table", "sincos_3d_table", "grid_ids",
                                  "resample_position_table", "resample_position_table_bilinear"])
def test_export_keeps_length_arguments_dynamic(posenc_ops, name):
    function = length_cases(posenc_ops)[name]
    length = torch.export.Dim("length", min=2, max=300)
    program = torch.export.export(Call(function), (torch.randn(2, 9, 16),), dynamic_shapes=({1: length},))
    # no specialization: the length is a symbol of the graph's inputs, not the example's 9
    assert len(program.range_constraints) >= 1
    for size in (2, 40, 300):
        x = torch.randn(2, size, 16)
        assert torch.equal(program.module()(x), function(x)), size


def test_symbolic_lengths_are_checked_when_the_program_runs(posenc_ops):
    """A length the export could not check (a symbol) is checked by the kernel that receives its
    value: alibi_bias without an offset needs key_length >= query_length."""
    slopes = posenc_ops.alibi_slopes(4)
    queries = torch.export.Dim("queries", min=1, max=64)
    keys = torch.export.Dim("keys", min=1, max=64)
    program = torch.export.export(
        Call2(lambda q, k: posenc_ops.alibi_bias(slopes, q.shape[0], k.shape[0])),
        (torch.zeros(3), torch.zeros(5)), dynamic_shapes=({0: queries}, {0: keys}))
    assert program.module()(torch.zeros(4), torch.zeros(6)).shape == (4, 4, 6)
    with pytest.raises(RuntimeError, match="key_length >= query_length"):
        program.module()(torch.zeros(6), torch.zeros(4))


class Call2(torch.nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x, y):
        return self.function(x, y)


def test_packed_positions_keep_the_token_count_dynamic(posenc_ops):
    """packed_positions' total (SymInt): the number of tokens of a packed batch, from its shape."""
    tokens = torch.export.Dim("tokens", min=4, max=512)
    program = torch.export.export(Call2(lambda cu, x: posenc_ops.packed_positions(cu, x.shape[0])),
                                  (torch.tensor([0, 3, 9]), torch.zeros(9)), dynamic_shapes=(None, {0: tokens}))
    for cu in ([0, 3, 9], [0, 1, 300], [0, 256, 512]):
        cu = torch.tensor(cu)
        x = torch.zeros(int(cu[-1]))
        assert torch.equal(program.module()(cu, x), posenc_ops.packed_positions(cu, x.shape[0]))


def test_crop_keeps_the_grid_dynamic(posenc_ops):
    """crop_position_table's new size (SymInt[]): SD3's centre crop of a 20 x 20 table to the input's grid."""
    table = torch.randn(1, 400, 8)
    side = torch.export.Dim("side", min=2, max=20)
    function = lambda x: posenc_ops.crop_position_table(table, [x.shape[0], x.shape[0]])  # noqa: E731
    program = torch.export.export(Call(function), (torch.zeros(9),), dynamic_shapes=({0: side},))
    for size in (2, 9, 15, 20):
        x = torch.zeros(size)
        assert torch.equal(program.module()(x), function(x)), size

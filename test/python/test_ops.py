"""posenc's custom operators from Python: values, errors, autograd, opcheck, torch.compile,
torch.export, and a scripted model that C++ runs."""

import pytest
import torch

from conftest import requires_torch
from reference import assert_within_bound, expected_exact, reference_table

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def test_ops_are_registered(posenc_ops):
    for name in ["sinusoidal_table", "add_positional_encoding", "add_position_table", "_add_position_table_backward"]:
        assert hasattr(posenc_ops, name), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_sinusoidal_table(posenc_ops, dtype):
    table = posenc_ops.sinusoidal_table(300, 33, 10000.0, 5, dtype=dtype)
    assert table.dtype == dtype and table.shape == (300, 33)
    exact = reference_table(300, 33, offset=5)
    # The float64 reference uses torch's sin/cos, posenc the C library's: both are within an ulp
    # or so, so a float64 table agrees to ~1e-15 and a rounded one to half an ulp of its dtype.
    atol, rtol = {torch.float64: (1e-14, 0.0), torch.float32: (2.0 ** -25, 0.0),
                  torch.bfloat16: (0.0, 2.0 ** -8), torch.float16: (2.0 ** -25, 2.0 ** -11)}[dtype]
    assert (table.double() - exact).abs().max().item() <= atol + rtol
    assert ((table.double() - exact).abs() <= atol + rtol * exact.abs() * 1.001 + 1e-300).all()


def test_sinusoidal_table_on_meta_device(posenc_ops):
    table = posenc_ops.sinusoidal_table(10, 4, device="meta")
    assert table.is_meta and table.shape == (10, 4)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_position_table(posenc_ops, batch_first, dtype):
    torch.manual_seed(0)
    table = posenc_ops.sinusoidal_table(512, 32)
    x = (torch.randn(2, 9, 32) if batch_first else torch.randn(9, 2, 32)).to(dtype)
    y = posenc_ops.add_position_table(x, table, 100, batch_first)
    assert y.dtype == dtype
    assert_within_bound(y, expected_exact(x, 100, batch_first), dtype)
    assert torch.equal(y, posenc_ops.add_position_table(x, table.unsqueeze(0), 100, batch_first))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_positional_encoding(posenc_ops, batch_first, dtype):
    torch.manual_seed(0)
    x = (torch.randn(2, 9, 31) if batch_first else torch.randn(9, 2, 31)).to(dtype)
    y = posenc_ops.add_positional_encoding(x, 40000, 10000.0, batch_first)
    assert y.dtype == dtype
    table_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    assert_within_bound(y, expected_exact(x, 40000, batch_first), dtype, table_dtype)


def test_ops_raise_clear_errors(posenc_ops):
    table = posenc_ops.sinusoidal_table(16, 8)
    with pytest.raises(RuntimeError, match=r"posenc::add_position_table: positions offset \.\. offset \+ L - 1 must lie in the table"):
        posenc_ops.add_position_table(torch.zeros(1, 5, 8), table, 12, True)
    with pytest.raises(RuntimeError, match="expected the last dimension of the input to be d_model = 8, but got 4"):
        posenc_ops.add_position_table(torch.zeros(1, 5, 4), table, 0, True)
    with pytest.raises(RuntimeError, match="sinusoidal_table: d_model must be >= 1, but got 0"):
        posenc_ops.sinusoidal_table(4, 0)
    with pytest.raises(RuntimeError, match="posenc::add_positional_encoding: offset must be >= 0, but got -3"):
        posenc_ops.add_positional_encoding(torch.zeros(1, 2, 4), -3)


def test_gradcheck_add_position_table(posenc_ops):
    x = torch.randn(2, 4, 6, dtype=torch.float64, requires_grad=True)
    table = torch.randn(10, 6, dtype=torch.float64, requires_grad=True)
    for batch_first in (True, False):
        assert torch.autograd.gradcheck(lambda a, t: posenc_ops.add_position_table(a, t, 3, batch_first), (x, table))
        assert torch.autograd.gradgradcheck(lambda a, t: posenc_ops.add_position_table(a, t, 3, batch_first), (x, table))


def test_gradcheck_add_positional_encoding(posenc_ops):
    x = torch.randn(3, 2, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a: posenc_ops.add_positional_encoding(a, 2, 100.0, False), (x,))


def test_table_gradient_sums_over_the_batch(posenc_ops):
    table = torch.zeros(8, 3, requires_grad=True)
    x = torch.randn(4, 2, 3)
    posenc_ops.add_position_table(x, table, 5, True).sum().backward()
    expected = torch.zeros(8, 3)
    expected[5:7] = 4.0
    assert torch.equal(table.grad, expected)


def test_double_backward_of_table_gradient(posenc_ops):
    grad = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    table = torch.zeros(9, 5, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda g: posenc_ops._add_position_table_backward(g, table, 2, True), (grad,))


def interleaved_columns(d_model, base=10000.0):
    """The column plan of the paper's table: frequency base^(-2(c//2)/d), sine on even columns."""
    column = torch.arange(d_model, dtype=torch.float64)
    frequency = base ** (-2.0 * torch.div(column, 2, rounding_mode="floor") / d_model)
    return torch.stack([frequency, (column % 2)])


def test_columns_extend_a_table_exactly(posenc_ops):
    torch.manual_seed(0)
    x = torch.randn(2, 12, 10)
    small = posenc_ops.sinusoidal_table(8, 10)
    large = posenc_ops.sinusoidal_table(64, 10)
    got = posenc_ops.add_position_table(x, small, 30, True, columns=interleaved_columns(10))
    assert torch.equal(got, posenc_ops.add_position_table(x, large, 30, True))
    with pytest.raises(RuntimeError, match="positions offset .. offset \\+ L - 1 must lie in the table"):
        posenc_ops.add_position_table(x, small, 30, True)


def test_inv_freq_extends_rotary_caches_exactly(posenc_ops):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 3, 8)
    angles = torch.arange(64, dtype=torch.float64)[:, None] * (10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    cos, sin = angles.cos().float(), angles.sin().float()
    inv_freq = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    got = posenc_ops.apply_rotary(x, cos[:4], sin[:4], 40, inv_freq=inv_freq)
    # Rows past the caches come from the C library's float64 cos/sin, the reference's from torch's:
    # both within an ulp of float64, so the float32 caches can differ in their last bit at most.
    assert torch.allclose(got, posenc_ops.apply_rotary(x, cos, sin, 40), rtol=0, atol=2e-6)
    with pytest.raises(RuntimeError, match="must lie in the table"):
        posenc_ops.apply_rotary(x, cos[:4], sin[:4], 40)


OPCHECK_CASES = [
    ("add_position_table", lambda ops: (torch.randn(2, 5, 10), ops.sinusoidal_table(4, 10), 3, True, None, 1.0, interleaved_columns(10))),
    ("add_position_table", lambda ops: (torch.randn(2, 5, 8), ops.sinusoidal_table(16, 8), 3, True)),
    ("add_position_table", lambda ops: (torch.randn(5, 2, 8, dtype=torch.float64, requires_grad=True), torch.randn(1, 16, 8, dtype=torch.float64, requires_grad=True), 0, False)),
    ("add_position_table", lambda ops: (torch.randn(2, 5, 8).to(torch.bfloat16), ops.sinusoidal_table(16, 8), 11, True)),
    ("add_positional_encoding", lambda ops: (torch.randn(2, 5, 7, requires_grad=True), 4, 10000.0, True)),
    ("_add_position_table_backward", lambda ops: (torch.randn(2, 5, 8), ops.sinusoidal_table(16, 8), 3, True)),
]


@requires_torch(2, 4, "torch.library.opcheck")
@pytest.mark.parametrize("name, make_args", OPCHECK_CASES)
def test_opcheck(posenc_ops, name, make_args):
    torch.library.opcheck(getattr(posenc_ops, name).default, make_args(posenc_ops))


@requires_torch(2, 4, "torch.library.opcheck")
def test_opcheck_table_factory(posenc_ops):
    torch.library.opcheck(posenc_ops.sinusoidal_table.default, (12, 6), {"base": 100.0, "offset": 3, "dtype": torch.float64})


class ModelUsingOps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.register_buffer("pe", torch.ops.posenc.sinusoidal_table(64, 16))

    def forward(self, x, offset: int = 0):
        return self.proj(torch.ops.posenc.add_position_table(x, self.pe, offset, True))


@requires_torch(2, 1, "torch.compile")
def test_torch_compile_fullgraph(posenc_ops):
    torch.manual_seed(0)
    model = ModelUsingOps().eval()
    x = torch.randn(2, 10, 16)
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        assert torch.allclose(compiled(x, 5), model(x, 5), atol=1e-6)
    # Training through the compiled graph: gradients match eager.
    x_grad = x.clone().requires_grad_()
    twin = ModelUsingOps()
    twin.load_state_dict(model.state_dict())
    trained = torch.compile(twin, fullgraph=True, backend="aot_eager")
    trained(x_grad, 2).sum().backward()
    x_ref = x.clone().requires_grad_()
    model(x_ref, 2).sum().backward()
    assert torch.allclose(x_grad.grad, x_ref.grad, atol=1e-6)


@requires_torch(2, 2, "torch.export")
def test_torch_export(posenc_ops):
    torch.manual_seed(0)
    model = ModelUsingOps().eval()
    x = torch.randn(2, 10, 16)
    exported = torch.export.export(model, (x,), {"offset": 4})
    assert any("posenc" in str(node.target) for node in exported.graph.nodes)
    assert torch.allclose(exported.module()(x, offset=4), model(x, 4))


@requires_torch(2, 2, "torch.export with dynamic shapes")
def test_torch_export_dynamic_length(posenc_ops):
    model = ModelUsingOps().eval()
    length = torch.export.Dim("length", min=2, max=32)
    exported = torch.export.export(model, (torch.randn(2, 10, 16),), dynamic_shapes={"x": {1: length}})
    x = torch.randn(2, 20, 16)
    assert torch.allclose(exported.module()(x), model(x))


def test_scripted_model_runs_in_cpp(posenc_ops, test_tool, tmp_path):
    """Python scripts a model that calls the ops and saves it; a C++ program linked with posenc
    loads it with torch::jit::load and runs it."""
    torch.manual_seed(0)
    model = torch.jit.script(ModelUsingOps().eval())
    model_path, args_path, out_path = tmp_path / "model.pt", tmp_path / "args.pt", tmp_path / "out.pt"
    model.save(str(model_path))
    x = torch.randn(3, 12, 16)
    torch.save((x, 9), str(args_path))
    test_tool("jit-run", model_path, args_path, out_path)
    assert torch.equal(torch.load(str(out_path)), model(x, 9))


@requires_torch(2, 4, "torch.library.opcheck")
def test_opcheck_inplace_and_out_variants(posenc_ops):
    table = posenc_ops.sinusoidal_table(16, 8)
    torch.library.opcheck(posenc_ops.add_position_table_.default, (torch.randn(2, 5, 8), table, 3, True, None, 1.0))
    torch.library.opcheck(posenc_ops.add_position_table_out.default, (torch.randn(2, 5, 8), table, 3, True, None, 2.0), {"out": torch.empty(2, 5, 8)})
    cos, sin = torch.randn(16, 4), torch.randn(16, 4)
    torch.library.opcheck(posenc_ops.apply_rotary_.default, (torch.randn(2, 5, 3, 8), cos, sin, 1, None, True, False, False))


@requires_torch(2, 4, "torch.library.opcheck")
@pytest.mark.parametrize("learned", [False, True])
def test_opcheck_fused_token_embedding(posenc_ops, learned):
    weight = torch.randn(20, 8, requires_grad=True)
    table = torch.randn(16, 8, requires_grad=learned)
    tokens = torch.randint(0, 20, (3, 5))
    torch.library.opcheck(posenc_ops.token_and_position_embedding.default, (tokens, weight, table, 2, True, None, 2.0, 0, 0.0, False))


def test_fused_token_embedding_matches_chain(posenc_ops):
    weight = torch.randn(30, 16)
    table = posenc_ops.sinusoidal_table(64, 16)
    tokens = torch.randint(0, 30, (4, 10))
    out, mask = posenc_ops.token_and_position_embedding(tokens, weight, table, 5, True, None, 4.0, -1, 0.0, False)
    assert mask.numel() == 0
    assert torch.allclose(out, weight[tokens] * 4.0 + table[5:15], atol=1e-6)
    torch.manual_seed(0)
    dropped, mask = posenc_ops.token_and_position_embedding(tokens, weight, table, 5, True, None, 4.0, -1, 0.5, True)
    assert mask.shape == out.shape and mask.dtype == torch.bool
    assert torch.allclose(dropped, out * mask / 0.5, atol=1e-5)


@requires_torch(2, 1, "torch.compile")
def test_compile_fused_token_embedding_training_step(posenc_ops):
    weight = torch.randn(30, 16, requires_grad=True)
    table = posenc_ops.sinusoidal_table(64, 16)
    tokens = torch.randint(0, 30, (4, 10))

    def step(w):
        out, _ = torch.ops.posenc.token_and_position_embedding(tokens, w, table, 0, True, None, 4.0, 0, 0.0, False)
        return out.square().sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    (grad_compiled,) = torch.autograd.grad(compiled(weight), weight)
    (grad_eager,) = torch.autograd.grad(step(weight), weight)
    assert torch.allclose(grad_compiled, grad_eager, atol=1e-5)

"""What posenc's operators guarantee to a Python caller about the calls they accept (the C++ side
is test/cpp/call_safety_test.cpp): one device per call, whichever kernel runs; no write into a
tensor the call reads; autograd's in-place rules checked before writing; `out=` resized by
PyTorch's rules; options within the range where every value is a number."""

import warnings

import pytest
import torch

from reference import columns_of, inv_freq_of

INT64_MAX = 2**63 - 1




def caches(max_len, rotary_dim):
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * inv_freq_of(rotary_dim)
    return angles.cos().float(), angles.sin().float()


# --- one device per call -------------------------------------------------------------------------

MIXED_DEVICE_CALLS = {
    "columns on meta": lambda ops: ops.add_position_table(torch.zeros(1, 3, 6), ops.sinusoidal_table(4, 6), 0, True, None, 1.0, columns_of(6).to("meta")),
    "inv_freq on meta": lambda ops: ops.apply_rotary(torch.zeros(1, 3, 2, 4), *caches(8, 4), inv_freq=inv_freq_of(4).to("meta")),
    "token columns on meta": lambda ops: ops.token_and_position_embedding(
        torch.zeros(2, 3, dtype=torch.long), torch.zeros(10, 6), ops.sinusoidal_table(4, 6), columns=columns_of(6).to("meta")
    ),
    "out on meta": lambda ops: ops.add_position_table_out(torch.zeros(1, 3, 6), ops.sinusoidal_table(4, 6), out=torch.empty(0, device="meta")),
    "table on meta": lambda ops: ops.add_position_table(torch.zeros(1, 3, 6), ops.sinusoidal_table(4, 6, device="meta")),
    "cos on meta": lambda ops: ops.apply_rotary(torch.zeros(1, 3, 2, 4), caches(8, 4)[0].to("meta"), caches(8, 4)[1]),
    "backward: grad on meta": lambda ops: ops._token_and_position_embedding_backward(
        torch.zeros(2, 3, 6, device="meta"), torch.empty(0, dtype=torch.bool), torch.zeros(2, 3, dtype=torch.long), torch.zeros(10, 6),
        ops.sinusoidal_table(4, 6), 0, True, None, 1.0, -1, 0.0, [True, True],
    ),
}


@pytest.mark.parametrize("case", MIXED_DEVICE_CALLS)
def test_arguments_on_two_devices_are_rejected(posenc_ops, case):
    """A meta argument among CPU ones selects the Meta kernel, which must raise like torch.add
    rather than return memory nobody wrote."""
    with pytest.raises(RuntimeError, match="meta"):
        MIXED_DEVICE_CALLS[case](posenc_ops)


# --- nothing written that the call reads ---------------------------------------------------------

def test_in_place_target_that_is_the_table_is_rejected(posenc_ops):
    table = posenc_ops.sinusoidal_table(8, 4)
    before = table.clone()
    with pytest.raises(RuntimeError, match="x shares memory with the table"):
        posenc_ops.add_position_table_(table.view(1, 8, 4), table, 0, True)
    assert torch.equal(table, before)


def test_in_place_target_overlapping_part_of_the_table_is_rejected(posenc_ops):
    table = posenc_ops.sinusoidal_table(8, 4)
    before = table.clone()
    with pytest.raises(RuntimeError, match="x shares memory with the table"):
        posenc_ops.add_position_table_(table[2:6].unsqueeze(0), table, 1, True)
    assert torch.equal(table, before)


def test_out_sharing_positions_is_rejected(posenc_ops):
    positions = torch.tensor([3, 5])
    out = positions.view(torch.float32).view(1, 2, 2)
    with pytest.raises(RuntimeError, match="out shares memory with positions"):
        posenc_ops.add_position_table_out(torch.zeros(1, 2, 2), posenc_ops.sinusoidal_table(8, 2), 0, True, positions, out=out)
    assert positions.tolist() == [3, 5]


def test_rotary_in_place_target_sharing_sin_is_rejected(posenc_ops):
    cos, sin = caches(8, 4)
    before = sin.clone()
    with pytest.raises(RuntimeError, match="x shares memory with sin"):
        posenc_ops.apply_rotary_(sin.view(-1)[8:].view(1, 2, 1, 4), cos, sin)
    assert torch.equal(sin, before)


def test_out_may_be_the_input(posenc_ops):
    table = posenc_ops.sinusoidal_table(8, 4)
    x = torch.randn(2, 8, 4)
    expected = x + table
    posenc_ops.add_position_table_out(x, table, out=x)
    assert torch.allclose(x, expected)


# --- autograd's in-place rules, before anything is written -----------------------------------------

def test_in_place_on_a_leaf_that_requires_grad_raises_before_writing(posenc_ops):
    x = torch.randn(2, 3, 4, requires_grad=True)
    before = x.detach().clone()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
        posenc_ops.add_position_table_(x, posenc_ops.sinusoidal_table(8, 4), 0, True)
    assert torch.equal(x.detach(), before)
    # as ATen's own in-place operators do
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
        x.add_(1)


def test_rotary_in_place_on_a_view_of_such_a_leaf_raises_before_writing(posenc_ops):
    leaf = torch.randn(1, 3, 2, 4, requires_grad=True)
    before = leaf.detach().clone()
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        posenc_ops.apply_rotary_(leaf[:], *caches(8, 4))
    assert torch.equal(leaf.detach(), before)


def test_in_place_on_one_of_several_views_raises_before_writing(posenc_ops):
    base = torch.randn(2, 2, 3, 4, requires_grad=True) * 2
    before = base.detach().clone()
    with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
        posenc_ops.add_position_table_(base.unbind(0)[0], posenc_ops.sinusoidal_table(8, 4), 0, True)
    assert torch.equal(base.detach(), before)


def test_in_place_on_an_inference_tensor_outside_inference_mode_raises_before_writing(posenc_ops):
    with torch.inference_mode():
        x = torch.randn(2, 3, 4)
    before = x.clone()
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        posenc_ops.add_position_table_(x, posenc_ops.sinusoidal_table(8, 4), 0, True)
    assert torch.equal(x, before)


def test_in_place_under_no_grad_is_allowed_on_a_leaf(posenc_ops):
    """As for an optimizer's update: no graph, no rule broken."""
    x = torch.zeros(1, 3, 4, requires_grad=True)
    with torch.no_grad():
        posenc_ops.add_position_table_(x, posenc_ops.sinusoidal_table(8, 4), 0, True)
    assert torch.equal(x.detach()[0], posenc_ops.sinusoidal_table(3, 4))


# --- out= follows PyTorch's resize rules -----------------------------------------------------------

def test_empty_out_is_resized_silently(posenc_ops):
    out = torch.empty(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        posenc_ops.add_position_table_out(torch.zeros(2, 0, 4), posenc_ops.sinusoidal_table(8, 4), out=out)
    assert out.shape == (2, 0, 4)


def test_out_of_another_shape_is_resized_with_pytorchs_warning(posenc_ops, capfd):
    out = torch.empty(5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        posenc_ops.add_position_table_out(torch.zeros(2, 3, 4), posenc_ops.sinusoidal_table(8, 4), out=out)
    assert torch.equal(out, posenc_ops.sinusoidal_table(3, 4).expand(2, 3, 4))
    # The same warning as torch.add's, from the same function of ATen. In torch 2.11 warnings of
    # torch.ops calls go to C++'s handler, which prints them to stderr; torch 2.15 raises them as
    # Python warnings, as it does torch.add's.
    expected = "An output with one or more elements was resized since it had shape [5]"
    assert any(expected in str(warning.message) for warning in caught) or expected in capfd.readouterr().err


def test_fake_tensor_out_is_resized(posenc_ops):
    out = torch.empty(0, device="meta")
    posenc_ops.add_position_table_out(torch.empty(2, 3, 4, device="meta"), torch.empty(8, 4, device="meta"), out=out)
    assert out.shape == (2, 3, 4)


# --- options within the range where every value is a number --------------------------------------

def test_scale_beyond_float32_is_rejected_for_float32_inputs(posenc_ops):
    table = posenc_ops.sinusoidal_table(8, 4)
    with pytest.raises(RuntimeError, match=r"scale must lie in \[-3.4028e38, 3.4028e38\] for Float inputs"):
        posenc_ops.add_position_table(torch.zeros(1, 3, 4), table, 0, True, None, 1e300)
    with pytest.raises(RuntimeError, match=r"scale must lie in \[-3.4028e38, 3.4028e38\] for BFloat16 inputs"):
        posenc_ops.add_positional_encoding(torch.zeros(1, 3, 4, dtype=torch.bfloat16), 0, 10000.0, True, None, 1e39)
    # float64 inputs are computed in float64: 0 * 1e300 + pe is pe, not NaN
    y = posenc_ops.add_position_table(torch.zeros(1, 3, 4, dtype=torch.float64), table.double(), 0, True, None, 1e300)
    assert torch.equal(y[0], table.double()[:3])


def test_bases_below_the_range_of_finite_angles_are_rejected(posenc_ops):
    for base in (5e-324, 1e-300):
        with pytest.raises(RuntimeError, match="base must be finite and >= 5.2e-290"):
            posenc_ops.sinusoidal_table(8, 4, base)
        with pytest.raises(RuntimeError, match="base must be finite and >= 5.2e-290"):
            posenc_ops.add_positional_encoding(torch.zeros(1, 3, 4), 0, base)


def test_the_smallest_accepted_base_gives_sin_0_and_cos_0_at_position_0(posenc_ops):
    table = posenc_ops.sinusoidal_table(8, 6, 5.2e-290)
    assert torch.isfinite(table).all()
    assert table[0].tolist() == [0.0, 1.0] * 3
    far = posenc_ops.add_positional_encoding(torch.zeros(1, 2, 6), INT64_MAX - 2, 5.2e-290)
    assert torch.isfinite(far).all()


def test_frequencies_that_overflow_angles_are_rejected(posenc_ops):
    columns = columns_of(4)
    columns[0, 1] = 1e300
    with pytest.raises(RuntimeError, match=r"columns must hold frequencies in \[-1.9e289, 1.9e289\]"):
        posenc_ops.add_position_table(torch.zeros(1, 9, 4), posenc_ops.sinusoidal_table(8, 4), 0, True, None, 1.0, columns)
    inv_freq = inv_freq_of(4)
    inv_freq[0] = float("inf")
    with pytest.raises(RuntimeError, match=r"inv_freq must hold frequencies in \[-1.9e289, 1.9e289\]"):
        posenc_ops.apply_rotary(torch.zeros(1, 9, 1, 4), *caches(8, 4), inv_freq=inv_freq)


def test_attention_factor_the_caches_cannot_hold_is_rejected(posenc_ops):
    with pytest.raises(RuntimeError, match="attention_factor must be > 0 and at most 3.40282e\\+38"):
        posenc_ops.apply_rotary(torch.zeros(1, 9, 1, 4), *caches(8, 4), inv_freq=inv_freq_of(4), attention_factor=1e300)

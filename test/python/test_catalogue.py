"""A catalogue of bad and extreme inputs to every public entry point reachable from Python: each
operator of ``torch.ops.posenc``, each ``posenc.nn`` module (constructor and forwards) and the
``posenc`` program (``table``, ``rope``, ``export``, ``plot``).

Each row names one call and what it must do: raise a clean error (the exception type and a
distinctive part of a message saying what must hold; for the program, a positive exit status and a
part of its stderr) or, for an extreme but valid input (empty, length 1, large offsets, half
precision, non-contiguous views), return an exact result. A row whose call misbehaves today (a
crash, a silently wrong value, an internal message) is marked ``xfail(strict=True)`` with what
should happen instead.

Every new public entry point (operator, module, forward, subcommand or option) must add rows here:
at least its size arguments at -1, 0 and huge values, wrong dtypes and ranks, and the device and
aliasing rules that apply to it.
"""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from conftest import TORCH_VERSION

# The rows are written for the pip environment's torch (2.11): meta-device factories
# (`with torch.device("meta")`) and torch's own messages of older versions differ.
pytestmark = pytest.mark.skipif(TORCH_VERSION < (2, 4), reason="the catalogue runs with torch >= 2.4 (the pip environment)")

SOURCE_ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_ROOT, "python"))

I64 = 2**63 - 1
HUGE = (2**31, 2**62, I64)
f32, f64, f16, bf16, i64 = torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64
META = "meta"  # huge sizes go to the meta device: nothing is allocated if a check is missing


@pytest.fixture(scope="module")
def posenc(posenc_ops):  # the fixture checks POSENC_LIBRARY is set (the package reads it)
    import posenc as package

    return package


def err(id, fn, exc, message, xfail=None):
    """A call ``fn(ops, nn)`` that must raise ``exc`` whose message contains ``message``."""
    marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
    return pytest.param(fn, (exc, message), id=id, marks=marks)


def ok(id, fn, check, xfail=None):
    """A call ``fn(ops, nn)`` that must return a result ``check(result)`` accepts."""
    marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
    return pytest.param(fn, check, id=id, marks=marks)


def cos_sin(max_len, rotary_dim, dtype=f32):
    angles = torch.arange(max_len, dtype=f64)[:, None] * (10000.0 ** (-torch.arange(0, rotary_dim, 2, dtype=f64) / rotary_dim))
    return angles.cos().to(dtype), angles.sin().to(dtype)


def table(o, max_len=8, d_model=4):
    return o.sinusoidal_table(max_len, d_model)


# --- errors: operators -----------------------------------------------------------------------------

OP_ERRORS = [
    # sinusoidal_table(max_len, d_model, base, offset, channels, frequencies, dtype, device)
    err("sinusoidal_table-max_len=-1", lambda o, n: o.sinusoidal_table(-1, 4), RuntimeError, "max_len must be >= 1"),
    err("sinusoidal_table-d_model=0", lambda o, n: o.sinusoidal_table(4, 0), RuntimeError, "d_model must be >= 1"),
    err("sinusoidal_table-d_model=-2", lambda o, n: o.sinusoidal_table(4, -2), RuntimeError, "d_model must be >= 1"),
    err("sinusoidal_table-max_len=2^31", lambda o, n: o.sinusoidal_table(2**31, 4), RuntimeError, "a table of max_len * d_model = 2147483648 * 4 elements is over posenc's limit of 2^28"),
    err("sinusoidal_table-max_len=2^62", lambda o, n: o.sinusoidal_table(2**62, 4), RuntimeError, "a table of max_len * d_model = 4611686018427387904 * 4 elements is over posenc's limit of"),
    err("sinusoidal_table-max_len=i64max", lambda o, n: o.sinusoidal_table(I64, 4), RuntimeError, "a table of max_len * d_model = 9223372036854775807 * 4 elements is over posenc's limit of"),
    err("sinusoidal_table-d_model=2^62", lambda o, n: o.sinusoidal_table(4, 2**62), RuntimeError, "a table of max_len * d_model = 4 * 4611686018427387904 elements is over posenc's limit of"),
    err("sinusoidal_table-d_model=i64max", lambda o, n: o.sinusoidal_table(1, I64), RuntimeError, "a table of max_len * d_model = 1 * 9223372036854775807 elements is over posenc's limit of"),
    err("sinusoidal_table-base=0", lambda o, n: o.sinusoidal_table(4, 4, 0.0), RuntimeError, "base must be finite and >= 5.2e-290 (so that every angle position * base^-e is a finite"),
    err("sinusoidal_table-base=nan", lambda o, n: o.sinusoidal_table(4, 4, math.nan), RuntimeError, "base must be finite and >= 5.2e-290 (so that every angle position * base^-e is a finite"),
    err("sinusoidal_table-base=inf", lambda o, n: o.sinusoidal_table(4, 4, math.inf), RuntimeError, "base must be finite and >= 5.2e-290 (so that every angle position * base^-e is a finite"),
    err("sinusoidal_table-offset=-1", lambda o, n: o.sinusoidal_table(4, 4, offset=-1), RuntimeError, "offset must be >= 0"),
    err("sinusoidal_table-offset=i64max", lambda o, n: o.sinusoidal_table(4, 4, offset=I64), RuntimeError, "offset + max_len must fit in int64"),
    err("sinusoidal_table-channels-unknown", lambda o, n: o.sinusoidal_table(4, 4, channels="bogus"), RuntimeError, "channels must be \"interleaved\" or \"concatenated\""),
    err("sinusoidal_table-frequencies-unknown", lambda o, n: o.sinusoidal_table(4, 4, frequencies="bogus"), RuntimeError, "frequencies must be \"paper\" or \"tensor2tensor\""),
    err("sinusoidal_table-dtype=int64", lambda o, n: o.sinusoidal_table(4, 4, dtype=i64), RuntimeError, "dtype must be float16, bfloat16, float32 or float64"),
    # alibi_slopes(num_heads, max_bias, first_head, heads, dtype, device)
    err("alibi_slopes-num_heads=0", lambda o, n: o.alibi_slopes(0), RuntimeError, "num_heads must be in [1, 2^28] (posenc's limit of heads)"),
    err("alibi_slopes-num_heads=-1", lambda o, n: o.alibi_slopes(-1), RuntimeError, "num_heads must be in [1, 2^28] (posenc's limit of heads)"),
    err("alibi_slopes-num_heads=2^31", lambda o, n: o.alibi_slopes(2**31), RuntimeError, "num_heads must be in [1, 2^28] (posenc's limit of heads)"),
    err("alibi_slopes-num_heads=2^62", lambda o, n: o.alibi_slopes(2**62), RuntimeError, "num_heads must be in [1, 2^28] (posenc's limit of heads)"),
    err("alibi_slopes-num_heads=i64max", lambda o, n: o.alibi_slopes(I64), RuntimeError, "num_heads must be in [1, 2^28] (posenc's limit of heads)"),
    err("alibi_slopes-max_bias=nan", lambda o, n: o.alibi_slopes(8, math.nan), RuntimeError, "max_bias must be in (0, 64] (the smallest slope is 2^-max_bias)"),
    err("alibi_slopes-first_head=-1", lambda o, n: o.alibi_slopes(8, first_head=-1), RuntimeError, "first_head must be in [0, num_heads) = [0, 8)"),
    err("alibi_slopes-heads-past-num_heads", lambda o, n: o.alibi_slopes(8, first_head=6, heads=4), RuntimeError, "a shard of heads first_head .. first_head + heads - 1 must lie in the model's 8 heads"),
    err("alibi_slopes-dtype=int64", lambda o, n: o.alibi_slopes(8, dtype=i64), RuntimeError, "dtype must be float16, bfloat16, float32 or float64"),
    # alibi_bias(slopes, query_length, key_length, offset, causal, dtype)
    err("alibi_bias-slopes-3d", lambda o, n: o.alibi_bias(torch.ones(1, 2, 2), 3, 3), RuntimeError, "slopes must be [num_heads] or [batch, num_heads] with num_heads >= 1"),
    err("alibi_bias-slopes-int", lambda o, n: o.alibi_bias(torch.ones(2, dtype=i64), 3, 3), RuntimeError, "slopes' dtype must be float16, bfloat16, float32 or float64"),
    err("alibi_bias-query_length=-1", lambda o, n: o.alibi_bias(torch.ones(2), -1, 3), RuntimeError, "query_length must be >= 1"),
    err("alibi_bias-key_length=-1", lambda o, n: o.alibi_bias(torch.ones(2), 3, -1), RuntimeError, "key_length must be >= 1"),
    err("alibi_bias-lengths=2^31", lambda o, n: o.alibi_bias(torch.ones(2), 2**31, 2**31), RuntimeError, "the bias' heads * query_length * key_length = 2 * 2147483648 * 2147483648 elements is"),
    err("alibi_bias-key_length=i64max", lambda o, n: o.alibi_bias(torch.ones(2), 1, I64), RuntimeError, "the bias' heads * query_length * key_length = 2 * 1 * 9223372036854775807 elements is"),
    err("alibi_bias-offset=-1", lambda o, n: o.alibi_bias(torch.ones(2), 3, 3, -1), RuntimeError, "offset (the position of the first query) must be >= 0 and offset + query_length must fit"),
    # alibi_causal_bias(slopes, key_length, attention_mask, dtype)
    err("alibi_causal_bias-key_length=-1", lambda o, n: o.alibi_causal_bias(torch.ones(2), -1), RuntimeError, "key_length must be >= 1"),
    err("alibi_causal_bias-key_length=2^62", lambda o, n: o.alibi_causal_bias(torch.ones(2), 2**62), RuntimeError, "the bias' batch * heads * key_length = 1 * 2 * 4611686018427387904 elements is more than"),
    err("alibi_causal_bias-mask-wrong-length", lambda o, n: o.alibi_causal_bias(torch.ones(2), 4, torch.ones(1, 3)), RuntimeError, "attention_mask must be [batch, key_length] = [batch, 4] (1 for a token, 0 for padding)"),
    err("alibi_causal_bias-mask-3d", lambda o, n: o.alibi_causal_bias(torch.ones(2), 4, torch.ones(1, 1, 4)), RuntimeError, "attention_mask must be [batch, key_length] = [batch, 4] (1 for a token, 0 for padding)"),
    err("alibi_causal_bias-mask-on-meta", lambda o, n: o.alibi_causal_bias(torch.ones(2), 4, torch.ones(1, 4, device="meta")), RuntimeError, "attention_mask must be bool or integer (1 for a token, 0 for padding)"),
    # relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance)
    err("relative_position_bucket-float", lambda o, n: o.relative_position_bucket(torch.zeros(3)), RuntimeError, "relative_position must be an integer tensor (key position - query position)"),
    err("relative_position_bucket-num_buckets=0", lambda o, n: o.relative_position_bucket(torch.zeros(3, dtype=i64), True, 0), RuntimeError, "num_buckets must be >= 4 when bidirectional (each direction needs an exact and a"),
    err("relative_position_bucket-num_buckets=-1", lambda o, n: o.relative_position_bucket(torch.zeros(3, dtype=i64), True, -1), RuntimeError, "num_buckets must be >= 4 when bidirectional (each direction needs an exact and a"),
    err("relative_position_bucket-num_buckets=2^62", lambda o, n: o.relative_position_bucket(torch.zeros(3, dtype=i64), True, 2**62), RuntimeError, "max_distance must be >= num_buckets (the logarithmic buckets span the distances from"),
    err("relative_position_bucket-max_distance=0", lambda o, n: o.relative_position_bucket(torch.zeros(3, dtype=i64), True, 32, 0), RuntimeError, "max_distance must be >= num_buckets (the logarithmic buckets span the distances from"),
    err("relative_position_bucket-max_distance=-1", lambda o, n: o.relative_position_bucket(torch.zeros(3, dtype=i64), True, 32, -1), RuntimeError, "max_distance must be >= num_buckets (the logarithmic buckets span the distances from"),
    err("relative_position_bucket-max_distance=i64max", lambda o, n: o.relative_position_bucket(torch.zeros(3, dtype=i64), True, 32, I64), RuntimeError, "max_distance must be <= 2^27 (posenc's limit of bucketed distances)"),
    # rotary
    err("apply_rotary-x-3d", lambda o, n: o.apply_rotary(torch.zeros(2, 3, 4), *cos_sin(8, 4)), RuntimeError, "expected a 4-D query or key tensor of shape [B, L, H, Dh] (heads_first=false)"),
    err("apply_rotary-x-int", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4, dtype=i64), *cos_sin(8, 4)), RuntimeError, "expected a floating-point input (float16, bfloat16, float32 or float64)"),
    err("apply_rotary-offset-past-table", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), *cos_sin(8, 4), offset=6), RuntimeError, "positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (8)"),
    err("apply_rotary-offset=-1", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), *cos_sin(8, 4), offset=-1), RuntimeError, "offset must be >= 0"),
    err("apply_rotary-offset=i64max", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), *cos_sin(8, 4), offset=I64), RuntimeError, "offset + L must fit in int64"),
    err("apply_rotary-positions-past-table", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), *cos_sin(8, 4), positions=torch.tensor([0, 1, 8])), RuntimeError, "positions must be < max_len (8)"),
    err("apply_rotary-positions-negative", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), *cos_sin(8, 4), positions=torch.tensor([0, -2, 2])), RuntimeError, "positions must be >= -1 (-1 marks padding)"),
    err("apply_rotary-positions-float", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), *cos_sin(8, 4), positions=torch.tensor([0.0, 1.0, 2.0])), RuntimeError, "floating-point positions (Float) are computed from the encoding's definition, which this"),
    err("apply_rotary-cos-sin-shapes-differ", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), cos_sin(8, 4)[0], cos_sin(7, 4)[1]), RuntimeError, "cos and sin must be [max_len, R/2] tables of the same shape (R/2 <= 2^28)"),
    err("apply_rotary-rotary_dim-above-head_dim", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), *cos_sin(8, 6)), RuntimeError, "the head dimension Dh = 4 is smaller than the rotated width 6 (input shape [1, 3, 2, 4])"),
    err("apply_rotary-x-on-meta", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4, device="meta"), *cos_sin(8, 4)), RuntimeError, "expected the input on the device of the cos/sin caches (cpu)"),
    err("apply_rotary_qk_-q-shares-heads-with-k", lambda o, n: (lambda b: o.apply_rotary_qk_(b[:, :, 0:3], b[:, :, 2:4], *cos_sin(8, 4)))(torch.zeros(1, 3, 4, 4)), RuntimeError, "q shares memory with k"),
    err("apply_rotary_qk_-q-is-k", lambda o, n: (lambda b: o.apply_rotary_qk_(b, b, *cos_sin(8, 4)))(torch.zeros(1, 3, 2, 4)), RuntimeError, "q shares memory with k"),
]

OP_ERRORS += [
    # relative_position_bias(weight, query_length, key_length, bidirectional, max_distance, offset)
    err("relative_position_bias-weight-1d", lambda o, n: o.relative_position_bias(torch.zeros(32), 3, 3), RuntimeError, "weight must be the [num_buckets, num_heads] bias table (T5's"),
    err("relative_position_bias-weight-int", lambda o, n: o.relative_position_bias(torch.zeros(32, 2, dtype=i64), 3, 3), RuntimeError, "weight's dtype must be float16, bfloat16, float32 or float64"),
    err("relative_position_bias-query_length=-1", lambda o, n: o.relative_position_bias(torch.zeros(32, 2), -1, 3), RuntimeError, "query_length must be >= 1"),
    err("relative_position_bias-key_length=0", lambda o, n: o.relative_position_bias(torch.zeros(32, 2), 3, 0), RuntimeError, "key_length must be >= 1"),
    err("relative_position_bias-lengths=2^31", lambda o, n: o.relative_position_bias(torch.zeros(32, 2), 2**31, 2**31), RuntimeError, "num_heads * query_length * key_length = 2 * 2147483648 * 2147483648 elements is more than"),
    err("relative_position_bias-key_length=i64max", lambda o, n: o.relative_position_bias(torch.zeros(32, 2), 1, I64), RuntimeError, "num_heads * query_length * key_length = 2 * 1 * 9223372036854775807 elements is more than"),
    err("relative_position_bias-offset=-1", lambda o, n: o.relative_position_bias(torch.zeros(32, 2), 3, 3, offset=-1), RuntimeError, "offset (the position of the first query, e.g. the number of cached tokens) must be >= 0"),
    err("relative_position_bias-offset=i64max", lambda o, n: o.relative_position_bias(torch.zeros(32, 2), 3, 3, offset=I64), RuntimeError, "offset (the position of the first query, e.g. the number of cached tokens) must be >= 0"),
    err("relative_position_bias-max_distance=0", lambda o, n: o.relative_position_bias(torch.zeros(32, 2), 3, 3, max_distance=0), RuntimeError, "max_distance must be >= num_buckets (the logarithmic buckets span the distances from"),
    err("relative_position_bias-max_distance=2^62", lambda o, n: o.relative_position_bias(torch.zeros(32, 2), 3, 3, max_distance=2**62), RuntimeError, "max_distance must be <= 2^27 (posenc's limit of bucketed distances)"),
    err("relative_position_bias-num_buckets=2", lambda o, n: o.relative_position_bias(torch.zeros(2, 2), 3, 3), RuntimeError, "num_buckets must be >= 4 when bidirectional (each direction needs an exact and a"),
    # relative_sinusoidal_table(length, d_model, base, key_length, dtype, device)
    err("relative_sinusoidal_table-length=0", lambda o, n: o.relative_sinusoidal_table(0, 4), RuntimeError, "length must be >= 1"),
    err("relative_sinusoidal_table-length=-1", lambda o, n: o.relative_sinusoidal_table(-1, 4), RuntimeError, "length must be >= 1"),
    err("relative_sinusoidal_table-length=2^62", lambda o, n: o.relative_sinusoidal_table(2**62, 4), RuntimeError, "length + key_length must fit in int64"),
    err("relative_sinusoidal_table-length=i64max", lambda o, n: o.relative_sinusoidal_table(I64, 4), RuntimeError, "length + key_length must fit in int64"),
    err("relative_sinusoidal_table-d_model=0", lambda o, n: o.relative_sinusoidal_table(4, 0), RuntimeError, "d_model must be >= 1"),
    err("relative_sinusoidal_table-d_model=2^62", lambda o, n: o.relative_sinusoidal_table(4, 2**62), RuntimeError, "a table of max_len * d_model = 7 * 4611686018427387904 elements is over posenc's limit of"),
    err("relative_sinusoidal_table-key_length=-1", lambda o, n: o.relative_sinusoidal_table(4, 4, key_length=-1), RuntimeError, "key_length must be >= 1"),
    err("relative_sinusoidal_table-key_length=i64max", lambda o, n: o.relative_sinusoidal_table(4, 4, key_length=I64), RuntimeError, "length + key_length must fit in int64"),
    err("relative_sinusoidal_table-base=-1", lambda o, n: o.relative_sinusoidal_table(4, 4, -1.0), RuntimeError, "base must be finite and >= 5.2e-290 (so that every angle position * base^-e is a finite"),
    # rel_shift(x)
    err("rel_shift-1d", lambda o, n: o.rel_shift(torch.zeros(5)), RuntimeError, "x must be scores [..., Lq, Lq + Lk - 1] against a relative table"),
    # attention_temperature(query, positions=None, offset=0, floor_scale, attn_scale, heads_first, form)
    err("attention_temperature-3d", lambda o, n: o.attention_temperature(torch.zeros(2, 3, 4)), RuntimeError, "query must be a floating-point [B, L, H, head_dim] tensor (float16, bfloat16, float32 or float64), but got Float of shape [2, 3, 4]; pass heads_first=true"),
    err("attention_temperature-int", lambda o, n: o.attention_temperature(torch.zeros(1, 2, 3, 4, dtype=i64)), RuntimeError, "but got Long of shape"),
    err("attention_temperature-floor_scale=0", lambda o, n: o.attention_temperature(torch.zeros(1, 2, 3, 4), None, 0, 0.0), RuntimeError, "floor_scale must be finite and > 0"),
    err("attention_temperature-floor_scale=nan", lambda o, n: o.attention_temperature(torch.zeros(1, 2, 3, 4), None, 0, math.nan), RuntimeError, "floor_scale must be finite and > 0"),
    err("attention_temperature-attn_scale=inf", lambda o, n: o.attention_temperature(torch.zeros(1, 2, 3, 4), None, 0, 8.0, math.inf), RuntimeError, "attn_scale must be finite"),
    err("attention_temperature-form", lambda o, n: o.attention_temperature(torch.zeros(1, 2, 3, 4), None, 0, 8.0, 0.1, False, "llama3"), RuntimeError, 'form must be "llama4"'),
    err("attention_temperature-offset=-1", lambda o, n: o.attention_temperature(torch.zeros(1, 2, 3, 4), None, -1), RuntimeError, "offset must be >= 0"),
    err("attention_temperature-offset-overflow", lambda o, n: o.attention_temperature(torch.zeros(1, 2, 3, 4), None, I64), RuntimeError, "offset + L must fit in int64"),
    err("attention_temperature-positions-and-offset", lambda o, n: o.attention_temperature(torch.zeros(1, 2, 3, 4), torch.zeros(2, dtype=i64), 1), RuntimeError, "pass either an offset or explicit positions, not both"),
    err("attention_temperature-positions-shape", lambda o, n: o.attention_temperature(torch.zeros(1, 2, 3, 4), torch.zeros(3, dtype=i64)), RuntimeError, "positions must have shape [L] = [2] or [B, L] = [1, 2]"),
    err("attention_temperature-positions-bool", lambda o, n: o.attention_temperature(torch.zeros(1, 2, 3, 4), torch.zeros(2, dtype=torch.bool)), RuntimeError, "positions must be an integer tensor (int64 or int32) or a floating-point one"),
    err("AttentionTemperature-floor_scale=-1", lambda o, n: n.AttentionTemperature(floor_scale=-1), ValueError, "AttentionTemperature: floor_scale must be finite and > 0"),
    err("AttentionTemperature-form", lambda o, n: n.AttentionTemperature(form="yarn"), ValueError, 'AttentionTemperature: form must be "llama4"'),
    err("rel_shift-width-below-Lq", lambda o, n: o.rel_shift(torch.zeros(1, 1, 3, 2)), RuntimeError, "the last dimension of x (2) must hold the Lq + Lk - 1 relative positions of its Lq = 3"),
    # add_positional_encoding(x, offset, base, batch_first, positions, scale, channels, frequencies)
    err("add_positional_encoding-x-2d", lambda o, n: o.add_positional_encoding(torch.zeros(3, 4)), RuntimeError, "expected a 3-D input of shape [B, L, D] (batch_first=true)"),
    err("add_positional_encoding-x-int", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4, dtype=i64)), RuntimeError, "expected a floating-point input (float16, bfloat16, float32 or float64)"),
    err("add_positional_encoding-offset=-1", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4), -1), RuntimeError, "offset must be >= 0"),
    err("add_positional_encoding-offset=i64max", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4), I64), RuntimeError, "offset + max_len must fit in int64"),
    err("add_positional_encoding-base=nan", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4), 0, math.nan), RuntimeError, "base must be finite and >= 5.2e-290 (so that every angle position * base^-e is a finite"),
    err("add_positional_encoding-scale=inf", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4), scale=math.inf), RuntimeError, "scale must be finite"),
    err("add_positional_encoding-positions-nan", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4), positions=torch.tensor([0.0, math.nan, 1.0])), RuntimeError, "floating-point positions must be finite and in [0, 2^63)"),
    err("add_positional_encoding-positions-inf", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4), positions=torch.tensor([0.0, math.inf, 1.0])), RuntimeError, "floating-point positions must be finite and in [0, 2^63)"),
    err("add_positional_encoding-positions-wrong-length", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4), positions=torch.tensor([0, 1])), RuntimeError, "positions must have shape [L] = [3] or [B, L] (batch_first=true) = [1, 3]"),
    err("add_positional_encoding-positions-on-meta", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4), positions=torch.tensor([0, 1, 2], device="meta")), RuntimeError, "positions must be on the input's device (cpu)"),
    err("add_positional_encoding-channels-unknown", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4), channels="bogus"), RuntimeError, "channels must be \"interleaved\" or \"concatenated\""),
    err("add_positional_encoding-frequencies-unknown", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4), frequencies=""), RuntimeError, "frequencies must be \"paper\" or \"tensor2tensor\""),
    # add_position_table(x, table, offset, batch_first, positions, scale, columns)
    err("add_position_table-width-mismatch", lambda o, n: o.add_position_table(torch.zeros(1, 3, 6), table(o)), RuntimeError, "expected the last dimension of the input to be d_model = 4"),
    err("add_position_table-table-1d", lambda o, n: o.add_position_table(torch.zeros(1, 3, 4), torch.zeros(4)), RuntimeError, "expected the encoding table as [max_len, D] or [1, max_len, D]"),
    err("add_position_table-table-int", lambda o, n: o.add_position_table(torch.zeros(1, 3, 4), torch.zeros(8, 4, dtype=i64)), RuntimeError, "the encoding table's dtype must be float16, bfloat16, float32 or float64"),
    err("add_position_table-offset-past-table", lambda o, n: o.add_position_table(torch.zeros(1, 3, 4), table(o), 6), RuntimeError, "positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (8)"),
    err("add_position_table-offset=i64max", lambda o, n: o.add_position_table(torch.zeros(1, 3, 4), table(o), I64), RuntimeError, "offset + L must fit in int64"),
    err("add_position_table-positions-past-table", lambda o, n: o.add_position_table(torch.zeros(1, 3, 4), table(o), positions=torch.tensor([0, 8, 1])), RuntimeError, "positions must be < max_len (8)"),
    err("add_position_table-positions=-2", lambda o, n: o.add_position_table(torch.zeros(1, 3, 4), table(o), positions=torch.tensor([0, -2, 1])), RuntimeError, "positions must be >= -1 (-1 marks padding)"),
    err("add_position_table-positions=i64max", lambda o, n: o.add_position_table(torch.zeros(1, 3, 4), table(o), positions=torch.tensor([0, I64, 1])), RuntimeError, "positions must be < max_len (8)"),
    err("add_position_table-positions-batch-mismatch", lambda o, n: o.add_position_table(torch.zeros(2, 3, 4), table(o), positions=torch.zeros(3, 3, dtype=i64)), RuntimeError, "positions must have shape [L] = [3] or [B, L] (batch_first=true) = [2, 3]"),
    # the sequence modules' call operators (posenc.nn passes its options and tensors)
    err("positional_encoding_call-extrapolate-without-columns", lambda o, n: o.positional_encoding_call(torch.zeros(1, 3, 4), table(o), None, 0, None, True, 1.0, 0.0, False, True), RuntimeError, "LearnedPositionalEmbedding: rows past the table are computed from a sinusoidal encoding's columns, but none were given"),
    err("positional_encoding_call-past-table-python-advice", lambda o, n: o.positional_encoding_call(torch.zeros(1, 3, 4), table(o), o.sinusoidal_columns(4), 7), RuntimeError, "PositionalEncoding: positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (8), but got L = 3 and offset = 7 (offset + L = 10); build the module with a larger max_len or pass beyond_max_len='extrapolate', or split the sequence"),
    err("token_and_position_embedding_call-ids-3d", lambda o, n: o.token_and_position_embedding_call(torch.zeros(1, 3, 2, dtype=torch.long), torch.zeros(10, 4), table(o), None), RuntimeError, "TokenAndPositionEmbedding: expected token ids of shape [B, L] (batch_first=true), but got a 3-D tensor of shape [1, 3, 2]"),
    err("sinusoidal_columns-d_model=0", lambda o, n: o.sinusoidal_columns(0), RuntimeError, "posenc::sinusoidal_columns: d_model must be >= 1"),
    err("positions_from_padding_mask-int-mask", lambda o, n: o.positions_from_padding_mask(torch.zeros(2, 3, dtype=torch.long)), RuntimeError, "posenc::positions_from_padding_mask: expected a bool padding mask (true = padding), but got Long"),
    err("add_position_table-float-positions-without-columns", lambda o, n: o.add_position_table(torch.zeros(1, 3, 4), table(o), positions=torch.tensor([0.5, 1.0, 2.0])), RuntimeError, "floating-point positions (Float) are computed from the encoding's definition, which this"),
    err("add_position_table-columns-wrong-shape", lambda o, n: o.add_position_table(torch.zeros(1, 3, 4), table(o), positions=torch.tensor([0, 9, 1]), columns=torch.zeros(3, 4, dtype=f64)), RuntimeError, "columns must be a float64 [2, D] = [2, 4] column plan (frequencies, kinds)"),
    err("add_position_table-table-on-meta", lambda o, n: o.add_position_table(torch.zeros(1, 3, 4), o.sinusoidal_table(8, 4, device="meta")), RuntimeError, "expected the input on the device of the encoding table (meta)"),
    err("add_position_table_-x-is-table", lambda o, n: (lambda t: o.add_position_table_(t.view(1, 8, 4), t))(table(o)), RuntimeError, "x shares memory with the table"),
    err("add_position_table_-x-expanded", lambda o, n: o.add_position_table_(torch.zeros(1, 3, 4).expand(2, 3, 4), table(o)), RuntimeError, "unsupported operation: more than one element of the written-to tensor refers to a single"),
    err("add_position_table_-x-int", lambda o, n: o.add_position_table_(torch.zeros(1, 3, 4, dtype=i64), table(o)), RuntimeError, "expected a floating-point input (float16, bfloat16, float32 or float64)"),
    err("add_position_table_out-out-is-table", lambda o, n: (lambda t: o.add_position_table_out(torch.zeros(1, 8, 4), t, out=t.view(1, 8, 4)))(table(o)), RuntimeError, "out shares memory with the table, which the operation reads while writing out"),
    err("add_position_table_out-out-int", lambda o, n: o.add_position_table_out(torch.zeros(1, 3, 4), table(o), out=torch.empty(0, dtype=i64)), RuntimeError, "out must have the input's dtype and device (Float, cpu), but has Long, cpu"),
    # packed_positions(cu_seqlens, total, start_positions)
    err("packed_positions-float", lambda o, n: o.packed_positions(torch.tensor([0.0, 3.0]), 3), RuntimeError, "cu_seqlens must be a 1-D int32 or int64 tensor"),
    err("packed_positions-2d", lambda o, n: o.packed_positions(torch.tensor([[0, 3]]), 3), RuntimeError, "cu_seqlens must be a 1-D int32 or int64 tensor"),
    err("packed_positions-empty", lambda o, n: o.packed_positions(torch.zeros(0, dtype=i64), 0), RuntimeError, "cu_seqlens must hold the cumulative sequence lengths [0, l0, l0 + l1, ..., T] (at least 2"),
    err("packed_positions-not-from-0", lambda o, n: o.packed_positions(torch.tensor([1, 3]), 3), RuntimeError, "cu_seqlens must start at 0 and end at the number of packed tokens T = 3, but goes from 1"),
    err("packed_positions-decreasing", lambda o, n: o.packed_positions(torch.tensor([0, 3, 2, 4]), 4), RuntimeError, "cu_seqlens must not decrease, but entry 1 is 3 and entry 2 is 2"),
    err("packed_positions-total-mismatch", lambda o, n: o.packed_positions(torch.tensor([0, 3]), 4), RuntimeError, "cu_seqlens must start at 0 and end at the number of packed tokens T = 4, but goes from 0"),
    err("packed_positions-total=-1", lambda o, n: o.packed_positions(torch.tensor([0, 3]), -1), RuntimeError, "total (the number of packed tokens) must be in [0, 2^28] (posenc's limit of positions in"),
    err("packed_positions-total=2^31", lambda o, n: o.packed_positions(torch.tensor([0, 2**31]), 2**31), RuntimeError, "total (the number of packed tokens) must be in [0, 2^28] (posenc's limit of positions in"),
    err("packed_positions-total=2^62", lambda o, n: o.packed_positions(torch.tensor([0, 2**62]), 2**62), RuntimeError, "total (the number of packed tokens) must be in [0, 2^28] (posenc's limit of positions in"),
    err("packed_positions-total=i64max", lambda o, n: o.packed_positions(torch.tensor([0, I64]), I64), RuntimeError, "total (the number of packed tokens) must be in [0, 2^28] (posenc's limit of positions in"),
    err("packed_positions-start_positions-wrong-length", lambda o, n: o.packed_positions(torch.tensor([0, 2, 3]), 3, torch.tensor([0])), RuntimeError, "start_positions must hold one position per sequence (2), but holds 1"),
    err("packed_positions-start_positions-negative", lambda o, n: o.packed_positions(torch.tensor([0, 2, 3]), 3, torch.tensor([0, -1])), RuntimeError, "start_positions must be >= 0, but sequence 1 starts at -1"),
    err("packed_positions-start_positions=i64max", lambda o, n: o.packed_positions(torch.tensor([0, 2, 3]), 3, torch.tensor([0, I64])), RuntimeError, "sequence 1 starting at position 9223372036854775807 with 1 tokens has positions past the"),
    err("packed_positions-last-position=i64max", lambda o, n: o.packed_positions(torch.tensor([0, 2]), 2, torch.tensor([I64 - 1])), RuntimeError, "has positions past the int64 range"),
    err("packed_positions-on-meta", lambda o, n: o.packed_positions(torch.tensor([0, 2, 3]), 3, torch.tensor([0, 1], device="meta")), RuntimeError, "expected all tensors of the call on one device, but start_positions is on meta and the"),
    # context_parallel_positions(seq_len, world_size, rank, zigzag, device)
    err("context_parallel_positions-world_size=0", lambda o, n: o.context_parallel_positions(8, 0, 0), RuntimeError, "expected 0 <= rank < world_size with world_size >= 1"),
    err("context_parallel_positions-world_size=-1", lambda o, n: o.context_parallel_positions(8, -1, 0), RuntimeError, "expected 0 <= rank < world_size with world_size >= 1"),
    err("context_parallel_positions-world_size=2^62", lambda o, n: o.context_parallel_positions(8, 2**62, 0), RuntimeError, "world_size must be <= 2^28 (posenc's limit of chunks)"),
    err("context_parallel_positions-rank=world_size", lambda o, n: o.context_parallel_positions(8, 2, 2), RuntimeError, "expected 0 <= rank < world_size with world_size >= 1"),
    err("context_parallel_positions-rank=-1", lambda o, n: o.context_parallel_positions(8, 2, -1), RuntimeError, "expected 0 <= rank < world_size with world_size >= 1"),
    err("context_parallel_positions-seq_len=-1", lambda o, n: o.context_parallel_positions(-1, 2, 0), RuntimeError, "seq_len must be >= 0"),
    err("context_parallel_positions-seq_len-not-divisible", lambda o, n: o.context_parallel_positions(7, 2, 0), RuntimeError, "the sequence length (7) must be a multiple of world_size = 2 to split it into equal"),
    err("context_parallel_positions-zigzag-not-divisible", lambda o, n: o.context_parallel_positions(6, 2, 0, True), RuntimeError, "the sequence length (6) must be a multiple of 2 * world_size = 4 to split it into equal"),
    err("context_parallel_positions-seq_len=2^62", lambda o, n: o.context_parallel_positions(2**62, 2, 0), RuntimeError, "a rank's shard of seq_len = 4611686018427387904 over 2 chunks holds 2305843009213693952"),
    err("context_parallel_positions-seq_len=i64max", lambda o, n: o.context_parallel_positions(I64, 1, 0), RuntimeError, "a rank's shard of seq_len = 9223372036854775807 over 1 chunks holds 9223372036854775807"),
    # context_parallel_packed_positions(cu_seqlens, total, world_size, rank, zigzag)
    err("context_parallel_packed_positions-float", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0.0, 4.0]), 4, 2, 0), RuntimeError, "cu_seqlens must be a 1-D int32 or int64 tensor"),
    err("context_parallel_packed_positions-2d", lambda o, n: o.context_parallel_packed_positions(torch.tensor([[0, 4]]), 4, 2, 0), RuntimeError, "cu_seqlens must be a 1-D int32 or int64 tensor"),
    err("context_parallel_packed_positions-empty", lambda o, n: o.context_parallel_packed_positions(torch.zeros(0, dtype=i64), 0, 2, 0), RuntimeError, "cu_seqlens must hold the cumulative sequence lengths [0, l0, l0 + l1, ..., T] (at least 2 entries), but holds 0"),
    err("context_parallel_packed_positions-world_size=0", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 4]), 4, 0, 0), RuntimeError, "expected 0 <= rank < world_size with world_size >= 1, but got rank 0 and world_size 0"),
    err("context_parallel_packed_positions-world_size=2^62", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 4]), 4, 2**62, 0), RuntimeError, "world_size must be <= 2^28"),
    err("context_parallel_packed_positions-rank=-1", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 4]), 4, 2, -1), RuntimeError, "expected 0 <= rank < world_size"),
    err("context_parallel_packed_positions-total=-1", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 4]), -1, 2, 0), RuntimeError, "total (the number of packed tokens) must be in [0, 2^28]"),
    err("context_parallel_packed_positions-total=2^62", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 4]), 2**62, 2, 0), RuntimeError, "total (the number of packed tokens) must be in [0, 2^28]"),
    err("context_parallel_packed_positions-total=i64max", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 4]), I64, 1, 0), RuntimeError, "total (the number of packed tokens) must be in [0, 2^28]"),
    err("context_parallel_packed_positions-total-not-divisible", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 6]), 6, 2, 0, True), RuntimeError, "total (the number of packed tokens) must be a multiple of 2 * world_size = 4, as every sequence's length must be, but got 6"),
    err("context_parallel_packed_positions-total-mismatch", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 4]), 8, 2, 0), RuntimeError, "cu_seqlens must start at 0 and end at the number of packed tokens T = 8, but goes from 0 to 4"),
    err("context_parallel_packed_positions-decreasing", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 6, 4, 8]), 8, 2, 0), RuntimeError, "cu_seqlens must not decrease, but entry 1 is 6 and entry 2 is 4"),
    err("context_parallel_packed_positions-uneven-sequence", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 3, 4]), 4, 2, 0), RuntimeError, "sequence 0 has 3 tokens, which must be a multiple of world_size = 2 to split it into equal chunks"),
    err("context_parallel_packed_positions-on-meta-total-not-divisible", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 4], device="meta"), 6, 4, 0), RuntimeError, "total (the number of packed tokens) must be a multiple of world_size = 4"),
    # check_module_options(module, options): the C++ modules' checks of posenc.nn's keyword arguments
    err("check_module_options-unknown-module", lambda o, n: o.check_module_options("Rotary", "{}"), RuntimeError, "posenc::check_module_options: module must name a posenc module with options (PositionalEncoding, LearnedPositionalEmbedding"),
    err("check_module_options-not-json", lambda o, n: o.check_module_options("ALiBi", "{num_heads: 4"), RuntimeError, "posenc::check_module_options: options must be a JSON object of ALiBi's keyword arguments"),
    err("check_module_options-array", lambda o, n: o.check_module_options("ALiBi", "[4]"), RuntimeError, "options must be a JSON object of ALiBi's keyword arguments"),
    err("check_module_options-missing-size", lambda o, n: o.check_module_options("ALiBi", "{}"), RuntimeError, "ALiBi: num_heads must be in [1, 2^28] (posenc's limit of heads), but got 0"),
    err("check_module_options-unknown-key", lambda o, n: o.check_module_options("ALiBi", '{"num_heads": 4, "heads_first": true}'), RuntimeError, "ALiBi has no option 'heads_first'; see its keyword arguments (help(posenc.nn.ALiBi))"),
    err("check_module_options-float-size", lambda o, n: o.check_module_options("ALiBi", '{"num_heads": 4.0}'), RuntimeError, "ALiBi: num_heads must be an integer in int64's range, but got 4.0"),
    err("check_module_options-size-past-int64", lambda o, n: o.check_module_options("ALiBi", '{"num_heads": 9223372036854775808}'), RuntimeError, "ALiBi: num_heads must be an integer in int64's range, but got 9223372036854775808"),
    err("check_module_options-size-below-int64", lambda o, n: o.check_module_options("ALiBi", '{"num_heads": -9223372036854775809}'), RuntimeError, "ALiBi: num_heads must be an integer in int64's range, but got -9.223372036854776e+18"),
    err("check_module_options-number-as-text", lambda o, n: o.check_module_options("ALiBi", '{"num_heads": 4, "max_bias": "8"}'), RuntimeError, "ALiBi: max_bias must be a number, but got \"8\""),
    err("check_module_options-nan-text", lambda o, n: o.check_module_options("ALiBi", '{"num_heads": 4, "max_bias": "nan"}'), RuntimeError, "ALiBi: max_bias must be in (0, 64] (the smallest slope is 2^-max_bias), but got nan"),
    err("check_module_options-bool-as-number", lambda o, n: o.check_module_options("RelativePositionBias", '{"num_heads": 2, "bidirectional": 0}'), RuntimeError, "RelativePositionBias: bidirectional must be True or False, but got 0"),
    err("check_module_options-list-of-text", lambda o, n: o.check_module_options("AxialRotaryEmbedding", '{"axes_dim": ["4"]}'), RuntimeError, "AxialRotaryEmbedding: axes_dim must be an integer in int64's range, but got \"4\""),
    err("check_module_options-list-expected", lambda o, n: o.check_module_options("AxialRotaryEmbedding", '{"axes_dim": 4}'), RuntimeError, "AxialRotaryEmbedding: axes_dim must be a list of integers, but got 4"),
    err("check_module_options-choice-not-text", lambda o, n: o.check_module_options("VisionRotaryEmbedding", '{"dim": 8, "grid_indexing": 1}'), RuntimeError, "VisionRotaryEmbedding: grid_indexing must be one of 'ij', 'xy', but got 1"),
    err("check_module_options-form-unknown", lambda o, n: o.check_module_options("AttentionTemperature", '{"form": "yarn"}'), RuntimeError, 'AttentionTemperature: form must be "llama4"'),
    # mrope_position_ids(token_types, image_grid_thw, video_grid_thw, attention_mask, *, spatial_merge_size, video_time_intervals, frames_apart)
    err("mrope_position_ids-token_types-1d", lambda o, n: o.mrope_position_ids(torch.zeros(5, dtype=i64)), RuntimeError, "token_types must be [B, L] integers (0 text, 1 image, 2 video), but got Long of shape [5]"),
    err("mrope_position_ids-token_types-float", lambda o, n: o.mrope_position_ids(torch.zeros(1, 5)), RuntimeError, "token_types must be [B, L] integers (0 text, 1 image, 2 video), but got Float"),
    err("mrope_position_ids-token_type=i64max", lambda o, n: o.mrope_position_ids(torch.tensor([[0, I64]])), RuntimeError, "token_types must hold 0 (text), 1 (image) or 2 (video), but row 0 holds 9223372036854775807"),
    err("mrope_position_ids-token_type=-1", lambda o, n: o.mrope_position_ids(torch.tensor([[0, -1]])), RuntimeError, "token_types must hold 0 (text), 1 (image) or 2 (video), but row 0 holds -1"),
    err("mrope_position_ids-spatial_merge_size=0", lambda o, n: o.mrope_position_ids(torch.zeros(1, 2, dtype=i64), spatial_merge_size=0), RuntimeError, "spatial_merge_size must be >= 1, but got 0"),
    err("mrope_position_ids-spatial_merge_size=-1", lambda o, n: o.mrope_position_ids(torch.zeros(1, 2, dtype=i64), spatial_merge_size=-1), RuntimeError, "spatial_merge_size must be >= 1, but got -1"),
    err("mrope_position_ids-spatial_merge_size=i64max", lambda o, n: o.mrope_position_ids(torch.ones(1, 1, dtype=i64), torch.tensor([[1, 2, 2]]), spatial_merge_size=I64), RuntimeError, "each grid of image_grid_thw must have t >= 1 and h, w multiples of spatial_merge_size = 9223372036854775807"),
    err("mrope_position_ids-grid-wrong-shape", lambda o, n: o.mrope_position_ids(torch.ones(1, 1, dtype=i64), torch.tensor([1, 2, 2])), RuntimeError, "image_grid_thw must be [N, 3] (t, h, w) integers, but got Long of shape [3]"),
    err("mrope_position_ids-grid-float", lambda o, n: o.mrope_position_ids(torch.ones(1, 1, dtype=i64), torch.tensor([[1.0, 2.0, 2.0]])), RuntimeError, "image_grid_thw must be [N, 3] (t, h, w) integers, but got Float"),
    err("mrope_position_ids-grid-t=0", lambda o, n: o.mrope_position_ids(torch.ones(1, 1, dtype=i64), torch.tensor([[0, 2, 2]])), RuntimeError, "each grid of image_grid_thw must have t >= 1 and h, w multiples of spatial_merge_size = 2, but grid 0 is [0, 2, 2]"),
    err("mrope_position_ids-grid-h=-2", lambda o, n: o.mrope_position_ids(torch.ones(1, 1, dtype=i64), torch.tensor([[1, -2, 2]])), RuntimeError, "but grid 0 is [1, -2, 2]"),
    err("mrope_position_ids-grid=2^62", lambda o, n: o.mrope_position_ids(torch.ones(1, 1, dtype=i64), torch.tensor([[1, 2**62, 2**62]])), RuntimeError, "holds more than 2^28 tokens (posenc's limit of positions in one call)"),
    err("mrope_position_ids-grid-t=i64max", lambda o, n: o.mrope_position_ids(torch.full((1, 1), 2, dtype=i64), None, torch.tensor([[I64, 2, 2]])), RuntimeError, "holds more than 2^28 tokens"),
    err("mrope_position_ids-run-does-not-fill-grid", lambda o, n: o.mrope_position_ids(torch.ones(1, 3, dtype=i64), torch.tensor([[1, 4, 4]])), RuntimeError, "row 0's run of 3 image tokens at columns 0..2 does not match its grids in image_grid_thw, which hold 4 tokens (t * h/2 * w/2 each)"),
    err("mrope_position_ids-no-grids", lambda o, n: o.mrope_position_ids(torch.full((1, 2), 2, dtype=i64)), RuntimeError, "row 0 has more video tokens than video_grid_thw has grids for (0 grids)"),
    err("mrope_position_ids-grid-left-over", lambda o, n: o.mrope_position_ids(torch.zeros(1, 2, dtype=i64), torch.tensor([[1, 2, 2]])), RuntimeError, "image_grid_thw has 1 grids, but the tokens use 0"),
    err("mrope_position_ids-frames_apart-2^28-frames", lambda o, n: o.mrope_position_ids(torch.full((1, 1), 2, dtype=i64), None, torch.tensor([[2**28, 2, 2]]), frames_apart=True), RuntimeError, "video_grid_thw has 268435456 frames (frames_apart: each frame is a grid), but the tokens use 1"),
    err("mrope_position_ids-masked-run-columns", lambda o, n: o.mrope_position_ids(torch.tensor([[1, 1, 1, 1]]), torch.tensor([[1, 4, 4]]), attention_mask=torch.tensor([[0, 1, 1, 1]])), RuntimeError, "row 0's run of 3 image tokens at columns 1..3 does not match"),
    err("mrope_position_ids-interval=1e39-one-frame", lambda o, n: o.mrope_position_ids(torch.full((1, 1), 2, dtype=i64), None, torch.tensor([[1, 2, 2]]), video_time_intervals=[1e39]), RuntimeError, "but video 0 of 1 frames has 1e+39"),
    err("mrope_position_ids-mask-shape", lambda o, n: o.mrope_position_ids(torch.zeros(1, 2, dtype=i64), attention_mask=torch.ones(2, 1)), RuntimeError, "attention_mask must have token_types' shape [1, 2], but got [2, 1]"),
    err("mrope_position_ids-mask-on-meta", lambda o, n: o.mrope_position_ids(torch.zeros(1, 2, dtype=i64), attention_mask=torch.ones(1, 2, device="meta")), RuntimeError, "attention_mask is on meta"),
    err("mrope_position_ids-intervals-count", lambda o, n: o.mrope_position_ids(torch.full((1, 2), 2, dtype=i64), None, torch.tensor([[2, 2, 2]]), video_time_intervals=[]), RuntimeError, "video_time_intervals must give one interval per video (1), but gives 0"),
    err("mrope_position_ids-interval=nan", lambda o, n: o.mrope_position_ids(torch.full((1, 2), 2, dtype=i64), None, torch.tensor([[2, 2, 2]]), video_time_intervals=[math.nan]), RuntimeError, "video_time_intervals must be finite and >= 0 (each video's temporal spacing in positions), but video 0 has nan"),
    err("mrope_position_ids-interval=-1", lambda o, n: o.mrope_position_ids(torch.full((1, 2), 2, dtype=i64), None, torch.tensor([[2, 2, 2]]), video_time_intervals=[-1.0]), RuntimeError, "but video 0 has -1"),
    err("mrope_position_ids-interval=2^62", lambda o, n: o.mrope_position_ids(torch.full((1, 2), 2, dtype=i64), None, torch.tensor([[2, 2, 2]]), video_time_intervals=[2.0**62]), RuntimeError, "video_time_intervals must keep each video's interval and temporal positions below 2^62, but video 0 of 2 frames has 4.61169e+18"),
    err("nn.mrope_position_ids-mismatch", lambda o, n: n.mrope_position_ids(torch.ones(1, 3, dtype=i64), torch.tensor([[1, 4, 4]])), ValueError, "posenc::mrope_position_ids: row 0's run of 3 image tokens at columns 0..2 does not match"),
    err("context_parallel_positions-seq_len=2^31", lambda o, n: o.context_parallel_positions(2**31, 1, 0), RuntimeError, "a rank's shard of seq_len = 2147483648 over 1 chunks holds 2147483648 positions, over"),
]
OP_ERRORS += [
    err("context_parallel_positions-seq_len=-2", lambda o, n: o.context_parallel_positions(-2, 2, 0), RuntimeError, "seq_len must be >= 0"),
    err("context_parallel_positions-seq_len=-1-world_size=1", lambda o, n: o.context_parallel_positions(-1, 1, 0), RuntimeError, "seq_len must be >= 0"),
    err("relative_sinusoidal_table-length=2^31", lambda o, n: o.relative_sinusoidal_table(2**31, 4), RuntimeError, "a table of max_len * d_model = 4294967295 * 4 elements is over posenc's limit of 2^28"),
    # apply_rotary_qk / apply_rotary_ / apply_rotary_qk_
    err("apply_rotary_qk-batch-mismatch", lambda o, n: o.apply_rotary_qk(torch.zeros(1, 3, 2, 4), torch.zeros(2, 3, 2, 4), *cos_sin(8, 4)), RuntimeError, "k must hold the keys of q's tokens (the same batch B and length L, in the layout [B, L"),
    err("apply_rotary_qk-length-mismatch", lambda o, n: o.apply_rotary_qk(torch.zeros(1, 3, 2, 4), torch.zeros(1, 2, 2, 4), *cos_sin(8, 4)), RuntimeError, "k must hold the keys of q's tokens (the same batch B and length L, in the layout [B, L"),
    err("apply_rotary_qk-dtype-mismatch", lambda o, n: o.apply_rotary_qk(torch.zeros(1, 3, 2, 4), torch.zeros(1, 3, 2, 4, dtype=f64), *cos_sin(8, 4)), RuntimeError, "q and k must share a dtype, but q is Float and k Double"),
    err("apply_rotary_qk-k-on-meta", lambda o, n: o.apply_rotary_qk(torch.zeros(1, 3, 2, 4), torch.zeros(1, 3, 2, 4, device="meta"), *cos_sin(8, 4)), RuntimeError, "expected the input on the device of the cos/sin caches (cpu)"),
    err("apply_rotary_qk-offset=-1", lambda o, n: o.apply_rotary_qk(torch.zeros(1, 3, 2, 4), torch.zeros(1, 3, 2, 4), *cos_sin(8, 4), offset=-1), RuntimeError, "offset must be >= 0"),
    err("apply_rotary_-x-expanded", lambda o, n: o.apply_rotary_(torch.zeros(1, 3, 1, 4).expand(2, 3, 1, 4), *cos_sin(8, 4)), RuntimeError, "unsupported operation: more than one element of the written-to tensor refers to a single"),
    err("apply_rotary_-x-shares-cos", lambda o, n: (lambda b: o.apply_rotary_(b.view(1, 8, 1, 2), b[:, :1], torch.zeros(8, 1)))(torch.zeros(8, 2)), RuntimeError, "x shares memory with cos, which the operation reads while writing x"),
    err("apply_rotary-inv_freq-wrong-length", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), *cos_sin(8, 4), positions=torch.tensor([0, 9, 1]), inv_freq=torch.ones(3, dtype=f64)), RuntimeError, "inv_freq must be a float64 [R/2] = [2] tensor of frequencies"),
    err("apply_rotary-inv_freq-nan", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), *cos_sin(8, 4), positions=torch.tensor([0, 9, 1]), inv_freq=torch.tensor([1.0, math.nan], dtype=f64)), RuntimeError, "inv_freq must hold frequencies in [-1.9e289, 1.9e289] (so that every angle is a finite"),
    err("apply_rotary-attention_factor=nan", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), *cos_sin(8, 4), positions=torch.tensor([0, 9, 1]), inv_freq=torch.ones(2, dtype=f64), attention_factor=math.nan), RuntimeError, "attention_factor must be > 0 and at most 3.40282e+38 (the largest Float of the cos/sin"),
    err("apply_rotary-float-positions-nan", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), *cos_sin(8, 4), positions=torch.tensor([0.0, math.nan, 1.0], dtype=f64), inv_freq=torch.ones(2, dtype=f64)), RuntimeError, "floating-point positions must be finite and in [0, 2^63)"),
    err("apply_rotary-cos-3d", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), torch.zeros(1, 8, 2), torch.zeros(1, 8, 2)), RuntimeError, "cos and sin must be [max_len, R/2] tables of the same shape (R/2 <= 2^28)"),
    err("apply_rotary-cos-int", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4), torch.zeros(8, 2, dtype=i64), torch.zeros(8, 2, dtype=i64)), RuntimeError, "the dtype of cos and sin must be float16, bfloat16, float32 or float64"),
    # multimodal_rotary_tables(cos, sin, positions, mrope_section, interleaved, inv_freq, attention_factor)
    err("multimodal_rotary_tables-section-sum-mismatch", lambda o, n: o.multimodal_rotary_tables(*cos_sin(8, 8), torch.zeros(3, 5, dtype=i64), [1, 1, 1]), RuntimeError, "mrope_section must hold three non-negative numbers of frequencies (temporal, height"),
    err("multimodal_rotary_tables-section-negative", lambda o, n: o.multimodal_rotary_tables(*cos_sin(8, 8), torch.zeros(3, 5, dtype=i64), [4, -1, 1]), RuntimeError, "mrope_section must hold three non-negative numbers of frequencies (temporal, height"),
    err("multimodal_rotary_tables-section=2^62", lambda o, n: o.multimodal_rotary_tables(*cos_sin(8, 8), torch.zeros(3, 5, dtype=i64), [2**62, 2**62, -(2**63) + 4]), RuntimeError, "mrope_section must hold three non-negative numbers of frequencies (temporal, height"),
    err("multimodal_rotary_tables-section=i64max", lambda o, n: o.multimodal_rotary_tables(*cos_sin(8, 8), torch.zeros(3, 5, dtype=i64), [I64, 1, 1]), RuntimeError, "mrope_section must hold three non-negative numbers of frequencies (temporal, height"),
    err("multimodal_rotary_tables-section-two-entries", lambda o, n: o.multimodal_rotary_tables(*cos_sin(8, 8), torch.zeros(3, 5, dtype=i64), [2, 2]), RuntimeError, "mrope_section must hold three non-negative numbers of frequencies (temporal, height"),
    err("multimodal_rotary_tables-positions-first-dim-2", lambda o, n: o.multimodal_rotary_tables(*cos_sin(8, 8), torch.zeros(2, 5, dtype=i64), [2, 1, 1]), RuntimeError, "multimodal positions must be [3, B, L] or [3, L] (temporal, height and width position of"),
    err("multimodal_rotary_tables-positions-past-table", lambda o, n: o.multimodal_rotary_tables(*cos_sin(8, 8), torch.full((3, 5), 8, dtype=i64), [2, 1, 1]), RuntimeError, "positions must be < max_len (8)"),
    err("multimodal_rotary_tables-positions-on-meta", lambda o, n: o.multimodal_rotary_tables(*cos_sin(8, 8), torch.zeros(3, 5, dtype=i64, device="meta"), [2, 1, 1]), RuntimeError, "positions must be on the input's device (cpu)"),
    # rope_frequencies(rotary_dim, base, rope_parameters, freq_factors, seq_len, positions, frequencies, device)
    err("rope_frequencies-rotary_dim=0", lambda o, n: o.rope_frequencies(0, 10000.0, "{}"), RuntimeError, "the rotated width must be even and >= 2"),
    err("rope_frequencies-rotary_dim=-2", lambda o, n: o.rope_frequencies(-2, 10000.0, "{}"), RuntimeError, "the rotated width must be even and >= 2"),
    err("rope_frequencies-rotary_dim-odd", lambda o, n: o.rope_frequencies(5, 10000.0, "{}"), RuntimeError, "the rotated width must be even and >= 2"),
    err("rope_frequencies-rotary_dim=2^62", lambda o, n: o.rope_frequencies(2**62, 10000.0, "{}"), RuntimeError, "rotary_dim"),
    err("rope_frequencies-rotary_dim=i64max", lambda o, n: o.rope_frequencies(I64, 10000.0, "{}"), RuntimeError, "the rotated width must be even and >= 2"),
    err("rope_frequencies-base=0", lambda o, n: o.rope_frequencies(8, 0.0, "{}"), RuntimeError, "base must be finite and >= 5.2e-290 (so that every angle position * base^-e is a finite"),
    err("rope_frequencies-base=nan", lambda o, n: o.rope_frequencies(8, math.nan, "{}"), RuntimeError, "base must be finite and >= 5.2e-290 (so that every angle position * base^-e is a finite"),
    err("rope_frequencies-json-malformed", lambda o, n: o.rope_frequencies(8, 10000.0, "{"), RuntimeError, "rope_parameters must be a JSON object (transformers' rope parameters, e.g. {\"rope_type\": \""),
    err("rope_frequencies-json-not-object", lambda o, n: o.rope_frequencies(8, 10000.0, "[1, 2]"), RuntimeError, "rope_parameters must be a JSON object (e.g. {\"rope_type\": \"yarn\", \"factor\": 4.0}), but is "),
    err("rope_frequencies-json-empty-string", lambda o, n: o.rope_frequencies(8, 10000.0, ""), RuntimeError, "rope_parameters must be a JSON object (transformers' rope parameters, e.g. {\"rope_type\": \""),
    err("rope_frequencies-rope_type-unknown", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "bogus"}'), RuntimeError, "unknown rope_parameters.rope_type 'bogus'"),
    err("rope_frequencies-linear-without-factor", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "linear"}'), RuntimeError, "rope type 'linear' needs a scaling factor"),
    err("rope_frequencies-linear-factor=-1", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "linear", "factor": -1}'), RuntimeError, "the scaling factor must be a finite number > 0"),
    err("rope_frequencies-linear-factor-string", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "linear", "factor": "2"}'), RuntimeError, "rope_parameters.factor must be a number, but is a string"),
    # the numbers JSON has no literal for, spelled as posenc.nn spells them: read, then refused by the check
    err("rope_frequencies-linear-factor-spelled-inf", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "linear", "factor": "inf"}'), RuntimeError, "rope_parameters.factor must be finite, but is inf"),
    err("rope_frequencies-longrope-factor-spelled-nan", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 4, "short_factor": [1, 1, 1, 1], "long_factor": [1, 1, 1, "nan"]}'), RuntimeError, "rope_parameters.long_factor must hold finite numbers, but holds nan"),
    err("rope_frequencies-linear-short_factor-spelled-inf", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "linear", "factor": 2.0, "short_factor": ["inf"]}'), RuntimeError, "rope_parameters.short_factor must hold finite numbers, but holds inf"),
    # (spellings are numbers only where a number is read: a flag or a list spelled so is the wrong type)
    err("rope_frequencies-truncate-spelled-nan", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "yarn", "factor": 4.0, "truncate": "nan"}'), RuntimeError, "rope_parameters.truncate must be true or false, but is a string"),
    err("rope_frequencies-short_factor-spelled-inf", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "linear", "factor": 2.0, "short_factor": "inf"}'), RuntimeError, "rope_parameters.short_factor must be a list of numbers (one per frequency), but is a string"),
    err("rope_frequencies-original_max-spelled-inf", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": "inf"}'), RuntimeError, "rope_parameters.original_max_position_embeddings must be a whole number, but is inf"),
    err("rope_frequencies-factor-NaN-literal", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "linear", "factor": NaN}'), RuntimeError, "rope_parameters must be a JSON object (transformers' rope parameters, e.g. {\"rope_type\": \""),
    err("rope_frequencies-yarn-factor=1e400", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "yarn", "factor": 1e400, "original_max_position_embeddings": 16}'), RuntimeError, "rope_parameters must be a JSON object (transformers' rope parameters, e.g. {\"rope_type\": \""),
    err("rope_frequencies-llama3-missing-keys", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "llama3", "factor": 8}'), RuntimeError, "rope type 'llama3' reads the model's context length"),
    err("rope_frequencies-dynamic-seq_len=-1", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 16}', seq_len=-1), RuntimeError, "seq_len must be >= 1 (a call's last position + 1)"),
    err("rope_frequencies-seq_len=0", lambda o, n: o.rope_frequencies(8, 10000.0, "{}", seq_len=0), RuntimeError, "seq_len must be >= 1 (a call's last position + 1)"),
    err("rope_frequencies-positions-negative", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 16, "max_position_embeddings": 32}', positions=torch.tensor([-5])), RuntimeError, "positions must be >= -1 (-1 marks padding) (got -5 at index 0)"),
    err("rope_frequencies-positions-and-seq_len", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 16, "max_position_embeddings": 32}', seq_len=4, positions=torch.tensor([0, 1])), RuntimeError, "pass seq_len (a call's length) or positions (a call's positions), not both"),
    err("rope_frequencies-frequencies-without-positions", lambda o, n: o.rope_frequencies(8, 10000.0, "{}", frequencies=torch.ones(4, dtype=f64)), RuntimeError, "frequencies"),
    err("rope_frequencies-frequencies-wrong-shape", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 16, "max_position_embeddings": 32}', positions=torch.tensor([0, 40]), frequencies=torch.ones(3, dtype=f64)), RuntimeError, "frequencies must be float64 [R/2] = [4] (the variant's)"),
    err("rope_frequencies-device-meta-positions-cpu", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 16, "max_position_embeddings": 32}', positions=torch.tensor([0, 40]), device=torch.device(META)), RuntimeError, "with positions, inv_freq lies on their device (cpu), but device = meta was given"),
    err("rope_frequencies-freq_factors-wrong-length", lambda o, n: o.rope_frequencies(8, 10000.0, "{}", [1.0, 1.0]), RuntimeError, "freq_factors must be empty or hold one divisor per frequency (R / 2 = 4), but holds 2"),
    err("rope_frequencies-freq_factors-zero", lambda o, n: o.rope_frequencies(8, 10000.0, "{}", [1.0, 0.0, 1.0, 1.0]), RuntimeError, "freq_factors must hold finite numbers > 0, but holds 0"),
    err("rope_frequencies-freq_factors-nan", lambda o, n: o.rope_frequencies(8, 10000.0, "{}", [1.0, math.nan, 1.0, 1.0]), RuntimeError, "freq_factors must hold finite numbers > 0, but holds nan"),
    err("rope_frequencies-longrope-short_factor-wrong-length", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "longrope", "short_factor": [1, 1], "long_factor": [1, 1, 1, 1], "original_max_position_embeddings": 16, "max_position_embeddings": 32}'), RuntimeError, "longrope needs short_factor and long_factor with one value per frequency (R / 2 = 4)"),
    # rotary_tables(max_len, inv_freq, attention_factor, dtype, device)
    err("rotary_tables-max_len=0", lambda o, n: o.rotary_tables(0, torch.ones(2, dtype=f64)), RuntimeError, "max_len must be >= 1"),
    err("rotary_tables-max_len=-1", lambda o, n: o.rotary_tables(-1, torch.ones(2, dtype=f64)), RuntimeError, "max_len must be >= 1"),
    err("rotary_tables-max_len=2^31", lambda o, n: o.rotary_tables(2**31, torch.ones(2, dtype=f64)), RuntimeError, "the cos/sin caches hold max_len * rotary_dim / 2 = 2147483648 * 2 elements, which is over posenc's limit of 2^28"),
    err("rotary_tables-max_len=2^62", lambda o, n: o.rotary_tables(2**62, torch.ones(2, dtype=f64)), RuntimeError, "the cos/sin caches hold max_len * rotary_dim / 2 = 4611686018427387904 * 2 elements, which is over posenc's limit of"),
    err("rotary_tables-max_len=i64max", lambda o, n: o.rotary_tables(I64, torch.ones(2, dtype=f64)), RuntimeError, "the cos/sin caches hold max_len * rotary_dim / 2 = 9223372036854775807 * 2 elements, which is over posenc's limit of"),
    err("rotary_tables-inv_freq-2d", lambda o, n: o.rotary_tables(8, torch.ones(2, 2, dtype=f64)), RuntimeError, "inv_freq must be a 1-D float64 [R/2] tensor of frequencies (R/2 <= 2^28)"),
    err("rotary_tables-inv_freq-int", lambda o, n: o.rotary_tables(8, torch.ones(2, dtype=i64)), RuntimeError, "inv_freq must be a float64 [R/2] = [2] tensor of frequencies"),
    err("rotary_tables-inv_freq-empty", lambda o, n: o.rotary_tables(8, torch.ones(0, dtype=f64)), RuntimeError, "inv_freq must be a 1-D float64 [R/2] tensor of frequencies (R/2 <= 2^28)"),
    err("rotary_tables-inv_freq-inf", lambda o, n: o.rotary_tables(8, torch.tensor([1.0, math.inf], dtype=f64)), RuntimeError, "inv_freq must hold frequencies in [-1.9e289, 1.9e289] (so that every angle is a finite"),
    err("rotary_tables-attention_factor=-1", lambda o, n: o.rotary_tables(8, torch.ones(2, dtype=f64), -1.0), RuntimeError, "attention_factor must be > 0 and at most 3.40282e+38 (the largest Float of the cos/sin"),
    err("rotary_tables-dtype=int64", lambda o, n: o.rotary_tables(8, torch.ones(2, dtype=f64), dtype=i64), RuntimeError, "dtype must be float16, bfloat16, float32 or float64"),
    # token_and_position_embedding(tokens, weight, table, offset, batch_first, positions, scale, padding_idx, dropout, train, columns)
    err("token_and_position_embedding-tokens-float", lambda o, n: o.token_and_position_embedding(torch.zeros(1, 3), torch.zeros(10, 4), table(o)), RuntimeError, "expected int64 token ids"),
    err("token_and_position_embedding-tokens-1d", lambda o, n: o.token_and_position_embedding(torch.zeros(3, dtype=i64), torch.zeros(10, 4), table(o)), RuntimeError, "expected token ids of shape [B, L] (batch_first=true)"),
    err("token_and_position_embedding-token-past-vocab", lambda o, n: o.token_and_position_embedding(torch.tensor([[0, 10, 1]]), torch.zeros(10, 4), table(o)), RuntimeError, "token ids must lie in [0, vocab_size) = [0, 10)"),
    err("token_and_position_embedding-token-negative", lambda o, n: o.token_and_position_embedding(torch.tensor([[0, -1, 1]]), torch.zeros(10, 4), table(o)), RuntimeError, "token ids must lie in [0, vocab_size) = [0, 10)"),
    err("token_and_position_embedding-width-mismatch", lambda o, n: o.token_and_position_embedding(torch.zeros(1, 3, dtype=i64), torch.zeros(10, 6), table(o)), RuntimeError, "the position table must have D = 6 columns on cpu, but has 4 on cpu"),
    err("token_and_position_embedding-length-past-table", lambda o, n: o.token_and_position_embedding(torch.zeros(1, 9, dtype=i64), torch.zeros(10, 4), table(o)), RuntimeError, "positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (8)"),
    err("token_and_position_embedding-offset=i64max", lambda o, n: o.token_and_position_embedding(torch.zeros(1, 3, dtype=i64), torch.zeros(10, 4), table(o), I64), RuntimeError, "offset + L must fit in int64"),
    err("token_and_position_embedding-padding_idx-past-vocab", lambda o, n: o.token_and_position_embedding(torch.zeros(1, 3, dtype=i64), torch.zeros(10, 4), table(o), padding_idx=10), RuntimeError, "padding_idx"),
    err("token_and_position_embedding-padding_idx=-2", lambda o, n: o.token_and_position_embedding(torch.zeros(1, 3, dtype=i64), torch.zeros(10, 4), table(o), padding_idx=-2), RuntimeError, "padding_idx"),
    err("token_and_position_embedding-dropout=1.5", lambda o, n: o.token_and_position_embedding(torch.zeros(1, 3, dtype=i64), torch.zeros(10, 4), table(o), dropout=1.5, train=True), RuntimeError, "dropout must be in [0, 1]"),
    err("token_and_position_embedding-dropout=nan", lambda o, n: o.token_and_position_embedding(torch.zeros(1, 3, dtype=i64), torch.zeros(10, 4), table(o), dropout=math.nan, train=True), RuntimeError, "dropout must be in [0, 1]"),
    err("token_and_position_embedding-weight-int", lambda o, n: o.token_and_position_embedding(torch.zeros(1, 3, dtype=i64), torch.zeros(10, 4, dtype=i64), table(o)), RuntimeError, "the dtype of the token embedding weight must be float16, bfloat16, float32 or float64"),
    err("token_and_position_embedding-weight-on-meta", lambda o, n: o.token_and_position_embedding(torch.zeros(1, 3, dtype=i64), torch.zeros(10, 4, device="meta"), table(o)), RuntimeError, "expected the token ids on the module's device (meta)"),
    err("token_and_position_embedding-scale=nan", lambda o, n: o.token_and_position_embedding(torch.zeros(1, 3, dtype=i64), torch.zeros(10, 4), table(o), scale=math.nan), RuntimeError, "scale must be finite"),
]

# --- exact results: extreme but valid inputs to the operators ------------------------------------


def like(shape, dtype, values=None):
    """The result has this shape and dtype (and, given ``values(ops)``, equals it, NaN where it has NaN)."""

    def check(result, o):
        assert tuple(result.shape) == tuple(shape), result.shape
        assert result.dtype == dtype, result.dtype
        if values is not None:
            expected = values(o) if callable(values) else values
            assert torch.equal(result.isnan(), expected.isnan()), (result, expected)
            assert torch.equal(result.nan_to_num(), expected.to(result.dtype).nan_to_num()), (result, expected)

    return check


def holds(predicate):
    """A check that the result satisfies ``predicate`` (for results that are not one tensor)."""
    def check(result, ops):
        assert predicate(result), f"unexpected result {result}"
    return check


def pair(first, second):
    return lambda result, o: (first(result[0], o), second(result[1], o))


X = torch.arange(24, dtype=f32).reshape(1, 3, 2, 4) / 7  # a [B, L, H, Dh] query


OP_RESULTS = [
    # check_module_options: valid options (defaults, null for a default, every module) return nothing
    ok("check_module_options-defaults", lambda o, n: [o.check_module_options(m, json.dumps(a)) for m, a in [
        ("PositionalEncoding", {"d_model": 1, "max_len": 1}), ("LearnedPositionalEmbedding", {"d_model": 1, "max_len": 1}),
        ("TokenAndPositionEmbedding", {"vocab_size": 1, "d_model": 1, "max_len": 1, "scale": None}), ("Timesteps", {"embedding_dim": 4}),
        ("TimestepEmbedder", {"hidden_size": 1}), ("AxialRotaryEmbedding", {"axes_dim": [2]}), ("VisionRotaryEmbedding", {"dim": 4}),
        ("ALiBi", {"num_heads": 1}), ("AttentionTemperature", {}), ("RelativePositionBias", {"num_heads": 1}),
        ("RelPositionalEncoding", {"d_model": 1, "max_len": 1}), ("RelPositionMultiheadAttention", {"embed_dim": 1, "num_heads": 1})]],
       holds(lambda r: r == [None] * 12)),
    ok("check_module_options-largest-table", lambda o, n: o.check_module_options("PositionalEncoding", json.dumps({"d_model": 1, "max_len": 2**28})), holds(lambda r: r is None)),
    # mrope_position_ids: empty batches, padding, large spacing, int32 types and a bool mask
    ok("mrope_position_ids-empty-batch", lambda o, n: o.mrope_position_ids(torch.zeros(0, 4, dtype=i64)), holds(lambda r: r[0].shape == (3, 0, 4) and r[1].shape == (0, 1))),
    ok("mrope_position_ids-length-0", lambda o, n: o.mrope_position_ids(torch.zeros(2, 0, dtype=i64)), holds(lambda r: r[0].shape == (3, 2, 0) and torch.equal(r[1], torch.zeros(2, 1, dtype=i64)))),
    ok("mrope_position_ids-one-kept-token", lambda o, n: o.mrope_position_ids(torch.ones(1, 4, dtype=i64), torch.tensor([[1, 2, 2]]), attention_mask=torch.tensor([[0, 0, 0, 1]])), holds(lambda r: torch.equal(r[0], torch.zeros(3, 1, 4, dtype=i64)) and torch.equal(r[1], torch.tensor([[0]])))),
    ok("mrope_position_ids-all-masked", lambda o, n: o.mrope_position_ids(torch.zeros(2, 3, dtype=i64), attention_mask=torch.zeros(2, 3, dtype=i64)), holds(lambda r: torch.equal(r[0], torch.zeros(3, 2, 3, dtype=i64)) and torch.equal(r[1], torch.zeros(2, 1, dtype=i64)))),
    ok("mrope_position_ids-interval-large", lambda o, n: o.mrope_position_ids(torch.full((1, 2), 2, dtype=i64), None, torch.tensor([[2, 2, 2]]), video_time_intervals=[2.0**61]), holds(lambda r: r[0][0].tolist() == [[0, 2**61]] and r[1].item() == 2**61 - 1)),
    ok("mrope_position_ids-int32-bool-mask", lambda o, n: o.mrope_position_ids(torch.tensor([[0, 0, 0]], dtype=torch.int32), attention_mask=torch.tensor([[False, True, True]])), holds(lambda r: r[0].dtype == i64 and r[0][1].tolist() == [[0, 0, 1]])),
    ok("sinusoidal_table-max_len=1-d_model=1", lambda o, n: o.sinusoidal_table(1, 1), like((1, 1), f32, torch.zeros(1, 1))),
    ok("sinusoidal_table-d_model-odd", lambda o, n: o.sinusoidal_table(2, 3), like((2, 3), f32)),
    ok("sinusoidal_table-float16", lambda o, n: o.sinusoidal_table(4, 4, dtype=f16), like((4, 4), f16, lambda o: o.sinusoidal_table(4, 4, dtype=f64).to(f16))),
    ok("sinusoidal_table-bfloat16", lambda o, n: o.sinusoidal_table(4, 4, dtype=bf16), like((4, 4), bf16, lambda o: o.sinusoidal_table(4, 4, dtype=f64).to(bf16))),
    ok("sinusoidal_table-offset=2^40", lambda o, n: o.sinusoidal_table(2, 4, offset=2**40, dtype=f64), like((2, 4), f64)),
    ok("sinusoidal_table-offset-equals-slice", lambda o, n: o.sinusoidal_table(3, 6, offset=5), like((3, 6), f32, lambda o: o.sinusoidal_table(8, 6)[5:])),
    ok("sinusoidal_table-on-meta", lambda o, n: o.sinusoidal_table(4, 6, device="meta"), like((4, 6), f32)),
    ok("alibi_slopes-num_heads=1", lambda o, n: o.alibi_slopes(1), like((1,), f32, torch.tensor([2.0**-8]))),
    ok("alibi_slopes-8-heads", lambda o, n: o.alibi_slopes(8), like((8,), f32, 2.0 ** -torch.arange(1, 9, dtype=f32))),
    ok("alibi_bias-slopes-2d-per-batch", lambda o, n: o.alibi_bias(torch.ones(2, 1), 1, 2), like((2, 1, 1, 2), f32, torch.tensor([-1.0, 0.0]).expand(2, 1, 1, 2))),
    ok("alibi_bias-slopes-nan-propagates", lambda o, n: o.alibi_bias(torch.tensor([math.nan]), 1, 2), like((1, 1, 2), f32, torch.full((1, 1, 2), math.nan))),
    ok("alibi_bias-length-1", lambda o, n: o.alibi_bias(torch.ones(1), 1, 1), like((1, 1, 1), f32, torch.zeros(1, 1, 1))),
    ok("alibi_bias-float16", lambda o, n: o.alibi_bias(torch.ones(1, dtype=f16), 2, 2), like((1, 2, 2), f16, torch.tensor([[[0.0, -1.0], [-1.0, 0.0]]]))),
    ok("relative_position_bucket-empty", lambda o, n: o.relative_position_bucket(torch.zeros(0, dtype=i64)), like((0,), i64)),
    ok("relative_position_bucket-extremes", lambda o, n: o.relative_position_bucket(torch.tensor([-I64 - 1, 0, I64])), like((3,), i64, torch.tensor([15, 0, 31]))),
    ok("attention_temperature-empty", lambda o, n: o.attention_temperature(torch.zeros(0, 0, 3, 4)), like((0, 0, 3, 4), f32)),
    ok("attention_temperature-padding-not-scaled", lambda o, n: o.attention_temperature(torch.ones(1, 2, 1, 1), torch.tensor([-1, 2**40]), 0, 1.0, 1.0), like((1, 2, 1, 1), f32, torch.tensor([1.0, 1.0 + math.log1p(2.0**40 + 1)]).view(1, 2, 1, 1))),
    ok("attention_temperature-float16-stays", lambda o, n: o.attention_temperature(torch.ones(1, 1, 1, 2, dtype=f16), None, 8191), like((1, 1, 1, 2), f16, torch.full((1, 1, 1, 2), 1.0 + 0.1 * math.log(2.0), dtype=f16))),
    ok("rel_shift-int64", lambda o, n: o.rel_shift(torch.arange(5).reshape(1, 1, 1, 5)), like((1, 1, 1, 5), i64, torch.arange(5).reshape(1, 1, 1, 5))),
    ok("add_positional_encoding-empty-batch", lambda o, n: o.add_positional_encoding(torch.zeros(0, 3, 4)), like((0, 3, 4), f32)),
    ok("add_positional_encoding-length-0", lambda o, n: o.add_positional_encoding(torch.zeros(2, 0, 4)), like((2, 0, 4), f32)),
    ok("add_positional_encoding-offset=2^40", lambda o, n: o.add_positional_encoding(torch.zeros(1, 1, 4, dtype=f64), 2**40), like((1, 1, 4), f64, lambda o: o.sinusoidal_table(1, 4, offset=2**40, dtype=f64)[None])),
    ok("add_positional_encoding-float16", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4, dtype=f16)), like((1, 3, 4), f16, lambda o: o.sinusoidal_table(3, 4, dtype=f16)[None])),
    ok("add_positional_encoding-bfloat16", lambda o, n: o.add_positional_encoding(torch.zeros(1, 3, 4, dtype=bf16)), like((1, 3, 4), bf16, lambda o: o.sinusoidal_table(3, 4, dtype=bf16)[None])),
    ok("add_positional_encoding-non-contiguous", lambda o, n: o.add_positional_encoding(torch.zeros(4, 3, 2).transpose(0, 2)), like((2, 3, 4), f32, lambda o: o.sinusoidal_table(3, 4).expand(2, 3, 4))),
    ok("add_position_table-positions-padding=-1", lambda o, n: o.add_position_table(torch.ones(1, 2, 4), table(o), positions=torch.tensor([-1, 0])), like((1, 2, 4), f32, lambda o: torch.stack([torch.ones(4), 1 + o.sinusoidal_table(1, 4)[0]])[None])),
    ok("add_position_table-last-row", lambda o, n: o.add_position_table(torch.zeros(1, 1, 4), table(o), 7), like((1, 1, 4), f32, lambda o: o.sinusoidal_table(8, 4)[7:][None])),
    ok("add_position_table-table-3d", lambda o, n: o.add_position_table(torch.zeros(1, 2, 4), table(o)[None]), like((1, 2, 4), f32, lambda o: o.sinusoidal_table(2, 4)[None])),
    ok("add_position_table_out-out-is-x", lambda o, n: (lambda x: (o.add_position_table_out(x, table(o), out=x), x)[1])(torch.zeros(1, 2, 4)), like((1, 2, 4), f32, lambda o: o.sinusoidal_table(2, 4)[None])),
    ok("packed_positions-empty-sequences", lambda o, n: o.packed_positions(torch.tensor([0, 0, 2, 2]), 2), like((2,), i64, torch.tensor([0, 1]))),
    ok("packed_positions-total=0", lambda o, n: o.packed_positions(torch.tensor([0, 0]), 0), like((0,), i64)),
    ok("packed_positions-int32", lambda o, n: o.packed_positions(torch.tensor([0, 2, 3], dtype=torch.int32), 3), like((3,), i64, torch.tensor([0, 1, 0]))),
    ok("packed_positions-start=i64max-1", lambda o, n: o.packed_positions(torch.tensor([0, 1]), 1, torch.tensor([I64 - 1])), like((1,), i64, torch.tensor([I64 - 1]))),
    ok("context_parallel_positions-seq_len=0", lambda o, n: o.context_parallel_positions(0, 2, 0), like((0,), i64)),
    ok("context_parallel_positions-zigzag", lambda o, n: o.context_parallel_positions(8, 2, 1, True), like((4,), i64, torch.tensor([2, 3, 4, 5]))),
    ok("context_parallel_packed_positions-total=0", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 0]), 0, 2, 1, True)[0], like((0,), i64)),
    ok("context_parallel_packed_positions-empty-sequences", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 0, 4, 4], dtype=torch.int32), 4, 2, 1, True)[1], like((2,), i64, torch.tensor([1, 2]))),
    ok("context_parallel_packed_positions-on-meta", lambda o, n: o.context_parallel_packed_positions(torch.tensor([0, 8, 12], device="meta"), 12, 2, 0)[0], like((6,), i64)),
    ok("apply_rotary-length-0", lambda o, n: o.apply_rotary(torch.zeros(1, 0, 2, 4), *cos_sin(8, 4)), like((1, 0, 2, 4), f32)),
    ok("apply_rotary-batch-0", lambda o, n: o.apply_rotary(torch.zeros(0, 3, 2, 4), *cos_sin(8, 4)), like((0, 3, 2, 4), f32)),
    ok("apply_rotary-position-0-is-identity", lambda o, n: o.apply_rotary(X[:, :1], *cos_sin(8, 4)), like((1, 1, 2, 4), f32, X[:, :1])),
    ok("apply_rotary-positions-padding=-1", lambda o, n: o.apply_rotary(X, *cos_sin(8, 4), positions=torch.tensor([-1, -1, -1])), like((1, 3, 2, 4), f32, X)),
    ok("apply_rotary-head_dim-odd-passes-rest", lambda o, n: o.apply_rotary(torch.ones(1, 1, 1, 5), *cos_sin(8, 4)), like((1, 1, 1, 5), f32, torch.ones(1, 1, 1, 5))),
    ok("apply_rotary-non-contiguous", lambda o, n: o.apply_rotary(X.transpose(1, 2).contiguous().transpose(1, 2), *cos_sin(8, 4)), like((1, 3, 2, 4), f32, lambda o: o.apply_rotary(X, *cos_sin(8, 4)))),
    ok("apply_rotary-float16", lambda o, n: o.apply_rotary(X.to(f16)[:, :1], *cos_sin(8, 4, f16)), like((1, 1, 2, 4), f16, X.to(f16)[:, :1])),
    ok("apply_rotary-bfloat16", lambda o, n: o.apply_rotary(X.to(bf16)[:, :1], *cos_sin(8, 4, bf16)), like((1, 1, 2, 4), bf16, X.to(bf16)[:, :1])),
    ok("apply_rotary-inverse-undoes", lambda o, n: o.apply_rotary(o.apply_rotary(X.double(), *cos_sin(8, 4, f64)), *cos_sin(8, 4, f64), inverse=True).float(), like((1, 3, 2, 4), f32, X)),
    ok("apply_rotary-on-meta", lambda o, n: o.apply_rotary(torch.zeros(1, 3, 2, 4, device="meta"), *(t.to("meta") for t in cos_sin(8, 4))), like((1, 3, 2, 4), f32)),
    ok("apply_rotary_qk-head_dims-differ", lambda o, n: o.apply_rotary_qk(X, torch.ones(1, 3, 1, 6), *cos_sin(8, 4)),
       pair(like((1, 3, 2, 4), f32, lambda o: o.apply_rotary(X, *cos_sin(8, 4))), like((1, 3, 1, 6), f32, lambda o: o.apply_rotary(torch.ones(1, 3, 1, 6), *cos_sin(8, 4))))),
    ok("apply_rotary_qk_-disjoint-heads-of-one-buffer", lambda o, n: (lambda b: (o.apply_rotary_qk_(b[:, :, :2], b[:, :, 2:], *cos_sin(8, 4)), b)[1])(torch.cat([X, X], 2)),
       like((1, 3, 4, 4), f32, lambda o: torch.cat([o.apply_rotary(X, *cos_sin(8, 4))] * 2, 2))),
    ok("rope_frequencies-rotary_dim=2", lambda o, n: o.rope_frequencies(2, 10000.0, "{}"), pair(like((1,), f64, torch.ones(1, dtype=f64)), like((), f64, torch.tensor(1.0, dtype=f64)))),
    ok("rope_frequencies-dynamic-seq_len=i64max", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 16, "max_position_embeddings": 32}', seq_len=I64),
       lambda r, o: (like((4,), f64)(r[0], o), torch.isfinite(r[0]).all() and (r[0] > 0).all() and (r[0].diff() < 0).all() or pytest.fail(str(r)))),
    ok("rope_frequencies-fractional-positions", lambda o, n: o.rope_frequencies(8, 10000.0, '{"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 16, "max_position_embeddings": 32}', positions=torch.tensor([0.5])),
       pair(like((4,), f64, lambda o: o.rope_frequencies(8, 10000.0, "{}")[0]), like((), f64, torch.tensor(1.0, dtype=f64)))),
    ok("rope_frequencies-json-whitespace", lambda o, n: o.rope_frequencies(4, 10000.0, " {  } "), pair(like((2,), f64, torch.tensor([1.0, 0.01], dtype=f64)), like((), f64))),
    ok("rotary_tables-max_len=1", lambda o, n: o.rotary_tables(1, torch.ones(2, dtype=f64)), pair(like((1, 2), f32, torch.ones(1, 2)), like((1, 2), f32, torch.zeros(1, 2)))),
    ok("rotary_tables-bfloat16", lambda o, n: o.rotary_tables(2, torch.ones(1, dtype=f64), dtype=bf16), pair(like((2, 1), bf16, torch.tensor([[1.0], [math.cos(1)]]).to(bf16)), like((2, 1), bf16, torch.tensor([[0.0], [math.sin(1)]]).to(bf16)))),
    ok("multimodal_rotary_tables-section-with-zero", lambda o, n: o.multimodal_rotary_tables(*cos_sin(8, 8), torch.zeros(3, 5, dtype=i64), [4, 0, 0]), pair(like((5, 4), f32, torch.ones(5, 4)), like((5, 4), f32, torch.zeros(5, 4)))),
    ok("resample_position_table-posemb-2d", lambda o, n: o.resample_position_table(torch.ones(5, 8), [3, 3]), like((10, 8), f32, torch.ones(10, 8))),
    ok("resample_position_table-new_size-square", lambda o, n: o.resample_position_table(torch.ones(1, 5, 8), [3]), like((1, 10, 8), f32, torch.ones(1, 10, 8))),
    ok("resample_position_table-same-size-is-identity", lambda o, n: o.resample_position_table(torch.arange(40.0).reshape(1, 5, 8), [2, 2]), like((1, 5, 8), f32, torch.arange(40.0).reshape(1, 5, 8))),
    ok("resample_position_table-on-meta", lambda o, n: o.resample_position_table(torch.zeros(1, 5, 8, device=META), [3, 3]), like((1, 10, 8), f32)),
    ok("crop_position_table-1x1", lambda o, n: o.crop_position_table(torch.arange(32.0).reshape(1, 4, 8), [1, 1]), like((1, 1, 8), f32, torch.arange(8.0).reshape(1, 1, 8))),
    ok("crop_position_table-whole", lambda o, n: o.crop_position_table(torch.arange(32.0).reshape(1, 4, 8), [2, 2]), like((1, 4, 8), f32, torch.arange(32.0).reshape(1, 4, 8))),
    ok("timestep_embedding-empty", lambda o, n: o.timestep_embedding(torch.zeros(0), 8), like((0, 8), f32)),
    ok("timestep_embedding-t=0", lambda o, n: o.timestep_embedding(torch.zeros(1), 4), like((1, 4), f32, torch.tensor([[0.0, 0.0, 1.0, 1.0]]))),
    ok("timestep_embedding-odd-width-zero-column", lambda o, n: o.timestep_embedding(torch.zeros(1), 5), like((1, 5), f32, torch.tensor([[0.0, 0.0, 1.0, 1.0, 0.0]]))),
    ok("timestep_embedding-int64-timesteps-bfloat16", lambda o, n: o.timestep_embedding(torch.zeros(2, dtype=i64), 4, dtype=bf16), like((2, 4), bf16, torch.tensor([[0.0, 0.0, 1.0, 1.0]] * 2))),
    ok("sincos_2d_table-grid-1x1", lambda o, n: o.sincos_2d_table(4, [1, 1]), like((1, 4), f32, torch.tensor([[0.0, 1.0, 0.0, 1.0]]))),
    ok("sincos_2d_table-extra_tokens", lambda o, n: o.sincos_2d_table(4, [1], True, 2), like((3, 4), f32, torch.tensor([[0.0] * 4] * 2 + [[0.0, 1.0, 0.0, 1.0]]))),
    ok("sincos_2d_grid_table-1x1", lambda o, n: o.sincos_2d_grid_table([1, 1], 4), like((1, 4), f32)),
    ok("sincos_3d_table-1x1x1", lambda o, n: o.sincos_3d_table(16, [1, 1], 1), like((1, 1, 16), f32)),
    ok("grid_ids-1x1", lambda o, n: o.grid_ids([1, 1]), like((1, 2), f64, torch.zeros(1, 2))),
    ok("grid_ids-on-meta", lambda o, n: o.grid_ids([3, 5], device=META), like((15, 2), f64)),
    ok("axial_rotary_tables-no-tokens", lambda o, n: o.axial_rotary_tables(torch.zeros(0, 2), [4, 2]), pair(like((0, 3), f32), like((0, 3), f32))),
    ok("axial_rotary_tables-negative-coordinates", lambda o, n: o.axial_rotary_tables(torch.tensor([[-1.0]], dtype=f64), [2], dtype=f64),
       pair(like((1, 1), f64, torch.tensor([[math.cos(1.0)]], dtype=f64)), like((1, 1), f64, torch.tensor([[-math.sin(1.0)]], dtype=f64)))),
    ok("token_and_position_embedding-length-0", lambda o, n: o.token_and_position_embedding(torch.zeros(2, 0, dtype=i64), torch.zeros(10, 4), table(o)), pair(like((2, 0, 4), f32), like((0,), torch.bool))),
    ok("token_and_position_embedding-last-row", lambda o, n: o.token_and_position_embedding(torch.zeros(1, 1, dtype=i64), torch.zeros(10, 4), table(o), 7), pair(like((1, 1, 4), f32, lambda o: o.sinusoidal_table(8, 4)[7:][None]), like((0,), torch.bool))),
]


def on_meta(fn):
    """Runs ``fn()`` with the meta device as the default, so that a missing size check allocates
    nothing (a module's parameters then hold no memory)."""
    with torch.device("meta"):
        return fn()


VISION_ERRORS = [
    # timestep_embedding(timesteps, embedding_dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period, dtype)
    err("timestep_embedding-timesteps-2d", lambda o, n: o.timestep_embedding(torch.zeros(2, 2), 8), RuntimeError, "timesteps must be a 1-D tensor [N] (one timestep per batch element)"),
    err("timestep_embedding-embedding_dim=0", lambda o, n: o.timestep_embedding(torch.zeros(2), 0), RuntimeError, "embedding_dim must be in [2, 2^28]"),
    err("timestep_embedding-embedding_dim=-1", lambda o, n: o.timestep_embedding(torch.zeros(2), -1), RuntimeError, "embedding_dim must be in [2, 2^28]"),
    err("timestep_embedding-embedding_dim=2^31", lambda o, n: o.timestep_embedding(torch.zeros(2, device=META), 2**31), RuntimeError, "embedding_dim must be in [2, 2^28]"),
    err("timestep_embedding-embedding_dim=2^62", lambda o, n: o.timestep_embedding(torch.zeros(2, device=META), 2**62), RuntimeError, "embedding_dim must be in [2, 2^28]"),
    err("timestep_embedding-embedding_dim=i64max", lambda o, n: o.timestep_embedding(torch.zeros(2, device=META), I64), RuntimeError, "embedding_dim must be in [2, 2^28]"),
    err("timestep_embedding-max_period=0", lambda o, n: o.timestep_embedding(torch.zeros(2), 8, max_period=0), RuntimeError, "max_period must be >= 1"),
    err("timestep_embedding-max_period=-1", lambda o, n: o.timestep_embedding(torch.zeros(2), 8, max_period=-1), RuntimeError, "max_period must be >= 1"),
    err("timestep_embedding-timesteps-nan", lambda o, n: o.timestep_embedding(torch.tensor([0.0, math.nan]), 8), RuntimeError, "timesteps must be finite (and scale * timesteps within float64)"),
    err("timestep_embedding-timesteps-inf", lambda o, n: o.timestep_embedding(torch.tensor([0.0, math.inf]), 8), RuntimeError, "timesteps must be finite (and scale * timesteps within float64)"),
    err("timestep_embedding-scale=nan", lambda o, n: o.timestep_embedding(torch.zeros(2), 8, scale=math.nan), RuntimeError, "scale must be finite"),
    err("timestep_embedding-shift-equals-half-dim", lambda o, n: o.timestep_embedding(torch.zeros(2), 2, downscale_freq_shift=1.0), RuntimeError, "downscale_freq_shift must be finite and differ from embedding_dim / 2 = 1 (the"),
    err("timestep_embedding-dtype=int64", lambda o, n: o.timestep_embedding(torch.zeros(2), 8, dtype=i64), RuntimeError, "dtype must be float16, bfloat16, float32 or float64"),
    # sincos_2d_table(embed_dim, grid_size, cls_token, extra_tokens, interpolation_scale, base_size, dtype, device)
    err("sincos_2d_table-embed_dim-not-multiple-of-4", lambda o, n: o.sincos_2d_table(6, [2, 2]), RuntimeError, "embed_dim must be a positive multiple of 4 (half the columns per axis, each half sines"),
    err("sincos_2d_table-embed_dim=0", lambda o, n: o.sincos_2d_table(0, [2, 2]), RuntimeError, "embed_dim must be a positive multiple of 4 (half the columns per axis, each half sines"),
    err("sincos_2d_table-embed_dim=-4", lambda o, n: o.sincos_2d_table(-4, [2, 2]), RuntimeError, "embed_dim must be a positive multiple of 4 (half the columns per axis, each half sines"),
    err("sincos_2d_table-embed_dim=2^62", lambda o, n: o.sincos_2d_table(2**62, [2, 2], device=META), RuntimeError, "limit"),
    err("sincos_2d_table-grid-empty", lambda o, n: o.sincos_2d_table(8, []), RuntimeError, "grid_size must be [H, W] (or one size for a square grid)"),
    err("sincos_2d_table-grid-three", lambda o, n: o.sincos_2d_table(8, [2, 2, 2]), RuntimeError, "grid_size must be [H, W] (or one size for a square grid)"),
    err("sincos_2d_table-grid=0", lambda o, n: o.sincos_2d_table(8, [0, 2]), RuntimeError, "grid_size must hold sizes in [1, 2^28]"),
    err("sincos_2d_table-grid=-1", lambda o, n: o.sincos_2d_table(8, [-1, 2]), RuntimeError, "grid_size must hold sizes in [1, 2^28]"),
    err("sincos_2d_table-grid=2^31", lambda o, n: o.sincos_2d_table(8, [2**31, 2**31], device=META), RuntimeError, "grid_size must hold sizes in [1, 2^28]"),
    err("sincos_2d_table-grid=i64max", lambda o, n: o.sincos_2d_table(8, [I64, 1], device=META), RuntimeError, "grid_size must hold sizes in [1, 2^28]"),
    err("sincos_2d_table-extra_tokens=-1", lambda o, n: o.sincos_2d_table(8, [2, 2], extra_tokens=-1), RuntimeError, "extra_tokens must be in [0, 2^28 / embed_dim]"),
    err("sincos_2d_table-extra_tokens=i64max", lambda o, n: o.sincos_2d_table(8, [2, 2], True, I64, device=META), RuntimeError, "extra_tokens must be in [0, 2^28 / embed_dim]"),
    err("sincos_2d_table-base_size=0", lambda o, n: o.sincos_2d_table(8, [2, 2], base_size=0), RuntimeError, "base_size must be >= 1"),
    err("sincos_2d_table-interpolation_scale=0", lambda o, n: o.sincos_2d_table(8, [2, 2], interpolation_scale=0.0), RuntimeError, "interpolation_scale must be finite and > 0"),
    err("sincos_2d_table-interpolation_scale=nan", lambda o, n: o.sincos_2d_table(8, [2, 2], interpolation_scale=math.nan), RuntimeError, "interpolation_scale must be finite and > 0"),
    # sincos_2d_grid_table(feat_shape, dim, temperature, reverse_coord, interleave_sin_cos, dtype, device)
    err("sincos_2d_grid_table-dim-not-multiple-of-4", lambda o, n: o.sincos_2d_grid_table([2, 2], 6), RuntimeError, "dim must be a positive multiple of 4"),
    err("sincos_2d_grid_table-dim=0", lambda o, n: o.sincos_2d_grid_table([2, 2], 0), RuntimeError, "dim must be a positive multiple of 4"),
    err("sincos_2d_grid_table-dim=2^62", lambda o, n: o.sincos_2d_grid_table([2, 2], 2**62, device=META), RuntimeError, "limit"),
    err("sincos_2d_grid_table-feat_shape-one", lambda o, n: o.sincos_2d_grid_table([4], 8), RuntimeError, "feat_shape must be [H, W]"),
    err("sincos_2d_grid_table-feat_shape=-1", lambda o, n: o.sincos_2d_grid_table([-1, 2], 8), RuntimeError, "feat_shape must hold sizes in [1, 2^28]"),
    err("sincos_2d_grid_table-feat_shape=2^62", lambda o, n: o.sincos_2d_grid_table([2**62, 2**62], 8, device=META), RuntimeError, "feat_shape must hold sizes in [1, 2^28]"),
    err("sincos_2d_grid_table-temperature=0", lambda o, n: o.sincos_2d_grid_table([2, 2], 8, 0.0), RuntimeError, "temperature must be finite and > 0"),
    # axial_rotary_tables(ids, axes_dim, theta, dtype)
    err("axial_rotary_tables-ids-1d", lambda o, n: o.axial_rotary_tables(torch.zeros(4), [4]), RuntimeError, "ids must be [N, 1] (one coordinate per token and axis of axes_dim)"),
    err("axial_rotary_tables-axes-count-mismatch", lambda o, n: o.axial_rotary_tables(torch.zeros(4, 3), [4, 4]), RuntimeError, "ids must be [N, 2] (one coordinate per token and axis of axes_dim)"),
    err("axial_rotary_tables-axes_dim-odd", lambda o, n: o.axial_rotary_tables(torch.zeros(4, 2), [4, 3]), RuntimeError, "every axes_dim must be even and >= 2 (each axis rotates pairs of channels) and within posenc's limit of 2^28 channels, but"),
    err("axial_rotary_tables-axes_dim=0", lambda o, n: o.axial_rotary_tables(torch.zeros(4, 2), [4, 0]), RuntimeError, "every axes_dim must be even and >= 2 (each axis rotates pairs of channels) and within posenc's limit of 2^28 channels, but"),
    err("axial_rotary_tables-axes_dim=-2", lambda o, n: o.axial_rotary_tables(torch.zeros(4, 2), [4, -2]), RuntimeError, "every axes_dim must be even and >= 2 (each axis rotates pairs of channels) and within posenc's limit of 2^28 channels, but"),
    err("axial_rotary_tables-axes_dim=2^62", lambda o, n: o.axial_rotary_tables(torch.zeros(4, 2, device=META), [2**62, 2**62]), RuntimeError, "limit"),
    err("axial_rotary_tables-axes_dim=i64max-1", lambda o, n: o.axial_rotary_tables(torch.zeros(4, 1, device=META), [I64 - 1]), RuntimeError, "limit"),
    err("axial_rotary_tables-axes_dim-empty", lambda o, n: o.axial_rotary_tables(torch.zeros(4, 0), []), RuntimeError, "axes_dim must name the rotated width of each axis (e.g. {16, 56, 56} for Flux)"),
    err("axial_rotary_tables-ids-nan", lambda o, n: o.axial_rotary_tables(torch.tensor([[0.0], [math.nan]]), [4]), RuntimeError, "ids must be finite"),
    err("axial_rotary_tables-theta=0", lambda o, n: o.axial_rotary_tables(torch.zeros(4, 1), [4], 0.0), RuntimeError, "theta must be finite and >= 5.2e-290 (so that every angle position * theta^-e is a finite"),
    err("axial_rotary_tables-dtype=int64", lambda o, n: o.axial_rotary_tables(torch.zeros(4, 1), [4], dtype=i64), RuntimeError, "dtype must be float16, bfloat16, float32 or float64"),
    # resample_position_table(posemb, new_size, old_size, num_prefix_tokens, interpolation, antialias, align_corners)
    err("resample_position_table-not-square-without-old_size", lambda o, n: o.resample_position_table(torch.zeros(1, 7, 8), [3, 3]), RuntimeError, "the table's 6 grid rows (N - num_prefix_tokens = 7 - 1) are not a square grid"),
    err("resample_position_table-old_size-mismatch", lambda o, n: o.resample_position_table(torch.zeros(1, 5, 8), [3, 3], [3, 3]), RuntimeError, "old_size must be {H, W} with H * W = N - num_prefix_tokens = 4"),
    err("resample_position_table-new_size=0", lambda o, n: o.resample_position_table(torch.zeros(1, 5, 8), [0, 3]), RuntimeError, "new_size must be {H, W} (or {S} for a square grid) of sizes >= 1"),
    err("resample_position_table-new_size=-1", lambda o, n: o.resample_position_table(torch.zeros(1, 5, 8), [-1, 3]), RuntimeError, "new_size must be {H, W} (or {S} for a square grid) of sizes >= 1"),
    err("resample_position_table-new_size=2^31", lambda o, n: o.resample_position_table(torch.zeros(1, 5, 8, device=META), [2**31, 2**31]), RuntimeError, "a grid of H * W = 2147483648 * 2147483648 elements is over posenc's limit of 2^28"),
    err("resample_position_table-new_size=i64max", lambda o, n: o.resample_position_table(torch.zeros(1, 5, 8, device=META), [I64, 1]), RuntimeError, "a grid of H * W = 9223372036854775807 * 1 elements is over posenc's limit of 2^28"),
    err("resample_position_table-interpolation-unknown", lambda o, n: o.resample_position_table(torch.zeros(1, 5, 8), [3, 3], interpolation="bogus"), RuntimeError, "interpolation must be \"bicubic\", \"bilinear\" or \"nearest\""),
    err("resample_position_table-num_prefix_tokens=-1", lambda o, n: o.resample_position_table(torch.zeros(1, 5, 8), [3, 3], num_prefix_tokens=-1), RuntimeError, "num_prefix_tokens must lie in [0, N] = [0, 5]"),
    err("resample_position_table-num_prefix_tokens-past-table", lambda o, n: o.resample_position_table(torch.zeros(1, 5, 8), [3, 3], num_prefix_tokens=6), RuntimeError, "num_prefix_tokens must lie in [0, N] = [0, 5]"),
    err("resample_position_table-int", lambda o, n: o.resample_position_table(torch.zeros(1, 5, 8, dtype=i64), [3, 3]), RuntimeError, "posemb's dtype must be float16, bfloat16, float32 or float64"),
    # sincos_3d_table(embed_dim, spatial_size, temporal_size, spatial_interpolation_scale, temporal_interpolation_scale, dtype, device)
    err("sincos_3d_table-embed_dim-not-multiple-of-16", lambda o, n: o.sincos_3d_table(10, [2, 2], 2), RuntimeError, "embed_dim must be a positive multiple of 16 (a quarter of the columns for time, three"),
    err("sincos_3d_table-embed_dim=0", lambda o, n: o.sincos_3d_table(0, [2, 2], 2), RuntimeError, "embed_dim must be a positive multiple of 16 (a quarter of the columns for time, three"),
    err("sincos_3d_table-embed_dim=2^62", lambda o, n: o.sincos_3d_table(2**62, [2, 2], 2, device=META), RuntimeError, "limit"),
    err("sincos_3d_table-temporal_size=0", lambda o, n: o.sincos_3d_table(16, [2, 2], 0), RuntimeError, "temporal_size must be in [1, 2^28]"),
    err("sincos_3d_table-temporal_size=-1", lambda o, n: o.sincos_3d_table(16, [2, 2], -1), RuntimeError, "temporal_size must be in [1, 2^28]"),
    err("sincos_3d_table-temporal_size=2^31", lambda o, n: o.sincos_3d_table(16, [2, 2], 2**31, device=META), RuntimeError, "temporal_size must be in [1, 2^28]"),
    err("sincos_3d_table-temporal_size=i64max", lambda o, n: o.sincos_3d_table(16, [2, 2], I64, device=META), RuntimeError, "temporal_size must be in [1, 2^28]"),
    err("sincos_3d_table-spatial_size=-1", lambda o, n: o.sincos_3d_table(16, [-1, 2], 2), RuntimeError, "spatial_size must hold sizes in [1, 2^28]"),
    err("sincos_3d_table-spatial_size=2^62", lambda o, n: o.sincos_3d_table(16, [2**62, 2**62], 1, device=META), RuntimeError, "spatial_size must hold sizes in [1, 2^28]"),
    err("sincos_3d_table-spatial_size-three", lambda o, n: o.sincos_3d_table(16, [2, 2, 2], 2), RuntimeError, "spatial_size must be [H, W] (or one size for a square grid)"),
    err("sincos_3d_table-temporal_scale=0", lambda o, n: o.sincos_3d_table(16, [2, 2], 2, 1.0, 0.0), RuntimeError, "temporal_interpolation_scale must be finite and > 0"),
    # crop_position_table(posemb, new_size, old_size, num_prefix_tokens)
    err("crop_position_table-larger-than-table", lambda o, n: o.crop_position_table(torch.zeros(1, 4, 8), [3, 3]), RuntimeError, "new_size must hold sizes >= 1 within the table's grid [2, 2]"),
    err("crop_position_table-new_size=0", lambda o, n: o.crop_position_table(torch.zeros(1, 4, 8), [0, 2]), RuntimeError, "new_size must hold sizes >= 1 within the table's grid [2, 2]"),
    err("crop_position_table-new_size=-1", lambda o, n: o.crop_position_table(torch.zeros(1, 4, 8), [-1, 2]), RuntimeError, "new_size must hold sizes >= 1 within the table's grid [2, 2]"),
    err("crop_position_table-new_size=i64max", lambda o, n: o.crop_position_table(torch.zeros(1, 4, 8), [I64, I64]), RuntimeError, "new_size must hold sizes >= 1 within the table's grid [2, 2]"),
    err("crop_position_table-old_size-mismatch", lambda o, n: o.crop_position_table(torch.zeros(1, 4, 8), [1, 1], [3, 3]), RuntimeError, "old_size must be {H, W} with H * W = N - num_prefix_tokens = 4"),
    err("crop_position_table-num_prefix_tokens=-1", lambda o, n: o.crop_position_table(torch.zeros(1, 4, 8), [1, 1], num_prefix_tokens=-1), RuntimeError, "num_prefix_tokens must lie in [0, N] = [0, 4]"),
    err("crop_position_table-posemb-1d", lambda o, n: o.crop_position_table(torch.zeros(8), [1, 1]), RuntimeError, "posemb must be a position table [1, N, D] or [N, D]"),
    # grid_ids(feat_shape, ref_feat_shape, grid_offset, grid_indexing, dtype, device)
    err("grid_ids-feat_shape-empty", lambda o, n: o.grid_ids([]), RuntimeError, "feat_shape must be the patch grid [H, W]"),
    err("grid_ids-feat_shape=0", lambda o, n: o.grid_ids([0, 2]), RuntimeError, "feat_shape must hold sizes in [1, 2^28]"),
    err("grid_ids-feat_shape=-1", lambda o, n: o.grid_ids([-1, 2]), RuntimeError, "feat_shape must hold sizes in [1, 2^28]"),
    err("grid_ids-feat_shape=2^31", lambda o, n: o.grid_ids([2**31, 2**31], device=META), RuntimeError, "feat_shape must hold sizes in [1, 2^28]"),
    err("grid_ids-feat_shape=i64max", lambda o, n: o.grid_ids([I64, 2], device=META), RuntimeError, "feat_shape must hold sizes in [1, 2^28]"),
    err("grid_ids-ref_feat_shape-mismatch", lambda o, n: o.grid_ids([2, 2], [2]), RuntimeError, "ref_feat_shape must be empty or the pretraining grid [H, W] of sizes >= 1"),
    err("grid_ids-ref_feat_shape=0", lambda o, n: o.grid_ids([2, 2], [0, 2]), RuntimeError, "ref_feat_shape must be empty or the pretraining grid [H, W] of sizes >= 1"),
    err("grid_ids-grid_indexing-unknown", lambda o, n: o.grid_ids([2, 2], grid_indexing="ji"), RuntimeError, "grid_indexing must be \"ij\" (row, column) or \"xy\" (column, row)"),
    err("grid_ids-grid_offset=nan", lambda o, n: o.grid_ids([2, 2], grid_offset=math.nan), RuntimeError, "grid_offset must be finite"),
    err("grid_ids-dtype=int64", lambda o, n: o.grid_ids([2, 2], dtype=i64), RuntimeError, "dtype must be float16, bfloat16, float32 or float64"),
]


# --- errors and exact results: posenc.nn modules -------------------------------------------------


def call(make, method="forward", *args, **kwargs):
    """``make(nn)`` builds a small module; the row then calls one of its forwards."""
    return lambda o, n: getattr(make(n), method)(*args, **kwargs)


PE = lambda n, **kw: n.PositionalEncoding(4, 8, **kw)
LPE = lambda n, **kw: n.LearnedPositionalEmbedding(4, 8, **kw)
TPE = lambda n, **kw: n.TokenAndPositionEmbedding(10, 4, 8, **kw)
ROPE = lambda n, **kw: n.RotaryEmbedding(4, 8, **kw)

NN_ERRORS = [
    # PositionalEncoding
    err("PositionalEncoding-d_model=0", lambda o, n: n.PositionalEncoding(0, 8), ValueError, "d_model must be >= 1"),
    err("PositionalEncoding-d_model=-1", lambda o, n: n.PositionalEncoding(-1, 8), ValueError, "d_model must be >= 1"),
    err("PositionalEncoding-d_model=2^62", lambda o, n: n.PositionalEncoding(2**62, 8), ValueError, "a table of max_len * d_model = 8 * 4611686018427387904 elements is over posenc's limit of"),
    err("PositionalEncoding-max_len=0", lambda o, n: n.PositionalEncoding(4, 0), ValueError, "max_len must be >= 1"),
    err("PositionalEncoding-max_len=2^31", lambda o, n: n.PositionalEncoding(4, 2**31), ValueError, "a table of max_len * d_model = 2147483648 * 4 elements is over posenc's limit of 2^28"),
    err("PositionalEncoding-max_len=i64max", lambda o, n: n.PositionalEncoding(4, I64), ValueError, "a table of max_len * d_model = 9223372036854775807 * 4 elements is over posenc's limit of"),
    err("PositionalEncoding-dropout=1.5", lambda o, n: PE(n, dropout=1.5), ValueError, "PositionalEncoding: dropout must be in [0, 1], but got 1.5; pass the probability of zeroing an element (0 disables dropout)"),
    err("PositionalEncoding-dropout=nan", lambda o, n: PE(n, dropout=math.nan), ValueError, "PositionalEncoding: dropout must be in [0, 1], but got nan"),
    err("PositionalEncoding-scale=inf", lambda o, n: PE(n, scale=math.inf), ValueError, "PositionalEncoding: scale must be finite, but got inf"),
    err("PositionalEncoding-layout-unknown", lambda o, n: PE(n, layout="bogus"), ValueError, "layout must be one of 'interleaved', 'concatenated'"),
    err("PositionalEncoding-spacing-unknown", lambda o, n: PE(n, spacing="bogus"), ValueError, "spacing must be one of 'paper', 'tensor2tensor'"),
    err("PositionalEncoding-beyond_max_len-unknown", lambda o, n: PE(n, beyond_max_len="clip"), ValueError, "beyond_max_len must be one of 'error', 'extrapolate'"),
    err("PositionalEncoding-base=-1", lambda o, n: PE(n, base=-1.0), ValueError, "base must be finite and >= 5.2e-290 (so that every angle position * base^-e is a finite"),
    err("PositionalEncoding-forward-width-mismatch", call(PE, "forward", torch.zeros(1, 3, 6)), RuntimeError, "expected the last dimension of the input to be d_model = 4"),
    err("PositionalEncoding-forward-2d", call(PE, "forward", torch.zeros(3, 4)), RuntimeError, "expected a 3-D input of shape [B, L, D] (batch_first=true)"),
    err("PositionalEncoding-forward-int", call(PE, "forward", torch.zeros(1, 3, 4, dtype=i64)), RuntimeError, "expected a floating-point input (float16, bfloat16, float32 or float64)"),
    err("PositionalEncoding-forward-offset-past-max_len", call(PE, "forward", torch.zeros(1, 3, 4), 6), RuntimeError, "positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (8)"),
    err("PositionalEncoding-forward-offset=-1", call(PE, "forward", torch.zeros(1, 3, 4), -1), RuntimeError, "offset must be >= 0"),
    err("PositionalEncoding-forward-offset=i64max-extrapolate", call(lambda n: PE(n, beyond_max_len="extrapolate"), "forward", torch.zeros(1, 3, 4), I64), RuntimeError, "PositionalEncoding: offset + L must fit in int64, but got offset = 9223372036854775807 and L = 3"),
    err("PositionalEncoding-forward-x-on-meta", call(PE, "forward", torch.zeros(1, 3, 4, device=META)), RuntimeError, "expected the input on the device of the encoding table (cpu)"),
    err("PositionalEncoding-forward_positions-None", call(PE, "forward_positions", torch.zeros(1, 3, 4), None), ValueError, "forward_positions needs positions"),
    err("PositionalEncoding-forward_positions-nan", call(PE, "forward_positions", torch.zeros(1, 3, 4), torch.tensor([0.0, math.nan, 1.0])), RuntimeError, "floating-point positions must be finite and in [0, 2^63)"),
    err("PositionalEncoding-forward_positions-past-max_len", call(PE, "forward_positions", torch.zeros(1, 3, 4), torch.tensor([0, 8, 1])), RuntimeError, "positions must be < max_len (8)"),
    err("PositionalEncoding-forward_padded-mask-wrong-shape", call(PE, "forward_padded", torch.zeros(1, 3, 4), torch.zeros(1, 2, dtype=torch.bool)), RuntimeError, "positions must have shape [L] = [3] or [B, L] (batch_first=true) = [1, 3]"),
    # LearnedPositionalEmbedding
    err("LearnedPositionalEmbedding-max_len=-1", lambda o, n: n.LearnedPositionalEmbedding(4, -1), ValueError, "max_len must be >= 1"),
    err("LearnedPositionalEmbedding-max_len=0", lambda o, n: n.LearnedPositionalEmbedding(4, 0), ValueError, "max_len must be >= 1"),
    err("LearnedPositionalEmbedding-d_model=0", lambda o, n: n.LearnedPositionalEmbedding(0, 8), ValueError, "d_model must be >= 1"),
    err("LearnedPositionalEmbedding-max_len=2^31", lambda o, n: on_meta(lambda: n.LearnedPositionalEmbedding(4, 2**31)), ValueError, "limit"),
    err("LearnedPositionalEmbedding-max_len=2^62", lambda o, n: on_meta(lambda: n.LearnedPositionalEmbedding(4, 2**62)), ValueError, "limit"),
    err("LearnedPositionalEmbedding-max_len=i64max", lambda o, n: on_meta(lambda: n.LearnedPositionalEmbedding(4, I64)), ValueError, "limit"),
    err("LearnedPositionalEmbedding-init_std=-1", lambda o, n: LPE(n, init_std=-1.0), ValueError, "init_std must be finite and >= 0"),
    err("LearnedPositionalEmbedding-init_std=nan", lambda o, n: LPE(n, init_std=math.nan), ValueError, "init_std must be finite and >= 0"),
    err("LearnedPositionalEmbedding-dropout=-0.1", lambda o, n: LPE(n, dropout=-0.1), ValueError, "LearnedPositionalEmbedding: dropout must be in [0, 1], but got -0.1"),
    err("LearnedPositionalEmbedding-scale=nan", lambda o, n: LPE(n, scale=math.nan), ValueError, "LearnedPositionalEmbedding: scale must be finite, but got nan"),
    err("LearnedPositionalEmbedding-forward-offset-past-max_len", call(LPE, "forward", torch.zeros(1, 3, 4), 6), RuntimeError, "positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (8)"),
    err("LearnedPositionalEmbedding-forward_positions-float", call(LPE, "forward_positions", torch.zeros(1, 3, 4), torch.tensor([0.0, 1.0, 2.0])), RuntimeError, "LearnedPositionalEmbedding: floating-point positions (Float) are computed from the encoding's definition, which this call lacks (a learned table has none)"),
    err("LearnedPositionalEmbedding-forward-width-mismatch", call(LPE, "forward", torch.zeros(1, 3, 5)), RuntimeError, "expected the last dimension of the input to be d_model = 4"),
    # TokenAndPositionEmbedding
    err("TokenAndPositionEmbedding-vocab_size=0", lambda o, n: n.TokenAndPositionEmbedding(0, 4, 8), ValueError, "TokenAndPositionEmbedding: vocab_size must be >= 1, but got 0"),
    err("TokenAndPositionEmbedding-d_model=-1", lambda o, n: n.TokenAndPositionEmbedding(10, -1, 8), ValueError, "TokenAndPositionEmbedding: d_model must be >= 1, but got -1"),
    err("TokenAndPositionEmbedding-max_len=0", lambda o, n: n.TokenAndPositionEmbedding(10, 4, 0), ValueError, "max_len must be >= 1, but got 0"),
    err("TokenAndPositionEmbedding-max_len=2^62", lambda o, n: n.TokenAndPositionEmbedding(10, 4, 2**62), ValueError, "a position table of max_len * d_model = 4611686018427387904 * 4 elements is over posenc's limit of"),
    err("TokenAndPositionEmbedding-learned-max_len=-1", lambda o, n: n.TokenAndPositionEmbedding(10, 4, -1, positions="learned"), ValueError, "max_len must be >= 1"),
    err("TokenAndPositionEmbedding-learned-max_len=2^62", lambda o, n: on_meta(lambda: n.TokenAndPositionEmbedding(10, 4, 2**62, positions="learned")), ValueError, "limit"),
    err("TokenAndPositionEmbedding-vocab_size=2^62", lambda o, n: on_meta(lambda: n.TokenAndPositionEmbedding(2**62, 4, 8)), ValueError, "limit"),
    # None is the default only where the signature's default is None (padding_idx, scale here)
    err("TokenAndPositionEmbedding-positions=None", lambda o, n: TPE(n, positions=None, beyond_max_len="extrapolate"), ValueError, "TokenAndPositionEmbedding: positions must not be None; leave it out for its default"),
    err("PositionalEncoding-dropout=None", lambda o, n: PE(n, dropout=None), ValueError, "PositionalEncoding: dropout must not be None; leave it out for its default"),
    err("PositionalEncoding-d_model-float", lambda o, n: n.PositionalEncoding(4.5, 8), ValueError, "PositionalEncoding: d_model must be an integer in int64's range, but got 4.5"),
    err("PositionalEncoding-base=10^400", lambda o, n: PE(n, base=10**400), ValueError, "PositionalEncoding: base must be finite and >= 5.2e-290"),
    err("PositionalEncoding-max_len=2^64", lambda o, n: n.PositionalEncoding(4, 2**64), ValueError, "PositionalEncoding: max_len must be an integer in int64's range, but got 1.8446744073709552e+19"),
    err("PositionalEncoding-inplace=1", lambda o, n: PE(n, inplace=1), ValueError, "PositionalEncoding: inplace must be True or False, but got 1"),
    err("PositionalEncoding-dropout-tensor-of-two", lambda o, n: PE(n, dropout=torch.tensor([0.1, 0.2])), ValueError, "PositionalEncoding: dropout must be a number, but got \"tensor([0.1000, 0.2000])\""),
    err("PositionalEncoding-unknown-keyword", lambda o, n: PE(n, dmodel=4), TypeError, "unexpected keyword argument 'dmodel'"),
    err("TokenAndPositionEmbedding-positions-unknown", lambda o, n: TPE(n, positions="rotary"), ValueError, "positions must be one of 'sinusoidal', 'learned'"),
    err("TokenAndPositionEmbedding-learned-extrapolate", lambda o, n: TPE(n, positions="learned", beyond_max_len="extrapolate"), ValueError, "learned positions cannot extrapolate past max_len"),
    err("TokenAndPositionEmbedding-padding_idx=vocab_size", lambda o, n: TPE(n, padding_idx=10), ValueError, "padding_idx must be in [0, vocab_size) = [0, 10)"),
    err("TokenAndPositionEmbedding-padding_idx=-1", lambda o, n: TPE(n, padding_idx=-1), ValueError, "padding_idx must be in [0, vocab_size) = [0, 10)"),
    err("TokenAndPositionEmbedding-dropout=2", lambda o, n: TPE(n, dropout=2.0), ValueError, "TokenAndPositionEmbedding: dropout must be in [0, 1], but got 2"),
    err("TokenAndPositionEmbedding-scale=nan", lambda o, n: TPE(n, scale=math.nan), ValueError, "TokenAndPositionEmbedding: scale must be finite, but got nan"),
    # (a finite scale is a valid option, which a module cast to float64 uses; a float32 call refuses it, as in C++)
    err("TokenAndPositionEmbedding-scale-past-float32", call(lambda n: TPE(n, scale=1e39), "forward", torch.zeros(1, 3, dtype=i64)), RuntimeError, "TokenAndPositionEmbedding: scale must lie in [-3.4028e38, 3.4028e38] for Float inputs"),
    err("TokenAndPositionEmbedding-forward-ids-float", call(TPE, "forward", torch.zeros(1, 3)), RuntimeError, "TokenAndPositionEmbedding: expected integer token ids, but got Float"),
    err("TokenAndPositionEmbedding-forward-ids-1d", call(TPE, "forward", torch.zeros(3, dtype=i64)), RuntimeError, "TokenAndPositionEmbedding: expected token ids of shape [B, L] (batch_first=true), but got a 1-D tensor"),
    err("TokenAndPositionEmbedding-forward-id-past-vocab", call(TPE, "forward", torch.tensor([[0, 10]])), RuntimeError, "token ids must lie in [0, vocab_size) = [0, 10)"),
    err("TokenAndPositionEmbedding-forward-length-past-max_len", call(TPE, "forward", torch.zeros(1, 9, dtype=i64)), RuntimeError, "positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (8)"),
    err("TokenAndPositionEmbedding-forward-offset=-1-padding", call(lambda n: TPE(n, padding_idx=0), "forward", torch.ones(1, 3, dtype=i64), -1), RuntimeError, "TokenAndPositionEmbedding: offset must be >= 0"),
    err("TokenAndPositionEmbedding-learned-forward_positions-float", call(lambda n: TPE(n, positions="learned"), "forward_positions", torch.ones(1, 3, dtype=i64), torch.tensor([0.0, 1.0, 2.0])), RuntimeError, "TokenAndPositionEmbedding: floating-point positions (Float) are computed from the encoding's definition, which this call lacks (a learned table has none)"),
    # RotaryEmbedding
    err("RotaryEmbedding-head_dim=0", lambda o, n: n.RotaryEmbedding(0, 8), ValueError, "RotaryEmbedding: head_dim must be >= 2, but got 0"),
    err("RotaryEmbedding-head_dim=-2", lambda o, n: n.RotaryEmbedding(-2, 8), ValueError, "RotaryEmbedding: head_dim must be >= 2, but got -2"),
    err("RotaryEmbedding-head_dim-odd", lambda o, n: n.RotaryEmbedding(5, 8), ValueError, "RotaryEmbedding: the rotated width must be even and >= 2, but got 5"),
    err("RotaryEmbedding-head_dim=2^62", lambda o, n: n.RotaryEmbedding(2**62, 8), ValueError, "head_dim"),
    err("RotaryEmbedding-rotary_dim=0", lambda o, n: ROPE(n, rotary_dim=0), ValueError, "RotaryEmbedding: the rotated width must be even and >= 2, but got 0"),
    err("RotaryEmbedding-rotary_dim-above-head_dim", lambda o, n: ROPE(n, rotary_dim=6), ValueError, "RotaryEmbedding: rotary_dim (6) must be <= head_dim (4)"),
    err("RotaryEmbedding-rotary_dim-odd", lambda o, n: n.RotaryEmbedding(8, 8, rotary_dim=3), ValueError, "RotaryEmbedding: the rotated width must be even and >= 2, but got 3"),
    err("RotaryEmbedding-max_len=0", lambda o, n: n.RotaryEmbedding(4, 0), ValueError, "RotaryEmbedding: max_len must be >= 1, but got 0; pass the number of positions the module rotates"),
    err("RotaryEmbedding-max_len=-1", lambda o, n: n.RotaryEmbedding(4, -1), ValueError, "RotaryEmbedding: max_len must be >= 1, but got -1"),
    # (max_len itself may exceed the table limit: rows past cached_len are computed per call)
    err("RotaryEmbedding-max_len=2^31", lambda o, n: n.RotaryEmbedding(4, 2**31), ValueError, "the cos/sin caches hold max_len * rotary_dim / 2 = 2147483648 * 2 elements, which is over posenc's limit of 2^28 elements (1 GiB in float32); set cached_len (e.g. 8192"),
    err("RotaryEmbedding-cached_len=2^31", lambda o, n: n.RotaryEmbedding(4, 2**31, cached_len=2**31), ValueError, "the cos/sin caches hold cached_len * rotary_dim / 2 = 2147483648 * 2 elements, which is over posenc's limit of 2^28 elements (1 GiB in float32); lower cached_len"),
    err("RotaryEmbedding-cached_len=0", lambda o, n: n.RotaryEmbedding(4, 16, cached_len=0), ValueError, "cached_len must be in [1, max_len = 16], but got 0"),
    err("RotaryEmbedding-max_len=2^62", lambda o, n: n.RotaryEmbedding(4, 2**62), ValueError, "limit"),
    err("RotaryEmbedding-max_len=i64max", lambda o, n: n.RotaryEmbedding(4, I64), ValueError, "limit"),
    # (the C++ options' checks, reached with the numbers JSON cannot hold spelled "nan", "inf")
    err("RotaryEmbedding-base=nan", lambda o, n: ROPE(n, base=math.nan), ValueError, "RotaryEmbedding: base must be finite and >= 5.2e-290"),
    err("RotaryEmbedding-base=-inf", lambda o, n: ROPE(n, base=-math.inf), ValueError, "RotaryEmbedding: base must be finite and >= 5.2e-290"),
    err("RotaryEmbedding-base=inf-rope_theta=inf", lambda o, n: ROPE(n, base=math.inf, rope_scaling={"rope_theta": math.inf}), ValueError, "RotaryEmbedding: base must be finite and >= 5.2e-290"),
    err("RotaryEmbedding-rope_theta=nan", lambda o, n: ROPE(n, rope_scaling={"rope_theta": math.nan}), ValueError, 'RotaryEmbedding: rope_parameters.rope_theta ("nan") differs from base (10000)'),
    # (the reader of posenc.nn's keyword arguments, as for the other modules)
    err("RotaryEmbedding-head_dim=4.5", lambda o, n: n.RotaryEmbedding(4.5, 8), ValueError, "RotaryEmbedding: head_dim must be an integer in int64's range, but got 4.5"),
    err("RotaryEmbedding-base=True", lambda o, n: ROPE(n, base=True), ValueError, "RotaryEmbedding: base must be a number, but got true"),
    err("RotaryEmbedding-heads_first=1", lambda o, n: ROPE(n, heads_first=1), ValueError, "RotaryEmbedding: heads_first must be True or False, but got 1"),
    err("RotaryEmbedding-max_len=None", lambda o, n: n.RotaryEmbedding(4, None), ValueError, "RotaryEmbedding: max_len must not be None; leave it out for its default"),
    err("rotary_embedding_frequencies-unknown-option", lambda o, n: o.rotary_embedding_frequencies('{"head_dim": 4, "max_len": 8, "heads": 2}'), RuntimeError, "RotaryEmbedding has no option 'heads'; see its keyword arguments (help(posenc.nn.RotaryEmbedding))"),
    err("RotaryEmbedding-pairing-unknown", lambda o, n: ROPE(n, pairing="bogus"), ValueError, "pairing must be one of 'half_split', 'interleaved'"),
    err("RotaryEmbedding-deinterleave-interleaved", lambda o, n: ROPE(n, pairing="interleaved", deinterleave=True), ValueError, "RotaryEmbedding: deinterleave regroups pairs (2i, 2i + 1) into halves (i, i + R/2), the layout of pairing 'half_split', but pairing is 'interleaved'; pass pairing='half_split' with deinterleave"),
    err("RotaryEmbedding-mrope_hw_alternating-unequal", lambda o, n: ROPE(n, mrope_section=[0, 2, 0], mrope_hw_alternating=True), ValueError, "RotaryEmbedding: mrope_hw_alternating alternates the height and width frequencies, so mrope_section's height and width sizes must be equal, but got [0, 2, 0]; ERNIE 4.5-VL's [22, 22, 20] (height, width, time) is {20, 22, 22} here (time, height, width)"),
    err("RotaryEmbedding-mrope_hw_alternating-interleaved", lambda o, n: ROPE(n, mrope_section=[0, 1, 1], mrope_interleaved=True, mrope_hw_alternating=True), ValueError, "RotaryEmbedding: mrope_hw_alternating (ERNIE 4.5-VL's assignment of the multimodal frequencies) needs mrope_section and excludes mrope_interleaved (Qwen3-VL's), but mrope_interleaved is set too; pass mrope_section {t, h, w} with h == w, and one assignment"),
    err("RotaryEmbedding-mrope_hw_alternating-no-section", lambda o, n: ROPE(n, mrope_hw_alternating=True), ValueError, "RotaryEmbedding: mrope_hw_alternating (ERNIE 4.5-VL's assignment of the multimodal frequencies) needs mrope_section and excludes mrope_interleaved (Qwen3-VL's), but mrope_section is empty; pass mrope_section {t, h, w} with h == w, and one assignment"),
    err("RotaryEmbedding-freq_factors=inf", lambda o, n: ROPE(n, freq_factors=[1.0, math.inf]), ValueError, "RotaryEmbedding: freq_factors must hold finite numbers > 0, but holds inf"),
    err("RotaryEmbedding-beyond_max_len-unknown", lambda o, n: ROPE(n, beyond_max_len="wrap"), ValueError, "beyond_max_len must be one of 'error', 'extrapolate'"),
    err("RotaryEmbedding-rope_type-unknown", lambda o, n: ROPE(n, rope_scaling={"rope_type": "bogus"}), ValueError, "RotaryEmbedding: unknown rope_parameters.rope_type 'bogus'"),
    err("RotaryEmbedding-linear-without-factor", lambda o, n: ROPE(n, rope_scaling={"rope_type": "linear"}), ValueError, "RotaryEmbedding: rope type 'linear' needs a scaling factor"),
    err("RotaryEmbedding-linear-factor=nan", lambda o, n: ROPE(n, rope_scaling={"rope_type": "linear", "factor": math.nan}), ValueError, "RotaryEmbedding: rope_parameters.factor must be finite, but is nan"),
    err("RotaryEmbedding-linear-factor=inf", lambda o, n: ROPE(n, rope_scaling={"rope_type": "linear", "factor": math.inf}), ValueError, "RotaryEmbedding: rope_parameters.factor must be finite, but is inf"),
    err("RotaryEmbedding-yarn-beta_fast=nan-numpy", lambda o, n: ROPE(n, rope_scaling={"rope_type": "yarn", "factor": 4.0, "beta_fast": __import__("numpy").float32("nan")}), ValueError, "RotaryEmbedding: rope_parameters.beta_fast must be finite, but is nan"),
    err("RotaryEmbedding-linear-short_factor-nan", lambda o, n: ROPE(n, rope_scaling={"rope_type": "linear", "factor": 2.0, "short_factor": [math.nan, 1.0]}), ValueError, "RotaryEmbedding: rope_parameters.short_factor must hold finite numbers, but holds nan"),
    err("RotaryEmbedding-factor-not-a-number", lambda o, n: ROPE(n, rope_scaling={"rope_type": "linear", "factor": [2]}), ValueError, "RotaryEmbedding: rope_parameters.factor must be a number, but is a array"),
    err("RotaryEmbedding-rope_scaling-not-serializable", lambda o, n: ROPE(n, rope_scaling={"rope_type": "linear", "factor": object()}), TypeError, "Object of type object is not JSON serializable"),
    err("RotaryEmbedding-freq_factors-wrong-length", lambda o, n: ROPE(n, freq_factors=[1.0]), ValueError, "RotaryEmbedding: freq_factors must be empty or hold one divisor per frequency (R"),
    err("RotaryEmbedding-mrope_section-sum-mismatch", lambda o, n: ROPE(n, mrope_section=[1, 1, 1]), ValueError, "mrope_section must hold three non-negative numbers of frequencies (temporal, height"),
    err("RotaryEmbedding-mrope_section-negative", lambda o, n: ROPE(n, mrope_section=[2, 1, -1]), ValueError, "mrope_section must hold three non-negative numbers of frequencies (temporal, height"),
    err("RotaryEmbedding-mrope_section=i64max", lambda o, n: ROPE(n, mrope_section=[I64, 1, 1]), ValueError, "mrope_section must hold three non-negative numbers of frequencies (temporal, height"),
    err("RotaryEmbedding-mrope_section=2^62-wraps", lambda o, n: ROPE(n, mrope_section=[2**62, 2**62, -(2**63) + 2]), ValueError, "mrope_section must hold three non-negative numbers of frequencies (temporal, height"),
    err("RotaryEmbedding-forward-head_dim-mismatch", call(ROPE, "forward", torch.zeros(1, 3, 2, 6)), RuntimeError, "expected heads of width head_dim = 4, but got 6 (input shape [1, 3, 2, 6]); build the module with head_dim = 6"),
    err("RotaryEmbedding-forward-3d", call(ROPE, "forward", torch.zeros(1, 3, 4)), RuntimeError, "expected a 4-D query or key tensor of shape [B, L, H, Dh] (heads_first=false)"),
    err("RotaryEmbedding-forward-offset-past-max_len", call(ROPE, "forward", torch.zeros(1, 3, 2, 4), 6), RuntimeError, "positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (8)"),
    err("RotaryEmbedding-forward-offset=-1", call(ROPE, "forward", torch.zeros(1, 3, 2, 4), -1), RuntimeError, "offset must be >= 0"),
    err("RotaryEmbedding-forward-int", call(ROPE, "forward", torch.zeros(1, 3, 2, 4, dtype=i64)), RuntimeError, "expected a floating-point input (float16, bfloat16, float32 or float64)"),
    err("RotaryEmbedding-forward-x-on-meta", call(ROPE, "forward", torch.zeros(1, 3, 2, 4, device=META)), RuntimeError, "expected the input on the device of the cos/sin caches (cpu)"),
    err("RotaryEmbedding-forward_positions-None", call(ROPE, "forward_positions", torch.zeros(1, 3, 2, 4), None), ValueError, "forward_positions needs positions"),
    err("RotaryEmbedding-forward_positions-multimodal-without-mrope", call(ROPE, "forward_positions", torch.zeros(1, 3, 2, 4), torch.zeros(3, 1, 3, dtype=i64)), RuntimeError, "positions [3, 1, 3] are multimodal [3, B, L] positions, but the module has no"),
    err("RotaryEmbedding-forward_positions-past-max_len", call(ROPE, "forward_positions", torch.zeros(1, 3, 2, 4), torch.tensor([0, 8, 1])), RuntimeError, "positions must be < max_len (8)"),
    err("RotaryEmbedding-forward_qk-length-mismatch", call(ROPE, "forward_qk", torch.zeros(1, 3, 2, 4), torch.zeros(1, 2, 2, 4)), RuntimeError, "k must hold the keys of q's tokens (the same batch B and length L, in the layout [B, L"),
    err("RotaryEmbedding-forward_qk-dtype-mismatch", call(ROPE, "forward_qk", torch.zeros(1, 3, 2, 4), torch.zeros(1, 3, 2, 4, dtype=f64)), RuntimeError, "q and k must share a dtype, but q is Float and k Double"),
    # Timesteps / TimestepEmbedder
    err("Timesteps-embedding_dim=0", lambda o, n: n.Timesteps(0), ValueError, "embedding_dim must be in [2, 2^28]"),
    err("Timesteps-embedding_dim=-1", lambda o, n: n.Timesteps(-1), ValueError, "embedding_dim must be in [2, 2^28]"),
    err("Timesteps-embedding_dim=2^31", lambda o, n: n.Timesteps(2**31), ValueError, "embedding_dim must be in [2, 2^28]"),
    err("Timesteps-embedding_dim=i64max", lambda o, n: n.Timesteps(I64), ValueError, "embedding_dim must be in [2, 2^28]"),
    err("Timesteps-max_period=0", lambda o, n: n.Timesteps(8, max_period=0), ValueError, "max_period must be >= 1"),
    err("Timesteps-forward-2d", call(lambda n: n.Timesteps(8), "forward", torch.zeros(2, 2)), RuntimeError, "timesteps must be a 1-D tensor [N] (one timestep per batch element)"),
    err("Timesteps-forward-nan", call(lambda n: n.Timesteps(8), "forward", torch.tensor([math.nan])), RuntimeError, "timesteps must be finite (and scale * timesteps within float64)"),
    err("TimestepEmbedder-hidden_size=0", lambda o, n: n.TimestepEmbedder(0), ValueError, "hidden_size must be >= 1"),
    err("TimestepEmbedder-hidden_size=2^62", lambda o, n: on_meta(lambda: n.TimestepEmbedder(2**62)), ValueError, "hidden_size"),
    err("TimestepEmbedder-frequency_embedding_size=0", lambda o, n: n.TimestepEmbedder(8, frequency_embedding_size=0), ValueError, "embedding_dim must be in [2, 2^28]"),
    err("TimestepEmbedder-frequency_embedding_size=2^62", lambda o, n: on_meta(lambda: n.TimestepEmbedder(8, frequency_embedding_size=2**62)), ValueError, "embedding_dim must be in [2, 2^28]"),
    err("TimestepEmbedder-forward-2d", call(lambda n: n.TimestepEmbedder(8, frequency_embedding_size=4), "forward", torch.zeros(2, 2)), RuntimeError, "timesteps must be a 1-D tensor [N] (one timestep per batch element)"),
    # AxialRotaryEmbedding
    err("AxialRotaryEmbedding-axes_dim-empty", lambda o, n: n.AxialRotaryEmbedding([]), ValueError, "axes_dim must name the rotated width of each axis (e.g. {16, 56, 56} for Flux)"),
    err("AxialRotaryEmbedding-axes_dim-odd", lambda o, n: n.AxialRotaryEmbedding([4, 3]), ValueError, "every axes_dim must be even and >= 2 (each axis rotates pairs of channels) and within posenc's limit of 2^28 channels, but"),
    err("AxialRotaryEmbedding-axes_dim=-2", lambda o, n: n.AxialRotaryEmbedding([-2]), ValueError, "every axes_dim must be even and >= 2 (each axis rotates pairs of channels) and within posenc's limit of 2^28 channels, but"),
    err("AxialRotaryEmbedding-axes_dim=2^62", lambda o, n: n.AxialRotaryEmbedding([2**62]), ValueError, "limit"),
    err("AxialRotaryEmbedding-theta=0", lambda o, n: n.AxialRotaryEmbedding([4], theta=0.0), ValueError, "theta must be finite and >= 5.2e-290 (so that every angle position * theta^-e is a finite"),
    err("AxialRotaryEmbedding-pairing-unknown", lambda o, n: n.AxialRotaryEmbedding([4], pairing="bogus"), ValueError, "pairing must be one of 'half_split', 'interleaved'"),
    err("AxialRotaryEmbedding-forward-ids-columns-mismatch", call(lambda n: n.AxialRotaryEmbedding([2, 2]), "forward", torch.zeros(1, 3, 1, 4), torch.zeros(3, 3)), RuntimeError, "ids must be [N, 2] (one coordinate per token and axis of axes_dim)"),
    err("AxialRotaryEmbedding-forward-head_dim-too-small", call(lambda n: n.AxialRotaryEmbedding([2, 4]), "forward", torch.zeros(1, 3, 1, 4), torch.zeros(3, 2)), RuntimeError, "the head dimension Dh = 4 is smaller than the rotated width 6 (input shape [1, 3, 1, 4])"),
    err("AxialRotaryEmbedding-forward-fewer-ids-than-tokens", call(lambda n: n.AxialRotaryEmbedding([2, 2]), "forward", torch.zeros(1, 3, 1, 4), torch.zeros(2, 2)), Exception, "ids"),
    err("AxialRotaryEmbedding-forward-ids-length-mismatch", call(lambda n: n.AxialRotaryEmbedding([2, 2]), "forward", torch.zeros(1, 3, 1, 4), torch.zeros(4, 2)), Exception, "ids"),
    # VisionRotaryEmbedding
    err("VisionRotaryEmbedding-dim=0", lambda o, n: n.VisionRotaryEmbedding(0), Exception, "dim must be a positive multiple of 4"),
    err("VisionRotaryEmbedding-dim=6", lambda o, n: n.VisionRotaryEmbedding(6), Exception, "dim must be a positive multiple of 4"),
    err("VisionRotaryEmbedding-dim=-4", lambda o, n: n.VisionRotaryEmbedding(-4), Exception, "dim must be a positive multiple of 4"),
    err("VisionRotaryEmbedding-ref_feat_shape=0", lambda o, n: n.VisionRotaryEmbedding(8, ref_feat_shape=[0, 2]), ValueError, "ref_feat_shape must be empty or the pretraining grid [H, W] of sizes >= 1"),
    err("VisionRotaryEmbedding-grid_indexing-unknown", lambda o, n: n.VisionRotaryEmbedding(8, grid_indexing="ji"), ValueError, "grid_indexing must be one of 'ij', 'xy'"),
    err("VisionRotaryEmbedding-num_prefix_tokens=-1", lambda o, n: n.VisionRotaryEmbedding(8, num_prefix_tokens=-1), ValueError, "VisionRotaryEmbedding: num_prefix_tokens must be in [0, 2^28] (the class and register tokens before the patches), but got -1"),
    err("VisionRotaryEmbedding-num_prefix_tokens=2^28+1", lambda o, n: n.VisionRotaryEmbedding(8, num_prefix_tokens=2**28 + 1), ValueError, "VisionRotaryEmbedding: num_prefix_tokens must be in [0, 2^28]"),
    err("VisionRotaryEmbedding-tables-bad-grid", call(lambda n: n.VisionRotaryEmbedding(8), "tables", [0, 3]), RuntimeError, "VisionRotaryEmbedding: "),
    err("VisionRotaryEmbedding-forward-token-count-mismatch", call(lambda n: n.VisionRotaryEmbedding(8), "forward", torch.zeros(1, 2, 4, 8), [2, 2]), RuntimeError, "VisionRotaryEmbedding: expected 1 prefix tokens + 2 x 2 = 5 tokens along dimension 2, but got 4 (shape [1, 2, 4, 8]); pass the patch grid of this input"),
    err("VisionRotaryEmbedding-forward-feat_shape=2^31", call(lambda n: n.VisionRotaryEmbedding(8), "forward", torch.zeros(1, 2, 5, 8), [2**31, 2**31]), RuntimeError, "VisionRotaryEmbedding: feat_shape must hold sizes in [1, 2^28], but got [2147483648, 2147483648]"),
    err("VisionRotaryEmbedding-forward-feat_shape-one-entry", call(lambda n: n.VisionRotaryEmbedding(8), "forward", torch.zeros(1, 2, 5, 8), [4]), RuntimeError, "feat_shape must be"),
    # ALiBi
    err("ALiBi-num_heads=0", lambda o, n: n.ALiBi(0), ValueError, "num_heads must be in [1, 2^28] (posenc's limit of heads)"),
    err("ALiBi-num_heads=-1", lambda o, n: n.ALiBi(-1), ValueError, "num_heads must be in [1, 2^28] (posenc's limit of heads)"),
    err("ALiBi-num_heads=2^62", lambda o, n: n.ALiBi(2**62), ValueError, "num_heads must be in [1, 2^28] (posenc's limit of heads)"),
    err("ALiBi-num_heads=i64max", lambda o, n: n.ALiBi(I64), ValueError, "num_heads must be in [1, 2^28] (posenc's limit of heads)"),
    err("ALiBi-max_bias=0", lambda o, n: n.ALiBi(4, max_bias=0.0), ValueError, "max_bias must be in (0, 64] (the smallest slope is 2^-max_bias)"),
    err("ALiBi-heads=0", lambda o, n: n.ALiBi(4, heads=0), ValueError, "a shard of heads first_head .. first_head + heads - 1 must lie in the model's 4 heads"),
    err("ALiBi-forward-query_length=-1", call(lambda n: n.ALiBi(4), "forward", -1, 3), RuntimeError, "query_length must be >= 1"),
    err("ALiBi-forward-lengths=2^31", call(lambda n: n.ALiBi(4), "forward", 2**31, 2**31), RuntimeError, "the bias' heads * query_length * key_length = 4 * 2147483648 * 2147483648 elements is"),
    err("ALiBi-forward-offset=i64max", call(lambda n: n.ALiBi(4), "forward", 3, 3, I64), RuntimeError, "offset (the position of the first query) must be >= 0 and offset + query_length must fit"),
    err("ALiBi-forward_causal-mask-wrong-length", call(lambda n: n.ALiBi(4), "forward_causal", 4, torch.ones(1, 5)), RuntimeError, "attention_mask must be [batch, key_length] = [batch, 4] (1 for a token, 0 for padding)"),
    err("ALiBi-forward_causal-key_length=0", call(lambda n: n.ALiBi(4), "forward_causal", 0), RuntimeError, "key_length must be >= 1"),
    # RelativePositionBias
    err("RelativePositionBias-num_heads=0", lambda o, n: n.RelativePositionBias(0), ValueError, "num_heads must be >= 1"),
    err("RelativePositionBias-num_heads=2^62", lambda o, n: on_meta(lambda: n.RelativePositionBias(2**62)), ValueError, "limit"),
    err("RelativePositionBias-num_buckets=0", lambda o, n: n.RelativePositionBias(2, num_buckets=0), ValueError, "num_buckets must be >= 4 when bidirectional (each direction needs an exact and a"),
    err("RelativePositionBias-num_buckets=2^62", lambda o, n: n.RelativePositionBias(2, num_buckets=2**62), ValueError, "max_distance must be >= num_buckets (the logarithmic buckets span the distances from"),
    err("RelativePositionBias-max_distance=-1", lambda o, n: n.RelativePositionBias(2, max_distance=-1), ValueError, "max_distance must be >= num_buckets (the logarithmic buckets span the distances from"),
    err("RelativePositionBias-forward-key_length=-1", call(lambda n: n.RelativePositionBias(2), "forward", 3, -1), RuntimeError, "key_length must be >= 1"),
    err("RelativePositionBias-forward-offset=-1", call(lambda n: n.RelativePositionBias(2), "forward", 3, 3, -1), RuntimeError, "offset (the position of the first query, e.g. the number of cached tokens) must be >= 0"),
    err("RelativePositionBias-forward-lengths=2^31", call(lambda n: n.RelativePositionBias(2), "forward", 2**31, 2**31), RuntimeError, "num_heads * query_length * key_length = 2 * 2147483648 * 2147483648 elements is more than"),
    # RelPositionalEncoding / RelPositionMultiheadAttention
    err("RelPositionalEncoding-d_model=0", lambda o, n: n.RelPositionalEncoding(0), ValueError, "d_model must be >= 1"),
    err("RelPositionalEncoding-max_len=0", lambda o, n: n.RelPositionalEncoding(4, max_len=0), ValueError, "length must be >= 1"),
    err("RelPositionalEncoding-max_len=2^62", lambda o, n: n.RelPositionalEncoding(4, max_len=2**62), ValueError, "length + key_length must fit in int64"),
    err("RelPositionalEncoding-legacy-max_len=-1", lambda o, n: n.RelPositionalEncoding(4, max_len=-1, legacy=True), ValueError, "max_len must be >= 1"),
    err("RelPositionalEncoding-dropout=nan", lambda o, n: n.RelPositionalEncoding(4, max_len=8, dropout=math.nan), ValueError, "RelPositionalEncoding: dropout must be in [0, 1], but got nan"),
    err("RelPositionalEncoding-forward-width-mismatch", call(lambda n: n.RelPositionalEncoding(4, max_len=8), "forward", torch.zeros(1, 3, 6)), RuntimeError, "RelPositionalEncoding: expected the last dimension of the input to be d_model = 4, but got 6"),
    err("RelPositionalEncoding-forward-offset-past-max_len", call(lambda n: n.RelPositionalEncoding(4, max_len=8), "forward", torch.zeros(1, 3, 4), 6), RuntimeError, "RelPositionalEncoding: the 6 cached and 3 new positions must fit in the table's max_len = 8 (offset + L <= 8)"),
    err("RelPositionalEncoding-forward-offset=-1", call(lambda n: n.RelPositionalEncoding(4, max_len=8), "forward", torch.zeros(1, 3, 4), -1), RuntimeError, "RelPositionalEncoding: offset must be >= 0, but got -1"),
    err("RelPositionalEncoding-forward-offset=2^63-1", call(lambda n: n.RelPositionalEncoding(4, max_len=8), "forward", torch.zeros(1, 3, 4), 2**63 - 1), RuntimeError, "RelPositionalEncoding: offset + L must fit in int64, but got offset = 9223372036854775807 and L = 3"),
    err("RelPositionalEncoding-forward-x-on-meta", call(lambda n: n.RelPositionalEncoding(4, max_len=8), "forward", torch.zeros(1, 3, 4, device=META)), RuntimeError, "RelPositionalEncoding: expected the input on the device of the encoding table (cpu)"),
    err("RelPositionMultiheadAttention-num_heads=0", lambda o, n: n.RelPositionMultiheadAttention(8, 0), ValueError, "embed_dim must be a positive multiple of num_heads >= 1"),
    err("RelPositionMultiheadAttention-embed_dim=0", lambda o, n: n.RelPositionMultiheadAttention(0, 2), ValueError, "embed_dim must be a positive multiple of num_heads >= 1"),
    err("RelPositionMultiheadAttention-not-divisible", lambda o, n: n.RelPositionMultiheadAttention(6, 4), ValueError, "embed_dim must be a positive multiple of num_heads >= 1"),
    err("RelPositionMultiheadAttention-embed_dim=2^31", lambda o, n: on_meta(lambda: n.RelPositionMultiheadAttention(2**31, 2)), ValueError, "limit"),
    err("RelPositionMultiheadAttention-dropout=2", lambda o, n: n.RelPositionMultiheadAttention(8, 2, dropout=2.0), ValueError, "RelPositionMultiheadAttention: dropout must be in [0, 1], but got 2; pass the probability of zeroing an element"),
    err("RelPositionMultiheadAttention-forward-width-mismatch", call(lambda n: n.RelPositionMultiheadAttention(8, 2), "forward", torch.zeros(1, 3, 8), torch.zeros(1, 3, 8), torch.zeros(1, 3, 6), torch.zeros(1, 5, 8)), RuntimeError, "RelPositionMultiheadAttention: query, key, value and pos_emb must be [B, L, embed_dim = 8]"),
    err("RelPositionMultiheadAttention-forward-pos_emb-length", call(lambda n: n.RelPositionMultiheadAttention(8, 2), "forward", torch.zeros(1, 3, 8), torch.zeros(1, 3, 8), torch.zeros(1, 3, 8), torch.zeros(1, 4, 8)), RuntimeError, "RelPositionMultiheadAttention: pos_emb must be [1 or B, Lq + Lk - 1, embed_dim] = [1 or 1, 5, 8]"),
    err("RelPositionMultiheadAttention-forward-value-length", call(lambda n: n.RelPositionMultiheadAttention(8, 2), "forward", torch.zeros(1, 3, 8), torch.zeros(1, 3, 8), torch.zeros(1, 4, 8), torch.zeros(1, 5, 8)), RuntimeError, "RelPositionMultiheadAttention: key and value must be [B, Lk, 8] with the batch of query [1, 3, 8], but got [1, 3, 8] and [1, 4, 8]"),
    err("RelPositionMultiheadAttention-forward-key-batch", call(lambda n: n.RelPositionMultiheadAttention(8, 2), "forward", torch.zeros(2, 3, 8), torch.zeros(1, 3, 8), torch.zeros(1, 3, 8), torch.zeros(1, 5, 8)), RuntimeError, "RelPositionMultiheadAttention: key and value must be [B, Lk, 8] with the batch of query [2, 3, 8]"),
    err("RelPositionalEncoding-forward-2d", call(lambda n: n.RelPositionalEncoding(4, max_len=8), "forward", torch.zeros(3, 4)), RuntimeError, "RelPositionalEncoding: expected a 3-D input of shape [B, L, D] (batch_first=true), but got a 2-D tensor"),
    err("RelPositionalEncoding-forward-int", call(lambda n: n.RelPositionalEncoding(4, max_len=8), "forward", torch.zeros(1, 3, 4, dtype=torch.long)), RuntimeError, "RelPositionalEncoding: expected a floating-point input"),
    err("TimestepEmbedder-forward-on-meta", call(lambda n: n.TimestepEmbedder(8, frequency_embedding_size=4), "forward", torch.zeros(2, device=META)), RuntimeError, "TimestepEmbedder: expected the timesteps on the module's device (cpu), but got timesteps on meta"),
]



def qk_views(n):
    """q and k as disjoint head ranges of one fused [B, L, 2 H, Dh] buffer (the layout of a fused QKV projection)."""
    fused = torch.cat([X, X], 2)
    return n.RotaryEmbedding(4, 8).forward_qk(fused[:, :, :2], fused[:, :, 2:])


def norms_kept(shape, dtype):
    """A rotation: the result has this shape and dtype and the norm of each pair of channels of ``X``-like inputs."""

    def check(result, o):
        like(shape, dtype)(result, o)
        assert torch.isfinite(result).all()
        torch.testing.assert_close(result.double().norm(dim=-1), torch.ones(shape[:-1], dtype=f64) * math.sqrt(shape[-1]))

    return check


NN_RESULTS = [
    # keyword arguments given as numpy scalars and 0-dim tensors: checked as the numbers they hold
    ok("PositionalEncoding-numpy-and-tensor-arguments", lambda o, n: n.PositionalEncoding(
        __import__("numpy").int64(4), torch.tensor(8), batch_first=__import__("numpy").bool_(True),
        base=__import__("numpy").float32(10000.0))(torch.zeros(1, 2, 4)), like((1, 2, 4), f32, lambda o: o.sinusoidal_table(2, 4)[None])),
    ok("PositionalEncoding-max_len=1-d_model=1", lambda o, n: n.PositionalEncoding(1, 1)(torch.ones(1, 1, 1)), like((1, 1, 1), f32, torch.ones(1, 1, 1))),
    ok("PositionalEncoding-length-0", lambda o, n: PE(n)(torch.zeros(2, 0, 4)), like((2, 0, 4), f32)),
    ok("PositionalEncoding-last-row", lambda o, n: PE(n)(torch.zeros(1, 1, 4), 7), like((1, 1, 4), f32, lambda o: o.sinusoidal_table(8, 4)[7:][None])),
    ok("PositionalEncoding-extrapolate-offset=2^40", lambda o, n: PE(n, beyond_max_len="extrapolate")(torch.zeros(1, 1, 4), 2**40), like((1, 1, 4), f32, lambda o: o.sinusoidal_table(1, 4, offset=2**40)[None])),
    ok("PositionalEncoding-float16", lambda o, n: PE(n)(torch.zeros(1, 3, 4, dtype=f16)), like((1, 3, 4), f16, lambda o: o.sinusoidal_table(3, 4).to(f16)[None])),
    ok("PositionalEncoding-bfloat16", lambda o, n: PE(n)(torch.zeros(1, 3, 4, dtype=bf16)), like((1, 3, 4), bf16, lambda o: o.sinusoidal_table(3, 4).to(bf16)[None])),
    ok("PositionalEncoding-non-contiguous", lambda o, n: PE(n)(torch.zeros(4, 3, 2).transpose(0, 2)), like((2, 3, 4), f32, lambda o: o.sinusoidal_table(3, 4).expand(2, 3, 4))),
    ok("PositionalEncoding-forward_padded-all-padding", lambda o, n: PE(n).forward_padded(torch.ones(1, 3, 4), torch.ones(1, 3, dtype=torch.bool)), like((1, 3, 4), f32, torch.ones(1, 3, 4))),
    ok("PositionalEncoding-on-meta", lambda o, n: PE(n).to(META)(torch.zeros(2, 3, 4, device=META)), like((2, 3, 4), f32)),
    ok("PositionalEncoding-seq-first-batch-1", lambda o, n: PE(n, batch_first=False)(torch.zeros(3, 1, 4)), like((3, 1, 4), f32, lambda o: o.sinusoidal_table(3, 4)[:, None])),
    ok("LearnedPositionalEmbedding-length-0", lambda o, n: LPE(n)(torch.zeros(2, 0, 4)), like((2, 0, 4), f32)),
    ok("LearnedPositionalEmbedding-init_std=0", lambda o, n: LPE(n, init_std=0.0)(torch.ones(1, 8, 4)), like((1, 8, 4), f32, torch.ones(1, 8, 4))),
    ok("TokenAndPositionEmbedding-length-0", lambda o, n: TPE(n)(torch.zeros(1, 0, dtype=i64)), like((1, 0, 4), f32)),
    ok("TokenAndPositionEmbedding-int32-ids", lambda o, n: TPE(n, scale=0.0)(torch.zeros(1, 2, dtype=torch.int32)), like((1, 2, 4), f32, lambda o: o.sinusoidal_table(2, 4)[None])),
    ok("TokenAndPositionEmbedding-all-padding", lambda o, n: TPE(n, padding_idx=0)(torch.zeros(1, 3, dtype=i64)), like((1, 3, 4), f32, torch.zeros(1, 3, 4))),
    ok("TokenAndPositionEmbedding-extrapolate-offset=2^40", lambda o, n: TPE(n, scale=0.0, beyond_max_len="extrapolate")(torch.zeros(1, 1, dtype=i64), 2**40), like((1, 1, 4), f32, lambda o: o.sinusoidal_table(1, 4, offset=2**40)[None])),
    # (numpy scalars and 0-dim tensors among the options and rope parameters: the numbers they hold)
    ok("RotaryEmbedding-numpy-and-tensor-arguments", lambda o, n: (n.RotaryEmbedding(
        __import__("numpy").int64(4), torch.tensor(8), base=__import__("numpy").float32(500.0),
        rope_scaling={"rope_type": "linear", "factor": torch.tensor(2.0)})(X),
        n.RotaryEmbedding(4, 8, base=500.0, rope_scaling={"rope_type": "linear", "factor": 2.0})(X)),
        lambda r, o: torch.testing.assert_close(r[0], r[1], rtol=0, atol=0)),
    ok("RotaryEmbedding-last-row", lambda o, n: ROPE(n)(X[:, :1], 7), like((1, 1, 2, 4), f32, lambda o: o.apply_rotary(X[:, :1], *cos_sin(8, 4), offset=7))),
    ok("RotaryEmbedding-length-0", lambda o, n: ROPE(n)(torch.zeros(1, 0, 2, 4)), like((1, 0, 2, 4), f32)),
    ok("RotaryEmbedding-extrapolate-offset=2^40", lambda o, n: ROPE(n, beyond_max_len="extrapolate")(torch.ones(1, 2, 1, 4), 2**40), norms_kept((1, 2, 1, 4), f32)),
    ok("RotaryEmbedding-float16", lambda o, n: ROPE(n)(torch.ones(1, 3, 2, 4, dtype=f16)), lambda r, o: like((1, 3, 2, 4), f16, lambda o: o.apply_rotary(torch.ones(1, 3, 2, 4), *cos_sin(8, 4)).to(f16))(r, o)),
    ok("RotaryEmbedding-bfloat16", lambda o, n: ROPE(n)(torch.ones(1, 3, 2, 4, dtype=bf16)), lambda r, o: like((1, 3, 2, 4), bf16, lambda o: o.apply_rotary(torch.ones(1, 3, 2, 4), *cos_sin(8, 4)).to(bf16))(r, o)),
    ok("RotaryEmbedding-rotary_dim=2-passes-rest", lambda o, n: ROPE(n, rotary_dim=2)(torch.ones(1, 2, 1, 4))[..., 2:], like((1, 2, 1, 2), f32, torch.ones(1, 2, 1, 2))),
    ok("RotaryEmbedding-forward_qk-fused-buffer-views", lambda o, n: qk_views(n), pair(*[like((1, 3, 2, 4), f32, lambda o: o.apply_rotary(X, *cos_sin(8, 4)))] * 2)),
    ok("RotaryEmbedding-positions-padding=-1", lambda o, n: ROPE(n).forward_positions(X, torch.tensor([-1, -1, -1])), like((1, 3, 2, 4), f32, X)),
    ok("RotaryEmbedding-mrope-section-with-zero", lambda o, n: ROPE(n, mrope_section=[2, 0, 0]).forward_positions(X, torch.zeros(3, 1, 3, dtype=i64)), like((1, 3, 2, 4), f32, X)),
    ok("Timesteps-empty", lambda o, n: n.Timesteps(8)(torch.zeros(0)), like((0, 8), f32)),
    ok("Timesteps-embedding_dim=2", lambda o, n: n.Timesteps(2, downscale_freq_shift=0.0)(torch.zeros(1)), like((1, 2), f32, torch.tensor([[0.0, 1.0]]))),
    ok("TimestepEmbedder-one-timestep", lambda o, n: n.TimestepEmbedder(3, frequency_embedding_size=4)(torch.zeros(1)), like((1, 3), f32)),
    ok("AxialRotaryEmbedding-zero-ids-is-identity", lambda o, n: n.AxialRotaryEmbedding([2, 2])(X, torch.zeros(3, 2)), like((1, 3, 2, 4), f32, X)),
    ok("AxialRotaryEmbedding-no-tokens", lambda o, n: n.AxialRotaryEmbedding([2, 2])(torch.zeros(1, 0, 2, 4), torch.zeros(0, 2)), like((1, 0, 2, 4), f32)),
    ok("VisionRotaryEmbedding-grid-1x1-is-identity", lambda o, n: n.VisionRotaryEmbedding(8)(torch.ones(1, 2, 2, 8), [1, 1]), like((1, 2, 2, 8), f32, torch.ones(1, 2, 2, 8))),
    ok("VisionRotaryEmbedding-no-prefix", lambda o, n: n.VisionRotaryEmbedding(8, num_prefix_tokens=0)(torch.ones(1, 2, 1, 8), [1, 1]), like((1, 2, 1, 8), f32, torch.ones(1, 2, 1, 8))),
    ok("ALiBi-1x1", lambda o, n: n.ALiBi(2)(1, 1), like((2, 1, 1), f32, torch.zeros(2, 1, 1))),
    ok("ALiBi-offset-2^40", lambda o, n: n.ALiBi(1, max_bias=1.0)(1, 1, 2**40), like((1, 1, 1), f32, torch.full((1, 1, 1), -0.5 * 2**40))),
    ok("ALiBi-forward_causal-mask-all-padding", lambda o, n: n.ALiBi(1).forward_causal(2, torch.zeros(1, 2, dtype=i64)), like((1, 1, 1, 2), f32)),
    ok("RelativePositionBias-1x1", lambda o, n: n.RelativePositionBias(2)(1, 1), like((1, 2, 1, 1), f32)),
    ok("RelPositionalEncoding-length-1", lambda o, n: n.RelPositionalEncoding(4, max_len=8, scale_input=False)(torch.ones(1, 1, 4))[1], like((1, 1, 4), f32, torch.tensor([[[0.0, 1.0, 0.0, 1.0]]]))),
    ok("RelPositionalEncoding-no-frames", lambda o, n: n.RelPositionalEncoding(4, max_len=8)(torch.ones(2, 0, 4))[1], like((1, 0, 4), f32)),
    ok("RelPositionalEncoding-offset-fills-table", lambda o, n: n.RelPositionalEncoding(4, max_len=8)(torch.ones(1, 2, 4), 6)[1], like((1, 9, 4), f32)),
    ok("RelPositionMultiheadAttention-length-1", lambda o, n: n.RelPositionMultiheadAttention(8, 2)(*[torch.ones(1, 1, 8)] * 4), like((1, 1, 8), f32)),
]



# --- the posenc program ----------------------------------------------------------------------------
# "{tmp}" in an argument is the test's temporary directory, "{config}" a config.json there holding
# the row's config text.


def cli(id, args, stderr, config=None, xfail=None):
    """``posenc ARGS`` must exit with a positive status and say ``stderr`` on stderr."""
    marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
    return pytest.param(args, config, ("error", stderr, ()), id=id, marks=marks)


def cli_ok(id, args, stdout, files=(), config=None):
    """``posenc ARGS`` must exit with 0, say ``stdout`` on stdout and write ``files``."""
    return pytest.param(args, config, ("ok", stdout, files), id=id)


def hf(**fields):
    config = {"hidden_size": 64, "num_attention_heads": 4, "rope_theta": 10000, "max_position_embeddings": 128}
    config.update(fields)
    return json.dumps({k: v for k, v in config.items() if v is not None})


TABLE = ["table", "--d-model", "4", "--max-len"]
HF_ROPE = ["rope", "--hf-config", "{config}"]
OUT = ["-o", "{tmp}/a.pt"]
SINUSOIDAL = ["export", "--max-len", "8", "--d-model", "4"]
ROTARY = ["export", "--module", "rotary", "--max-len", "8", "--head-dim", "4"]
PLOT = ["plot", "-o", "{tmp}", "--width", "200", "--height", "200", "--max-len", "2", "--grid", "1"]

CLI_ROWS = [
    # posenc table
    cli("table-max-len=0", TABLE + ["0"], "--max-len: must be an integer >= 1, but got 0"),
    cli("table-max-len=-1", TABLE + ["-1"], "--max-len: must be an integer >= 1, but got -1"),
    cli("table-max-len=abc", TABLE + ["abc"], "--max-len: must be an integer >= 1, but got abc"),
    cli("table-max-len=2^31", TABLE + [str(2**31)], "max_len * d_model = 2147483648 * 4 elements is over posenc's limit of 2^28"),
    cli("table-max-len=2^62", TABLE + [str(2**62)], "max_len * d_model = 4611686018427387904 * 4 elements is over posenc's limit of 2^28"),
    cli("table-max-len=i64max", TABLE + [str(I64)], "max_len * d_model = 9223372036854775807 * 4 elements is over posenc's limit of 2^28"),
    cli("table-max-len=2^64", TABLE + [str(2**64)], "18446744073709551616"),
    cli("table-d-model=0", ["table", "--max-len", "4", "--d-model", "0"], "--d-model: must be an integer >= 1, but got 0"),
    cli("table-d-model=2^62", ["table", "--max-len", "4", "--d-model", str(2**62)], "max_len * d_model = 4 * 4611686018427387904 elements is over posenc's limit"),
    cli("table-base=0", TABLE + ["4", "--base", "0"], "--base: must be a finite number > 0, but got 0"),
    cli("table-base=nan", TABLE + ["4", "--base", "nan"], "--base: must be a finite number > 0, but got nan"),
    cli("table-base=inf", TABLE + ["4", "--base", "inf"], "--base: must be a finite number > 0, but got inf"),
    cli("table-offset=-1", TABLE + ["4", "--offset", "-1"], "--offset: must be an integer >= 0, but got -1"),
    cli("table-offset=i64max", TABLE + ["4", "--offset", str(I64)], "offset + max_len must fit in int64"),
    cli("table-format-unknown", TABLE + ["4", "--format", "json"], "--format: json not in {text,csv}"),
    cli("table-precision=18", TABLE + ["4", "--precision", "18"], "--precision: Value 18 not in range 0 to 17"),
    cli("table-max-len-missing", ["table", "--d-model", "4"], "--max-len is required"),
    cli("table-unknown-option", TABLE + ["4", "--bogus"], "The following argument was not expected: --bogus"),
    cli("unknown-subcommand", ["bogus"], "bogus"),
    # posenc rope --hf-config FILE
    cli("rope-config-missing", ["rope", "--hf-config", "{tmp}/missing.json"], "--hf-config: File does not exist"),
    cli("rope-config-is-directory", ["rope", "--hf-config", "{tmp}"], "--hf-config: File is actually a directory"),
    cli("rope-config-malformed", HF_ROPE, "config.json: not valid JSON", config='{"hidden_size": 64,'),
    cli("rope-config-empty", HF_ROPE, "config.json: not valid JSON", config=""),
    cli("rope-config-array", HF_ROPE, "config.json: expected a JSON object (a model's config.json)", config="[1, 2]"),
    cli("rope-config-NaN-literal", HF_ROPE, "config.json: not valid JSON", config=hf(max_position_embeddings=128).replace("10000", "NaN")),
    cli("rope-config-number-overflows", HF_ROPE, "config.json: not valid JSON", config=hf(max_position_embeddings=128).replace("128", "1e400")),
    cli("rope-rope_type-unknown", HF_ROPE, "unknown rope_scaling.rope_type 'bogus'", config=hf(rope_scaling={"rope_type": "bogus", "factor": 2})),
    cli("rope-factor-string", HF_ROPE, "rope_scaling.factor must be a number, but is a string", config=hf(rope_scaling={"rope_type": "linear", "factor": "2"})),
    # (a config may not spell a number as posenc.nn's arguments do)
    cli("rope-factor-spelled-inf", HF_ROPE, "rope_scaling.factor must be a number, but is a string", config=hf(rope_scaling={"rope_type": "linear", "factor": "inf"})),
    cli("rope-linear-without-factor", HF_ROPE, "rope_scaling.factor is needed by rope type 'linear'", config=hf(rope_scaling={"rope_type": "linear"})),
    cli("rope-num_attention_heads=0", HF_ROPE, "num_attention_heads must be a whole number >= 1, but is 0", config=hf(num_attention_heads=0)),
    cli("rope-head_dim=0", HF_ROPE, "the head width must be >= 2, but is 0 (head_dim)", config=hf(head_dim=0)),
    cli("rope-head_dim=2^62", HF_ROPE, "limit", config=hf(head_dim=2**62)),
    cli("rope-hidden_size-missing", HF_ROPE, "head_dim or hidden_size is needed", config=hf(hidden_size=None)),
    cli("rope-hidden_size-string", HF_ROPE, "hidden_size must be a number, but is a string", config=hf(hidden_size="64")),
    cli("rope-rope_theta=-1", HF_ROPE, "rope_theta", config=hf(rope_theta=-1)),
    cli("rope-partial_rotary_factor=0", HF_ROPE, "partial_rotary_factor must lie in (0, 1], but is 0", config=hf(partial_rotary_factor=0)),
    cli("rope-partial_rotary_factor=2", HF_ROPE, "partial_rotary_factor must lie in (0, 1], but is 2", config=hf(partial_rotary_factor=2)),
    cli("rope-max_position_embeddings=-1", HF_ROPE, "max_position_embeddings must be a whole number >= 1", config=hf(max_position_embeddings=-1)),
    cli("rope-max_position_embeddings=2^62", HF_ROPE, "limit", config=hf(max_position_embeddings=2**62)),
    cli("rope-seq-len=0", HF_ROPE + ["--seq-len", "0"], "--seq-len: must be an integer >= 1, but got 0", config=hf()),
    cli("rope-format-unknown", HF_ROPE + ["--format", "xml"], "--format: xml not in {text,csv}", config=hf()),
    cli("rope-hf-config-missing", ["rope"], "--hf-config is required"),
    # posenc export ... -o FILE
    cli("export-max-len=0", ["export", "--max-len", "0", "--d-model", "4"] + OUT, "--max-len: must be an integer >= 1, but got 0"),
    cli("export-max-len=2^31", ["export", "--max-len", str(2**31), "--d-model", "4"] + OUT, "max_len * d_model = 2147483648 * 4 elements is over posenc's limit"),
    cli("export-max-len=i64max", ["export", "--max-len", str(I64), "--d-model", "4"] + OUT, "is over posenc's limit"),
    cli("export-d-model=2^62", ["export", "--max-len", "8", "--d-model", str(2**62)] + OUT, "max_len * d_model = 8 * 4611686018427387904 elements is over posenc's limit"),
    cli("export-d-model-missing", ["export", "--max-len", "8"] + OUT, "--d-model"),
    cli("export-output-missing", SINUSOIDAL, "--output is required"),
    cli("export-output-in-missing-directory", SINUSOIDAL + ["-o", "{tmp}/missing/a.pt"], "the directory must exist and be writable"),
    cli("export-output-is-directory", SINUSOIDAL + ["-o", "{tmp}"], "is a directory; name a file in it"),
    cli("export-module-unknown", SINUSOIDAL + ["--module", "bogus"] + OUT, "--module: bogus not in {sinusoidal,rotary}"),
    cli("export-format-unknown", SINUSOIDAL + ["--format", "tflite"] + OUT, "--format: tflite not in {torchscript,safetensors,onnx}"),
    cli("export-onnx-extrapolate", SINUSOIDAL + ["--format", "onnx", "--extrapolate"] + OUT, "--extrapolate: an ONNX graph holds the table's rows"),
    cli("export-scale=nan", SINUSOIDAL + ["--scale", "nan"] + OUT, "scale must be finite, but got nan"),
    cli("export-head-dim-with-sinusoidal", SINUSOIDAL + ["--head-dim", "4"] + OUT, "applies to --module rotary only"),
    cli("export-d-model-with-rotary", ROTARY + ["--d-model", "4"] + OUT, "applies to --module sinusoidal only"),
    cli("export-rotary-head-dim-missing", ["export", "--module", "rotary", "--max-len", "8"] + OUT, "--head-dim"),
    cli("export-rotary-dim-above-head-dim", ROTARY + ["--rotary-dim", "6"] + OUT, "rotary_dim (6) must be <= head_dim (4)"),
    cli("export-rotary-dim-odd", ROTARY + ["--rotary-dim", "3"] + OUT, "the rotated width must be even and >= 2, but got 3"),
    cli("export-head-dim-odd", ["export", "--module", "rotary", "--max-len", "8", "--head-dim", "5"] + OUT, "the rotated width must be even and >= 2, but got 5"),
    cli("export-head-dim=2^62", ["export", "--module", "rotary", "--max-len", "8", "--head-dim", str(2**62)] + OUT, "head_dim"),
    cli("export-rotary-max-len=2^31", ["export", "--module", "rotary", "--max-len", str(2**31), "--head-dim", "4"] + OUT, "max_len * rotary_dim / 2 = 2147483648 * 2 elements, which is over posenc's limit of 2^28 elements (1 GiB in float32); set cached_len"),
    cli("export-rotary-cached-len=2^31", ["export", "--module", "rotary", "--max-len", str(2**31), "--cached-len", str(2**31), "--head-dim", "4"] + OUT, "cached_len * rotary_dim / 2 = 2147483648 * 2 elements, which is over posenc's limit"),
    cli("export-rotary-cached-len-past-max-len", ["export", "--module", "rotary", "--max-len", "8", "--cached-len", "9", "--head-dim", "4"] + OUT, "cached_len must be in [1, max_len = 8], but got 9"),
    cli("export-hf-config-malformed", ["export", "--module", "rotary", "--hf-config", "{config}"] + OUT, "config.json: not valid JSON", config="{"),
    cli("export-hf-config-max_position_embeddings=-1", ["export", "--module", "rotary", "--hf-config", "{config}"] + OUT, "max_position_embeddings must be a whole number >= 1", config=hf(max_position_embeddings=-1)),
    cli("export-hf-config-with-sinusoidal", ["export", "--hf-config", "{config}"] + OUT, "--hf-config: applies to --module rotary only", config=hf()),
    # posenc plot -o DIR
    cli("plot-max-len=1", PLOT + ["--max-len", "1"], "--max-len: Value 1 not in range 2 to 4096"),
    cli("plot-max-len=4097", PLOT + ["--max-len", "4097"], "--max-len: Value 4097 not in range 2 to 4096"),
    cli("plot-d-model=0", PLOT + ["--d-model", "0"], "--d-model: Value 0 not in range 1 to 4096"),
    cli("plot-grid=0", PLOT + ["--grid", "0"], "--grid: Value 0 not in range 1 to 192"),
    cli("plot-grid=193", PLOT + ["--grid", "193"], "--grid: Value 193 not in range 1 to 192"),
    cli("plot-grid-three-sizes", ["plot", "-o", "{tmp}", "--grid", "2", "3", "4"], "--grid: At Most 2 required but received 3"),
    cli("plot-embed-dim=6", PLOT + ["--embed-dim", "6"], "--embed-dim: must be a multiple of 4, but got 6"),
    cli("plot-channel-past-embed-dim", PLOT + ["--embed-dim", "8", "--channels", "8"], "--channels: must be below --embed-dim (8), but got 8"),
    cli("plot-33-channels", PLOT + ["--channels"] + [str(c) for c in range(33)], "--channels: at most 32 channels (one panel each), but got 33"),
    cli("plot-width=199", PLOT + ["--width", "199"], "--width: Value 199 not in range 200 to 10000"),
    cli("plot-head-dim=3", PLOT + ["--head-dim", "3"], "--head-dim: must be a multiple of 2, but got 3"),
    cli("plot-rope-theta=1", PLOT + ["--rope-theta", "1"], "--rope-theta: must be a finite number > 1, but got 1"),
    cli("plot-rope-factor=0.5", PLOT + ["--rope-factor", "0.5"], "--rope-factor: must be a finite number >= 1, but got 0.5"),
    cli("plot-original-max-len=i64max", PLOT + ["--original-max-len", str(I64)], "the extended context factor * original_max_len = 8 * 9223372036854775807 must lie in [1, 9e15)"),
    cli("plot-rope-factor=1e308", PLOT + ["--rope-factor", "1e308"], "must lie in [1, 9e15); lower --rope-factor or --original-max-len"),
    cli("plot-base=1e-300", PLOT + ["--base", "1e-300"], "base must be finite and >= 5.2e-290"),
    cli("plot-base-size=0", PLOT + ["--base-size", "0"], "--base-size: must be an integer >= 1, but got 0"),
    cli("plot-output-is-a-file", ["plot", "-o", "{config}"], "exists but is not a directory; choose another output directory", config="{}"),
    # extreme but valid
    cli_ok("table-1x1", ["table", "--max-len", "1", "--d-model", "1"], "tensor([[0.0000]])"),
    cli_ok("table-csv-precision-0", ["table", "--max-len", "1", "--d-model", "2", "--format", "csv", "--precision", "0"], "0,1"),
    cli_ok("table-offset=2^40", ["table", "--max-len", "1", "--d-model", "2", "--offset", str(2**40), "--format", "csv"], "-0.405705012,-0.914004072"),
    cli_ok("rope-hidden_size-floor-divided-like-transformers", HF_ROPE, "head_dim 16", config=hf(hidden_size=65)),
    cli_ok("rope-dynamic-seq-len=i64max", HF_ROPE + ["--seq-len", str(I64)], "rope_type dynamic", config=hf(rope_scaling={"rope_type": "dynamic", "factor": 2})),
    cli_ok("export-1x1", ["export", "--max-len", "1", "--d-model", "1"] + OUT, "wrote", files=["a.pt"]),
    cli_ok("export-rotary-head-dim-2-safetensors", ["export", "--module", "rotary", "--max-len", "1", "--head-dim", "2", "--format", "safetensors", "-o", "{tmp}/r.safetensors"], "wrote", files=["r.safetensors"]),
    cli_ok("plot-smallest-into-new-directory", ["plot", "-o", "{tmp}/new/dir", "--width", "200", "--height", "200", "--max-len", "2", "--d-model", "1", "--grid", "1", "--embed-dim", "4", "--head-dim", "2"], "wrote",
           files=["new/dir/positional_encoding.png", "new/dir/position_similarity.png", "new/dir/sincos_2d.png", "new/dir/rope_spectrum.png"]),
]


# --- the tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn, expected", OP_ERRORS + VISION_ERRORS + NN_ERRORS)
def test_errors(posenc_ops, posenc, fn, expected):
    """Operators and posenc.nn modules: a clean error saying what must hold."""
    exc, message = expected
    with pytest.raises(exc) as info:
        fn(posenc_ops, posenc.nn)
    assert message in str(info.value)


@pytest.mark.parametrize("fn, check", OP_RESULTS + NN_RESULTS)
def test_results(posenc_ops, posenc, fn, check):
    """Operators and posenc.nn modules: the exact result of an extreme but valid call."""
    check(fn(posenc_ops, posenc.nn), posenc_ops)


@pytest.mark.parametrize("args, config, expected", CLI_ROWS)
def test_cli(posenc_cli, tmp_path, args, config, expected):
    """The posenc program: a positive exit status and a message on stderr, or its output."""
    if config is not None:
        (tmp_path / "config.json").write_text(config)
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{config}", str(tmp_path / "config.json")) for a in args]
    result = subprocess.run([posenc_cli, *argv], capture_output=True, text=True, timeout=60)
    kind, text, files = expected
    if kind == "error":
        assert result.returncode > 0, (result.returncode, result.stdout, result.stderr)  # an exit status, never a signal
        assert text in result.stderr, result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert text in result.stdout, result.stdout
        for name in files:
            assert (tmp_path / name).stat().st_size > 0, name

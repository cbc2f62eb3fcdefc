"""Independent Python references for posenc's tests, written from the paper's formula.

``ReferencePositionalEncoding`` is the usual PyTorch module (a buffer ``pe`` of shape
``[1, max_len, d_model]``, ``forward(x) = x + pe[:, offset:offset + L]``), with the table built in
a chosen dtype: float32 reproduces what typical Python code computes, float64 is the accurate
reference the tolerances are measured against.
"""

import math

import torch

# Rounding a value of magnitude <= 1 to float32 moves it by at most half an ulp of [0.5, 1).
FLOAT32_ROUNDING = 2.0 ** -25
# Unit roundoff (the relative error of one rounding to nearest): 2^-p for p significant bits.
FLOAT32_EPS_HALF = 2.0 ** -24  # 24 bits
BFLOAT16_EPS_HALF = 2.0 ** -8  # 8 bits
FLOAT16_EPS_HALF = 2.0 ** -11  # 11 bits


def reference_table(max_len, d_model, base=10000.0, offset=0, dtype=torch.float64):
    """The ``[max_len, d_model]`` table computed with torch operations in ``dtype``."""
    position = torch.arange(offset, offset + max_len, dtype=dtype).unsqueeze(1)
    column = torch.arange(d_model)
    exponent = (column - column % 2).to(dtype) / d_model
    frequency = torch.pow(torch.tensor(base, dtype=dtype), -exponent)
    angle = position * frequency
    return torch.where(column % 2 == 0, torch.sin(angle), torch.cos(angle))


def math_value(position, column, d_model, base=10000.0):
    """One entry of the table with Python's math module (float64, correctly rounded libm)."""
    angle = position * base ** (-(column - column % 2) / d_model)
    return math.sin(angle) if column % 2 == 0 else math.cos(angle)


class ReferencePositionalEncoding(torch.nn.Module):
    def __init__(self, d_model, max_len, base=10000.0, batch_first=True, table_dtype=torch.float32):
        super().__init__()
        self.batch_first = batch_first
        self.register_buffer("pe", reference_table(max_len, d_model, base, dtype=table_dtype).unsqueeze(0))

    def forward(self, x, offset: int = 0):
        length = x.size(1) if self.batch_first else x.size(0)
        rows = self.pe[0, offset:offset + length]
        rows = rows.unsqueeze(0) if self.batch_first else rows.unsqueeze(1)
        return (x + rows).to(x.dtype)


def expected_exact(x, offset, batch_first, base=10000.0):
    """x + PE in float64 with the float64 table: the value every implementation approximates."""
    length = x.size(1) if batch_first else x.size(0)
    rows = reference_table(length, x.size(2), base, offset, torch.float64)
    rows = rows.unsqueeze(0) if batch_first else rows.unsqueeze(1)
    return x.to(torch.float64) + rows


def tolerance(dtype, table_dtype=torch.float32):
    """(atol, rtol) bounding |result - expected_exact| for an output of ``dtype``.

    The table entry carries its own rounding (2^-25 absolute for a float32 table, ~1e-16 for a
    float64 one); the sum is rounded once to float32 (or float64) and, for float16/bfloat16, once
    more to the output dtype. Each rounding is at most half an ulp, i.e. relative eps/2.
    """
    table_error = FLOAT32_ROUNDING if table_dtype == torch.float32 else 1e-15
    relative = {
        torch.float64: 2.0 ** -53 if table_dtype == torch.float64 else FLOAT32_EPS_HALF,
        torch.float32: FLOAT32_EPS_HALF,
        torch.bfloat16: BFLOAT16_EPS_HALF + FLOAT32_EPS_HALF,
        torch.float16: FLOAT16_EPS_HALF + FLOAT32_EPS_HALF,
    }[dtype]
    # 1% headroom on each bound for the float64 reference's own rounding.
    return table_error * 1.01 + 1e-15, relative * 1.01


def max_error(actual, expected):
    return (actual.to(torch.float64) - expected.to(torch.float64)).abs().max().item()


def assert_within_bound(actual, expected, dtype, table_dtype=torch.float32):
    atol, rtol = tolerance(dtype, table_dtype)
    excess = (actual.to(torch.float64) - expected).abs() - (atol + rtol * expected.abs())
    assert excess.max().item() <= 0, (
        f"{dtype}: error exceeds atol={atol:.3g} + rtol={rtol:.3g}*|expected| by {excess.max().item():.3g}")


def tensor2tensor_signal(length, channels, min_timescale=1.0, max_timescale=1.0e4, start_index=0):
    """tensor2tensor's get_timing_signal_1d (also fairseq's SinusoidalPositionalEmbedding table),
    written from its definition in float64: [sin | cos] of channels // 2 log-spaced timescales,
    zero-padded to an odd width."""
    position = torch.arange(start_index, start_index + length, dtype=torch.float64)
    num_timescales = channels // 2
    increment = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * torch.exp(torch.arange(num_timescales, dtype=torch.float64) * -increment)
    scaled_time = position.unsqueeze(1) * inv_timescales.unsqueeze(0)
    signal = torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)
    return torch.nn.functional.pad(signal, (0, channels % 2))


def marian_table(length, dim):
    """HF Marian/BART's sinusoidal table in float64: the paper's frequencies, the sines of the even
    columns first, then the cosines of the odd ones."""
    full = reference_table(length, dim, dtype=torch.float64)
    return torch.cat([full[:, 0::2], full[:, 1::2]], dim=1)


def rope_cos_sin(positions, rotary_dim, base=10000.0):
    """cos and sin of position * base^(-2i / rotary_dim) in float64: [N, rotary_dim / 2]."""
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angle = positions.to(torch.float64).reshape(-1, 1) * inv_freq
    return torch.cos(angle), torch.sin(angle)


def rope_half_split(x, cos, sin, rotary_dim):
    """HF LLaMA's apply_rotary_pos_emb: x * cos + rotate_half(x) * sin on the first rotary_dim
    channels, with cos/sin repeated over both halves. x [B, L, H, D]; cos/sin [L, R/2]."""
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    cos = torch.cat([cos, cos], -1)[None, :, None, :]
    sin = torch.cat([sin, sin], -1)[None, :, None, :]
    half = rotary_dim // 2
    rotated_half = torch.cat([-rot[..., half:], rot[..., :half]], -1)
    return torch.cat([rot * cos + rotated_half * sin, rest], -1)


def rope_interleaved(x, cos, sin, rotary_dim):
    """torchtune's RotaryPositionalEmbeddings (GPT-J pairs (2i, 2i + 1)). x [B, L, H, D]."""
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    pairs = rot.reshape(*rot.shape[:-1], rotary_dim // 2, 2)
    cos = cos[None, :, None, :]
    sin = sin[None, :, None, :]
    out = torch.stack([pairs[..., 0] * cos - pairs[..., 1] * sin, pairs[..., 1] * cos + pairs[..., 0] * sin], -1)
    return torch.cat([out.flatten(-2), rest], -1)


def columns_of(d_model, base=10000.0):
    """The paper's column plan (frequency, kind 0 = sine / 1 = cosine) of an interleaved table."""
    column = torch.arange(d_model, dtype=torch.float64)
    frequency = base ** (-2.0 * torch.div(column, 2, rounding_mode="floor") / d_model)
    return torch.stack([frequency, column % 2])


def inv_freq_of(rotary_dim, base=10000.0):
    return base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)

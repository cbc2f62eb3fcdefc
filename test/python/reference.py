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

"""ONNX export of posenc.nn modules.

``posenc.onnx.export(module, args)`` is ``torch.onnx.export(module, args, dynamo=True)`` with a
translation of each posenc operator into standard ONNX operators (opset 23: the ``RotaryEmbedding``
operator for rotations, plain operators elsewhere), so that ONNX Runtime, or any other runtime of
opset 23, runs the exported model without posenc. Lengths stay dynamic where ``dynamic_shapes``
(as ``torch.export`` takes them) says so. ``translation_table()`` gives the translations for a
``torch.onnx.export`` call of your own (a whole model that uses posenc.nn modules).

What exports: the operators below, called as posenc.nn's modules call them.

* ``add_position_table`` (``PositionalEncoding``, ``LearnedPositionalEmbedding``): consecutive rows
  from ``offset``, or integer positions ``[L]`` / ``[B, L]`` with -1 for padding; the sum in
  float32 (float64 for float64 inputs) rounded once, as posenc's kernels round it; with a
  ``columns`` plan (``PositionalEncoding`` with ``beyond_max_len="extrapolate"`` or fractional
  positions), rows past the table and at fractional positions from float64 angles, as posenc
  computes them;
* ``add_positional_encoding`` (rows computed from the definition): float64 angles, as posenc;
* ``apply_rotary`` / ``apply_rotary_qk`` (``RotaryEmbedding.forward``, ``forward_positions`` with
  integer positions, ``forward_qk``) from the cached cos/sin tables: ONNX's ``RotaryEmbedding``
  (float32, and float16/bfloat16 turned in float32 as posenc turns them), plain operators for
  float64; heads first or not, either pairing, a partial rotation, the inverse rotation, -1 for
  padding;
* ``token_and_position_embedding`` (``TokenAndPositionEmbedding``, eval mode);
* ``timestep_embedding`` (``Timesteps``, ``TimestepEmbedder``): float64 angles, as posenc;
* ``RelPositionalEncoding`` and ``RelPositionMultiheadAttention`` (eval mode): ATen operations below
  their call operators (``rel_shift`` a reshape and narrow of the scores), batch and frame count
  dynamic;
* ``alibi_bias`` (``ALiBi.forward``), ``alibi_causal_bias`` without an attention mask
  (``ALiBi.forward_causal``) and ``relative_position_bias`` (T5's ``RelativePositionBias``): the
  lengths may be sizes of the model's inputs and stay dynamic.

What does not, refused at export by a message that says so (``ExportUnsupported``): rotary rows
computed per call (``RotaryEmbedding`` with ``beyond_max_len="extrapolate"``, fewer cached rows than
``max_len``, length-dependent rope types, fractional positions: their frequencies depend on the
call), multimodal ``[3, B, L]`` positions (M-RoPE), the vision and axial rotary tables (computed per
call from the patch grid), and dropout in training mode. The table builders a
module calls at construction (``sinusoidal_table``, ``rotary_tables``, ...) leave constants in the
graph: the module's buffers.

An ONNX graph has no place for posenc's argument checks: a position past a table is an error of
the runtime's ``Gather``, not posenc's message.
"""

import math
import os
import shutil
import sys
import tempfile
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch

__all__ = ["OPSET", "ExportUnsupported", "translation_table", "export", "Method"]

#: The opset of the exported graphs: 23, the first with the standard ``RotaryEmbedding``.
OPSET = 23

# onnx.TensorProto's data types, by number (the exporter's values carry them as ir.DataType)
_FLOAT, _INT64, _BOOL, _DOUBLE = 1, 7, 9, 11


class ExportUnsupported(RuntimeError):
    """A posenc operator call that has no ONNX translation; the message says which and why."""


def _refuse(operator: str, why: str) -> None:
    raise ExportUnsupported(f"posenc.onnx: posenc::{operator} cannot be exported to ONNX {why}")


def _opset():
    try:
        from onnxscript import opset23
    except ImportError as error:
        raise ImportError("posenc.onnx needs onnxscript (and onnx) to translate posenc's operators: "
                          f"pip install onnxscript ({error})") from error
    return opset23


def _dtype(value) -> int:
    return int(value.dtype)


def _accumulator(value) -> int:
    """The dtype posenc adds and rotates in: float64 for float64 inputs, float32 for any other."""
    return _DOUBLE if _dtype(value) == _DOUBLE else _FLOAT


def _ints(op, values: Sequence[int]):
    return op.Constant(value_ints=[int(v) for v in values])


def _scalar(op, value: float, dtype: int):
    """A scalar constant of `dtype` holding `value` (a float64 one for float64 arithmetic: value_float
    would round it to float32 first)."""
    if dtype == _DOUBLE:
        import onnx

        return op.Constant(value=onnx.helper.make_tensor("value", onnx.TensorProto.DOUBLE, [], [float(value)]))
    return op.Cast(op.Constant(value_float=float(value)), to=dtype)


def _double_vector(op, values: Sequence[float]):
    import onnx

    return op.Constant(value=onnx.helper.make_tensor("value", onnx.TensorProto.DOUBLE, [len(values)],
                                                     [float(v) for v in values]))


def _size(op, x, axis: int):
    """x.shape[axis] as an int64 [1] (dynamic)."""
    return op.Shape(x, start=axis, end=axis + 1)


def _as_length(op, length):
    """A length argument: a Python int (a constant) or a symbolic one (an int64 scalar value of the
    graph, a size of an input), as an int64 [1]."""
    if isinstance(length, int):
        return _ints(op, [length])
    return op.Reshape(op.Cast(length, to=_INT64), _ints(op, [1]))


def _range(op, start, count):
    """start .. start + count - 1 (int64 [count]); start a Python int, count an int64 [1]."""
    first = op.Constant(value_int=int(start))
    return op.Range(first, op.Add(first, op.Squeeze(count, _ints(op, [0]))), op.Constant(value_int=1))


def _table_rows(table, who: str):
    op = _opset()
    rank = len(table.shape)
    if rank == 2:
        return table
    if rank == 3 and table.shape[0] == 1:
        return op.Squeeze(table, _ints(op, [0]))
    _refuse(who, f"with a table of shape {table.shape}: it takes [N, D] or [1, N, D] tables")


def _gather(op, rows, positions, zero_padding: bool):
    """rows[positions] for positions of any shape (-1 = padding: a zero row when zero_padding)."""
    taken = op.Gather(rows, op.Max(positions, op.Constant(value_int=0)), axis=0)
    if not zero_padding:
        return taken
    padding = op.Unsqueeze(op.Less(positions, op.Constant(value_int=0)), _ints(op, [-1]))
    return op.Where(padding, op.CastLike(op.Constant(value_float=0.0), taken), taken)


def _sequence_rows(op, x, offset: int, batch_first: bool, positions, row_source: Callable):
    """The rows that a [B, L, D] (or [L, B, D] when not batch_first) call adds, broadcastable
    against x; `row_source(positions)` maps int64 (or float) positions of any shape to rows [..., D]."""
    sequence_axis = 0 if batch_first else 1  # where a [L, D] block of rows gets its batch axis
    if positions is None:
        rows = row_source(_range(op, offset, _size(op, x, 1 if batch_first else 0)))
        return op.Unsqueeze(rows, _ints(op, [sequence_axis]))
    rows = row_source(positions)
    if len(positions.shape) == 1:  # [L]: the same positions in every sequence
        return op.Unsqueeze(rows, _ints(op, [sequence_axis]))
    return rows  # [B, L, D] (or [L, B, D]: positions like the first two dimensions of x)


def _sum_rounded_once(op, x, rows, scale: float, dtype: int):
    """x * scale + rows in the accumulator dtype of `dtype` (x's), rounded once to `dtype`."""
    acc = _DOUBLE if dtype == _DOUBLE else _FLOAT
    scaled = op.Cast(x, to=acc)
    if scale != 1.0:
        scaled = op.Mul(scaled, _scalar(op, scale, acc))
    return op.Cast(op.Add(scaled, op.Cast(rows, to=acc)), to=dtype)


# --- the sequence encodings ----------------------------------------------------------------------


def _table_rows_of_call(op, x, rows, offset: int, batch_first: bool, positions):
    """The rows of the table `rows` [N, D] that a call on x ([B, L, ...] or [L, B, ...]) adds,
    broadcastable against it: a slice from offset, or the rows at positions (-1: zeros)."""
    if positions is None:
        start = _ints(op, [offset])
        block = op.Slice(rows, start, op.Add(start, _size(op, x, 1 if batch_first else 0)), _ints(op, [0]))
        return op.Unsqueeze(block, _ints(op, [0 if batch_first else 1]))
    return _sequence_rows(op, x, offset, batch_first, positions, lambda p: _gather(op, rows, p, True))


def _rows_with_columns(op, rows, columns, positions, fractional: bool):
    """Rows [..., D] at positions of any shape, in the table's dtype: the table's rows where an
    integer position lies in it (-1, padding: a zero row), elsewhere, and at every fractional
    position, rows computed from the column plan `columns` (float64 [2, D]: each column's frequency
    and kind, 0 sine, 1 cosine, 2 zero) with float64 angles and rounded once, as posenc's operators
    compute rows past a table (ops/common/arguments.cpp: extend_table)."""
    frequency = op.Gather(columns, op.Constant(value_int=0), axis=0)
    kind = op.Cast(op.Gather(columns, op.Constant(value_int=1), axis=0), to=_INT64)
    computed = op.CastLike(_sinusoid_rows(op, positions, frequency, kind, padding=False), rows)
    if fractional:
        return computed
    count = op.Squeeze(_size(op, rows, 0), _ints(op, [0]))
    in_table = op.Unsqueeze(op.Less(positions, count), _ints(op, [-1]))
    last = op.Sub(count, op.Constant(value_int=1))
    return op.Where(in_table, _gather(op, rows, op.Min(positions, last), True), computed)


def _rows_of_call(op, who: str, x, table, offset: int, batch_first: bool, positions, columns):
    """The table rows a call adds (broadcastable against x); with `columns`, rows past the table
    and at fractional positions computed from them."""
    rows = _table_rows(table, who)
    if columns is None:
        if positions is not None and _dtype(positions) != _INT64:
            _refuse(who, "with fractional positions and no columns plan: a learned table has rows for integer "
                    "positions only")
        return _table_rows_of_call(op, x, rows, offset, batch_first, positions)
    fractional = positions is not None and _dtype(positions) != _INT64
    return _sequence_rows(op, x, offset, batch_first, positions,
                          lambda p: _rows_with_columns(op, rows, columns, p, fractional))


def add_position_table(x, table, offset=0, batch_first=True, positions=None, scale=1.0, columns=None):
    """posenc::add_position_table: x * scale + table rows (consecutive or at positions; with a
    columns plan, rows past the table and at fractional positions computed from it)."""
    op = _opset()
    added = _rows_of_call(op, "add_position_table", x, table, offset, batch_first, positions, columns)
    return _sum_rounded_once(op, x, added, scale, _dtype(x))


def _sinusoid_plan(width: int, base: float, channels: str, frequencies: str) -> Tuple[list, list]:
    """Each column's frequency and kind (0 sine, 1 cosine, 2 zero) of posenc's sinusoidal encodings:
    the column plan posenc's sinusoidal_columns operator makes (detail::column_plan), read at export."""
    columns = torch.ops.posenc.sinusoidal_columns(width, base, channels, frequencies)
    return columns[0].tolist(), [int(k) for k in columns[1].tolist()]


def _plan_constants(op, width: int, base: float, channels: str, frequencies: str):
    """_sinusoid_plan as constants of the graph: frequencies float64 [D], kinds int64 [D]."""
    frequency, kind = _sinusoid_plan(width, base, channels, frequencies)
    return _double_vector(op, frequency), op.Constant(value_ints=list(kind))


def _sinusoid_rows(op, positions, frequency, kind, padding: bool):
    """Rows [..., D] of the sinusoid at positions (any shape), float64, from each column's
    `frequency` (float64 [D]) and `kind` (int64 [D]: 0 sine, 1 cosine, 2 zero), values of the
    graph; with `padding`, a zero row where an (integer) position is -1."""
    where = op.Cast(positions, to=_DOUBLE)
    angle = op.Mul(op.Unsqueeze(where, _ints(op, [-1])), frequency)
    zero = _scalar(op, 0.0, _DOUBLE)
    value = op.Where(op.Equal(kind, op.Constant(value_int=0)), op.Sin(angle),
                     op.Where(op.Equal(kind, op.Constant(value_int=1)), op.Cos(angle), zero))
    if padding:
        where_padding = op.Unsqueeze(op.Less(positions, op.Constant(value_int=0)), _ints(op, [-1]))
        value = op.Where(where_padding, zero, value)
    return value


def add_positional_encoding(x, offset=0, base=10000.0, batch_first=True, positions=None, scale=1.0,
                            channels="interleaved", frequencies="paper"):
    """posenc::add_positional_encoding: x * scale + sinusoid rows computed in float64, rounded to
    float32 (float64 inputs: float64), then added and rounded once (posenc's rounding)."""
    op = _opset()
    width = x.shape[-1]
    if not isinstance(width, int):
        _refuse("add_positional_encoding", "with a symbolic width: d_model must be fixed")
    frequency, kind = _plan_constants(op, width, float(base), channels, frequencies)
    rows_dtype = _DOUBLE if _dtype(x) == _DOUBLE else _FLOAT
    padding = positions is not None and _dtype(positions) == _INT64
    added = _sequence_rows(op, x, offset, batch_first, positions,
                           lambda p: op.Cast(_sinusoid_rows(op, p, frequency, kind, padding), to=rows_dtype))
    return _sum_rounded_once(op, x, added, scale, _dtype(x))


def token_and_position_embedding(tokens, weight, table, offset=0, batch_first=True, positions=None,
                                 scale=1.0, padding_idx=-1, dropout=0.0, train=False, columns=None):
    """posenc::token_and_position_embedding: weight[tokens] * scale + table rows, and an empty
    dropout mask (eval mode)."""
    op = _opset()
    if train and dropout > 0.0:
        _refuse("token_and_position_embedding", "in training mode with dropout: export the module in eval mode")
    embedded = op.Gather(weight, tokens, axis=0)
    added = _rows_of_call(op, "token_and_position_embedding", tokens, table, offset, batch_first, positions, columns)
    out = _sum_rounded_once(op, embedded, added, scale, _dtype(weight))
    mask = op.Cast(op.ConstantOfShape(_ints(op, [0])), to=_BOOL)
    return out, mask


# --- rotary --------------------------------------------------------------------------------------


def _rotary_positions(op, x, offset: int, positions, heads_first: bool, who: str):
    """The [B, L] int64 position of every token of x: offset + l, or the given [L] / [B, L] ones."""
    batch = _size(op, x, 0)
    length = _size(op, x, 2 if heads_first else 1)
    shape = op.Concat(batch, length, axis=0)
    if positions is None:
        return op.Expand(op.Unsqueeze(_range(op, offset, length), _ints(op, [0])), shape)
    if len(positions.shape) == 3:
        _refuse(who, "with multimodal [3, B, L] positions (M-RoPE): export the tables' rows per token instead")
    if len(positions.shape) == 1:
        return op.Expand(op.Unsqueeze(positions, _ints(op, [0])), shape)
    return positions


def _rotate_plain(op, x, cos, sin, ids, interleaved: bool, heads_first: bool, rotary_dim: int):
    """The rotation in plain float64 operators (ONNX's RotaryEmbedding has no float64): each
    product and difference rounded once, as posenc's kernels compute it."""
    half = rotary_dim // 2
    c = op.Gather(cos, ids, axis=0)  # [B, L, R/2]
    s = op.Gather(sin, ids, axis=0)
    head_axis = 1 if heads_first else 2
    c = op.Unsqueeze(c, _ints(op, [head_axis]))  # broadcast over the heads
    s = op.Unsqueeze(s, _ints(op, [head_axis]))
    rotated = op.Slice(x, _ints(op, [0]), _ints(op, [rotary_dim]), _ints(op, [3]))
    if interleaved:
        a = op.Slice(rotated, _ints(op, [0]), _ints(op, [rotary_dim]), _ints(op, [3]), _ints(op, [2]))
        b = op.Slice(rotated, _ints(op, [1]), _ints(op, [rotary_dim]), _ints(op, [3]), _ints(op, [2]))
    else:
        a = op.Slice(rotated, _ints(op, [0]), _ints(op, [half]), _ints(op, [3]))
        b = op.Slice(rotated, _ints(op, [half]), _ints(op, [rotary_dim]), _ints(op, [3]))
    first = op.Sub(op.Mul(a, c), op.Mul(b, s))
    second = op.Add(op.Mul(a, s), op.Mul(b, c))
    if interleaved:
        pairs = op.Concat(op.Unsqueeze(first, _ints(op, [-1])), op.Unsqueeze(second, _ints(op, [-1])), axis=-1)
        turned = op.Reshape(pairs, op.Shape(rotated))
    else:
        turned = op.Concat(first, second, axis=-1)
    if rotary_dim == x.shape[3]:
        return turned
    rest = op.Slice(x, _ints(op, [rotary_dim]), _ints(op, [x.shape[3]]), _ints(op, [3]))
    return op.Concat(turned, rest, axis=-1)


def _rotate(op, x, cos, sin, offset: int, positions, interleaved: bool, heads_first: bool, inverse: bool,
            inv_freq, who: str):
    """x [B, L, H, Dh] (or [B, H, L, Dh]) turned by the cached cos/sin [N, R/2] rows of its
    positions; channels past R pass through, -1 positions are copied."""
    if positions is not None and _dtype(positions) != _INT64:
        _refuse(who, "with fractional positions: their rows are computed per call from inv_freq, which a graph of "
                "fixed tables cannot hold; pass integer positions (int64), whose rows the cached tables hold")
    if inv_freq is not None:
        _refuse(who, "with rows computed per call (inv_freq: beyond_max_len='extrapolate', fewer cached rows "
                "than max_len, or a length-dependent rope type): build the module with the cached tables "
                "covering every position and beyond_max_len='error'")
    if len(x.shape) != 4:
        _refuse(who, f"for a {len(x.shape)}-D input: it takes 4-D [B, L, H, Dh] (or [B, H, L, Dh]) queries and keys")
    half, head, heads = cos.shape[1], x.shape[3], x.shape[1 if heads_first else 2]
    if not isinstance(half, int) or not isinstance(head, int):
        _refuse(who, "with a symbolic head width or table width: only the batch, the length and the "
                "head count may vary")
    rotary_dim = 2 * half
    ids = _rotary_positions(op, x, offset, positions, heads_first, who)
    safe = op.Max(ids, op.Constant(value_int=0))
    acc = _accumulator(x)
    cos_rows = op.Cast(cos, to=acc)
    sin_rows = op.Cast(sin, to=acc)
    if inverse:
        sin_rows = op.Neg(sin_rows)  # (exact: turning by -theta)
    if acc == _DOUBLE:
        y = _rotate_plain(op, x, cos_rows, sin_rows, safe, interleaved, heads_first, rotary_dim)
    else:
        turned = op.Cast(x, to=acc)  # float16 / bfloat16: turned in float32, rounded once, as posenc does
        attributes = dict(interleaved=int(interleaved), rotary_embedding_dim=rotary_dim)
        if heads_first:  # [B, H, L, Dh]: the operator's 4-D form
            y = op.RotaryEmbedding(turned, cos_rows, sin_rows, safe, **attributes)
        elif isinstance(heads, int):  # [B, L, H, Dh] as its 3-D form [B, L, H * Dh] (a view)
            flat = op.Reshape(turned, op.Concat(_size(op, x, 0), _size(op, x, 1), _ints(op, [heads * head]), axis=0))
            y = op.Reshape(op.RotaryEmbedding(flat, cos_rows, sin_rows, safe, num_heads=heads, **attributes),
                           op.Shape(x))
        else:  # a dynamic head count: through the 4-D form
            y = op.RotaryEmbedding(op.Transpose(turned, perm=[0, 2, 1, 3]), cos_rows, sin_rows, safe, **attributes)
            y = op.Transpose(y, perm=[0, 2, 1, 3])
        y = op.Cast(y, to=_dtype(x))
    if positions is not None:
        padding = op.Unsqueeze(op.Less(ids, op.Constant(value_int=0)), _ints(op, [1, 3] if heads_first else [2, 3]))
        y = op.Where(padding, x, y)
    return y


def apply_rotary(x, cos, sin, offset=0, positions=None, interleaved=False, heads_first=False, inverse=False,
                 inv_freq=None, attention_factor=1.0):
    """posenc::apply_rotary from the cached tables."""
    return _rotate(_opset(), x, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                   "apply_rotary")


def apply_rotary_qk(q, k, cos, sin, offset=0, positions=None, interleaved=False, heads_first=False,
                    inverse=False, inv_freq=None, attention_factor=1.0):
    """posenc::apply_rotary_qk: queries and keys (any head counts) turned alike."""
    op = _opset()
    return (_rotate(op, q, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq, "apply_rotary_qk"),
            _rotate(op, k, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq, "apply_rotary_qk"))


def multimodal_rotary_tables(cos, sin, positions, mrope_section, interleaved=False, inv_freq=None,
                             attention_factor=1.0):
    """posenc::multimodal_rotary_tables (M-RoPE, Qwen2-VL .. Qwen3-VL): each frequency's cos/sin
    row read at the position of its axis (temporal, height, width), positions [3, ...]."""
    op = _opset()
    if inv_freq is not None:
        _refuse("multimodal_rotary_tables", "with rows computed per call (positions past the cached tables: "
                "build the module with max_len covering them and beyond_max_len='error')")
    half = cos.shape[1]
    if not isinstance(half, int):
        _refuse("multimodal_rotary_tables", "with a symbolic table width")
    axes = _mrope_axes(list(mrope_section), bool(interleaved), half)
    safe = op.Max(positions, op.Constant(value_int=0))

    def pick(table):
        rows = [op.Gather(table, op.Gather(safe, op.Constant(value_int=a), axis=0), axis=0) for a in range(3)]
        height = op.Constant(value_ints=[int(a == 1) for a in axes])
        width = op.Constant(value_ints=[int(a == 2) for a in axes])
        one = op.Constant(value_int=1)
        return op.Where(op.Equal(width, one), rows[2], op.Where(op.Equal(height, one), rows[1], rows[0]))

    return pick(cos), pick(sin)


def _mrope_axes(section, interleaved: bool, half: int):
    """The axis (0 temporal, 1 height, 2 width) of each of the half frequencies (detail::mrope_axes,
    whose checks the module ran when it was built)."""
    axes = []
    for i in range(half):
        if interleaved:
            a = i % 3
            axes.append(a if a != 0 and i < 3 * section[a] else 0)
        else:
            axes.append(0 if i < section[0] else 1 if i < section[0] + section[1] else 2)
    return axes


# --- diffusion timesteps -------------------------------------------------------------------------


def timestep_embedding(timesteps, embedding_dim, flip_sin_to_cos=False, downscale_freq_shift=1.0, scale=1.0,
                       max_period=10000, dtype=None):
    """posenc::timestep_embedding: float64 angles scale * t * f_k, sin and cos rounded once."""
    op = _opset()
    half = embedding_dim // 2
    exponent = -math.log(float(max_period))
    divisor = float(half) - float(downscale_freq_shift)
    # (detail::timestep_frequencies: exp(-ln(max_period) k / divisor), then times scale, in float64)
    frequency = [math.exp(exponent * float(k) / divisor) * float(scale) for k in range(half)]
    t = op.Unsqueeze(op.Cast(timesteps, to=_DOUBLE), _ints(op, [-1]))  # [N, 1]
    angle = op.Mul(t, _double_vector(op, frequency))
    parts = [op.Cos(angle), op.Sin(angle)] if flip_sin_to_cos else [op.Sin(angle), op.Cos(angle)]
    if embedding_dim % 2 == 1:
        parts.append(op.Expand(_scalar(op, 0.0, _DOUBLE), op.Concat(_size(op, timesteps, 0), _ints(op, [1]), axis=0)))
    return op.Cast(op.Concat(*parts, axis=-1), to=_onnx_dtype(dtype, _FLOAT, "timestep_embedding"))


# --- attention biases ----------------------------------------------------------------------------


def _bias_positions(op, query_length, key_length, offset):
    """(query positions [Lq, 1], key positions [1, Lk]) as int64; offset None: Lk - Lq."""
    lq, lk = _as_length(op, query_length), _as_length(op, key_length)
    start = op.Sub(lk, lq) if offset is None else _as_length(op, offset)
    queries = op.Add(_range(op, 0, lq), start)
    return op.Unsqueeze(queries, _ints(op, [1])), op.Unsqueeze(_range(op, 0, lk), _ints(op, [0]))


def alibi_bias(slopes, query_length, key_length, offset=None, causal=False, dtype=None):
    """posenc::alibi_bias: -slope * |(offset + i) - j| in the slopes' dtype (or dtype); causal: -inf
    where the key lies after its query."""
    op = _opset()
    if dtype is not None:
        _refuse("alibi_bias", "with a dtype: export the slopes in the dtype of the bias")
    queries, keys = _bias_positions(op, query_length, key_length, offset)
    compute = _accumulator(slopes)  # float32 (float64 for float64 slopes), rounded once to theirs
    distance = op.Cast(op.Abs(op.Sub(queries, keys)), to=compute)  # [Lq, Lk], exact below 2^24
    per_head = op.Unsqueeze(op.Neg(op.Cast(slopes, to=compute)), _ints(op, [-1, -2]))  # [..., H, 1, 1]
    bias = op.Mul(per_head, distance)
    if causal:
        bias = op.Where(op.Greater(keys, queries), _scalar(op, -math.inf, compute), bias)
    return op.Cast(bias, to=_dtype(slopes))


def alibi_causal_bias(slopes, key_length, attention_mask=None, dtype=None):
    """posenc::alibi_causal_bias without an attention mask: slope * key position, [H, 1, Lk]."""
    op = _opset()
    if attention_mask is not None or dtype is not None:
        _refuse("alibi_causal_bias", "with an attention mask or a dtype: export alibi_bias(causal=True) instead")
    compute = _accumulator(slopes)
    keys = op.Cast(_range(op, 0, _as_length(op, key_length)), to=compute)  # [Lk]
    bias = op.Mul(op.Unsqueeze(op.Cast(slopes, to=compute), _ints(op, [-1])), keys)  # [..., H, Lk]
    return op.Cast(op.Unsqueeze(bias, _ints(op, [-2])), to=_dtype(slopes))


def _t5_bucket(op, relative, bidirectional: bool, num_buckets: int, max_distance: int):
    """T5's bucket of int64 relative positions (detail::relative_position_bucket): the logarithm in
    float64, clamped to the last bucket."""
    buckets = num_buckets // 2 if bidirectional else num_buckets
    zero = op.Constant(value_int=0)
    if bidirectional:
        base = op.Where(op.Greater(relative, zero), op.Constant(value_int=buckets), zero)
        distance = op.Abs(relative)
    else:
        base = op.Mul(relative, zero)
        distance = op.Max(op.Neg(relative), zero)
    max_exact = buckets // 2
    scaled = op.Mul(op.Div(op.Log(op.Div(op.Cast(op.Max(distance, op.Constant(value_int=max(max_exact, 1))), to=_DOUBLE),
                                         _scalar(op, float(max_exact), _DOUBLE))),
                           _scalar(op, math.log(float(max_distance) / float(max_exact)), _DOUBLE)),
                    _scalar(op, float(buckets - max_exact), _DOUBLE))
    last = float(buckets - 1 - max_exact)
    large = op.Add(op.Constant(value_int=max_exact), op.Cast(op.Min(scaled, _scalar(op, last, _DOUBLE)), to=_INT64))
    large = op.Min(large, op.Constant(value_int=buckets - 1))
    return op.Add(base, op.Where(op.Less(distance, op.Constant(value_int=max_exact)), distance, large))


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """posenc::relative_position_bucket (what T5's relative_position_bias decomposes into under
    export: the bucket of every key - query distance, then a lookup in the table)."""
    op = _opset()
    return _t5_bucket(op, op.Cast(relative_position, to=_INT64), bidirectional, num_buckets, max_distance)


# --- tables built per call -----------------------------------------------------------------------


def _onnx_dtype(dtype, default: int, who: str) -> int:
    if dtype is None:
        return default
    table = {torch.float32: _FLOAT, torch.float16: 10, torch.float64: _DOUBLE, torch.bfloat16: 16}
    if dtype not in table:
        _refuse(who, f"to dtype {dtype}: it takes float32, float16, bfloat16 or float64")
    return table[dtype]


def sinusoidal_table(max_len, d_model, base=10000.0, offset=0, channels="interleaved", frequencies="paper",
                     dtype=None, device=None):
    """posenc::sinusoidal_table: rows offset .. offset + max_len - 1, float64 angles rounded once."""
    op = _opset()
    frequency, kind = _plan_constants(op, int(d_model), float(base), channels, frequencies)
    rows = _sinusoid_rows(op, _range(op, offset, _as_length(op, max_len)), frequency, kind, padding=False)
    return op.Cast(rows, to=_onnx_dtype(dtype, _FLOAT, "sinusoidal_table"))


def rotary_tables(max_len, inv_freq, attention_factor=1.0, dtype=None, device=None):
    """posenc::rotary_tables: cos and sin of position * inv_freq in float64 (times the attention
    factor), rounded once."""
    op = _opset()
    positions = op.Cast(_range(op, 0, _as_length(op, max_len)), to=_DOUBLE)
    angle = op.Mul(op.Unsqueeze(positions, _ints(op, [1])), op.Unsqueeze(op.Cast(inv_freq, to=_DOUBLE), _ints(op, [0])))
    cos, sin = op.Cos(angle), op.Sin(angle)
    if attention_factor != 1.0:
        cos = op.Mul(cos, _scalar(op, attention_factor, _DOUBLE))
        sin = op.Mul(sin, _scalar(op, attention_factor, _DOUBLE))
    to = _onnx_dtype(dtype, _FLOAT, "rotary_tables")
    return op.Cast(cos, to=to), op.Cast(sin, to=to)


# --- the table and the export --------------------------------------------------------------------

_TRANSLATIONS = {
    "add_position_table": add_position_table,
    "add_positional_encoding": add_positional_encoding,
    "token_and_position_embedding": token_and_position_embedding,
    "apply_rotary": apply_rotary,
    "apply_rotary_qk": apply_rotary_qk,
    "multimodal_rotary_tables": multimodal_rotary_tables,
    "timestep_embedding": timestep_embedding,
    "alibi_bias": alibi_bias,
    "alibi_causal_bias": alibi_causal_bias,
    "relative_position_bucket": relative_position_bucket,
    "sinusoidal_table": sinusoidal_table,
    "rotary_tables": rotary_tables,
}


def translation_table() -> Dict[Any, Callable]:
    """``{torch.ops.posenc.<op>.default: translation}`` for ``torch.onnx.export(...,
    custom_translation_table=...)``."""
    ops = torch.ops.posenc
    return {getattr(ops, name).default: function for name, function in _TRANSLATIONS.items()}


class Method(torch.nn.Module):
    """``module.<method>(...)`` as a module's forward (what torch.onnx.export takes), with the
    method's tensor arguments: e.g. ``Method(rope, "forward_qk")`` exports queries and keys in one
    graph, ``Method(rope, "forward_positions")`` a rotation at given positions. The forward takes
    one or two inputs (torch.export maps ``dynamic_shapes`` onto them)."""

    def __new__(cls, module: torch.nn.Module, method: str):
        if cls is Method:
            function = getattr(module, method, None)
            if not callable(function):
                raise ValueError(f"posenc.onnx.Method: {type(module).__name__} has no method {method!r}")
            import inspect

            required = [p for p in inspect.signature(function).parameters.values()
                        if p.default is inspect.Parameter.empty and p.kind == p.POSITIONAL_OR_KEYWORD]
            if len(required) not in (1, 2):
                raise ValueError(f"posenc.onnx.Method: {type(module).__name__}.{method} takes {len(required)} "
                                 "required arguments; Method takes methods of one or two")
            cls = _Method1 if len(required) == 1 else _Method2
        return super().__new__(cls)

    def __init__(self, module: torch.nn.Module, method: str) -> None:
        super().__init__()
        self.module, self.method = module, method
        self.train(module.training)


class _Method1(Method):
    def forward(self, x):
        return getattr(self.module, self.method)(x)


class _Method2(Method):
    def forward(self, x, y):
        return getattr(self.module, self.method)(x, y)


def export(module: torch.nn.Module, args: Tuple[Any, ...], f: Optional[str] = None, *,
           dynamic_shapes: Any = None, input_names: Optional[Sequence[str]] = None,
           output_names: Optional[Sequence[str]] = None, **options: Any):
    """``torch.onnx.export(module, args, f, dynamo=True, opset_version=23)`` with posenc's
    translations (and any ``custom_translation_table`` given in ``options`` on top). The module is
    exported as it is (call ``.eval()`` first for inference). Returns the ``torch.onnx.ONNXProgram``
    (``f``: also written there, by temporary and rename: a failed export leaves a file at ``f`` as it
    was). A module holding a ``RotaryEmbedding`` of a length-dependent rope type (``dynamic``,
    ``longrope``) is refused (``ExportUnsupported``)."""
    _refuse_length_dependent(module)
    table = translation_table()
    table.update(options.pop("custom_translation_table", None) or {})
    options.setdefault("verbose", False)
    path = os.fspath(f) if isinstance(f, (str, os.PathLike)) else None
    # (what torch.onnx.export passes on to ONNXProgram.save, with its defaults)
    save = dict(include_initializers=options.pop("export_params", True),
                keep_initializers_as_inputs=options.pop("keep_initializers_as_inputs", False),
                external_data=options.pop("external_data", True))
    try:
        program = _torch_onnx_export(module, args, f if path is None else None, dynamic_shapes, input_names,
                                     output_names, table, options)
    except Exception as error:  # the exporter wraps a translation's refusal: say it plainly
        cause = error
        while cause is not None and not isinstance(cause, ExportUnsupported):
            cause = cause.__cause__ or cause.__context__
        if cause is not None:
            raise ExportUnsupported(str(cause)) from error
        missing = _untranslated_operator(error)
        if missing is not None:
            raise ExportUnsupported(
                f"posenc.onnx: posenc::{missing} has no ONNX translation (posenc.onnx translates "
                f"{', '.join(sorted(_TRANSLATIONS))}); compute its result outside the exported model and "
                "pass it in, or export the module's tables (safetensors) instead") from error
        raise
    if path is not None:
        _save(program, path, **save)
    return program


def _refuse_length_dependent(module) -> None:
    """Refuses a module holding a RotaryEmbedding whose frequencies switch with each call's length
    (dynamic NTK, LongRoPE): a graph of fixed tables would keep the example's frequencies at every
    length."""
    from . import nn

    for name, rope in (module.named_modules() if isinstance(module, torch.nn.Module) else ()):
        if isinstance(rope, nn.RotaryEmbedding) and rope.rope_type in ("dynamic", "longrope"):
            past = "max_position_embeddings" if rope.rope_type == "dynamic" else "original_max_position_embeddings"
            raise ExportUnsupported(
                f"posenc.onnx: {'the module' if not name else name} (RotaryEmbedding, rope_type "
                f"'{rope.rope_type}') cannot be exported to ONNX: its frequencies depend on each call's length "
                f"(they switch once a call passes {past}), and a graph of fixed tables would rotate every length "
                "with the example's; run it with posenc, or export a rope type whose frequencies are fixed "
                "(e.g. 'yarn' or 'linear')")


def _save(program, path: str, **options: Any) -> None:
    """program.save(path, **options) by temporary and rename: written into a new folder beside
    `path` under its name (with its external data file, named after it, beside it), then each file
    renamed over its destination, the model last; on failure the folder is removed and the files
    at `path` stay as they were."""
    destination = os.path.realpath(path)  # (a symbolic link stays; the file it names is replaced)
    where, name = os.path.split(destination)
    folder = tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=where)
    try:
        program.save(os.path.join(folder, name), **options)
        for written in sorted(os.listdir(folder), key=lambda item: item == name):
            os.replace(os.path.join(folder, written), os.path.join(where, written))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _untranslated_operator(error: BaseException) -> Optional[str]:
    """The posenc operator the exporter found no ONNX function for, if that is why it failed."""
    import re

    cause: Optional[BaseException] = error
    while cause is not None:
        found = re.search(r"No ONNX function found for <OpOverload\(op='posenc\.(\w+)'", str(cause))
        if found:
            return found.group(1)
        cause = cause.__cause__ or cause.__context__
    return None


def _torch_onnx_export(module, args, f, dynamic_shapes, input_names, output_names, table, options):
    return torch.onnx.export(module, tuple(args), f, dynamo=True, opset_version=OPSET, dynamic_shapes=dynamic_shapes,
                             input_names=input_names, output_names=output_names, custom_translation_table=table,
                             **options)


# --- posenc export --format onnx -----------------------------------------------------------------


def _cli_module(args):
    """The posenc.nn module `posenc export` builds from its options (the C++ CLI's run_export)."""
    from . import nn

    beyond = "extrapolate" if args.extrapolate else "error"
    if args.module == "sinusoidal":
        return nn.PositionalEncoding(args.d_model, args.max_len, base=args.base, batch_first=not args.seq_first,
                                     layout=args.layout, spacing=args.spacing, beyond_max_len=beyond, scale=args.scale)
    options = dict(heads_first=args.heads_first, beyond_max_len=beyond)
    if args.cached_len is not None:
        options["cached_len"] = args.cached_len
    if args.hf_config:
        if args.max_len:
            options["max_len"] = args.max_len
        if args.pairing:
            options.update(pairing=args.pairing, deinterleave=args.deinterleave)
        elif args.deinterleave:
            options["deinterleave"] = True
        if args.inverse:
            options["inverse"] = True
        if args.rotate_last_channels:
            options["rotate_last_channels"] = True
        return nn.RotaryEmbedding.from_hf_config(args.hf_config, layer=args.layer, layer_type=args.layer_type or None,
                                                 **options)
    return nn.RotaryEmbedding(args.head_dim, args.max_len, base=args.base, rotary_dim=args.rotary_dim,
                              pairing=args.pairing or "half_split", deinterleave=args.deinterleave,
                              inverse=args.inverse, rotate_last_channels=args.rotate_last_channels, **options)


def _cli_program(module):
    """The module exported with its batch and length dynamic (rotary: the head count too), from an
    example of sizes 2 (torch.export specializes sizes 0 and 1)."""
    from . import nn

    if isinstance(module, nn.RotaryEmbedding):
        length_dim, heads_dim = (2, 1) if module.heads_first else (1, 2)
        shape = [2, 2, 2, module.head_dim]
        shape[length_dim] = min(4, module.max_len)
        dynamic = {0: torch.export.Dim("batch", min=1), length_dim: torch.export.Dim("length", min=1, max=module.max_len),
                   heads_dim: torch.export.Dim("heads", min=1)}
        return export(module.eval(), (torch.randn(shape),), dynamic_shapes=(dynamic,), input_names=["x"],
                      output_names=["rotated"])
    length_dim, batch_dim = (1, 0) if module.batch_first else (0, 1)
    shape = [2, 2, module.d_model]
    shape[length_dim] = min(4, module.max_len)
    dynamic = {batch_dim: torch.export.Dim("batch", min=1), length_dim: torch.export.Dim("length", min=1, max=module.max_len)}
    return export(module.eval(), (torch.randn(shape),), dynamic_shapes=(dynamic,), input_names=["x"],
                  output_names=["encoded"])


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m posenc.onnx``: what ``posenc export --format onnx`` runs, with the C++ CLI's
    options (checked there first): the module built by posenc.nn with the same options, exported
    with its batch size and length (and a rotary module's head count) dynamic."""
    import argparse
    import warnings

    parser = argparse.ArgumentParser(prog="python -m posenc.onnx", description=main.__doc__.splitlines()[0])
    parser.add_argument("--module", choices=["sinusoidal", "rotary"], default="sinusoidal")
    parser.add_argument("--max-len", type=int, default=0)
    parser.add_argument("--cached-len", type=int)
    parser.add_argument("--hf-config")
    parser.add_argument("--layer", type=int)
    parser.add_argument("--layer-type", default="")
    parser.add_argument("--d-model", type=int, default=0)
    parser.add_argument("--head-dim", type=int, default=0)
    parser.add_argument("--rotary-dim", type=int)
    parser.add_argument("--base", type=float, default=10000.0)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--layout", default="interleaved")
    parser.add_argument("--spacing", default="paper")
    parser.add_argument("--pairing", default="")
    parser.add_argument("--deinterleave", action="store_true")
    parser.add_argument("--inverse", action="store_true")
    parser.add_argument("--rotate-last-channels", action="store_true")
    parser.add_argument("--seq-first", action="store_true")
    parser.add_argument("--heads-first", action="store_true")
    parser.add_argument("--extrapolate", action="store_true")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    if args.extrapolate:
        parser.error("--extrapolate: an ONNX graph holds the table's rows, it does not compute rows past max-len; "
                     "export with a --max-len that covers every position")
    module = _cli_module(args)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the exporter's deprecation and progress chatter)
            program = _cli_program(module)
    except ExportUnsupported as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 1
    _save(program, args.output)
    operators = sorted({node.op_type for node in program.model_proto.graph.node})
    sizes = "batch, length and head count" if args.module == "rotary" else "batch and length"
    print(f"wrote {args.output}: ONNX (opset {OPSET}) of {module} with dynamic {sizes} (input x); "
          f"operators {', '.join(operators)}; run it with onnxruntime.InferenceSession")
    return 0


if __name__ == "__main__":
    sys.exit(main())

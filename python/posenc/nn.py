"""``torch.nn`` modules mirroring posenc's C++ modules.

Each module takes the options of its C++ twin (``posenc::PositionalEncodingOptions`` etc.) as
keyword arguments with the same names and defaults, holds the same tensors under the same
state-dict keys and shapes, and computes through the same ``torch.ops.posenc`` operators, so its
outputs on CPU equal the C++ module's bit for bit and a state dict moves between the two (e.g. as
safetensors). Enumerations are strings: ``layout="interleaved" | "concatenated"``, ``spacing=
"paper" | "tensor2tensor"``, ``pairing="half_split" | "interleaved"``, ``grid_indexing="ij" | "xy"``.

Tables that are functions of the options (``pe``, ``cos``/``sin``) follow the C++ rule under
``.to()``/``.half()``/``.double()``: float64 recomputes them in float64, a 16-bit dtype leaves them
in float32 (a table is never stored in 16 bits).

Rows that ``PositionalEncoding`` and ``TokenAndPositionEmbedding`` compute (past ``max_len`` with
``beyond_max_len="extrapolate"``, fractional positions) are rounded as the table's rows are.
"""

import contextlib
import json
import math
import os
import sys
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

__all__ = [
    "PositionalEncoding",
    "LearnedPositionalEmbedding",
    "TokenAndPositionEmbedding",
    "RotaryEmbedding",
    "read_hf_rope_config",
    "mrope_position_ids",
    "Timesteps",
    "TimestepEmbedder",
    "AxialRotaryEmbedding",
    "VisionRotaryEmbedding",
    "ALiBi",
    "AttentionTemperature",
    "RelativePositionBias",
    "RelPositionalEncoding",
    "RelPositionMultiheadAttention",
]

_ops = torch.ops.posenc


def _whole_positions(positions: Tensor) -> Tensor:
    """The positions of a RotaryEmbedding whose frequencies follow the call's largest position
    (dynamic NTK, LongRoPE), for its call: that call (rotary_embedding_call, CompositeImplicitAutograd:
    DTensor sees the apply_rotary it decomposes into, with posenc.distributed's rule) reads the
    largest position on the host, which on a sharded DTensor is the shard's own. Such positions are
    replicated first (they are small; the rotation then shards them again as the input). Looks for
    DTensor only where torch.distributed.tensor is loaded already."""
    dtensor = sys.modules.get("torch.distributed.tensor")
    if dtensor is None or not isinstance(positions, dtensor.DTensor):
        return positions
    if all(placement.is_replicate() for placement in positions.placements):
        return positions
    return positions.redistribute(placements=[dtensor.Replicate()] * positions.device_mesh.ndim)


def _json_value(value: Any) -> Any:
    """A keyword argument as the operators' JSON takes it: numpy scalars and one-element tensors
    as the Python number or bool they hold, lists item by item, and numbers JSON cannot hold (not
    finite, or integers past 2^64) as the strings "nan", "inf", "-inf" or a float, so that the
    C++ check, not the JSON parser, says what must hold."""
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    if not isinstance(value, (bool, int, float, str)) and value is not None and hasattr(value, "item"):
        try:
            value = value.item()  # (0-dim tensors and arrays, numpy scalars)
        except (TypeError, ValueError, RuntimeError):
            return repr(value)  # (the operator says it has the wrong type)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**64:
        try:
            value = float(value)
        except OverflowError:
            value = math.inf if value > 0 else -math.inf
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _check_options(module: str, **options: Any) -> None:
    """The C++ module's checks of its options (its reset(), before anything is allocated), through
    the check_module_options operator, raised as ValueError with the C++ message."""
    text = json.dumps({name: _json_value(value) for name, value in options.items()}, default=repr)
    with _cpp_checks():
        _ops.check_module_options(module, text)


@contextlib.contextmanager
def _cpp_checks():
    """The C++ checks' errors (c10::Error, a RuntimeError here) raised as the ValueError of a
    constructor's argument, with the C++ message."""
    try:
        yield
    except RuntimeError as error:
        raise ValueError(str(error).split("\nException raised from")[0]) from None


def _table_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a derived table takes when the module is cast to `dtype` (the C++ rule)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class _Module(torch.nn.Module):
    """The base of posenc.nn's modules: `load_state_dict` applies the whole state or, when it raises
    (a missing or unexpected key, a tensor of the wrong shape, anywhere in the state), leaves every
    parameter and buffer of the module and its children as it was, as the C++ modules' loads do.
    (torch.nn.Module's own load copies each matching tensor as it goes and raises at the end.)"""

    def load_state_dict(self, state_dict, *args, **kwargs):
        saved = []
        for module in self.modules():
            for store in (module._parameters, module._buffers):
                for name, tensor in store.items():
                    saved.append((store, name, tensor, None if tensor is None else tensor.detach().clone()))
        try:
            return super().load_state_dict(state_dict, *args, **kwargs)
        except BaseException:
            with torch.no_grad():
                for store, name, tensor, value in saved:
                    store[name] = tensor  # (assign=True may have put another object there)
                    if tensor is not None:
                        tensor.copy_(value)
            raise


class _DerivedTables(_Module):
    """Buffers computed from the options: `_build_tables(dtype, device)` recomputes them; casts
    keep them in float32 or float64, as the C++ modules' `to()` does."""

    _tables: Tuple[str, ...] = ()
    #: Plain tensor attributes that the operators take with the tables (the encoding's definition,
    #: float64): they follow the tables' device, never their dtype.
    _definitions: Tuple[str, ...] = ()

    def _build_tables(self, dtype: torch.dtype, device: torch.device) -> None:
        raise NotImplementedError

    def _apply(self, fn, recurse=True):
        first = getattr(self, self._tables[0])
        before = first.dtype
        if _APPLY_TAKES_RECURSE:
            super()._apply(fn, recurse)
        else:
            super()._apply(fn)
        after = getattr(self, self._tables[0])
        if after.dtype != before:
            # recomputed from the options in float32 or float64: never widened, never kept in 16 bits
            self._build_tables(_table_dtype(after.dtype), after.device)
        for name in self._definitions:
            value = getattr(self, name)
            if value is not None and value.device != after.device:
                setattr(self, name, value.to(after.device))
        return self


def _apply_takes_recurse() -> bool:
    import inspect

    return "recurse" in inspect.signature(torch.nn.Module._apply).parameters


_APPLY_TAKES_RECURSE = _apply_takes_recurse()

#: The most bytes of a config.json that posenc's reader takes (C++'s detail::kMaxConfigFileBytes,
#: which refuses a longer text with its message): a file is read to one byte past it.
_MAX_CONFIG_FILE_BYTES = 64 << 20


class _SequenceEncoding(_Module):
    """forward(x, offset) / forward_positions(x, positions) / forward_padded(x, padding_mask) of the
    modules that add a position table to `[B, L, D]` (or `[L, B, D]`) inputs. A call's logic (rows
    from the table or from the sinusoidal definition, in place or not, dropout) is the C++
    modules' own: the positional_encoding_call operators, given this module's options."""

    batch_first: bool
    scale: float
    dropout: float
    inplace: bool

    def _table(self) -> Tensor:
        raise NotImplementedError

    def _columns_and_extrapolate(self) -> Tuple[Optional[Tensor], bool]:
        return None, False

    def _add(self, x: Tensor, offset: int, positions: Optional[Tensor]) -> Tensor:
        columns, extrapolate = self._columns_and_extrapolate()
        arguments = (self._table(), columns, offset, positions, self.batch_first, self.scale, self.dropout,
                     self.training, extrapolate)
        if self.inplace:
            _ops.positional_encoding_call_(x, *arguments)
            return x
        return _ops.positional_encoding_call(x, *arguments)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """`dropout(x * scale + table[offset : offset + L])`."""
        return self._add(x, offset, None)

    def forward_positions(self, x: Tensor, positions: Tensor) -> Tensor:
        """Explicit positions, `[L]` or like the first two dimensions of `x`; -1 = padding.
        Fractional ones (sinusoidal encodings only) are computed from the definition."""
        if positions is None:
            raise ValueError(f"{type(self).__name__}: forward_positions needs positions; use forward(x, offset) for consecutive ones")
        return self._add(x, 0, positions)

    def forward_padded(self, x: Tensor, padding_mask: Tensor) -> Tensor:
        """Positions counted from each sequence's first real token; padding gets a zero vector."""
        return self._add(x, 0, _ops.positions_from_padding_mask(padding_mask, self.batch_first))


class PositionalEncoding(_SequenceEncoding, _DerivedTables):
    """The sinusoidal encoding of "Attention Is All You Need" (``posenc::PositionalEncoding``): a
    buffer ``pe`` ``[1, max_len, d_model]`` computed in float64 and rounded once; ``forward(x,
    offset=0)`` returns ``dropout(x * scale + pe[:, offset : offset + L])``."""

    _tables = ("pe",)
    _definitions = ("_columns",)

    def __init__(self, d_model: int, max_len: int, *, base: float = 10000.0, dropout: float = 0.0,
                 batch_first: bool = True, layout: str = "interleaved", spacing: str = "paper",
                 beyond_max_len: str = "error", scale: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        _check_options("PositionalEncoding", d_model=d_model, max_len=max_len, base=base, dropout=dropout,
                       batch_first=batch_first, layout=layout, spacing=spacing, beyond_max_len=beyond_max_len,
                       scale=scale, inplace=inplace)
        self.d_model, self.max_len, self.base = d_model, max_len, base
        self.dropout, self.batch_first, self.scale, self.inplace = dropout, batch_first, scale, inplace
        self.layout, self.spacing, self.beyond_max_len = layout, spacing, beyond_max_len
        self._build_tables(torch.float32, torch.device("cpu"))

    def _columns_and_extrapolate(self) -> Tuple[Optional[Tensor], bool]:
        return self._columns, self.beyond_max_len == "extrapolate"

    def _build_tables(self, dtype: torch.dtype, device: torch.device) -> None:
        table = _ops.sinusoidal_table(self.max_len, self.d_model, self.base, 0, self.layout,
                                      self.spacing, dtype=dtype, device=device)
        self.register_buffer("pe", table.unsqueeze(0))
        #: The encoding's definition as the operators take it (float64 ``[2, d_model]``: each
        #: column's frequency and kind), on the table's device: what positions past ``max_len``
        #: (``beyond_max_len="extrapolate"``) and fractional positions are computed from.
        self._columns = _ops.sinusoidal_columns(self.d_model, self.base, self.layout, self.spacing).to(device)

    def _table(self) -> Tensor:
        return self.pe

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, base={self.base}, dropout={self.dropout}, batch_first={self.batch_first}"


class LearnedPositionalEmbedding(_SequenceEncoding):
    """A trained position table (BERT/GPT-2, ``posenc::LearnedPositionalEmbedding``): the parameter
    ``weight`` ``[max_len, d_model]``, initialized from N(0, init_std^2)."""

    def __init__(self, d_model: int, max_len: int, *, init_std: float = 0.02, dropout: float = 0.0,
                 batch_first: bool = True, scale: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        _check_options("LearnedPositionalEmbedding", d_model=d_model, max_len=max_len, init_std=init_std,
                       dropout=dropout, batch_first=batch_first, scale=scale, inplace=inplace)
        self.d_model, self.max_len, self.init_std = d_model, max_len, init_std
        self.dropout, self.batch_first, self.scale, self.inplace = dropout, batch_first, scale, inplace
        self.weight = torch.nn.Parameter(torch.empty(max_len, d_model))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        torch.nn.init.normal_(self.weight, 0.0, self.init_std)

    def _table(self) -> Tensor:
        return self.weight

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, dropout={self.dropout}, batch_first={self.batch_first}"


class TokenAndPositionEmbedding(_Module):
    """Token embedding plus positions in one fused operator (``posenc::TokenAndPositionEmbedding``):
    ``tokens`` (an ``Embedding``, ``padding_idx`` rows zero) and ``positions`` (a
    ``PositionalEncoding`` or a ``LearnedPositionalEmbedding``: keys ``tokens.weight`` and
    ``positions.pe`` / ``positions.weight``); ``forward(ids, offset=0)`` returns
    ``dropout(tokens(ids) * scale + table[positions])``, ``[B, L, D]`` for ids ``[B, L]``
    (``[L, B]`` with ``batch_first=False``). With ``padding_idx``, positions count the real tokens
    from each sequence's first one and padding gets no position (fairseq)."""

    def __init__(self, vocab_size: int, d_model: int, max_len: int, *, positions: str = "sinusoidal",
                 scale: Optional[float] = None, padding_idx: Optional[int] = None, dropout: float = 0.0,
                 batch_first: bool = True, base: float = 10000.0, beyond_max_len: str = "error") -> None:
        super().__init__()
        # (every table checked before the first is allocated)
        _check_options("TokenAndPositionEmbedding", vocab_size=vocab_size, d_model=d_model, max_len=max_len,
                       positions=positions, scale=scale, padding_idx=padding_idx, dropout=dropout,
                       batch_first=batch_first, base=base, beyond_max_len=beyond_max_len)
        self.kind, self.beyond_max_len = positions, beyond_max_len
        self.vocab_size, self.d_model, self.max_len = vocab_size, d_model, max_len
        self.scale = math.sqrt(d_model) if scale is None else scale
        self.padding_idx, self.dropout, self.batch_first = padding_idx, dropout, batch_first
        self.tokens = torch.nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        if self.kind == "sinusoidal":
            self.positions = PositionalEncoding(d_model, max_len, base=base, dropout=dropout, batch_first=batch_first,
                                                beyond_max_len=beyond_max_len, scale=self.scale)
        else:
            self.positions = LearnedPositionalEmbedding(d_model, max_len, dropout=dropout,
                                                        batch_first=batch_first, scale=self.scale)

    def _table(self) -> Tensor:
        return self.positions.pe if self.kind == "sinusoidal" else self.positions.weight

    def _embed(self, ids: Tensor, offset: int, positions: Optional[Tensor]) -> Tensor:
        # the C++ module's call: the token_and_position_embedding_call operator
        columns, extrapolate = self.positions._columns_and_extrapolate()
        return _ops.token_and_position_embedding_call(
            ids, self.tokens.weight, self._table(), columns, offset, positions, self.batch_first, self.scale,
            -1 if self.padding_idx is None else self.padding_idx, self.dropout, self.training, extrapolate)

    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:
        return self._embed(ids, offset, None)

    def forward_positions(self, ids: Tensor, positions: Tensor) -> Tensor:
        """Explicit positions, ``[L]`` or like ``ids``; -1 = padding; fractional ones with
        sinusoidal positions."""
        if positions is None:
            raise ValueError("TokenAndPositionEmbedding: forward_positions needs positions; use forward(ids, offset) otherwise")
        return self._embed(ids, 0, positions)

    def extra_repr(self) -> str:
        return (f"vocab_size={self.vocab_size}, d_model={self.d_model}, max_len={self.max_len}, "
                f"positions={self.kind}, scale={self.scale}, padding_idx={self.padding_idx}")




def read_hf_rope_config(config: Any, *, strict: bool = False, layer: Optional[int] = None,
                        layer_type: Optional[str] = None) -> Dict[str, Any]:
    """Reads the rotary embedding of a Hugging Face config with posenc's C++ reader
    (``posenc::io::read_hf_rope_config``, the one ``posenc rope --hf-config`` and ``posenc export
    --hf-config`` use: transformers' rules, model-type defaults and pairings, both config forms).

    ``config``: a path to a ``config.json``, its contents as a ``dict``, or a
    ``transformers.PretrainedConfig`` (read through ``to_json_string(use_diff=False)``). Returns
    ``{"module": the keyword arguments of RotaryEmbedding, "num_attention_heads": ...,
    "num_key_value_heads": ..., "audit": [{"key", "status", "value", "reason"}, ...],
    "layer_types": the config's, "layer_type": the one read, "rotary_layers": which layers rotate
    (``no_rope_layers``; empty: all), "rotates": whether ``layer`` does, "attention_temperature": the
    keyword arguments of ``AttentionTemperature`` where the layer's queries are scaled by position (Llama
    4's layers without rotary, Ministral 3's and Mistral 4's layers), else None}``. ``layer`` (0-based) or
    ``layer_type`` choose the rope parameters of one layer where the config has one set per layer
    type (Gemma 3/3n/4, OLMo 3, ModernBERT; Gemma 4's ``per_layer_config`` too). Keys that
    change the rotation but are not applied give a ``UserWarning`` naming them, or with ``strict``
    a ``ValueError``; malformed configs are a ``ValueError`` naming the field."""
    if isinstance(config, (str, os.PathLike)):
        source = os.fspath(config)
        # (at most one byte past the reader's limit on a config's size, which then refuses it: a
        # file past it, or one without an end such as /dev/zero, never fills the memory)
        with open(source, "rb") as file:
            data = file.read(_MAX_CONFIG_FILE_BYTES + 1)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"read_hf_rope_config: {source} is not UTF-8 text ({error}); a config.json is "
                             "UTF-8 JSON") from None
    elif isinstance(config, dict):
        text, source = json.dumps(config), "config"
    elif hasattr(config, "to_json_string"):
        text, source = config.to_json_string(use_diff=False), type(config).__name__
    else:
        raise TypeError("read_hf_rope_config: config must be a path, a dict or a transformers.PretrainedConfig, "
                        f"but got {type(config).__name__}")
    try:
        reader = _ops.read_hf_rope_config
    except (AttributeError, RuntimeError):  # (posenc/__init__.py loads it where it is found)
        raise ImportError("read_hf_rope_config: posenc's config reader (libposenc_io.so) is not loaded: it was not "
                          "found beside libposenc.so; install the package with 'pip install --no-build-isolation .' "
                          "or set POSENC_IO_LIBRARY to the libposenc_io.so built with libposenc.so") from None
    with _cpp_checks():
        read = json.loads(reader(text, strict, source, layer, layer_type or ""))
    for message in read.pop("warnings"):
        warnings.warn(message, UserWarning, stacklevel=3)
    return read


def mrope_position_ids(token_types: Tensor, image_grid_thw: Optional[Tensor] = None,
                       video_grid_thw: Optional[Tensor] = None, attention_mask: Optional[Tensor] = None, *,
                       spatial_merge_size: int = 2, video_time_intervals: Optional[Sequence[float]] = None,
                       frames_apart: bool = False) -> Tuple[Tensor, Tensor]:
    """The ``[3, B, L]`` (temporal, height, width) positions of multimodal RoPE for a batch of
    text, image and video tokens, as Qwen2-VL, Qwen2.5-VL and Qwen3-VL / Qwen3.5 number them
    (transformers' ``get_rope_index``), and each row's ``rope_deltas`` ``[B, 1]`` (its largest
    position + 1 - its number of kept tokens: decoding continues at ``token index + delta`` on
    all axes).

    ``token_types`` ``[B, L]``: 0 text, 1 image, 2 video (transformers' ``mm_token_type_ids``).
    Text tokens count up by one on all three axes. A run of image or video tokens takes the next
    grids of ``image_grid_thw`` / ``video_grid_thw`` (``[N, 3]``: temporal, height and width
    patches, before merging) until it is filled: a grid of ``t * (h / m) * (w / m)`` tokens, with
    ``m = spatial_merge_size``, is numbered ``start + int(frame * interval)`` (the product in
    float32, truncated, as transformers computes it), ``start + row``, ``start + column``, and the
    next token starts at ``start + max(h, w) / m``.
    ``video_time_intervals``: each video's temporal spacing (default 1, Qwen2-VL's). Qwen2.5-VL:
    ``tokens_per_second * second_per_grid_ts``, and ``tokens_per_second`` for each video where
    ``second_per_grid_ts`` is not given. ``frames_apart``: each frame of a video is a grid of its
    own (Qwen3-VL and Qwen3.5, whose frames are separated by timestamp tokens); the intervals then
    have no effect.
    ``attention_mask`` ``[B, L]``: tokens where it is 0 are left out of the numbering and get
    position 0, as transformers gives them. The ``posenc::mrope_position_ids`` operator (the C++
    ``posenc::functional::mrope_position_ids``) computes them on the host; a mismatch between the
    tokens and the grids is a ValueError."""
    with _cpp_checks():  # the posenc::mrope_position_ids operator (the C++ functional form's)
        return tuple(_ops.mrope_position_ids(
            token_types, image_grid_thw, video_grid_thw, attention_mask, spatial_merge_size=spatial_merge_size,
            video_time_intervals=None if video_time_intervals is None else [float(v) for v in video_time_intervals],
            frames_apart=frames_apart))


class RotaryEmbedding(_DerivedTables):
    """Rotary position embedding (``posenc::RotaryEmbedding``): caches ``cos``/``sin`` ``[cached_len,
    rotary_dim / 2]``; ``forward(x, offset=0)`` rotates queries or keys ``[B, L, H, head_dim]``
    (``[B, H, L, head_dim]`` with ``heads_first``), the first ``rotary_dim`` channels of each head
    (the last with ``rotate_last_channels``: DeepSeek-V4's heads).

    ``rope_scaling`` is Hugging Face's block (``{"rope_type": "llama3", "factor": 8.0, ...}``, the
    parameter names of ``modeling_rope_utils.py``) for every rope type: ``default``, ``linear``,
    ``dynamic``, ``yarn``, ``longrope``, ``llama3``, ``proportional`` (read by the
    ``rotary_embedding_frequencies`` operator, which knows the types and checks every option as the C++
    module does; an unknown type or key is a ValueError). ``attention_factor_in_cos_sin`` folds the
    variant's attention factor into cos/sin (HF) or leaves it to the caller's softmax scale
    (DeepSeek; read it from ``attention_factor``). ``dynamic`` and ``longrope`` switch, per call, to
    the frequencies of the call's length once it passes ``max_position_embeddings`` /
    ``original_max_position_embeddings`` (the C++ module's semantics: keys cached by earlier calls
    keep the rotation they got). ``mrope_section`` (Qwen2-VL; ``mrope_interleaved``: Qwen3-VL;
    ``mrope_hw_alternating``: ERNIE 4.5-VL)
    rotates by multimodal positions ``[3, B, L]`` given to ``forward_positions``.
    ``beyond_max_len="extrapolate"`` computes positions past ``max_len`` from the frequencies.
    ``cached_len`` (default: ``max_len``; needed where ``max_len``'s caches would exceed posenc's
    limit of 2^28 elements, e.g. 10M-position contexts) is the number of cached rows; rows of positions from ``cached_len`` to ``max_len - 1`` are computed
    for each call that reaches them (float64 angles, rounded once: the values a cache would hold).
    """

    _tables = ("cos", "sin")
    _definitions = ("inv_freq", "_long_inv_freq")

    def __init__(self, head_dim: int, max_len: int, *, base: float = 10000.0,
                 rotary_dim: Optional[int] = None, pairing: str = "half_split",
                 heads_first: bool = False, beyond_max_len: str = "error",
                 rope_scaling: Optional[dict] = None, freq_factors: Optional[List[float]] = None,
                 attention_factor_in_cos_sin: bool = True, mrope_section: Optional[List[int]] = None,
                 mrope_interleaved: bool = False, cached_len: Optional[int] = None,
                 deinterleave: bool = False, inverse: bool = False, rotate_last_channels: bool = False,
                 mrope_hw_alternating: bool = False) -> None:
        super().__init__()
        self.head_dim, self.max_len, self.base = head_dim, max_len, base
        self.rotary_dim = head_dim if rotary_dim is None else rotary_dim
        #: Positions whose cos/sin rows are cached (the C++ options' cached_rows()).
        self.cached_len = max_len if cached_len is None else cached_len
        self.pairing = pairing
        self.deinterleave = deinterleave
        #: Turned by -theta (NanoChat's rotation; the C++ options' inverse).
        self.inverse = inverse
        #: The last ``rotary_dim`` channels of each head turn, the leading ones pass through
        #: (DeepSeek-V4's heads; the C++ options' rotate_last_channels).
        self.rotate_last_channels = rotate_last_channels
        self.heads_first = heads_first
        self.beyond_max_len = beyond_max_len
        scaling = dict(rope_scaling or {})
        self.rope_type = str(scaling.pop("rope_type", scaling.pop("type", "default")))
        self.rope_scaling = scaling
        self.freq_factors = list(freq_factors) if freq_factors else None
        self.attention_factor_in_cos_sin = attention_factor_in_cos_sin
        self.mrope_section = list(mrope_section) if mrope_section else None
        self.mrope_interleaved = mrope_interleaved
        #: ERNIE 4.5-VL's multimodal assignment (the C++ options' mrope_hw_alternating).
        self.mrope_hw_alternating = mrope_hw_alternating
        #: The options as the rotary_embedding operators read them (JSON text, numbers as
        #: _json_value gives them; the rope parameters' max_position_embeddings is max_len by
        #: default, as in the C++ options), which check them as the C++ module's reset().
        self._module = json.dumps({key: _json_value(value) for key, value in {
            "head_dim": head_dim, "max_len": max_len, "cached_len": cached_len, "base": base,
            "rotary_dim": self.rotary_dim, "pairing": self.pairing, "deinterleave": deinterleave, "inverse": inverse,
            "rotate_last_channels": rotate_last_channels,
            "heads_first": heads_first, "beyond_max_len": self.beyond_max_len,
            "freq_factors": self.freq_factors, "attention_factor_in_cos_sin": attention_factor_in_cos_sin,
            "mrope_section": self.mrope_section, "mrope_interleaved": mrope_interleaved,
            "mrope_hw_alternating": mrope_hw_alternating}.items()} | {
            "rope_parameters": {"rope_type": self.rope_type} | {
                key: _json_value(value) for key, value in scaling.items()}})
        with _cpp_checks():  # the operator checks the options as the C++ module's reset() (posenc's table of rope types)
            inv_freq, long_inv_freq, factor = _ops.rotary_embedding_frequencies(self._module)
        #: float64 frequencies ``[rotary_dim / 2]`` (the same as the C++ module's ``inv_freq()``), on
        #: the caches' device.
        self.inv_freq = inv_freq
        self._host_inv_freq = inv_freq  # what the caches are computed from (CPU)
        #: longrope: the frequencies of the calls past its original context (None for the other types)
        self._long_inv_freq = long_inv_freq if long_inv_freq.numel() > 0 else None
        # dynamic NTK and LongRoPE: a call's frequencies follow its largest position (sharded
        # DTensor positions are replicated first: _whole_positions)
        self._call_frequencies = self.rope_type == "dynamic" or self._long_inv_freq is not None
        #: The variant's attention factor (YaRN's mscale, LongRoPE's; 1 for the others).
        self.attention_factor = float(factor)
        #: The factor in the rows (cached or computed): the attention factor, or 1 when it is left out.
        self._rows_factor = self.attention_factor if self.attention_factor_in_cos_sin else 1.0
        self._build_tables(torch.float32, torch.device("cpu"))

    @classmethod
    def from_hf_config(cls, config: Any, *, layer: Optional[int] = None, layer_type: Optional[str] = None,
                       strict: bool = False, **kwargs: Any) -> "RotaryEmbedding":
        """The rotary embedding of a Hugging Face config (a path, a ``dict`` or a
        ``transformers.PretrainedConfig``), read by ``read_hf_rope_config`` (of ``layer`` or
        ``layer_type`` where the config has per-layer rope parameters); ``kwargs`` (e.g.
        ``heads_first=True``, ``beyond_max_len="extrapolate"``, ``max_len``, ``cached_len``) replace
        what the config gives. Equal to ``posenc export --module rotary --hf-config`` and to the C++
        ``RotaryEmbedding(read_hf_rope_config_file(path).options)``."""
        read = read_hf_rope_config(config, strict=strict, layer=layer, layer_type=layer_type)
        if not read["rotates"]:
            which = f"layer {layer}" if layer is not None else f"layer type {read['layer_type']}"
            raise ValueError(f"RotaryEmbedding.from_hf_config: {which} has no rotary (no_rope_layers, or its rope "
                             "parameters are null): its attention takes no positions but, where the config has one, "
                             "a query temperature (AttentionTemperature.from_hf_config); choose a layer that rotates "
                             "(read_hf_rope_config(...)['rotary_layers'] says which)")
        module = dict(read["module"])
        if "pairing" in kwargs:  # a pairing asked for replaces the config's regrouping too (as the CLI's --pairing)
            module.pop("deinterleave", None)
        return cls(**{**module, **kwargs})

    def _build_tables(self, dtype: torch.dtype, device: torch.device) -> None:
        # (the frequencies do not depend on the dtype: computed once, in __init__.) Made beside them
        # and moved: FakeTensorMode places an operator's outputs on its inputs' device.
        cos, sin = _ops.rotary_tables(self.cached_len, self._host_inv_freq, self._rows_factor, dtype=dtype)
        cos, sin = cos.to(device), sin.to(device)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    # The methods read the caches from self._buffers and call the operators' overloads: a decoding
    # step's Python side is then about the bare operator's (nn.Module.__getattr__ for the two caches
    # and the packet's overload resolution took a decoding step's forward_qk from 4.4 to 5.8 us,
    # docs/performance.md).
    # A call's logic (which rows it reads, rows computed past the caches, dynamic / longrope's
    # switch by the call's end, the checks against max_len, multimodal positions, deinterleave) is
    # the C++ module's own: the rotary_embedding_call operators, given this module's options.

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        buffers = self._buffers
        return _ops.rotary_embedding_call.default(x, buffers["cos"], buffers["sin"], self.inv_freq, self._long_inv_freq,
                                                  self._module, offset, None)

    def forward_positions(self, x: Tensor, positions: Tensor) -> Tensor:
        """Explicit positions: integer or fractional ``[L]`` / ``[B, L]``, or multimodal ``[3, B, L]``."""
        if positions is None:
            raise ValueError("RotaryEmbedding: forward_positions needs positions; use forward(x, offset) for consecutive ones")
        if self._call_frequencies:
            positions = _whole_positions(positions)
        buffers = self._buffers
        return _ops.rotary_embedding_call.default(x, buffers["cos"], buffers["sin"], self.inv_freq, self._long_inv_freq,
                                                  self._module, 0, positions)

    def forward_qk(self, q: Tensor, k: Tensor, offset: int = 0) -> Tuple[Tensor, Tensor]:
        """Queries and keys (any head counts: GQA/MQA) in one call."""
        buffers = self._buffers
        return _ops.rotary_embedding_call_qk.default(q, k, buffers["cos"], buffers["sin"], self.inv_freq,
                                                     self._long_inv_freq, self._module, offset, None)

    def forward_kv_cache_(self, q: Tensor, k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor,
                          cache_seqlens: Tensor, positions: Optional[Tensor] = None,
                          cache_heads_first: Optional[bool] = None) -> Tensor:
        """The decoding step of a serving loop in one pass (``posenc::rotary_kv_cache_``): rotates
        ``q`` in place, rotates ``k`` into ``k_cache`` and copies ``v`` into ``v_cache``, token l of
        sequence b at slot ``cache_seqlens[b] + l`` (flash-attn's convention). q, k, v are
        ``[B, L, H, head_dim]`` (``[B, H, L, head_dim]`` with ``heads_first``; k and v with H_kv
        heads), the caches ``[B, S, H_kv, D]``, or ``[B, H_kv, S, D]`` with ``cache_heads_first``
        (default: the module's ``heads_first``). ``positions``: the rotation's when they are not the
        slots (HF's position_ids of a left-padded batch). Inference only. Returns ``q``."""
        heads_first = self.heads_first if cache_heads_first is None else cache_heads_first
        buffers = self._buffers
        _ops.rotary_embedding_call_kv_cache_.default(q, k, v, k_cache, v_cache, buffers["cos"], buffers["sin"],
                                                     self.inv_freq, self._long_inv_freq, self._module, cache_seqlens,
                                                     positions, False, heads_first)
        return q

    def forward_paged_kv_cache_(self, q: Tensor, k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor,
                                positions: Tensor, slot_mapping: Tensor, cache_heads_first: bool = False) -> Tensor:
        """``forward_kv_cache_`` for a paged cache (``posenc::rotary_paged_kv_cache_``, vLLM's
        convention) and a packed batch of T tokens: q ``[T, H, head_dim]``, k and v ``[T, H_kv, D]``,
        positions ``[T]``, slot_mapping ``[T]`` (a negative slot skips the token), caches
        ``[num_blocks, block_size, H_kv, D]`` (FlashInfer's HND ``[num_blocks, H_kv, block_size, D]``
        with ``cache_heads_first``). Returns ``q``."""
        buffers = self._buffers
        _ops.rotary_embedding_call_kv_cache_.default(q, k, v, k_cache, v_cache, buffers["cos"], buffers["sin"],
                                                     self.inv_freq, self._long_inv_freq, self._module, slot_mapping,
                                                     positions, True, cache_heads_first)
        return q

    def extra_repr(self) -> str:
        cached = f", cached_len={self.cached_len}" if self.cached_len != self.max_len else ""
        return (f"head_dim={self.head_dim}, max_len={self.max_len}{cached}, rotary_dim={self.rotary_dim}, "
                f"base={self.base}, pairing={self.pairing}{', deinterleave=True' if self.deinterleave else ''}"
                f"{', inverse=True' if self.inverse else ''}"
                f"{', rotate_last_channels=True' if self.rotate_last_channels else ''}, "
                f"heads_first={self.heads_first}, rope_type={self.rope_type}")


class Timesteps(_Module):
    """Diffusers' sinusoidal timestep embedding (``posenc::Timesteps``, diffusers' ``Timesteps``):
    integer or fractional timesteps ``[N]`` -> ``[N, embedding_dim]``, computed in float64."""

    def __init__(self, embedding_dim: int, *, flip_sin_to_cos: bool = False,
                 downscale_freq_shift: float = 1.0, scale: float = 1.0, max_period: int = 10000) -> None:
        super().__init__()
        _check_options("Timesteps", embedding_dim=embedding_dim, flip_sin_to_cos=flip_sin_to_cos,
                       downscale_freq_shift=downscale_freq_shift, scale=scale, max_period=max_period)
        self.embedding_dim, self.flip_sin_to_cos = embedding_dim, flip_sin_to_cos
        self.downscale_freq_shift, self.scale, self.max_period = downscale_freq_shift, scale, max_period

    def forward(self, timesteps: Tensor) -> Tensor:
        return _ops.timestep_embedding(timesteps, self.embedding_dim, self.flip_sin_to_cos,
                                       self.downscale_freq_shift, self.scale, self.max_period)

    def extra_repr(self) -> str:
        return f"embedding_dim={self.embedding_dim}, flip_sin_to_cos={self.flip_sin_to_cos}, downscale_freq_shift={self.downscale_freq_shift}"


class TimestepEmbedder(_Module):
    """DiT's ``TimestepEmbedder`` (``posenc::TimestepEmbedder``): the timestep embedding (cos first,
    no shift) through ``mlp`` = Linear, SiLU, Linear (keys ``mlp.0.*``, ``mlp.2.*``)."""

    def __init__(self, hidden_size: int, *, frequency_embedding_size: int = 256, max_period: int = 10000) -> None:
        super().__init__()
        _check_options("TimestepEmbedder", hidden_size=hidden_size, frequency_embedding_size=frequency_embedding_size,
                       max_period=max_period)
        self.hidden_size, self.frequency_embedding_size = hidden_size, frequency_embedding_size
        self.max_period = max_period
        self.frequencies = Timesteps(frequency_embedding_size, flip_sin_to_cos=True,
                                     downscale_freq_shift=0.0, max_period=max_period)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(frequency_embedding_size, hidden_size),
                                       torch.nn.SiLU(), torch.nn.Linear(hidden_size, hidden_size))

    def forward(self, timesteps: Tensor) -> Tensor:
        # the C++ module's call: the timestep_embedder_call operator
        first, second = self.mlp[0], self.mlp[2]
        return _ops.timestep_embedder_call(timesteps, self.hidden_size, self.frequency_embedding_size,
                                           self.max_period, first.weight, first.bias, second.weight, second.bias)


class AxialRotaryEmbedding(_Module):
    """Axial RoPE of token coordinates (Flux's ``FluxPosEmbed``, ``posenc::AxialRotaryEmbedding``):
    ``forward(x, ids)`` rotates ``x`` ``[B, L, H, Dh]`` by the coordinates ``ids`` ``[L, A]``, axis
    ``a`` turning ``axes_dim[a] / 2`` frequency pairs."""

    def __init__(self, axes_dim: List[int], *, theta: float = 10000.0, pairing: str = "interleaved",
                 heads_first: bool = False) -> None:
        super().__init__()
        _check_options("AxialRotaryEmbedding", axes_dim=axes_dim, theta=theta, pairing=pairing, heads_first=heads_first)
        self.axes_dim, self.theta, self.heads_first = list(axes_dim), theta, heads_first
        self.pairing = pairing

    def tables(self, ids: Tensor, dtype: Optional[torch.dtype] = None) -> Tuple[Tensor, Tensor]:
        return _ops.axial_rotary_tables(ids, self.axes_dim, self.theta, dtype=dtype)

    def forward(self, x: Tensor, ids: Tensor) -> Tensor:
        # the C++ module's call: the axial_rotary_embedding_call operator
        return _ops.axial_rotary_embedding_call(x, ids, self.axes_dim, self.theta, self.pairing == "interleaved",
                                                self.heads_first)


class VisionRotaryEmbedding(_Module):
    """EVA-02's RoPE of a patch grid (timm's ``RotaryEmbeddingCat(in_pixels=False)``,
    ``posenc::VisionRotaryEmbedding``): ``forward(x, feat_shape)`` rotates the patches of ``x``
    ``[B, heads, prefix + h * w, Dh]``, leaving the ``num_prefix_tokens`` class/register tokens."""

    def __init__(self, dim: int, *, temperature: float = 10000.0, ref_feat_shape: Optional[List[int]] = None,
                 grid_offset: float = 0.0, grid_indexing: str = "ij", pairing: str = "interleaved",
                 num_prefix_tokens: int = 1, heads_first: bool = True) -> None:
        super().__init__()
        _check_options("VisionRotaryEmbedding", dim=dim, temperature=temperature, ref_feat_shape=ref_feat_shape,
                       grid_offset=grid_offset, grid_indexing=grid_indexing, pairing=pairing,
                       num_prefix_tokens=num_prefix_tokens, heads_first=heads_first)
        self.dim, self.temperature = dim, temperature
        self.ref_feat_shape = list(ref_feat_shape or [])
        self.grid_offset, self.grid_indexing, self.pairing = grid_offset, grid_indexing, pairing
        self.num_prefix_tokens, self.heads_first = num_prefix_tokens, heads_first

    def tables(self, feat_shape: List[int], dtype: Optional[torch.dtype] = None,
               device: Optional[torch.device] = None) -> Tuple[Tensor, Tensor]:
        # the C++ module's tables: the vision_rotary_embedding_tables operator
        return _ops.vision_rotary_embedding_tables(list(feat_shape), self.dim, self.temperature, self.ref_feat_shape,
                                                   self.grid_offset, self.grid_indexing, dtype=dtype, device=device)

    def forward(self, x: Tensor, feat_shape: List[int]) -> Tensor:
        # the C++ module's call: the vision_rotary_embedding_call operator
        return _ops.vision_rotary_embedding_call(x, list(feat_shape), self.dim, self.temperature, self.ref_feat_shape,
                                                 self.grid_offset, self.grid_indexing, self.pairing == "interleaved",
                                                 self.num_prefix_tokens, self.heads_first)


class ALiBi(_Module):
    """ALiBi's attention biases (``posenc::ALiBi``): the buffer ``slopes`` (heads ``first_head ..
    first_head + heads - 1`` of ``num_heads``, for tensor-parallel shards); ``forward(query_length,
    key_length, offset=None, causal=False)`` gives the bias ``[1, H, Lq, Lk]`` to add to the
    attention scores, ``forward_causal(key_length, attention_mask=None)`` BLOOM's form."""

    def __init__(self, num_heads: int, *, max_bias: float = 8.0, first_head: int = 0,
                 heads: Optional[int] = None) -> None:
        super().__init__()
        _check_options("ALiBi", num_heads=num_heads, max_bias=max_bias, first_head=first_head, heads=heads)
        self.num_heads, self.max_bias, self.first_head = num_heads, max_bias, first_head
        self.register_buffer("slopes", _ops.alibi_slopes(num_heads, max_bias, first_head, heads))

    def forward(self, query_length: int, key_length: int, offset: Optional[int] = None,
                causal: bool = False) -> Tensor:
        return _ops.alibi_bias(self.slopes, query_length, key_length, offset, causal)

    def forward_causal(self, key_length: int, attention_mask: Optional[Tensor] = None) -> Tensor:
        return _ops.alibi_causal_bias(self.slopes, key_length, attention_mask)

    def score_mod(self, query_length: int, key_length: int, offset: Optional[int] = None):
        """``forward(query_length, key_length, offset)`` as FlexAttention takes it: a ``score_mod``
        for ``torch.nn.attention.flex_attention`` (torch >= 2.5) that adds the same bias, value for
        value, without the ``[H, Lq, Lk]`` tensor. It reads a ``[H, D + 1]`` row of the bias by
        distance (``alibi_bias`` of one query at position 0; D the largest distance of the call), so
        memory is O(H (Lq + Lk)). ``causal_block_mask`` adds ``causal=True``; under it, the compact
        causal form (``forward_causal``) gives the same attention, since softmax cancels a constant
        per query row."""
        _ops.alibi_bias(self.slopes.to("meta"), query_length, key_length, offset, False)  # its checks
        start = key_length - query_length if offset is None else offset
        by_distance = _ops.alibi_bias(self.slopes, 1, max(key_length - 1, start + query_length - 1) + 1, 0, False)[:, 0]

        def alibi(score, b, h, q_idx, kv_idx):
            return score + by_distance[h, (q_idx + start - kv_idx).abs()].to(score.dtype)

        return alibi

    def causal_block_mask(self, query_length: int, key_length: int, offset: Optional[int] = None,
                          device=None):
        """FlexAttention's block mask of ``causal=True``: query i (at position ``offset + i``,
        default ``key_length - query_length``) sees the keys at positions <= its own
        (``torch.nn.attention.flex_attention.create_block_mask``; blocks with no such key are
        skipped, not computed)."""
        from torch.nn.attention.flex_attention import create_block_mask

        _ops.alibi_bias(self.slopes.to("meta"), query_length, key_length, offset, True)  # its checks
        start = key_length - query_length if offset is None else offset

        def causal(b, h, q_idx, kv_idx):
            return kv_idx <= q_idx + start

        device = self.slopes.device if device is None else device
        return create_block_mask(causal, None, None, query_length, key_length, device=device)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, max_bias={self.max_bias}, heads={self.slopes.shape[0]}"


class AttentionTemperature(_Module):
    """A query temperature that grows with the position (``posenc::AttentionTemperature``):
    ``form="llama4"``, Llama 4's attention temperature tuning (its layers without rotary scale
    their queries at position p by ``log1p(floor((p + 1) / floor_scale)) * attn_scale + 1``), or
    ``form="ministral3"``, Ministral 3's and Mistral 4's ``llama_4_scaling_beta`` (every layer,
    after the rotation: ``1 + attn_scale * log(1 + floor(p / floor_scale))``, floor_scale their
    ``original_max_position_embeddings``), each computed as transformers' model code computes it.
    ``forward(query, offset=0)`` scales ``query`` ``[B, L, H, head_dim]`` (``[B, H, L, head_dim]``
    with ``heads_first``) at positions ``offset .. offset + L - 1``; ``forward_positions(query,
    positions)`` at ``[L]`` or ``[B, L]`` positions. No parameters or buffers."""

    def __init__(self, *, floor_scale: float = 8192.0, attn_scale: float = 0.1, form: str = "llama4",
                 heads_first: bool = False) -> None:
        super().__init__()
        _check_options("AttentionTemperature", floor_scale=floor_scale, attn_scale=attn_scale, form=form,
                       heads_first=heads_first)
        self.floor_scale, self.attn_scale = float(floor_scale), float(attn_scale)
        self.form, self.heads_first = form, heads_first

    @classmethod
    def from_hf_config(cls, config: Any, *, layer: Optional[int] = None, layer_type: Optional[str] = None,
                       strict: bool = False, **kwargs: Any) -> Optional["AttentionTemperature"]:
        """The query temperature of a Hugging Face config (a path, a ``dict`` or a
        ``transformers.PretrainedConfig``; ``read_hf_rope_config(...)["attention_temperature"]``) for
        ``layer`` (Llama 4 scales the queries of its layers without rotary only), or ``None`` where
        that layer's queries are not scaled. ``kwargs`` (e.g. ``heads_first=True``) replace what the
        config gives."""
        read = read_hf_rope_config(config, strict=strict, layer=layer, layer_type=layer_type)
        options = read["attention_temperature"]
        return None if options is None else cls(**{**options, **kwargs})

    def forward(self, query: Tensor, offset: int = 0) -> Tensor:
        return _ops.attention_temperature(query, None, offset, self.floor_scale, self.attn_scale, self.heads_first,
                                          self.form)

    def forward_positions(self, query: Tensor, positions: Tensor) -> Tensor:
        return _ops.attention_temperature(query, positions, 0, self.floor_scale, self.attn_scale, self.heads_first,
                                          self.form)

    def extra_repr(self) -> str:
        return (f"form={self.form}, floor_scale={self.floor_scale}, attn_scale={self.attn_scale}, "
                f"heads_first={self.heads_first}")


class RelativePositionBias(_Module):
    """T5's bucketed relative position bias (``posenc::RelativePositionBias``): the embedding
    ``relative_attention_bias`` ``[num_buckets, num_heads]`` (T5's key name);
    ``forward(query_length, key_length, offset=0)`` gives the bias ``[1, H, Lq, Lk]``."""

    def __init__(self, num_heads: int, *, num_buckets: int = 32, max_distance: int = 128,
                 bidirectional: bool = True) -> None:
        super().__init__()
        _check_options("RelativePositionBias", num_heads=num_heads, num_buckets=num_buckets,
                       max_distance=max_distance, bidirectional=bidirectional)
        self.num_heads, self.num_buckets = num_heads, num_buckets
        self.max_distance, self.bidirectional = max_distance, bidirectional
        self.relative_attention_bias = torch.nn.Embedding(num_buckets, num_heads)

    def forward(self, query_length: int, key_length: int, offset: int = 0) -> Tensor:
        return _ops.relative_position_bias(self.relative_attention_bias.weight, query_length, key_length,
                                           self.bidirectional, self.max_distance, offset)

    def score_mod(self, query_length: int, key_length: int, offset: int = 0):
        """``forward(query_length, key_length, offset)`` as FlexAttention takes it: a ``score_mod``
        for ``torch.nn.attention.flex_attention`` (torch >= 2.5) that adds the same bias, value for
        value, without the ``[H, Lq, Lk]`` tensor. It reads a ``[H, Lq + Lk - 1]`` row of the bias
        by relative position (``relative_position_bias`` of one query, so the same buckets and the
        same gradient into ``relative_attention_bias.weight``): memory O(H (Lq + Lk))."""
        weight = self.relative_attention_bias.weight
        _ops.relative_position_bias(weight.to("meta"), query_length, key_length, self.bidirectional,
                                    self.max_distance, offset)  # its checks
        # entry j: the key at j - (Lq - 1) relative to a query at 0, i.e. key kv of query i at kv - i + Lq - 1
        by_relative = _ops.relative_position_bias(weight, 1, query_length + key_length - 1, self.bidirectional,
                                                  self.max_distance, offset + query_length - 1)[0, :, 0]

        def t5(score, b, h, q_idx, kv_idx):
            return score + by_relative[h, kv_idx - q_idx + query_length - 1].to(score.dtype)

        return t5

    def extra_repr(self) -> str:
        return (f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, "
                f"max_distance={self.max_distance}, bidirectional={self.bidirectional}")


class RelPositionalEncoding(_Module):
    """Transformer-XL / Conformer relative positions (``posenc::RelPositionalEncoding``, ESPnet's
    ``RelPositionalEncoding``): the buffer ``pe`` holds the sinusoids of the relative positions
    ``max_len - 1 .. -(max_len - 1)`` (``legacy``: ESPnet's ``LegacyRelPositionalEncoding``, the
    absolute positions ``0 .. max_len - 1``); ``forward(x, offset=0)`` returns ``(x * sqrt(d_model)``
    (``scale_input``), ``pos_emb)`` with ``pos_emb`` ``[1, 2 L - 1, d_model]`` (``[1, L, d_model]``)."""

    def __init__(self, d_model: int, *, max_len: int = 5000, dropout: float = 0.0, scale_input: bool = True,
                 legacy: bool = False, base: float = 10000.0) -> None:
        super().__init__()
        _check_options("RelPositionalEncoding", d_model=d_model, max_len=max_len, dropout=dropout,
                       scale_input=scale_input, legacy=legacy, base=base)
        self.d_model, self.max_len, self.dropout = d_model, max_len, dropout
        self.scale_input, self.legacy, self.base = scale_input, legacy, base
        if legacy:
            table = _ops.sinusoidal_table(max_len, d_model, base)
        else:
            table = _ops.relative_sinusoidal_table(max_len, d_model, base, max_len)
        self.register_buffer("pe", table)

    def forward(self, x: Tensor, offset: int = 0) -> Tuple[Tensor, Tensor]:
        # the C++ module's call: the rel_positional_encoding_call operator
        scale = math.sqrt(self.d_model) if self.scale_input else 1.0
        return _ops.rel_positional_encoding_call(x, self.pe, offset, self.legacy, scale, self.dropout, self.training)


class RelPositionMultiheadAttention(_Module):
    """Transformer-XL / Conformer self-attention with relative positions
    (``posenc::RelPositionMultiheadAttention``, ESPnet's ``RelPositionMultiHeadedAttention``): the
    parameters ``linear_q``, ``linear_k``, ``linear_v``, ``linear_out``, ``linear_pos`` (no bias),
    ``pos_bias_u``, ``pos_bias_v`` ``[H, d_k]`` under ESPnet's names; ``forward(query, key, value,
    pos_emb, mask=None)`` with ``pos_emb`` from ``RelPositionalEncoding``."""

    def __init__(self, embed_dim: int, num_heads: int, *, dropout: float = 0.0) -> None:
        super().__init__()
        _check_options("RelPositionMultiheadAttention", embed_dim=embed_dim, num_heads=num_heads, dropout=dropout)
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.linear_q = torch.nn.Linear(embed_dim, embed_dim)
        self.linear_k = torch.nn.Linear(embed_dim, embed_dim)
        self.linear_v = torch.nn.Linear(embed_dim, embed_dim)
        self.linear_out = torch.nn.Linear(embed_dim, embed_dim)
        self.linear_pos = torch.nn.Linear(embed_dim, embed_dim, bias=False)
        self.pos_bias_u = torch.nn.Parameter(torch.empty(num_heads, embed_dim // num_heads))
        self.pos_bias_v = torch.nn.Parameter(torch.empty(num_heads, embed_dim // num_heads))
        torch.nn.init.xavier_uniform_(self.pos_bias_u)
        torch.nn.init.xavier_uniform_(self.pos_bias_v)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, pos_emb: Tensor,
                mask: Optional[Tensor] = None) -> Tensor:
        # the C++ module's call: the rel_position_multihead_attention_call operator
        return _ops.rel_position_multihead_attention_call(
            query, key, value, pos_emb, mask, self.embed_dim, self.num_heads,
            self.linear_q.weight, self.linear_q.bias, self.linear_k.weight, self.linear_k.bias,
            self.linear_v.weight, self.linear_v.bias, self.linear_pos.weight,
            self.linear_out.weight, self.linear_out.bias, self.pos_bias_u, self.pos_bias_v,
            self.dropout, self.training)

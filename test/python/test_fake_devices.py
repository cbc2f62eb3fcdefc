"""posenc on devices other than the CPU, proved on the CPU: every operator and every posenc.nn
module runs on fake CUDA tensors (torch._subclasses.FakeTensorMode, no driver needed) and on meta
tensors, and gives outputs on the input's device with the shape and dtype the same call gives on
real CPU tensors (the expectations are those CPU calls, run first).

Fake tensors hold no data: reading one on the host (`.item()`, `.tolist()`, `int(t)`, `bool(t)`)
raises DataDependentOutputException, so a call that passes here reads nothing from the device.
(`.cpu()` of a fake tensor gives a fake CPU tensor without reading anything.) The operators run
their Meta kernels (or, for the composite ones, ATen's); the modules' own Python code runs as is.
FakeTensorMode runs a Meta kernel on meta copies of all arguments and then places the outputs, so
arguments on two devices are refused there by FakeTensorMode ("found two different devices"); on
meta tensors posenc's own checks refuse them.

Limits of torch 2.11 met here (not posenc's): FakeTensorMode refuses real tensors unless built
with allow_non_fake_inputs=True, which moving a real module with `.to("cuda")` inside the mode
needs; a module whose parameters are already fake cannot be cast again (`nn.Module._apply` swaps
fake parameters, and FakeTensorMode keeps a weak reference to them: "Couldn't swap"), so
parameters are cast on the CPU before the move, or moved and cast in one `.to("cuda", dtype)`;
and autograd's engine needs a CUDA driver for CUDA tensors, fake or not, so gradients are checked
on meta (the backward operators themselves run on fake CUDA).

A limit of torch 2.6 to 2.9 (not posenc's): FakeTensorMode runs an operator whose arguments are all
real tensors on those real tensors (as constants), so `.to("cuda")` of a real module inside the mode
calls the CUDA driver ("Found no NVIDIA driver"), and so does `.item()` of a fake CUDA element. There
the tests that move a real module with parameters or buffers into fake CUDA are skipped where a probe
(a torch.nn.Linear moved the same way) fails with the driver; the operators on fake CUDA, the modules
without tensors to move and every module move to meta still run. From torch 2.10 nothing is skipped.

No module call reads from the device, the dynamic / LongRoPE RotaryEmbedding with explicit
positions included (it chooses the call's frequencies where the positions lie; transformers reads
`position_ids.max()` there).
"""

import contextlib
import functools
import json
import os
import sys

import pytest

import torch

from reference import columns_of, inv_freq_of

from conftest import TORCH_VERSION

SOURCE_ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_ROOT, "python"))

pytestmark = pytest.mark.skipif(TORCH_VERSION < (2, 6), reason="fake CUDA tensors without a driver are tested with torch >= 2.6 (this is the LibTorch 1.13 environment)")

if TORCH_VERSION >= (2, 6):
    from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensor, FakeTensorMode

CUDA = torch.device("cuda", 0)
META = torch.device("meta")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def posenc(posenc_ops):  # the fixture checks POSENC_LIBRARY is set (the package reads it)
    import posenc as package

    return package


# --- targets: where a call runs ------------------------------------------------------------------

class Target:
    """Converts the CPU tensors of a call to the device under test: real clones on the CPU (the
    reference call), data-less tensors of the same size, strides and dtype on fake CUDA or meta."""

    def __init__(self, kind):
        self.kind = kind
        self.device = {"cpu": CPU, "cuda": CUDA, "meta": META}[kind]

    def __call__(self, t):
        if self.kind == "cpu":
            return t.clone()
        return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=self.device)

    def context(self, allow_non_fake_inputs=False):
        if self.kind == "cuda":
            return FakeTensorMode(allow_non_fake_inputs=allow_non_fake_inputs)
        return contextlib.nullcontext()


class UploadCounter(torch.utils._python_dispatch.TorchDispatchMode if TORCH_VERSION >= (2, 6) else object):
    """Notes every copy of a CPU tensor's values to another device that the code run under it
    makes (aten._to_copy or aten.copy_ from a CPU tensor with elements into a non-CPU one): what
    `.to(device)` of a host-made tensor does, which waits for a CUDA device and cannot be captured
    in a CUDA graph. (It sees the operators Python code calls; what posenc's C++ kernels do
    inside is checked by device_entry_test's counter.)"""

    def __init__(self):
        super().__init__()
        self.uploads = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is torch.ops.aten._to_copy.default:
            source, target = args[0], out
        elif func is torch.ops.aten.copy_.default:
            source, target = args[1], args[0]
        else:
            return out
        if (isinstance(source, torch.Tensor) and source.device.type == "cpu" and source.numel() > 0
                and target.device.type != "cpu"):
            self.uploads.append(f"{func}: {tuple(source.shape)} {source.dtype} to {target.device}")
        return out


def flat(out):
    if out is None or isinstance(out, torch.Tensor):
        return [out]
    result = []
    for item in out:
        result.extend(flat(item))
    return result


def check_like(expected, got, target, cpu_outputs=False):
    """Each output of `got` lies on the target's device (on the CPU with `cpu_outputs`: the
    operators that compute on the host and have no device argument) with the expected shape and
    dtype; fake CUDA outputs are fake tensors (they hold nothing read from a device)."""
    expected, got = flat(expected), flat(got)
    assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
    for index, (want, have) in enumerate(zip(expected, got)):
        if want is None:
            assert have is None, f"output {index}: expected None (undefined), got {have}"
            continue
        assert isinstance(have, torch.Tensor), f"output {index}: {type(have)}"
        device = CPU if cpu_outputs else target.device
        assert have.device == device, f"output {index} on {have.device}, expected {device}"
        if target.kind == "cuda":
            assert isinstance(have, FakeTensor), f"output {index} is a {type(have).__name__}, not a FakeTensor"
        assert have.shape == want.shape, f"output {index}: shape {tuple(have.shape)}, expected {tuple(want.shape)}"
        assert have.dtype == want.dtype, f"output {index}: dtype {have.dtype}, expected {want.dtype}"


class Recorder:
    """torch.ops.posenc, noting which operators a case calls."""

    def __init__(self, ops):
        self._ops = ops
        self.called = set()

    def __getattr__(self, name):
        self.called.add(name)
        return getattr(self._ops, name)


# --- inputs -------------------------------------------------------------------------------------
# Built on the CPU. The cached ones are real tensors; the others, built during a fake call, are fake
# CPU tensors. Either way a case passes them through T, which keeps only their metadata.

# posenc.nn.RotaryEmbedding's options as the rotary_embedding_call operators read them: 16
# positions, 8 of them cached; and dynamic NTK switching past 12 positions.
ROTARY_MODULE = json.dumps({"head_dim": 8, "max_len": 16, "cached_len": 8, "rotary_dim": 8})
ROTARY_DYNAMIC = json.dumps({"head_dim": 8, "max_len": 16, "rotary_dim": 8, "beyond_max_len": "extrapolate",
                             "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 12}})


@functools.lru_cache(maxsize=None)
def caches(max_len, rotary_dim):
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * inv_freq_of(rotary_dim)
    return angles.cos().float(), angles.sin().float()


@functools.lru_cache(maxsize=None)
def table(max_len, d_model):
    return torch.randn(max_len, d_model, generator=torch.Generator().manual_seed(max_len * 1000 + d_model))


@functools.lru_cache(maxsize=None)
def table3(max_len, d_model):
    return table(max_len, d_model).unsqueeze(0)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape))).to(dtype)


def ints(rows):
    return torch.tensor(rows, dtype=torch.long)


DYNAMIC_JSON = '{"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 32}'
POS_L = [0, 3, 1, 7, 2]                             # [L] shared by the batch
POS_BL = [[0, 3, -1, 5, 6], [1, 2, 3, 4, -1]]       # [B, L], -1 = padding
POS_BL_ROTARY = [[0, 3, 9, 5, 6], [1, 2, 3, 4, 0]]  # [B, L]
POS_FLOAT = [[0.5, 3.25, 20.0, 5.0, 6.75], [1.0, 2.5, 3.0, 4.0, 30.5]]  # fractional and past the table


# --- every operator ------------------------------------------------------------------------------

def _case(op, label, call, cpu_outputs=False):
    return pytest.param(op, call, cpu_outputs, id=f"{op}-{label}")


OPERATOR_CASES = [
    # positional-encoding family
    _case("sinusoidal_table", "default", lambda ops, T: ops.sinusoidal_table(12, 8, device=T.device)),
    _case("sinusoidal_table", "float64_options", lambda ops, T: ops.sinusoidal_table(
        12, 7, 500.0, 3, "concatenated", "tensor2tensor", dtype=torch.float64, device=T.device)),
    _case("add_positional_encoding", "offset", lambda ops, T: ops.add_positional_encoding(T(randn(2, 5, 8)), 7)),
    _case("add_positional_encoding", "seq_first_bf16", lambda ops, T: ops.add_positional_encoding(
        T(randn(5, 2, 8, dtype=torch.bfloat16)), 3, 10000.0, False, None, 2.0, "concatenated", "tensor2tensor")),
    _case("add_positional_encoding", "positions_L", lambda ops, T: ops.add_positional_encoding(
        T(randn(2, 5, 8)), 0, 10000.0, True, T(ints(POS_L)))),
    _case("add_positional_encoding", "positions_BL_padding", lambda ops, T: ops.add_positional_encoding(
        T(randn(2, 5, 8)), 0, 10000.0, True, T(ints(POS_BL)))),
    _case("add_positional_encoding", "positions_float", lambda ops, T: ops.add_positional_encoding(
        T(randn(2, 5, 8, dtype=torch.float64)), 0, 10000.0, True, T(torch.tensor(POS_FLOAT)))),
    _case("add_position_table", "offset", lambda ops, T: ops.add_position_table(T(randn(2, 5, 8)), T(table(16, 8)), 3)),
    _case("add_position_table", "table_3d_seq_first_half", lambda ops, T: ops.add_position_table(
        T(randn(5, 2, 8, dtype=torch.float16)), T(table3(16, 8)), 2, False, None, 1.5)),
    _case("add_position_table", "positions_L_int32", lambda ops, T: ops.add_position_table(
        T(randn(2, 5, 8)), T(table(16, 8)), 0, True, T(ints(POS_L).int()))),
    _case("add_position_table", "positions_BL_padding", lambda ops, T: ops.add_position_table(
        T(randn(2, 5, 8)), T(table(16, 8)), 0, True, T(ints(POS_BL)))),
    _case("add_position_table", "positions_float_columns", lambda ops, T: ops.add_position_table(
        T(randn(2, 5, 8)), T(table(16, 8)), 0, True, T(torch.tensor(POS_FLOAT)), 1.0, T(columns_of(8)))),
    _case("add_position_table", "offset_past_table_columns", lambda ops, T: ops.add_position_table(
        T(randn(2, 5, 8)), T(table(16, 8)), 14, True, None, 1.0, T(columns_of(8)))),
    _case("add_position_table_", "offset", lambda ops, T: _inplace(
        T(randn(2, 5, 8)), lambda x: ops.add_position_table_(x, T(table(16, 8)), 4))),
    _case("add_position_table_", "positions_BL_columns", lambda ops, T: _inplace(
        T(randn(2, 5, 8)), lambda x: ops.add_position_table_(x, T(table(16, 8)), 0, True, T(ints(POS_BL)), 2.0, T(columns_of(8))))),
    _case("sinusoidal_columns", "default", lambda ops, T: ops.sinusoidal_columns(8, device=T.device)),
    _case("sinusoidal_columns", "tensor2tensor_odd", lambda ops, T: ops.sinusoidal_columns(
        7, 500.0, "concatenated", "tensor2tensor", device=T.device)),
    # posenc.nn's sequence modules' calls (src/ops/sequence/module.cpp)
    _case("positional_encoding_call", "extrapolate_past_table", lambda ops, T: ops.positional_encoding_call(
        T(randn(2, 5, 8)), T(table3(16, 8)), T(columns_of(8)), 14, None, True, 1.0, 0.0, False, True)),
    _case("positional_encoding_call", "learned_positions_BL", lambda ops, T: ops.positional_encoding_call(
        T(randn(2, 5, 8)), T(table(16, 8)), None, 0, T(ints(POS_BL)), True, 2.0)),
    _case("positional_encoding_call", "fractional_dropout_train", lambda ops, T: ops.positional_encoding_call(
        T(randn(2, 5, 8)), T(table3(16, 8)), T(columns_of(8)), 0, T(torch.tensor(POS_FLOAT)), True, 1.0, 0.0, True)),
    _case("positional_encoding_call_", "offset", lambda ops, T: _inplace(
        T(randn(2, 5, 8)), lambda x: ops.positional_encoding_call_(x, T(table3(16, 8)), T(columns_of(8)), 4))),
    _case("positions_from_padding_mask", "batch_first", lambda ops, T: ops.positions_from_padding_mask(
        T(torch.tensor([[True, False, False], [False, True, False]])))),
    _case("positions_from_padding_mask", "seq_first", lambda ops, T: ops.positions_from_padding_mask(
        T(torch.tensor([[True, False], [False, False], [False, True]])), False)),
    _case("add_position_table_out", "resized", lambda ops, T: _inplace(
        T(torch.empty(0)), lambda out: ops.add_position_table_out(T(randn(2, 5, 8)), T(table(16, 8)), 1, out=out))),
    _case("add_position_table_out", "positions_L", lambda ops, T: _inplace(
        T(torch.empty(2, 5, 8)), lambda out: ops.add_position_table_out(
            T(randn(2, 5, 8)), T(table(16, 8)), 0, True, T(ints(POS_L)), out=out))),
    _case("_add_position_table_backward", "offset", lambda ops, T: ops._add_position_table_backward(
        T(randn(2, 5, 8)), T(table(16, 8)), 3, True)),
    _case("_add_position_table_backward", "positions_BL", lambda ops, T: ops._add_position_table_backward(
        T(randn(5, 2, 8)), T(table3(16, 8)), 0, False, T(ints(POS_BL).t()))),
    # rotary family
    _case("apply_rotary", "offset", lambda ops, T: ops.apply_rotary(T(randn(2, 5, 3, 8)), *map(T, caches(16, 8)), 4)),
    _case("apply_rotary", "heads_first_interleaved_inverse_bf16", lambda ops, T: ops.apply_rotary(
        T(randn(2, 3, 5, 8, dtype=torch.bfloat16)), *map(T, caches(16, 8)), 1, None, True, True, True)),
    _case("apply_rotary", "partial_rotary", lambda ops, T: ops.apply_rotary(T(randn(2, 5, 3, 12)), *map(T, caches(16, 8)))),
    _case("apply_rotary", "positions_L", lambda ops, T: ops.apply_rotary(
        T(randn(2, 5, 3, 8)), *map(T, caches(16, 8)), 0, T(ints(POS_L)))),
    _case("apply_rotary", "positions_BL", lambda ops, T: ops.apply_rotary(
        T(randn(2, 5, 3, 8)), *map(T, caches(16, 8)), 0, T(ints(POS_BL_ROTARY)))),
    _case("apply_rotary", "positions_float_inv_freq", lambda ops, T: ops.apply_rotary(
        T(randn(2, 5, 3, 8)), *map(T, caches(16, 8)), 0, T(torch.tensor(POS_FLOAT)), False, False, False, T(inv_freq_of(8)), 1.25)),
    _case("apply_rotary", "offset_past_caches_inv_freq", lambda ops, T: ops.apply_rotary(
        T(randn(2, 5, 3, 8)), *map(T, caches(16, 8)), 14, None, False, False, False, T(inv_freq_of(8)))),
    _case("apply_rotary_", "offset", lambda ops, T: _inplace(
        T(randn(2, 5, 3, 8)), lambda x: ops.apply_rotary_(x, *map(T, caches(16, 8)), 2))),
    _case("apply_rotary_", "positions_float_inv_freq", lambda ops, T: _inplace(
        T(randn(2, 3, 5, 8, dtype=torch.float64)), lambda x: ops.apply_rotary_(
            x, *map(T, caches(16, 8)), 0, T(torch.tensor(POS_FLOAT)), False, True, False, T(inv_freq_of(8))))),
    _case("apply_rotary_qk", "gqa_offset", lambda ops, T: ops.apply_rotary_qk(
        T(randn(2, 5, 4, 8)), T(randn(2, 5, 2, 8)), *map(T, caches(16, 8)), 3)),
    _case("apply_rotary_qk", "heads_first_positions_BL", lambda ops, T: ops.apply_rotary_qk(
        T(randn(2, 4, 5, 8)), T(randn(2, 1, 5, 8)), *map(T, caches(16, 8)), 0, T(ints(POS_BL_ROTARY)), True, True)),
    _case("apply_rotary_qk", "positions_float_inv_freq", lambda ops, T: ops.apply_rotary_qk(
        T(randn(2, 5, 4, 8)), T(randn(2, 5, 2, 8)), *map(T, caches(16, 8)), 0, T(torch.tensor(POS_FLOAT)),
        False, False, False, T(inv_freq_of(8)), 0.5)),
    _case("apply_rotary_qk_", "offset", lambda ops, T: _inplace(
        (T(randn(2, 5, 4, 8)), T(randn(2, 5, 2, 8))), lambda qk: ops.apply_rotary_qk_(*qk, *map(T, caches(16, 8)), 5))),
    _case("apply_rotary_qk_", "positions_L", lambda ops, T: _inplace(
        (T(randn(2, 5, 4, 8)), T(randn(2, 5, 2, 8))), lambda qk: ops.apply_rotary_qk_(*qk, *map(T, caches(16, 8)), 0, T(ints(POS_L))))),
    # A module's call (posenc.nn.RotaryEmbedding's options as JSON, its tensors): rows past its
    # cached ones, dynamic NTK switching by a call's end, and on queries and keys.
    _case("rotary_embedding_call", "cached_len_offset", lambda ops, T: ops.rotary_embedding_call(
        T(randn(2, 5, 3, 8)), *map(T, caches(8, 8)), T(inv_freq_of(8)), None, ROTARY_MODULE, 6)),
    _case("rotary_embedding_call", "dynamic_positions_BL", lambda ops, T: ops.rotary_embedding_call(
        T(randn(2, 5, 3, 8)), *map(T, caches(16, 8)), T(inv_freq_of(8)), None, ROTARY_DYNAMIC, 0, T(ints(POS_BL_ROTARY)))),
    _case("rotary_embedding_call_qk", "gqa_dynamic_past_switch", lambda ops, T: ops.rotary_embedding_call_qk(
        T(randn(2, 5, 4, 8)), T(randn(2, 5, 2, 8)), *map(T, caches(16, 8)), T(inv_freq_of(8)), None, ROTARY_DYNAMIC, 9)),
    # The fused KV-cache writes: q rotated (in place or returned) and the caches written.
    _case("rotary_kv_cache_", "gqa_seqlens", lambda ops, T: _inplace(
        (T(randn(2, 3, 4, 8)), T(torch.zeros(2, 6, 2, 8)), T(torch.zeros(2, 6, 2, 4))),
        lambda w: ops.rotary_kv_cache_(w[0], T(randn(2, 3, 2, 8)), T(randn(2, 3, 2, 4)), w[1], w[2],
                                       *map(T, caches(16, 8)), T(torch.tensor([1, 3], dtype=torch.int32))))),
    _case("rotary_kv_cache", "positions_heads_first_caches", lambda ops, T: (lambda kc, vc: (ops.rotary_kv_cache(
        T(randn(2, 3, 4, 8)), T(randn(2, 3, 2, 8)), T(randn(2, 3, 2, 8)), kc, vc, *map(T, caches(16, 8)),
        T(ints([0, 2])), T(ints([[0, 1, 2], [-1, 0, 1]])), False, False, True), kc, vc))(
        T(torch.zeros(2, 2, 6, 8)), T(torch.zeros(2, 2, 6, 8)))),
    _case("rotary_paged_kv_cache_", "slots_and_padding", lambda ops, T: _inplace(
        (T(randn(5, 4, 8)), T(torch.zeros(3, 4, 2, 8)), T(torch.zeros(3, 4, 2, 8))),
        lambda w: ops.rotary_paged_kv_cache_(w[0], T(randn(5, 2, 8)), T(randn(5, 2, 8)), w[1], w[2],
                                             *map(T, caches(16, 8)), T(ints(POS_L)), T(ints([4, -1, 11, 0, 7]))))),
    _case("rotary_paged_kv_cache", "interleaved_hnd", lambda ops, T: (lambda kc, vc: (ops.rotary_paged_kv_cache(
        T(randn(5, 4, 8)), T(randn(5, 2, 8)), T(randn(5, 2, 8)), kc, vc, *map(T, caches(16, 8)), T(ints(POS_L)),
        T(ints([4, 5, 11, 0, 7])), True, True), kc, vc))(T(torch.zeros(3, 2, 4, 8)), T(torch.zeros(3, 2, 4, 8)))),
    _case("rotary_embedding_call_kv_cache_", "cached_len_seqlens", lambda ops, T: _inplace(
        (T(randn(2, 3, 4, 8)), T(torch.zeros(2, 16, 2, 8)), T(torch.zeros(2, 16, 2, 8))),
        lambda w: ops.rotary_embedding_call_kv_cache_(w[0], T(randn(2, 3, 2, 8)), T(randn(2, 3, 2, 8)), w[1], w[2],
                                                      *map(T, caches(8, 8)), T(inv_freq_of(8)), None, ROTARY_MODULE,
                                                      T(ints([2, 9]))))),
    _case("multimodal_rotary_tables", "positions_3BL", lambda ops, T: ops.multimodal_rotary_tables(
        *map(T, caches(64, 16)), T(torch.randint(0, 64, (3, 2, 5), generator=torch.Generator().manual_seed(3))), [2, 3, 3])),
    _case("multimodal_rotary_tables", "positions_3L_interleaved", lambda ops, T: ops.multimodal_rotary_tables(
        *map(T, caches(64, 16)), T(torch.randint(0, 64, (3, 5), generator=torch.Generator().manual_seed(4))), [2, 3, 3], True)),
    _case("multimodal_rotary_tables", "inv_freq_past_caches", lambda ops, T: ops.multimodal_rotary_tables(
        *map(T, caches(8, 16)), T(torch.randint(0, 64, (3, 2, 5), generator=torch.Generator().manual_seed(5))), [2, 3, 3],
        False, T(inv_freq_of(16)), 1.5)),
    # host-side frequencies: float64 on the CPU whatever the mode (no tensor argument, no device)
    _case("rope_frequencies", "default", lambda ops, T: ops.rope_frequencies(16), cpu_outputs=True),
    _case("rope_frequencies", "yarn", lambda ops, T: ops.rope_frequencies(
        16, 10000.0, '{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}'), cpu_outputs=True),
    # a module's frequencies (longrope: the long ones too; empty for the others)
    _case("rotary_embedding_frequencies", "default", lambda ops, T: ops.rotary_embedding_frequencies(ROTARY_MODULE),
          cpu_outputs=True),
    _case("rotary_embedding_frequencies", "longrope", lambda ops, T: ops.rotary_embedding_frequencies(json.dumps(
        {"head_dim": 8, "max_len": 32, "rope_parameters": LONGROPE})), cpu_outputs=True),
    # a module's options checked on the host (posenc.nn's constructors): no tensor in or out, under any mode
    _case("check_module_options", "token_and_position", lambda ops, T: ops.check_module_options(
        "TokenAndPositionEmbedding", json.dumps({"vocab_size": 10, "d_model": 4, "max_len": 8, "padding_idx": 0})),
          cpu_outputs=True),
    # the frequencies of a length on a device: made on the host, placed there without a copy
    _case("rope_frequencies", "dynamic_device", lambda ops, T: ops.rope_frequencies(
        16, 10000.0, DYNAMIC_JSON, seq_len=40, device=T.device)[:1]),
    _case("rotary_tables", "default", lambda ops, T: ops.rotary_tables(16, T(inv_freq_of(8)), device=T.device)),
    _case("rotary_tables", "device_of_inv_freq", lambda ops, T: ops.rotary_tables(16, T(inv_freq_of(8)))),
    _case("rotary_tables", "float64_factor", lambda ops, T: ops.rotary_tables(
        16, T(inv_freq_of(8)), 1.5, dtype=torch.float64, device=T.device)),
    # token-embedding family
    _case("token_and_position_embedding", "offset", lambda ops, T: ops.token_and_position_embedding(
        T(ints([[1, 2, 3, 4, 5], [6, 7, 8, 9, 0]])), T(table(30, 8)), T(table(16, 8)), 3)),
    _case("token_and_position_embedding", "seq_first_3d_table", lambda ops, T: ops.token_and_position_embedding(
        T(ints([[1, 2], [3, 4], [5, 6], [7, 8], [9, 0]])), T(table(30, 8)), T(table3(16, 8)), 0, False, None, 2.0)),
    _case("token_and_position_embedding", "positions_BL_padding_idx", lambda ops, T: ops.token_and_position_embedding(
        T(ints([[1, 2, 0, 4, 5], [6, 7, 8, 9, 0]])), T(table(30, 8)), T(table(16, 8)), 0, True, T(ints(POS_BL)), 1.0, 0)),
    _case("token_and_position_embedding", "dropout_train", lambda ops, T: ops.token_and_position_embedding(
        T(ints([[1, 2, 3, 4, 5], [6, 7, 8, 9, 0]])), T(table(30, 8)), T(table(16, 8)), 0, True, None, 1.0, -1, 0.5, True)),
    _case("token_and_position_embedding_call", "padding_idx_offset_extrapolate", lambda ops, T: ops.token_and_position_embedding_call(
        T(ints([[0, 2, 3, 4, 5], [6, 0, 8, 9, 1]])), T(table(30, 8)), T(table3(16, 8)), T(columns_of(8)), 13, None, True,
        2.0, 0, 0.0, False, True)),
    _case("token_and_position_embedding_call", "learned_positions_L", lambda ops, T: ops.token_and_position_embedding_call(
        T(ints([[1, 2, 3, 4, 5], [6, 7, 8, 9, 0]])), T(table(30, 8)), T(table(16, 8)), None, 0, T(ints(POS_L)))),
    _case("token_and_position_embedding", "positions_float_columns", lambda ops, T: ops.token_and_position_embedding(
        T(ints([[1, 2, 3, 4, 5], [6, 7, 8, 9, 0]])), T(table(30, 8)), T(table(16, 8)), 0, True, T(torch.tensor(POS_FLOAT)),
        1.0, -1, 0.0, False, T(columns_of(8)))),
    _case("_token_and_position_embedding_backward", "both", lambda ops, T: ops._token_and_position_embedding_backward(
        T(randn(2, 5, 8)), T(torch.empty(0, dtype=torch.bool)), T(ints([[1, 2, 3, 4, 5], [6, 7, 8, 9, 0]])),
        T(table(30, 8)), T(table(16, 8)), 3, True, None, 1.0, -1, 0.0, [True, True])),
    _case("_token_and_position_embedding_backward", "dropout_positions_weight_only", lambda ops, T: ops._token_and_position_embedding_backward(
        T(randn(2, 5, 8)), T(torch.ones(2, 5, 8, dtype=torch.bool)), T(ints([[1, 2, 0, 4, 5], [6, 7, 8, 9, 0]])),
        T(table(30, 8)), T(table(16, 8)), 0, True, T(ints(POS_BL)), 2.0, 0, 0.5, [True, False])),
    # attention biases
    _case("alibi_slopes", "default", lambda ops, T: ops.alibi_slopes(12, device=T.device)),
    _case("alibi_slopes", "shard_float64", lambda ops, T: ops.alibi_slopes(12, 8.0, 4, 4, dtype=torch.float64, device=T.device)),
    _case("alibi_bias", "offset_causal_half", lambda ops, T: ops.alibi_bias(T(ops_cpu().alibi_slopes(6)), 5, 9, 4, True, torch.float16)),
    _case("alibi_bias", "default", lambda ops, T: ops.alibi_bias(T(ops_cpu().alibi_slopes(6)), 5, 9)),
    _case("alibi_causal_bias", "attention_mask", lambda ops, T: ops.alibi_causal_bias(
        T(ops_cpu().alibi_slopes(6)), 7, T(ints([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])), torch.bfloat16)),
    _case("alibi_causal_bias", "no_mask", lambda ops, T: ops.alibi_causal_bias(T(ops_cpu().alibi_slopes(6)), 7)),
    _case("relative_position_bucket", "bidirectional", lambda ops, T: ops.relative_position_bucket(
        T(torch.arange(-20, 20).view(5, 8)))),
    _case("relative_position_bucket", "causal", lambda ops, T: ops.relative_position_bucket(
        T(torch.arange(-20, 20).view(5, 8)), False, 16, 32)),
    _case("relative_position_bias", "offset", lambda ops, T: ops.relative_position_bias(T(table(32, 4)), 5, 9, True, 128, 4)),
    _case("relative_sinusoidal_table", "default", lambda ops, T: ops.relative_sinusoidal_table(6, 8, device=T.device)),
    _case("relative_sinusoidal_table", "key_length_float64", lambda ops, T: ops.relative_sinusoidal_table(
        6, 8, 10000.0, 9, dtype=torch.float64, device=T.device)),
    _case("rel_shift", "default", lambda ops, T: ops.rel_shift(T(randn(2, 3, 4, 9)))),
    _case("attention_temperature", "offset", lambda ops, T: ops.attention_temperature(T(randn(2, 5, 3, 8)), None, 9000)),
    _case("attention_temperature", "positions_heads_first_ministral3", lambda ops, T: ops.attention_temperature(
        T(randn(2, 3, 5, 8, dtype=torch.bfloat16)), T(ints(POS_BL)), 0, 4.0, 0.5, True, "ministral3")),
    # positions
    _case("packed_positions", "default", lambda ops, T: ops.packed_positions(T(torch.tensor([0, 3, 7], dtype=torch.int32)), 7)),
    _case("packed_positions", "start_positions", lambda ops, T: ops.packed_positions(T(ints([0, 3, 7])), 7, T(ints([5, 0])))),
    _case("context_parallel_positions", "contiguous", lambda ops, T: ops.context_parallel_positions(8, 2, 1, device=T.device)),
    _case("context_parallel_positions", "zigzag", lambda ops, T: ops.context_parallel_positions(8, 2, 0, True, device=T.device)),
    _case("context_parallel_packed_positions", "contiguous", lambda ops, T: ops.context_parallel_packed_positions(T(ints([0, 4, 10])), 10, 2, 1)),
    _case("context_parallel_packed_positions", "zigzag", lambda ops, T: ops.context_parallel_packed_positions(T(torch.tensor([0, 8, 12], dtype=torch.int32)), 12, 2, 0, True)),
    _case("mrope_position_ids", "text_only", lambda ops, T: ops.mrope_position_ids(T(torch.zeros(2, 5, dtype=torch.long)))),
    _case("mrope_position_ids", "image_video_mask", lambda ops, T: ops.mrope_position_ids(
        T(ints([[0, 1, 1, 2, 2, 0], [0, 0, 0, 0, 0, 0]])), T(ints([[1, 2, 4]])), T(ints([[2, 2, 2]])),
        T(ints([[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]])), spatial_merge_size=2, video_time_intervals=[0.5])),
    # vision and diffusion
    _case("timestep_embedding", "default", lambda ops, T: ops.timestep_embedding(T(torch.tensor([1.0, 250.5, 999.0])), 16)),
    _case("timestep_embedding", "flip_int_bf16", lambda ops, T: ops.timestep_embedding(
        T(ints([1, 250, 999])), 15, True, 0.0, 2.0, 1000, torch.bfloat16)),
    _case("sincos_2d_table", "cls_token", lambda ops, T: ops.sincos_2d_table(16, [3, 4], True, 1, device=T.device)),
    _case("sincos_2d_table", "float64", lambda ops, T: ops.sincos_2d_table(16, [3, 4], dtype=torch.float64, device=T.device)),
    _case("sincos_2d_grid_table", "default", lambda ops, T: ops.sincos_2d_grid_table([3, 4], 16, device=T.device)),
    _case("sincos_2d_grid_table", "options_float64", lambda ops, T: ops.sincos_2d_grid_table(
        [3, 4], 16, 100.0, True, True, dtype=torch.float64, device=T.device)),
    _case("axial_rotary_tables", "default", lambda ops, T: ops.axial_rotary_tables(T(randn(9, 3, dtype=torch.float64)), [4, 6, 6])),
    _case("axial_rotary_tables", "float64", lambda ops, T: ops.axial_rotary_tables(
        T(randn(9, 3)), [4, 6, 6], 100.0, torch.float64)),
    _case("resample_position_table", "bicubic_prefix", lambda ops, T: ops.resample_position_table(T(randn(1, 17, 8)), [3, 5], [4, 4], 1)),
    _case("resample_position_table", "bilinear_2d", lambda ops, T: ops.resample_position_table(
        T(randn(16, 8)), [6, 2], [4, 4], 0, "bilinear", False)),
    _case("sincos_3d_table", "default", lambda ops, T: ops.sincos_3d_table(16, [3, 4], 2, device=T.device)),
    _case("sincos_3d_table", "float64", lambda ops, T: ops.sincos_3d_table(16, [3, 4], 2, 2.0, 1.0, torch.float64, device=T.device)),
    _case("crop_position_table", "default", lambda ops, T: ops.crop_position_table(T(randn(1, 36, 8)), [3, 4], [6, 6])),
    _case("crop_position_table", "prefix_2d", lambda ops, T: ops.crop_position_table(T(randn(37, 8)), [2, 5], [6, 6], 1)),
    _case("grid_ids", "default", lambda ops, T: ops.grid_ids([3, 4], device=T.device)),
    # the vision rotary modules' calls (the options as arguments)
    _case("axial_rotary_embedding_call", "interleaved", lambda ops, T: ops.axial_rotary_embedding_call(
        T(randn(2, 9, 2, 16)), T(randn(9, 3, dtype=torch.float64)), [4, 6, 6], 10000.0, True, False)),
    _case("axial_rotary_embedding_call", "heads_first_half_split", lambda ops, T: ops.axial_rotary_embedding_call(
        T(randn(2, 2, 9, 16)), T(randn(9, 2)), [8, 8], 256.0, False, True)),
    _case("vision_rotary_embedding_call", "prefix", lambda ops, T: ops.vision_rotary_embedding_call(
        T(randn(2, 3, 1 + 12, 16)), [3, 4], 16, 10000.0, [], 0.0, "ij", True, 1, True)),
    _case("vision_rotary_embedding_call", "ref_grid_xy_no_prefix", lambda ops, T: ops.vision_rotary_embedding_call(
        T(randn(2, 12, 3, 16)), [3, 4], 8, 100.0, [6, 8], 0.5, "xy", False, 0, False)),
    _case("grid_ids", "xy_reference_float32", lambda ops, T: ops.grid_ids([3, 4], [6, 8], 0.5, "xy", torch.float32, device=T.device)),
    _case("vision_rotary_embedding_tables", "ref_grid_xy_float64", lambda ops, T: ops.vision_rotary_embedding_tables(
        [3, 4], 16, 100.0, [6, 8], 0.5, "xy", torch.float64, device=T.device)),
    _case("vision_rotary_embedding_tables", "default", lambda ops, T: ops.vision_rotary_embedding_tables(
        [2, 5], 8, 10000.0, [], 0.0, "ij", device=T.device)),
    # the timestep embedder's and the relative modules' calls (options and parameters as arguments)
    _case("timestep_embedder_call", "no_second_bias", lambda ops, T: ops.timestep_embedder_call(
        T(torch.tensor([1.0, 250.0, 999.0])), 8, 6, 10000, T(randn(8, 6)), T(randn(8)), T(randn(8, 8)), None)),
    _case("rel_positional_encoding_call", "relative_offset", lambda ops, T: ops.rel_positional_encoding_call(
        T(randn(2, 5, 8)), T(torch.ops.posenc.relative_sinusoidal_table(16, 8, 10000.0, 16)), 3, False, 2.0, 0.0, False)),
    _case("rel_positional_encoding_call", "legacy_bf16", lambda ops, T: ops.rel_positional_encoding_call(
        T(randn(2, 5, 8, dtype=torch.bfloat16)), T(table(16, 8)), 2, True, 1.0, 0.0, False)),
    _case("rel_position_multihead_attention_call", "bool_mask", lambda ops, T: ops.rel_position_multihead_attention_call(
        T(randn(2, 4, 8)), T(randn(2, 6, 8)), T(randn(2, 6, 8)), T(randn(1, 9, 8)),
        T(torch.arange(6).expand(2, 1, 1, 6) < torch.tensor([6, 4]).view(2, 1, 1, 1)), 8, 2,
        T(randn(8, 8)), T(randn(8)), T(randn(8, 8)), T(randn(8)), T(randn(8, 8)), T(randn(8)), T(randn(8, 8)),
        T(randn(8, 8)), T(randn(8)), T(randn(2, 4)), T(randn(2, 4)), 0.0, False)),
    _case("rel_position_multihead_attention_call", "additive_mask_no_biases", lambda ops, T: ops.rel_position_multihead_attention_call(
        T(randn(2, 4, 8)), T(randn(2, 4, 8)), T(randn(2, 4, 8)), T(randn(2, 7, 8)), T(randn(1, 1, 4, 4)), 8, 4,
        T(randn(8, 8)), None, T(randn(8, 8)), None, T(randn(8, 8)), None, T(randn(8, 8)),
        T(randn(8, 8)), None, T(randn(4, 2)), T(randn(4, 2)), 0.0, False)),
]


def ops_cpu():
    return torch.ops.posenc


def _inplace(tensors, call):
    """Runs an in-place or out= call (which returns nothing) and returns what it wrote."""
    assert call(tensors) is None
    return tensors


# The config reader's operator, registered by libposenc_io where `import posenc` loads it (so present
# or not as the tests run before in the same process imported posenc or not): it reads text, and
# takes no tensor or device.
IO_OPERATORS = {"read_hf_rope_config"}


def registered_operators():
    """Every operator the library registers in the posenc namespace, without overload names (and
    without the config reader's)."""
    names = {name.split("::", 1)[1].split(".", 1)[0] for name in torch._C._dispatch_get_all_op_names() if name.startswith("posenc::")}
    assert names, "no posenc operator registered"
    return names - IO_OPERATORS


def test_every_registered_operator_is_covered(posenc_ops):
    covered = {case.values[0] for case in OPERATOR_CASES}
    missing = registered_operators() - covered
    assert not missing, f"operators without a fake-device test (add them to OPERATOR_CASES): {sorted(missing)}"
    assert not covered - registered_operators(), "cases of operators the library does not register"


@pytest.mark.parametrize("kind", ["cuda", "meta"])
@pytest.mark.parametrize("op, call, cpu_outputs", OPERATOR_CASES)
def test_operator_on_another_device(posenc, posenc_ops, kind, op, call, cpu_outputs):
    # (`import posenc` registers the fake kernel of rope_frequencies, which has no tensor argument)
    reference = Recorder(posenc_ops)
    expected = call(reference, Target("cpu"))
    assert op in reference.called, f"the case of {op} does not call it"
    target = Target(kind)

    def body():
        with target.context():
            recorder = Recorder(posenc_ops)
            got = call(recorder, target)
            assert op in recorder.called
            check_like(expected, got, target, cpu_outputs)

    body()


def test_fake_cuda_needs_no_driver_and_reads_nothing():
    """What the tests above rely on: fake CUDA tensors without a driver, and host reads raise
    (torch 2.6 to 2.9 run `.item()` of a fake CUDA element on the driver, the limit of the module
    docstring: there a read raises the driver's error instead, which fails a call as surely)."""
    with FakeTensorMode():
        x = torch.empty(2, 3, device="cuda")
        assert isinstance(x, FakeTensor) and x.device == CUDA
        for read in (lambda: x[0, 0].item(), lambda: x.tolist(), lambda: int(x[0, 0]), lambda: bool(x.sum() > 0)):
            with pytest.raises(DataDependentOutputException if TORCH_VERSION >= (2, 10) else Exception) as raised:
                read()
            if not isinstance(raised.value, DataDependentOutputException):
                assert "driver" in str(raised.value).lower(), raised.value
        y = x.cpu()  # a fake CPU tensor, nothing read
        assert isinstance(y, FakeTensor) and y.device == CPU


@pytest.mark.parametrize("kind", ["meta"])
def test_gradients_on_another_device(posenc_ops, kind):
    """The autograd kernels and the backward operators on meta: gradients on the inputs' device,
    with the inputs' shapes and dtypes. (Not on fake CUDA: torch's autograd engine needs a CUDA
    driver for CUDA tensors, fake or not ("hasPrimaryContext expects a valid device index"); the
    backward operators run on fake CUDA in test_operator_on_another_device.)"""
    ops = posenc_ops

    def run(T):
        def leaf(t):
            return T(t).requires_grad_()

        x, tab = leaf(randn(2, 5, 8)), leaf(table(16, 8))
        ops.add_position_table(x, tab, 0, True, T(ints(POS_BL))).sum().backward()
        q = leaf(randn(2, 5, 3, 8))
        ops.apply_rotary(q, *map(T, caches(16, 8)), 2).sum().backward()
        k = leaf(randn(2, 5, 1, 8))
        rq, rk = ops.apply_rotary_qk(q, k, *map(T, caches(16, 8)), 0, T(ints(POS_L)))
        (rq.sum() + rk.sum()).backward()
        weight, positions = leaf(table(30, 8)), leaf(table(16, 8))
        out, _ = ops.token_and_position_embedding(T(ints([[1, 2, 3, 4, 5], [6, 7, 8, 9, 0]])), weight, positions,
                                                  1, True, None, 2.0, 0, 0.5, True)
        out.sum().backward()
        return [x.grad, tab.grad, q.grad, k.grad, weight.grad, positions.grad]

    expected = run(Target("cpu"))
    target = Target(kind)
    with target.context():
        check_like(expected, run(target), target)


# --- every posenc.nn module ----------------------------------------------------------------------

def _module_case(name, label, build, call):
    """build(posenc.nn) -> a module on the CPU; call(module, T, dtype) -> its outputs for inputs
    converted by T, floating inputs in `dtype`."""
    return pytest.param(name, label, build, call, id=f"{name}-{label}")


DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 16}
LONGROPE = {"rope_type": "longrope", "original_max_position_embeddings": 16, "short_factor": [1.0] * 4, "long_factor": [2.0] * 4}
IDS = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 0]]
PADDED_IDS = [[0, 0, 3, 4, 5], [6, 7, 8, 9, 0]]


MODULE_CASES = [
    _module_case("PositionalEncoding", "offset_and_positions", lambda nn: nn.PositionalEncoding(8, 16), lambda m, T, dt: [
        m(T(randn(2, 5, 8, dtype=dt)), 3),
        m.forward_positions(T(randn(2, 5, 8, dtype=dt)), T(ints(POS_L))),
        m.forward_positions(T(randn(2, 5, 8, dtype=dt)), T(ints(POS_BL))),
        m.forward_positions(T(randn(2, 5, 8, dtype=dt)), T(torch.tensor(POS_FLOAT))),
        m.forward_padded(T(randn(2, 5, 8, dtype=dt)), T(ints(POS_BL)).lt(0)),
    ]),
    _module_case("PositionalEncoding", "seq_first_scale_inplace", lambda nn: nn.PositionalEncoding(
        8, 16, batch_first=False, scale=2.0, inplace=True, layout="concatenated"), lambda m, T, dt: [
        m(T(randn(5, 2, 8, dtype=dt)), 1),
        m.forward_positions(T(randn(5, 2, 8, dtype=dt)), T(ints(POS_BL).t())),
    ]),
    _module_case("PositionalEncoding", "extrapolate_offset_dropout", lambda nn: nn.PositionalEncoding(
        8, 16, beyond_max_len="extrapolate", dropout=0.5).train(), lambda m, T, dt: [
        m(T(randn(2, 5, 8, dtype=dt)), 14),
        m(T(randn(2, 5, 8, dtype=dt)), 2),
    ]),
    _module_case("PositionalEncoding", "extrapolate_positions", lambda nn: nn.PositionalEncoding(
        8, 16, beyond_max_len="extrapolate"), lambda m, T, dt: [
        m.forward_positions(T(randn(2, 5, 8, dtype=dt)), T(ints(POS_BL))),
        m.forward_positions(T(randn(2, 5, 8, dtype=dt)), T(ints(POS_L) + 10)),
        m.forward_padded(T(randn(2, 5, 8, dtype=dt)), T(ints(POS_BL)).lt(0)),
    ]),
    _module_case("LearnedPositionalEmbedding", "offset_and_positions", lambda nn: nn.LearnedPositionalEmbedding(8, 16), lambda m, T, dt: [
        m(T(randn(2, 5, 8, dtype=dt)), 3),
        m.forward_positions(T(randn(2, 5, 8, dtype=dt)), T(ints(POS_L))),
        m.forward_positions(T(randn(2, 5, 8, dtype=dt)), T(ints(POS_BL))),
        m.forward_padded(T(randn(2, 5, 8, dtype=dt)), T(ints(POS_BL)).lt(0)),
    ]),
    _module_case("LearnedPositionalEmbedding", "dropout_inplace", lambda nn: nn.LearnedPositionalEmbedding(
        8, 16, dropout=0.5, inplace=True, batch_first=False).train(), lambda m, T, dt: [
        m(T(randn(5, 2, 8, dtype=dt)), 3),
    ]),
    _module_case("TokenAndPositionEmbedding", "sinusoidal", lambda nn: nn.TokenAndPositionEmbedding(30, 8, 16), lambda m, T, dt: [
        m(T(ints(IDS)), 3),
        m.forward_positions(T(ints(IDS)), T(ints(POS_L))),
        m.forward_positions(T(ints(IDS)), T(ints(POS_BL))),
        m.forward_positions(T(ints(IDS)), T(torch.tensor(POS_FLOAT))),
    ]),
    _module_case("TokenAndPositionEmbedding", "learned_padding_dropout", lambda nn: nn.TokenAndPositionEmbedding(
        30, 8, 16, positions="learned", padding_idx=0, dropout=0.5, batch_first=False).train(), lambda m, T, dt: [
        m(T(ints(PADDED_IDS).t()), 2),
        m.forward_positions(T(ints(PADDED_IDS).t()), T(ints(POS_BL).t())),
    ]),
    _module_case("TokenAndPositionEmbedding", "extrapolate_offset", lambda nn: nn.TokenAndPositionEmbedding(
        30, 8, 16, beyond_max_len="extrapolate"), lambda m, T, dt: [
        m(T(ints(IDS)), 14),
        m(T(ints(IDS)), 0),
    ]),
    _module_case("TokenAndPositionEmbedding", "extrapolate_positions", lambda nn: nn.TokenAndPositionEmbedding(
        30, 8, 16, beyond_max_len="extrapolate"), lambda m, T, dt: [
        m.forward_positions(T(ints(IDS)), T(ints(POS_BL))),
        m.forward_positions(T(ints(IDS)), T(ints(POS_L) + 10)),
    ]),
    _module_case("TokenAndPositionEmbedding", "extrapolate_padding_idx", lambda nn: nn.TokenAndPositionEmbedding(
        30, 8, 16, beyond_max_len="extrapolate", padding_idx=0), lambda m, T, dt: [
        m(T(ints(PADDED_IDS)), 2),
        m(T(ints(PADDED_IDS)), 14),
    ]),
    _module_case("RotaryEmbedding", "offset_positions_qk", lambda nn: nn.RotaryEmbedding(8, 16), lambda m, T, dt: [
        m(T(randn(2, 5, 3, 8, dtype=dt)), 4),
        m.forward_positions(T(randn(2, 5, 3, 8, dtype=dt)), T(ints(POS_L))),
        m.forward_positions(T(randn(2, 5, 3, 8, dtype=dt)), T(ints(POS_BL_ROTARY))),
        m.forward_qk(T(randn(2, 5, 4, 8, dtype=dt)), T(randn(2, 5, 2, 8, dtype=dt)), 2),
    ]),
    _module_case("RotaryEmbedding", "partial_heads_first_interleaved", lambda nn: nn.RotaryEmbedding(
        12, 16, rotary_dim=8, heads_first=True, pairing="interleaved"), lambda m, T, dt: [
        m(T(randn(2, 3, 5, 12, dtype=dt)), 4),
        m.forward_qk(T(randn(2, 4, 5, 12, dtype=dt)), T(randn(2, 2, 5, 12, dtype=dt))),
    ]),
    # DeepSeek-V3's regrouping of pairs (a new tensor before the turn) and NanoChat's turn by -theta
    _module_case("RotaryEmbedding", "deinterleave_inverse", lambda nn: nn.RotaryEmbedding(
        12, 16, rotary_dim=8, deinterleave=True, inverse=True), lambda m, T, dt: [
        m(T(randn(2, 5, 3, 12, dtype=dt)), 4),
        m.forward_positions(T(randn(2, 5, 3, 12, dtype=dt)), T(ints(POS_BL_ROTARY))),
        m.forward_qk(T(randn(2, 5, 4, 12, dtype=dt)), T(randn(2, 5, 2, 12, dtype=dt)), 2),
    ]),
    # fewer cached rows than max_len: rows past the cache computed where the positions lie (the
    # range check against max_len made on the device, nothing read back)
    _module_case("RotaryEmbedding", "cached_len_past_cache", lambda nn: nn.RotaryEmbedding(8, 32, cached_len=8),
                 lambda m, T, dt: [
        m(T(randn(2, 5, 3, 8, dtype=dt)), 20),
        m(T(randn(2, 5, 3, 8, dtype=dt)), 1),
        m.forward_positions(T(randn(2, 5, 3, 8, dtype=dt)), T(ints(POS_BL_ROTARY) + 20)),
        m.forward_qk(T(randn(2, 5, 4, 8, dtype=dt)), T(randn(2, 5, 2, 8, dtype=dt)), 26),
    ]),
    _module_case("RotaryEmbedding", "llama3", lambda nn: nn.RotaryEmbedding(8, 32, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 16}), lambda m, T, dt: [
        m(T(randn(2, 5, 3, 8, dtype=dt)), 4),
        m.forward_positions(T(randn(2, 5, 3, 8, dtype=dt)), T(ints(POS_BL_ROTARY))),
    ]),
    _module_case("RotaryEmbedding", "yarn_factor_outside", lambda nn: nn.RotaryEmbedding(8, 32, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}, attention_factor_in_cos_sin=False),
        lambda m, T, dt: [m(T(randn(2, 5, 3, 8, dtype=dt)), 4)]),
    _module_case("RotaryEmbedding", "dynamic_within", lambda nn: nn.RotaryEmbedding(8, 32, rope_scaling=DYNAMIC),
                 lambda m, T, dt: [m(T(randn(2, 5, 3, 8, dtype=dt)), 4)]),  # within the original length: the caches
    _module_case("RotaryEmbedding", "dynamic_past_switch", lambda nn: nn.RotaryEmbedding(8, 32, rope_scaling=DYNAMIC),
                 lambda m, T, dt: [m(T(randn(2, 5, 3, 8, dtype=dt)), 20)]),  # past it: frequencies of the call's length
    _module_case("RotaryEmbedding", "longrope_within", lambda nn: nn.RotaryEmbedding(8, 32, rope_scaling=LONGROPE),
                 lambda m, T, dt: [m(T(randn(2, 5, 3, 8, dtype=dt)), 4)]),
    _module_case("RotaryEmbedding", "longrope_past_switch", lambda nn: nn.RotaryEmbedding(8, 32, rope_scaling=LONGROPE),
                 lambda m, T, dt: [m(T(randn(2, 5, 3, 8, dtype=dt)), 20)]),
    _module_case("RotaryEmbedding", "dynamic_positions", lambda nn: nn.RotaryEmbedding(8, 32, rope_scaling=DYNAMIC),
                 lambda m, T, dt: [m.forward_positions(T(randn(2, 5, 3, 8, dtype=dt)), T(ints(POS_BL_ROTARY))),
                                   m.forward_positions(T(randn(2, 5, 3, 8, dtype=dt)), T(ints(POS_BL_ROTARY) + 20)),
                                   m.forward_positions(T(randn(2, 5, 3, 8, dtype=dt)), T(torch.tensor(POS_FLOAT)))]),
    _module_case("RotaryEmbedding", "longrope_positions", lambda nn: nn.RotaryEmbedding(8, 32, rope_scaling=LONGROPE),
                 lambda m, T, dt: [m.forward_positions(T(randn(2, 5, 3, 8, dtype=dt)), T(ints(POS_BL_ROTARY))),
                                   m.forward_positions(T(randn(2, 5, 3, 8, dtype=dt)), T(ints(POS_BL_ROTARY) + 20))]),
    _module_case("RotaryEmbedding", "extrapolate_past_caches", lambda nn: nn.RotaryEmbedding(8, 16, beyond_max_len="extrapolate"),
                 lambda m, T, dt: [m(T(randn(2, 5, 3, 8, dtype=dt)), 14)]),
    _module_case("RotaryEmbedding", "extrapolate_within", lambda nn: nn.RotaryEmbedding(8, 16, beyond_max_len="extrapolate"),
                 lambda m, T, dt: [m(T(randn(2, 5, 3, 8, dtype=dt)), 2)]),
    _module_case("RotaryEmbedding", "float_positions", lambda nn: nn.RotaryEmbedding(8, 16),
                 lambda m, T, dt: [m.forward_positions(T(randn(2, 5, 3, 8, dtype=dt)), T(torch.tensor(POS_FLOAT)))]),
    _module_case("RotaryEmbedding", "mrope", lambda nn: nn.RotaryEmbedding(16, 64, mrope_section=[2, 3, 3]), lambda m, T, dt: [
        m.forward_positions(T(randn(2, 5, 3, 16, dtype=dt)),
                            T(torch.randint(0, 64, (3, 2, 5), generator=torch.Generator().manual_seed(7)))),
        m(T(randn(2, 5, 3, 16, dtype=dt)), 1),
    ]),
    _module_case("RotaryEmbedding", "mrope_interleaved", lambda nn: nn.RotaryEmbedding(
        16, 64, mrope_section=[2, 3, 3], mrope_interleaved=True), lambda m, T, dt: [
        m.forward_positions(T(randn(2, 5, 3, 16, dtype=dt)),
                            T(torch.randint(0, 64, (3, 2, 5), generator=torch.Generator().manual_seed(8)))),
    ]),
    # DeepSeek-V4's last channels (a view turned, the leading channels put before it; in place on the view)
    _module_case("RotaryEmbedding", "rotate_last_channels", lambda nn: nn.RotaryEmbedding(
        12, 16, rotary_dim=8, pairing="interleaved", rotate_last_channels=True), lambda m, T, dt: [
        m(T(randn(2, 5, 3, 12, dtype=dt)), 4),
        m.forward_positions(T(randn(2, 5, 3, 12, dtype=dt)), T(ints(POS_BL_ROTARY))),
        m.forward_qk(T(randn(2, 5, 4, 12, dtype=dt)), T(randn(2, 5, 2, 12, dtype=dt)), 2),
    ]),
    # ERNIE 4.5-VL's M-RoPE: each axis' rows, each frequency from its axis (masks made where the positions lie)
    _module_case("RotaryEmbedding", "mrope_hw_alternating", lambda nn: nn.RotaryEmbedding(
        16, 64, mrope_section=[2, 3, 3], mrope_hw_alternating=True, pairing="interleaved"), lambda m, T, dt: [
        m.forward_positions(T(randn(2, 5, 3, 16, dtype=dt)),
                            T(torch.randint(0, 64, (3, 2, 5), generator=torch.Generator().manual_seed(9)))),
    ]),
    _module_case("Timesteps", "default", lambda nn: nn.Timesteps(16), lambda m, T, dt: [
        m(T(torch.tensor([1.0, 250.5, 999.0], dtype=dt))),
        m(T(ints([1, 250, 999]))),
    ]),
    _module_case("TimestepEmbedder", "default", lambda nn: nn.TimestepEmbedder(8, frequency_embedding_size=16), lambda m, T, dt: [
        m(T(torch.tensor([1.0, 250.5, 999.0]))),
    ]),
    _module_case("AxialRotaryEmbedding", "default", lambda nn: nn.AxialRotaryEmbedding([4, 6, 6]), lambda m, T, dt: [
        m(T(randn(2, 9, 3, 16, dtype=dt)), T(randn(9, 3, dtype=torch.float64))),
    ]),
    _module_case("AxialRotaryEmbedding", "heads_first_half_split", lambda nn: nn.AxialRotaryEmbedding(
        [4, 4], pairing="half_split", heads_first=True), lambda m, T, dt: [
        m(T(randn(2, 3, 9, 8, dtype=dt)), T(randn(9, 2))),
    ]),
    _module_case("VisionRotaryEmbedding", "prefix", lambda nn: nn.VisionRotaryEmbedding(16), lambda m, T, dt: [
        m(T(randn(2, 3, 1 + 12, 16, dtype=dt)), [3, 4]),
    ]),
    _module_case("VisionRotaryEmbedding", "ref_grid_no_prefix", lambda nn: nn.VisionRotaryEmbedding(
        16, ref_feat_shape=[6, 8], num_prefix_tokens=0, heads_first=False, grid_indexing="xy"), lambda m, T, dt: [
        m(T(randn(2, 12, 3, 16, dtype=dt)), [3, 4]),
    ]),
    _module_case("ALiBi", "default", lambda nn: nn.ALiBi(6), lambda m, T, dt: [
        m(5, 9), m(5, 9, 4, True),
        m.forward_causal(7), m.forward_causal(7, T(ints([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]]))),
    ]),
    _module_case("AttentionTemperature", "default", lambda nn: nn.AttentionTemperature(floor_scale=4), lambda m, T, dt: [
        m(T(randn(2, 5, 3, 8, dtype=dt)), 7),
        m.forward_positions(T(randn(2, 5, 3, 8, dtype=dt)), T(ints(POS_BL))),
    ]),
    _module_case("ALiBi", "shard", lambda nn: nn.ALiBi(12, first_head=4, heads=4), lambda m, T, dt: [m(5, 9)]),
    _module_case("RelativePositionBias", "default", lambda nn: nn.RelativePositionBias(4), lambda m, T, dt: [m(5, 9), m(1, 9, 8)]),
    _module_case("RelativePositionBias", "causal", lambda nn: nn.RelativePositionBias(4, num_buckets=16, bidirectional=False),
                 lambda m, T, dt: [m(5, 9)]),
    _module_case("RelPositionalEncoding", "default", lambda nn: nn.RelPositionalEncoding(8, max_len=16), lambda m, T, dt: [
        m(T(randn(2, 5, 8, dtype=dt)), 3),
    ]),
    _module_case("RelPositionalEncoding", "legacy_dropout", lambda nn: nn.RelPositionalEncoding(
        8, max_len=16, legacy=True, dropout=0.5).train(), lambda m, T, dt: [m(T(randn(2, 5, 8, dtype=dt)))]),
    _module_case("RelPositionMultiheadAttention", "default", lambda nn: nn.RelPositionMultiheadAttention(8, 2), lambda m, T, dt: [
        m(T(randn(2, 5, 8, dtype=dt)), T(randn(2, 5, 8, dtype=dt)), T(randn(2, 5, 8, dtype=dt)), T(randn(1, 9, 8, dtype=dt))),
        m(T(randn(2, 5, 8, dtype=dt)), T(randn(2, 5, 8, dtype=dt)), T(randn(2, 5, 8, dtype=dt)), T(randn(1, 9, 8, dtype=dt)),
          T(torch.ones(2, 1, 5, 5, dtype=torch.bool))),
    ]),
]


@functools.lru_cache(maxsize=None)
def _torch_moves_real_modules_into_fake_cuda():
    """None where torch moves a real module into fake CUDA without a driver, else torch's error."""
    module = torch.nn.Linear(2, 2)
    module.register_buffer("scale", torch.ones(2))
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            module.to(CUDA)
    except RuntimeError as error:
        return str(error).splitlines()[0]
    return None


def skip_where_torch_moves_modules_on_the_driver(module):
    """The skip of torch 2.6 to 2.9's limit (the module docstring): only below 2.10, only for a
    module with parameters or buffers to move (one without moves no real tensor) and only where
    the probe fails on the CUDA driver; anything else fails the test."""
    if not any(True for _ in module.parameters()) and not any(True for _ in module.buffers()):
        return
    problem = _torch_moves_real_modules_into_fake_cuda()
    if TORCH_VERSION < (2, 10) and problem is not None and "driver" in problem.lower():
        pytest.skip(f"torch {torch.__version__} runs the move of a real module into FakeTensorMode on the "
                    f"real tensors, which needs a CUDA driver: {problem}")


def build_module(posenc, build):
    torch.manual_seed(0)
    return build(posenc.nn)


def state(module):
    return dict(module.named_parameters()) | dict(module.named_buffers())


def check_state_follows(reference, module, target):
    """Every parameter and buffer lies on the target's device, with the reference's (the same
    module moved on the CPU) shape and dtype; parameters stay parameters."""
    want, have = state(reference), state(module)
    assert sorted(want) == sorted(have)
    for name, tensor in have.items():
        assert tensor.device == target.device, f"{name} on {tensor.device}, expected {target.device}"
        if target.kind == "cuda":
            assert isinstance(tensor, FakeTensor), f"{name} is not a fake tensor"
        assert tensor.shape == want[name].shape and tensor.dtype == want[name].dtype, \
            f"{name}: {tensor.dtype} {tuple(tensor.shape)}, expected {want[name].dtype} {tuple(want[name].shape)}"
    assert sorted(dict(module.named_parameters())) == sorted(dict(reference.named_parameters()))


def test_the_move_probe_sees_torchs_limit_only_where_it_is():
    """The skip above cannot hide a posenc failure: its probe uses torch.nn only, and from torch 2.10
    it must pass (a failure here is torch's or the environment's, and is then seen)."""
    problem = _torch_moves_real_modules_into_fake_cuda()
    if TORCH_VERSION >= (2, 10):
        assert problem is None, problem
    elif problem is not None:
        assert "driver" in problem.lower(), problem


def test_every_module_is_covered(posenc):
    covered = {case.values[0] for case in MODULE_CASES}
    modules = {name for name in posenc.nn.__all__ if isinstance(getattr(posenc.nn, name), type)}
    assert covered == modules, f"posenc.nn modules without a fake-device test: {sorted(modules - covered)}"


@pytest.mark.parametrize("kind, move", [("cuda", "to"), ("cuda", "cuda"), ("meta", "to")])
@pytest.mark.parametrize("name, label, build, call", MODULE_CASES)
def test_module_on_another_device(posenc, kind, move, name, label, build, call):
    """Built on the CPU, moved with `.to(device)` or `.cuda()` (meta: `.to("meta")`): parameters and
    buffers follow, and every forward gives outputs on the device, shaped as on the CPU."""
    reference = build_module(posenc, build)
    expected = call(reference, Target("cpu"), torch.float32)
    module = build_module(posenc, build)
    if kind == "cuda":
        skip_where_torch_moves_modules_on_the_driver(module)
    target = Target(kind)

    def body():
        with target.context(allow_non_fake_inputs=True):
            moved = module.cuda() if move == "cuda" else module.to(target.device)
            assert moved is module
            check_state_follows(reference, module, target)
            if kind == "meta":  # (inputs made first: the counter sees the module's own copies)
                inputs = Target(kind)
                with UploadCounter() as counter:
                    got = call(module, inputs, torch.float32)
                assert not counter.uploads, f"copies from the host in a forward: {counter.uploads}"
            else:
                got = call(module, target, torch.float32)
            check_like(expected, got, target)

    body()


@pytest.mark.parametrize("kind", ["cuda", "meta"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("order", ["cast_then_move", "move_and_cast", "move_then_cast"])
@pytest.mark.parametrize("name, label, build, call", MODULE_CASES)
def test_module_cast_on_another_device(posenc, kind, dtype, order, name, label, build, call):
    """`.to(dtype)`: parameters and buffers follow (derived tables in float32 or float64, as on the
    CPU), and the forward takes inputs of the module's dtype. `move_then_cast` casts a module
    already on the device: on fake CUDA only where it has no parameters (torch cannot cast fake
    parameters again, see the module docstring)."""
    reference = build_module(posenc, build).to(dtype)
    expected = call(reference, Target("cpu"), dtype)
    module = build_module(posenc, build)
    if kind == "cuda":
        skip_where_torch_moves_modules_on_the_driver(module)
    target = Target(kind)
    if order == "move_then_cast" and kind == "cuda" and list(module.parameters()):
        pytest.skip("torch 2.11 cannot cast the fake parameters of a module moved to fake CUDA (\"Couldn't swap\")")

    def body():
        if order == "cast_then_move":
            module.to(dtype)
        with target.context(allow_non_fake_inputs=True):
            if order == "cast_then_move":
                module.to(target.device)
            elif order == "move_and_cast":
                module.to(target.device, dtype)
            else:
                module.to(target.device)
                module.to(dtype)
            check_state_follows(reference, module, target)
            got = call(module, target, dtype)
            check_like(expected, got, target)

    body()


# --- a module on one device refuses inputs on another ------------------------------------------

REFUSALS = {
    # name: (module, call on an input of the other device)
    "PositionalEncoding": (lambda nn: nn.PositionalEncoding(8, 16), lambda m, T: m(T(randn(2, 5, 8)))),
    "PositionalEncoding.positions": (lambda nn: nn.PositionalEncoding(8, 16),
                                     lambda m, T: m.forward_positions(T(randn(2, 5, 8)), T(ints(POS_L)))),
    "LearnedPositionalEmbedding": (lambda nn: nn.LearnedPositionalEmbedding(8, 16), lambda m, T: m(T(randn(2, 5, 8)))),
    "TokenAndPositionEmbedding": (lambda nn: nn.TokenAndPositionEmbedding(30, 8, 16), lambda m, T: m(T(ints(IDS)))),
    "TokenAndPositionEmbedding.learned": (lambda nn: nn.TokenAndPositionEmbedding(30, 8, 16, positions="learned"),
                                          lambda m, T: m(T(ints(IDS)))),
    "RotaryEmbedding": (lambda nn: nn.RotaryEmbedding(8, 16), lambda m, T: m(T(randn(2, 5, 3, 8)))),
    "RotaryEmbedding.qk": (lambda nn: nn.RotaryEmbedding(8, 16), lambda m, T: m.forward_qk(T(randn(2, 5, 3, 8)), T(randn(2, 5, 3, 8)))),
    "RotaryEmbedding.mrope": (lambda nn: nn.RotaryEmbedding(16, 64, mrope_section=[2, 3, 3]),
                              lambda m, T: m.forward_positions(T(randn(2, 5, 3, 16)), T(torch.zeros(3, 2, 5, dtype=torch.long)))),
    "TimestepEmbedder": (lambda nn: nn.TimestepEmbedder(8, frequency_embedding_size=16), lambda m, T: m(T(torch.tensor([1.0, 2.0])))),
    "ALiBi.forward_causal": (lambda nn: nn.ALiBi(6), lambda m, T: m.forward_causal(7, T(torch.ones(2, 7, dtype=torch.long)))),
    "RelPositionalEncoding": (lambda nn: nn.RelPositionalEncoding(8, max_len=16), lambda m, T: m(T(randn(2, 5, 8)))),
    "RelPositionMultiheadAttention": (lambda nn: nn.RelPositionMultiheadAttention(8, 2),
                                      lambda m, T: m(*(T(randn(2, 5, 8)) for _ in range(3)), T(randn(1, 9, 8)))),
}


def _devices_named(message, first, second):
    text = str(message).lower()
    return first in text and second in text


@pytest.mark.parametrize("module_on, input_on", [("cuda", "cpu"), ("cpu", "cuda"), ("meta", "cpu"), ("cpu", "meta")])
@pytest.mark.parametrize("name", [
    name for name in sorted(REFUSALS)])
def test_module_refuses_an_input_on_another_device(posenc, name, module_on, input_on):
    """A module on one device and an input on another: an error that names both devices."""
    build, call = REFUSALS[name]
    module = build_module(posenc, build)
    if module_on == "cuda":
        skip_where_torch_moves_modules_on_the_driver(module)
    fake = "cuda" in (module_on, input_on)
    context = FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()
    with context:
        module.to(Target(module_on).device)
        if input_on == "cpu" and fake:  # fake CPU inputs: data-less, as the CUDA ones
            T = lambda t: torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="cpu")  # noqa: E731
        else:
            T = Target(input_on)
        with pytest.raises((RuntimeError, ValueError)) as raised:
            call(module, T)
    assert _devices_named(raised.value, module_on, input_on), f"the message does not name {module_on} and {input_on}: {raised.value}"
    assert not isinstance(raised.value, DataDependentOutputException)


# --- dynamic / LongRoPE with device positions: the call's frequencies chosen where they lie ------

@pytest.mark.parametrize("rope_scaling", [DYNAMIC, LONGROPE], ids=["dynamic", "longrope"])
@pytest.mark.parametrize("positions", [
    ints(POS_BL_ROTARY), ints(POS_BL_ROTARY) + 20, torch.tensor(POS_FLOAT) * 2.0, ints([[0, 3, -1, 5, 6], [30, 1, 2, 3, -1]]),
], ids=["within", "past_switch", "fractional", "padding"])
def test_device_path_of_switching_rope_types_equals_the_host_path(posenc, rope_scaling, positions):
    """What RotaryEmbedding computes for device positions (the device branch of its call,
    src/ops/rotary/module.cpp: `rope_frequencies(..., positions=, frequencies=)` from the module's
    own frequencies, then every row computed from them), run on CPU tensors, against the module's
    CPU path (a host read of the call's end, the caches where it does not switch), and the
    operator without `frequencies` (computed on the host and copied). Tolerance: one float32
    rounding of the outputs (2 ulp of |x| <= 6): the rows come from ATen's cos/sin of float64 angles
    instead of libm's; dynamic NTK's frequencies are rescaled by ATen's pow of the length ratio
    (within 8 ulp of float64 of the host's formula)."""
    module = posenc.nn.RotaryEmbedding(8, 32, rope_scaling=rope_scaling)
    parameters = json.dumps({"max_position_embeddings": 32, **json.loads(module._module)["rope_parameters"]})

    def frequencies_of(seq_len=None, **kwargs):  # the rope_frequencies operator, of the module's parameters
        return posenc.ops.rope_frequencies(8, module.base, parameters, None, seq_len, **kwargs)

    x = randn(2, 5, 3, 8)
    expected = module.forward_positions(x, positions)
    own = module.inv_freq if module._long_inv_freq is None else torch.stack([module.inv_freq, module._long_inv_freq])
    inv_freq = frequencies_of(positions=positions, frequencies=own)[0]
    assert torch.equal(inv_freq, frequencies_of(positions=positions)[0])
    got = posenc.ops.apply_rotary(x, module.cos.narrow(0, 0, 0), module.sin.narrow(0, 0, 0), 0, positions, False,
                                  False, False, inv_freq, module._rows_factor)
    torch.testing.assert_close(got, expected, rtol=0, atol=2 * 6 * 2.0 ** -23)
    end = int(positions.max().floor().item()) + 1
    host = frequencies_of(end)[0]
    if rope_scaling is LONGROPE:
        assert torch.equal(inv_freq, host)
    else:
        torch.testing.assert_close(inv_freq, host, rtol=8 * 2.0 ** -52, atol=0)


def test_positions_past_max_len_are_refused_or_computed(posenc):
    """Without extrapolation, integer positions past max_len are refused (CPU positions at once;
    positions on a device where they lie, by the same call, src/ops/rotary/module.cpp); with it
    they are computed."""
    module = posenc.nn.RotaryEmbedding(8, 32, rope_scaling=DYNAMIC)
    x = randn(1, 2, 1, 8)
    with pytest.raises(RuntimeError, match=r"positions must be < max_len \(32\)"):
        module.forward_positions(x, ints([[0, 32]]))
    with pytest.raises(RuntimeError, match="positions must be >= -1"):
        module.forward_positions(x, ints([[-2, 3]]))
    extrapolating = posenc.nn.RotaryEmbedding(8, 32, rope_scaling=DYNAMIC, beyond_max_len="extrapolate")
    assert extrapolating.forward_positions(x, ints([[0, 40]])).shape == x.shape


def test_rope_frequencies_takes_positions_or_a_length(posenc):
    dynamic = '{"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 16}'
    with pytest.raises(RuntimeError, match="seq_len .* or positions .*, not both"):
        posenc.ops.rope_frequencies(8, 10000.0, dynamic, seq_len=20, positions=ints([1, 2]))
    with pytest.raises(RuntimeError, match="integer or floating-point tensor"):
        posenc.ops.rope_frequencies(8, 10000.0, dynamic, positions=torch.tensor([True]))
    with pytest.raises(RuntimeError, match="finite"):
        posenc.ops.rope_frequencies(8, 10000.0, dynamic, positions=torch.tensor([1.0, float("nan")]))
    # device= names the positions' device ("cpu" is theirs here) or is left out
    assert posenc.ops.rope_frequencies(8, 10000.0, dynamic, positions=ints([1, 20]), device="cpu")[0].shape == (4,)
    with pytest.raises(RuntimeError, match="with positions, inv_freq lies on their device"):
        posenc.ops.rope_frequencies(8, 10000.0, dynamic, positions=ints([1, 2]), device="meta")

"""posenc.onnx: posenc.nn modules exported to ONNX (opset 23, standard operators only) and run by
ONNX Runtime (pinned in scripts/setup.sh), compared with the same modules run by posenc, at other
batch sizes and lengths than the export's example (one export each: the sizes stay dynamic).

Tolerances, by what the two sides compute:
* rows read from a table, sums and products rounded once as posenc rounds them (the sequence
  encodings, the token embedding, ALiBi, T5's buckets, float64 rotations): exact (torch.equal);
* values computed from float64 angles (fractional positions, timesteps, tables built per call):
  ONNX Runtime's float64 sin/cos and posenc's libm may differ in the last bit of a float64, which
  can move the rounding to float32 by one ulp: rtol 2^-23, atol 2^-24 (one float32 ulp of the
  output);
* the float32 rotation by ONNX's RotaryEmbedding: ONNX Runtime's kernel contracts x * cos - y * sin
  into fused multiply-adds, where posenc rounds each product, so the two differ by at most the
  rounding of the products, 2^-24 (|x| + |y|) <= 2^-23 max|x| (2^-22 max|x| allowed); float16 inputs
  are turned in float32 by both and rounded once more, so by one float16 ulp at most.
"""

import os
import sys

import pytest
import torch

from conftest import TORCH_VERSION, conformer_block, pinned_version

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

pytestmark = pytest.mark.skipif(TORCH_VERSION < (2, 9), reason="torch.onnx.export(dynamo=True) with opset 23 needs "
                                "torch >= 2.9 (this is the LibTorch 1.13 environment, which has no onnx either)")

FLOAT32_ULP = 2.0 ** -23


@pytest.fixture(scope="module")
def posenc(posenc_ops):  # the fixture checks POSENC_LIBRARY is set (the package reads it)
    import posenc
    import posenc.onnx

    return posenc


@pytest.fixture(scope="module")
def ort():
    import onnxruntime

    # The exact tolerances above are ONNX Runtime's kernels at the pinned version (its Log, its
    # fused rotation); another version (the GPU image has 1.30) may round otherwise: skipped, saying so.
    pinned = pinned_version("onnxruntime")
    if onnxruntime.__version__ != pinned:
        pytest.skip(f"onnxruntime {onnxruntime.__version__} is installed; these tests are written against "
                    f"the pinned {pinned} (scripts/setup.sh pip)")
    return onnxruntime


def run(ort, program, *inputs):
    """The exported program run by ONNX Runtime's CPU provider, outputs as torch tensors."""
    session = ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {given.name: value.numpy() for given, value in zip(session.get_inputs(), inputs)}
    return [torch.from_numpy(output) for output in session.run(None, feeds)]


def expected(module, *inputs):
    with torch.no_grad():
        out = module(*inputs)
    return list(out) if isinstance(out, tuple) else [out]


def dims(**ranges):
    return {name: torch.export.Dim(name, min=low, max=high) for name, (low, high) in ranges.items()}


def standard_operators_only(program):
    """Every node of the graph is a standard ONNX operator (no posenc domain: no posenc needed to
    run it)."""
    domains = {node.domain for node in program.model_proto.graph.node}
    assert domains <= {"", "ai.onnx"}, domains
    return {node.op_type for node in program.model_proto.graph.node}


# --- sequence encodings --------------------------------------------------------------------------


SEQUENCE_CASES = {
    "sinusoidal": lambda nn: nn.PositionalEncoding(64, 128),
    "sinusoidal_seq_first_scaled": lambda nn: nn.PositionalEncoding(64, 128, batch_first=False, scale=8.0),
    "sinusoidal_tensor2tensor": lambda nn: nn.PositionalEncoding(64, 128, layout="concatenated", spacing="tensor2tensor"),
    "learned": lambda nn: nn.LearnedPositionalEmbedding(64, 128, scale=0.5),
}


@pytest.mark.parametrize("case", list(SEQUENCE_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_sequence_encodings_equal_posenc(posenc, ort, case, dtype):
    module = SEQUENCE_CASES[case](posenc.nn).to(dtype).eval()
    batch_first = getattr(module, "batch_first", True)
    shape = (lambda b, l: (b, l, 64)) if batch_first else (lambda b, l: (l, b, 64))
    d = dims(batch=(1, 16), length=(1, 128))
    dynamic = {0: d["batch"], 1: d["length"]} if batch_first else {0: d["length"], 1: d["batch"]}
    program = posenc.onnx.export(module, (torch.randn(shape(2, 10)).to(dtype),), dynamic_shapes=(dynamic,))
    assert "Add" in standard_operators_only(program)
    for b, l in ((2, 10), (3, 1), (1, 128), (5, 77)):
        x = torch.randn(shape(b, l)).to(dtype)
        assert torch.equal(run(ort, program, x)[0], expected(module, x)[0]), (b, l)


def test_positions_with_padding_equal_posenc(posenc, ort):
    module = posenc.nn.PositionalEncoding(64, 128).eval()
    d = dims(length=(1, 128))
    program = posenc.onnx.export(posenc.onnx.Method(module, "forward_positions"),
                                 (torch.randn(2, 10, 64), torch.randint(-1, 128, (2, 10))),
                                 dynamic_shapes=({1: d["length"]}, {1: d["length"]}))
    for l in (1, 20, 128):
        x, positions = torch.randn(2, l, 64), torch.randint(-1, 128, (2, l))
        positions[:, 0] = -1  # padding: nothing added
        out = run(ort, program, x, positions)[0]
        assert torch.equal(out, expected(module.forward_positions, x, positions)[0]), l
        assert torch.equal(out[:, 0], x[:, 0])


def test_fractional_positions_equal_posenc(posenc, ort):
    """Rows computed from the definition (add_positional_encoding): float64 angles on both sides."""
    module = posenc.nn.PositionalEncoding(64, 128).eval()
    d = dims(length=(1, 512))
    program = posenc.onnx.export(posenc.onnx.Method(module, "forward_positions"),
                                 (torch.randn(2, 10, 64), torch.rand(2, 10) * 100),
                                 dynamic_shapes=({1: d["length"]}, {1: d["length"]}))
    assert {"Sin", "Cos"} <= standard_operators_only(program)
    for l in (1, 33, 512):
        x, positions = torch.randn(2, l, 64), torch.rand(2, l) * 5000
        torch.testing.assert_close(run(ort, program, x, positions)[0], expected(module.forward_positions, x, positions)[0],
                                   rtol=FLOAT32_ULP, atol=FLOAT32_ULP / 2)


def test_rows_past_the_table_equal_posenc(posenc, ort):
    """beyond_max_len="extrapolate": the table's rows, and past them rows computed from the column
    plan with float64 angles (the module's columns, a constant of the graph), for consecutive
    positions past the table and for integer positions with padding."""
    module = posenc.nn.PositionalEncoding(64, 16, beyond_max_len="extrapolate").eval()
    d = dims(length=(1, 512))
    program = posenc.onnx.export(module, (torch.randn(2, 10, 64),), dynamic_shapes=({1: d["length"]},))
    for l in (1, 16, 17, 512):
        x = torch.randn(2, l, 64)
        out = run(ort, program, x)[0]
        torch.testing.assert_close(out, expected(module, x)[0], rtol=FLOAT32_ULP, atol=FLOAT32_ULP / 2)
        assert torch.equal(out[:, :16], expected(module, x)[0][:, :16]), l  # the table's rows: exact
    method = posenc.onnx.Method(module, "forward_positions")
    program = posenc.onnx.export(method, (torch.randn(2, 10, 64), torch.randint(-1, 64, (2, 10))),
                                 dynamic_shapes=({1: d["length"]}, {1: d["length"]}))
    positions = torch.tensor([[-1, 0, 15, 16, 4000, 7], [3, 17, -1, 2, 16, 900]])
    x = torch.randn(2, 6, 64)
    out = run(ort, program, x, positions)[0]
    torch.testing.assert_close(out, expected(module.forward_positions, x, positions)[0], rtol=FLOAT32_ULP,
                               atol=FLOAT32_ULP / 2)
    assert torch.equal(out[0, 0], x[0, 0]) and torch.equal(out[1, 2], x[1, 2])  # padding: nothing added


def test_token_and_position_embedding_equals_posenc(posenc, ort):
    for kind in ("sinusoidal", "learned", "extrapolate"):
        # (extrapolating: a 16-row table, rows past it from float64 angles, one ulp as above)
        options = {"positions": "sinusoidal", "beyond_max_len": "extrapolate"} if kind == "extrapolate" else {"positions": kind}
        module = posenc.nn.TokenAndPositionEmbedding(100, 64, 16 if kind == "extrapolate" else 128, padding_idx=0,
                                                     **options).eval()
        d = dims(batch=(1, 8), length=(1, 128))
        program = posenc.onnx.export(module, (torch.randint(0, 100, (2, 10)),),
                                     dynamic_shapes=({0: d["batch"], 1: d["length"]},))
        for b, l in ((2, 10), (1, 1), (4, 128)):
            ids = torch.randint(0, 100, (b, l))
            if kind == "extrapolate":
                torch.testing.assert_close(run(ort, program, ids)[0], expected(module, ids)[0], rtol=FLOAT32_ULP,
                                           atol=FLOAT32_ULP / 2)
            else:
                assert torch.equal(run(ort, program, ids)[0], expected(module, ids)[0]), (kind, b, l)


# --- rotary --------------------------------------------------------------------------------------


ROTARY_CASES = {
    "half_split": {},
    "interleaved": {"pairing": "interleaved"},
    "heads_first": {"heads_first": True},
    "partial": {"rotary_dim": 32},
    "inverse": {"inverse": True},
    "deinterleave": {"deinterleave": True},
    "rotate_last_channels": {"rotary_dim": 32, "pairing": "interleaved", "rotate_last_channels": True},
}


def assert_rotation_close(out, reference, x):
    """The tolerance of the module docstring: exact in float64, the products' rounding in float32,
    one ulp in 16 bits."""
    if x.dtype == torch.float64:
        assert torch.equal(out, reference)
    elif x.dtype == torch.float32:
        torch.testing.assert_close(out, reference, rtol=0, atol=4 * FLOAT32_ULP * x.abs().max().item())
    else:
        ulp = torch.finfo(x.dtype).eps * reference.double().abs().clamp_min(torch.finfo(x.dtype).tiny)
        assert ((out.double() - reference.double()).abs() <= ulp + 4 * FLOAT32_ULP * x.abs().max().item()).all()


@pytest.mark.parametrize("case", list(ROTARY_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_rotary_equals_posenc(posenc, ort, case, dtype):
    options = ROTARY_CASES[case]
    module = posenc.nn.RotaryEmbedding(64, 256, **options).to(dtype).eval()
    heads_first = options.get("heads_first", False)
    shape = (lambda b, l, h: (b, h, l, 64)) if heads_first else (lambda b, l, h: (b, l, h, 64))
    d = dims(batch=(1, 16), length=(1, 256))
    length_dim = 2 if heads_first else 1
    program = posenc.onnx.export(module, (torch.randn(shape(2, 10, 4)).to(dtype),),
                                 dynamic_shapes=({0: d["batch"], length_dim: d["length"]},))
    operators = standard_operators_only(program)
    assert ("RotaryEmbedding" in operators) == (dtype != torch.float64), operators  # (none for float64)
    for b, l in ((2, 10), (1, 1), (3, 256)):
        x = torch.randn(shape(b, l, 4)).to(dtype)
        assert_rotation_close(run(ort, program, x)[0], expected(module, x)[0], x)


def test_rotary_qk_with_gqa_and_dynamic_heads(posenc, ort):
    """forward_qk (posenc.onnx.Method): 8 query heads, 2 key heads; the head counts may vary too."""
    module = posenc.nn.RotaryEmbedding(64, 512, pairing="interleaved").eval()
    d = dims(batch=(1, 16), length=(1, 512), heads=(1, 64), kv_heads=(1, 64))
    program = posenc.onnx.export(posenc.onnx.Method(module, "forward_qk"),
                                 (torch.randn(2, 10, 8, 64), torch.randn(2, 10, 2, 64)),
                                 dynamic_shapes=({0: d["batch"], 1: d["length"], 2: d["heads"]},
                                                 {0: d["batch"], 1: d["length"], 2: d["kv_heads"]}))
    for b, l, h, kv in ((2, 10, 8, 2), (1, 1, 32, 8), (3, 300, 4, 4)):
        q, k = torch.randn(b, l, h, 64), torch.randn(b, l, kv, 64)
        outs, references = run(ort, program, q, k), expected(module.forward_qk, q, k)
        for out, reference, x in zip(outs, references, (q, k)):
            assert_rotation_close(out, reference, x)


def test_rotary_positions_with_padding(posenc, ort):
    module = posenc.nn.RotaryEmbedding(64, 256).eval()
    d = dims(length=(1, 256))
    program = posenc.onnx.export(posenc.onnx.Method(module, "forward_positions"),
                                 (torch.randn(2, 10, 4, 64), torch.randint(-1, 256, (2, 10))),
                                 dynamic_shapes=({1: d["length"]}, {1: d["length"]}))
    for l in (1, 40):
        x, positions = torch.randn(2, l, 4, 64), torch.randint(0, 256, (2, l))
        positions[1, -1] = -1  # padding: copied unturned
        out = run(ort, program, x, positions)[0]
        assert_rotation_close(out, expected(module.forward_positions, x, positions)[0], x)
        assert torch.equal(out[1, -1], x[1, -1])


def test_rotary_from_a_config_equals_posenc(posenc, ort):
    """A model's RoPE read from its config (llama3 scaling, partial rotation from head_dim)."""
    config = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "max_position_embeddings": 1024,
              "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 128}}
    module = posenc.nn.RotaryEmbedding.from_hf_config(config).eval()
    d = dims(length=(1, 1024))
    program = posenc.onnx.export(module, (torch.randn(1, 10, 8, 64),), dynamic_shapes=({1: d["length"]},))
    x = torch.randn(1, 1000, 8, 64)
    assert_rotation_close(run(ort, program, x)[0], expected(module, x)[0], x)


@pytest.mark.parametrize("layout", ["contiguous", "interleaved", "hw_alternating"])
def test_multimodal_rotary_equals_posenc(posenc, ort, layout):
    """M-RoPE (Qwen2-VL's sections, Qwen3-VL's interleaved ones, ERNIE 4.5-VL's alternating height
    and width): positions [3, B, L]."""
    interleaved = layout == "interleaved"
    section = {"contiguous": [16, 24, 24], "interleaved": [24, 20, 20], "hw_alternating": [20, 22, 22]}[layout]
    module = posenc.nn.RotaryEmbedding(128, 4096, mrope_section=section, mrope_interleaved=interleaved,
                                       mrope_hw_alternating=layout == "hw_alternating",
                                       pairing="interleaved" if layout == "hw_alternating" else "half_split").eval()
    d = dims(length=(1, 2048))
    program = posenc.onnx.export(posenc.onnx.Method(module, "forward_positions"),
                                 (torch.randn(2, 10, 4, 128), torch.randint(0, 4096, (3, 2, 10))),
                                 dynamic_shapes=({1: d["length"]}, {2: d["length"]}))
    for l in (1, 50, 2048):
        x, positions = torch.randn(2, l, 4, 128), torch.randint(0, 4096, (3, 2, l))
        assert_rotation_close(run(ort, program, x, positions)[0], expected(module.forward_positions, x, positions)[0], x)


# --- diffusion timesteps -------------------------------------------------------------------------


@pytest.mark.parametrize("options", [{}, {"flip_sin_to_cos": True, "downscale_freq_shift": 0.0},
                                     {"scale": 1000.0}])
def test_timesteps_equal_posenc(posenc, ort, options):
    for width in (256, 65):
        module = posenc.nn.Timesteps(width, **options).eval()
        d = dims(count=(1, 4096))
        program = posenc.onnx.export(module, (torch.rand(8) * 1000,), dynamic_shapes=({0: d["count"]},))
        for count in (1, 300, 4096):
            t = torch.rand(count) * 1000
            torch.testing.assert_close(run(ort, program, t)[0], expected(module, t)[0],
                                       rtol=FLOAT32_ULP, atol=FLOAT32_ULP / 2)


def test_timestep_embedder_equals_posenc(posenc, ort):
    module = posenc.nn.TimestepEmbedder(64, frequency_embedding_size=32).eval()
    program = posenc.onnx.export(module, (torch.rand(8) * 1000,), dynamic_shapes=({0: torch.export.Dim("count", min=1, max=512)},))
    t = torch.rand(100) * 1000
    # the MLP's matrix products: ONNX Runtime's and ATen's sum orders differ
    torch.testing.assert_close(run(ort, program, t)[0], expected(module, t)[0], rtol=1e-5, atol=1e-5)


def test_conformer_block_equals_posenc(posenc, ort):
    """RelPositionalEncoding and RelPositionMultiheadAttention are ATen operations below their call
    operators (CompositeImplicitAutograd, src/ops/bias/relative_module.cpp; rel_shift a reshape and
    narrow of the scores): the export traces them with the batch and the frame count symbolic."""
    torch.manual_seed(0)
    module = conformer_block(posenc.nn).eval()
    d = dims(batch=(1, 16), length=(2, 64))
    program = posenc.onnx.export(module, (torch.randn(2, 9, 16),), dynamic_shapes=({0: d["batch"], 1: d["length"]},))
    for shape in ((3, 30, 16), (1, 2, 16), (2, 64, 16)):
        x = torch.randn(*shape)
        # the projections' and scores' matrix products: ONNX Runtime's and ATen's sum orders differ
        torch.testing.assert_close(run(ort, program, x)[0], expected(module, x)[0], rtol=1e-5, atol=1e-5)


# --- attention biases, lengths from the inputs' shapes -------------------------------------------


class Biases(torch.nn.Module):
    """The biases of queries [B, Lq, D] against keys [B, Lk, D]: their lengths are symbols of the
    exported graph (SymInt lengths), not the example's."""

    def __init__(self, nn):
        super().__init__()
        self.alibi = nn.ALiBi(8)
        self.t5 = nn.RelativePositionBias(8)
        self.causal_t5 = nn.RelativePositionBias(8, bidirectional=False, num_buckets=16, max_distance=64)

    def forward(self, q, k):
        lq, lk = q.shape[1], k.shape[1]
        return (self.alibi(lq, lk), self.alibi(lq, lk, None, True), self.alibi(lq, lk, lk - lq),
                self.alibi.forward_causal(lk), self.t5(lq, lk), self.causal_t5(lq, lk, lk - lq))


def test_attention_biases_keep_their_lengths_dynamic(posenc, ort):
    module = Biases(posenc.nn).eval()
    d = dims(queries=(1, 512), keys=(1, 1024))
    with torch.no_grad():
        module.t5.relative_attention_bias.weight.normal_()
        module.causal_t5.relative_attention_bias.weight.normal_()
    program = posenc.onnx.export(module, (torch.randn(1, 8, 4), torch.randn(1, 12, 4)),
                                 dynamic_shapes=({1: d["queries"]}, {1: d["keys"]}))
    standard_operators_only(program)
    for lq, lk in ((8, 12), (1, 1), (1, 700), (512, 1024), (300, 300)):
        q, k = torch.randn(1, lq, 4), torch.randn(1, lk, 4)
        for index, (out, reference) in enumerate(zip(run(ort, program, q, k), expected(module, q, k))):
            assert torch.equal(out, reference), (lq, lk, index)


class Temperatures(torch.nn.Module):
    """Llama 4's query temperature at an offset (a NoPE layer's decode step) and Ministral 3's at
    [B, L] positions."""

    def __init__(self, nn):
        super().__init__()
        self.llama4 = nn.AttentionTemperature(floor_scale=4)
        self.ministral3 = nn.AttentionTemperature(floor_scale=8, attn_scale=0.25, form="ministral3", heads_first=True)

    def forward(self, q, positions):
        return self.llama4(q, 10_000_000), self.ministral3.forward_positions(q.transpose(1, 2), positions)


def test_query_temperatures_equal_posenc(posenc, ort):
    """AttentionTemperature is made of ATen operations (CompositeImplicitAutograd): the export traces
    them into standard operators, which ONNX Runtime runs. Tolerance: 2 float32 ulps of the query,
    since ONNX has no log1p (the translation is Log(1 + x)) and ONNX Runtime's Log is its own, each
    within an ulp of ATen's in the scale, whose product with the query rounds once more."""
    module = Temperatures(posenc.nn)
    length = dims(length=(1, 256))["length"]
    program = posenc.onnx.export(module, (torch.randn(2, 9, 3, 8), torch.arange(18).view(2, 9)),
                                 dynamic_shapes=({1: length}, {1: length}))
    assert "Log1p" not in standard_operators_only(program)  # (no such ONNX operator: log(1 + x))
    for length in (9, 1, 200):
        q, positions = torch.randn(2, length, 3, 8), torch.randint(-1, 100, (2, length))
        for out, reference in zip(run(ort, program, q, positions), expected(module, q, positions)):
            torch.testing.assert_close(out, reference, rtol=2.0**-22, atol=0)


class TablesPerCall(torch.nn.Module):
    """Tables built in forward at the input's length (sinusoidal_table, rotary_tables)."""

    def __init__(self, ops):
        super().__init__()
        self.ops = ops
        self.register_buffer("inv_freq", ops.rope_frequencies(32, 500000.0)[0])

    def forward(self, x):
        cos, sin = self.ops.rotary_tables(x.shape[1], self.inv_freq)
        return x + self.ops.sinusoidal_table(x.shape[1], x.shape[2]), cos, sin


def test_tables_built_per_call_keep_their_length(posenc, ort):
    module = TablesPerCall(posenc.ops).eval()
    program = posenc.onnx.export(module, (torch.randn(2, 10, 48),), dynamic_shapes=({1: torch.export.Dim("length", min=1, max=4096)},))
    for l in (1, 100, 4096):
        x = torch.randn(2, l, 48)
        for out, reference in zip(run(ort, program, x), expected(module, x)):
            torch.testing.assert_close(out, reference, rtol=FLOAT32_ULP, atol=FLOAT32_ULP / 2)


# --- what does not export ------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["extrapolate", "uncached", "axial", "training_dropout"])
def test_unsupported_calls_are_refused_with_the_reason(posenc, case):
    nn = posenc.nn
    if case == "extrapolate":
        module, args, match = nn.RotaryEmbedding(64, 256, beyond_max_len="extrapolate").eval(), \
            (torch.randn(1, 10, 2, 64),), "rows computed per call"
    elif case == "uncached":
        module, args, match = nn.RotaryEmbedding(64, 1024, cached_len=128).eval(), \
            (torch.randn(1, 10, 2, 64),), "rows computed per call"
    elif case == "axial":
        module, args, match = nn.AxialRotaryEmbedding([16, 24, 24]).eval(), \
            (torch.randn(1, 10, 2, 64), torch.randn(10, 3)), "axial_rotary_tables has no ONNX translation"
    else:
        module, args, match = nn.TokenAndPositionEmbedding(100, 64, 128, dropout=0.1).train(), \
            (torch.randint(0, 100, (1, 10)),), "training mode"
    with pytest.raises(posenc.onnx.ExportUnsupported, match=match):
        posenc.onnx.export(module, args)


def test_export_writes_a_file_onnx_runtime_loads(posenc, ort, tmp_path):
    module = posenc.nn.RotaryEmbedding(64, 128).eval()
    path = tmp_path / "rope.onnx"
    posenc.onnx.export(module, (torch.randn(1, 4, 2, 64),), str(path),
                       dynamic_shapes=({1: torch.export.Dim("length", min=1, max=128)},))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = torch.randn(1, 100, 2, 64)
    assert_rotation_close(torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]),
                          expected(module, x)[0], x)


# --- posenc export --format onnx ------------------------------------------------------------------

LLAMA3_CONFIG = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 512,
                 "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                          "high_freq_factor": 4.0,
                                                          "original_max_position_embeddings": 64}}

CLI_CASES = {
    # name: (arguments, shape of an input of batch b, length l, heads h)
    "sinusoidal": (["--d-model", "32", "--max-len", "100", "--scale", "2.5", "--layout", "concatenated"],
                   lambda b, l, h: (b, l, 32)),
    "sinusoidal_seq_first": (["--d-model", "32", "--max-len", "100", "--seq-first", "--spacing", "tensor2tensor"],
                             lambda b, l, h: (l, b, 32)),
    "rotary": (["--module", "rotary", "--max-len", "256", "--head-dim", "64", "--rotary-dim", "32",
                "--pairing", "interleaved", "--base", "500000"], lambda b, l, h: (b, l, h, 64)),
    "rotary_heads_first_inverse": (["--module", "rotary", "--max-len", "256", "--head-dim", "64", "--heads-first",
                                    "--inverse", "--deinterleave"], lambda b, l, h: (b, h, l, 64)),
    "rotary_rotate_last_channels": (["--module", "rotary", "--max-len", "256", "--head-dim", "64", "--rotary-dim", "16",
                                     "--pairing", "interleaved", "--rotate-last-channels"], lambda b, l, h: (b, l, h, 64)),
    "rotary_hf_config": (["--module", "rotary", "--hf-config", "CONFIG"], lambda b, l, h: (b, l, h, 64)),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_onnx_export_equals_its_torchscript_export(posenc, ort, posenc_cli, tmp_path, case):
    """`posenc export --format onnx` (Python's posenc.onnx, run by the C++ program) gives the module
    that `posenc export` writes as TorchScript from the same options, at any batch, length and head
    count."""
    import json
    import subprocess

    arguments, shape = CLI_CASES[case]
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA3_CONFIG))
    arguments = [str(config) if a == "CONFIG" else a for a in arguments]
    python_dir = os.path.join(os.path.dirname(__file__), "..", "..", "python")
    environment = dict(os.environ, POSENC_PYTHON=sys.executable,
                       PYTHONPATH=os.pathsep.join([python_dir, os.environ.get("PYTHONPATH", "")]))
    for form, path in (("onnx", tmp_path / "module.onnx"), ("torchscript", tmp_path / "module.pt")):
        result = subprocess.run([posenc_cli, "export", *arguments, "--format", form, "-o", str(path)],
                                capture_output=True, text=True, env=environment)
        assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout
    scripted = torch.jit.load(str(tmp_path / "module.pt"))
    session = ort.InferenceSession(str(tmp_path / "module.onnx"), providers=["CPUExecutionProvider"])
    for b, l, h in ((1, 1, 1), (2, 50, 4), (3, 100, 8)):
        x = torch.randn(shape(b, l, h))
        out = torch.from_numpy(session.run(None, {"x": x.numpy()})[0])
        with torch.no_grad():
            reference = scripted(x)
        if case.startswith("rotary"):
            assert_rotation_close(out, reference, x)
        else:
            assert torch.equal(out, reference), (b, l)


def test_cli_onnx_export_says_what_it_needs(posenc_cli, tmp_path):
    import subprocess

    missing = subprocess.run([posenc_cli, "export", "--d-model", "8", "--max-len", "10", "--format", "onnx", "-o",
                              str(tmp_path / "m.onnx")], capture_output=True, text=True,
                             env=dict(os.environ, POSENC_PYTHON=str(tmp_path / "no-python")))
    assert missing.returncode == 1 and "could not run" in missing.stderr and "POSENC_PYTHON" in missing.stderr
    extrapolate = subprocess.run([posenc_cli, "export", "--d-model", "8", "--max-len", "10", "--format", "onnx",
                                  "--extrapolate", "-o", str(tmp_path / "m.onnx")], capture_output=True, text=True)
    assert extrapolate.returncode != 0 and "--max-len that covers every position" in extrapolate.stderr
    assert not (tmp_path / "m.onnx").exists()

"""Attention biases and relative encodings (ALiBi, T5's buckets and bias, the Transformer-XL /
Conformer relative sinusoidal encoding and attention) against Hugging Face transformers' own code
(pinned in scripts/setup.sh): BLOOM's `build_alibi_tensor` (with left padding) and MPT's
`build_mpt_alibi_tensor` for 1-64 heads, `T5Attention._relative_position_bucket` and
`compute_bias` (a T5 layer's weights saved here and loaded by the C++ module),
`Wav2Vec2ConformerRelPositionalEmbedding` and `Wav2Vec2ConformerSelfAttention` (relative) with the
same weights in C++. Plus opcheck, gradcheck and torch.compile of the operators.

Tolerances: BLOOM's slopes are float32 powers of a float32 base and MPT's float32 powers of two of
float32 exponents, a few ulps from 2^(-8k/n); posenc's are the float64 values rounded once, so
elementwise its error against a float64 evaluation is never larger than theirs, and the two agree
to 1e-6 relative (8 float32 ulps). The bucket function is integer-valued: equal. The Conformer
table: HF's angles are float32 (position * a float32 frequency, about p * 2^-24 rad); posenc's are
float64, so its error must not exceed HF's.
"""

import math

import pytest
import torch

from conftest import requires_torch, skip_unless_pinned

transformers = pytest.importorskip("transformers", reason="transformers is installed in the pip test environment only (scripts/setup.sh)")
try:
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes, build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor
    from transformers.models.t5.configuration_t5 import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention
    from transformers.models.wav2vec2_conformer.configuration_wav2vec2_conformer import Wav2Vec2ConformerConfig
    from transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer import (
        Wav2Vec2ConformerRelPositionalEmbedding, Wav2Vec2ConformerSelfAttention)
except ImportError as error:  # e.g. transformers 5.17 (the GPU machine's) has no _get_alibi_slopes
    skip_unless_pinned(transformers, error)


def true_slopes(heads, max_bias=8.0):
    """2^(-max_bias k / n) for the first n = 2^floor(log2 heads), then the odd terms for 2n, in
    float64 (the ALiBi paper's rule)."""
    n = 2 ** math.floor(math.log2(heads))
    slopes = [2.0 ** (-max_bias * k / n) for k in range(1, n + 1)]
    slopes += [2.0 ** (-max_bias * (2 * m - 1) / (2 * n)) for m in range(1, heads - n + 1)]
    return torch.tensor(slopes, dtype=torch.float64)


@pytest.mark.parametrize("heads", range(1, 65))
def test_alibi_slopes_against_bloom_and_mpt(posenc_ops, heads):
    ours = posenc_ops.alibi_slopes(heads)
    assert ours.dtype == torch.float32 and ours.shape == (heads,)
    bloom = _get_alibi_slopes(heads, torch.device("cpu"))
    mpt = -build_mpt_alibi_tensor(heads, 2)[:, 0, 0]  # alibi[:, 0, 0] = (1 - 2) * slope
    truth = true_slopes(heads)
    for theirs in (bloom, mpt):
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)
        assert ((ours.double() - truth).abs() <= (theirs.double() - truth).abs()).all()
    # a tensor-parallel shard is the slice of the whole
    if heads >= 4:
        assert torch.equal(posenc_ops.alibi_slopes(heads, first_head=heads // 2, heads=heads // 4), ours[heads // 2: heads // 2 + heads // 4])


@pytest.mark.parametrize("heads", [1, 3, 8, 12, 16, 30, 64])
def test_bloom_alibi_with_left_padding(posenc_ops, heads):
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1, 1, 1, 1]])
    bloom = build_alibi_tensor(mask, heads, torch.float32)  # [B * H, 1, L]
    ours = posenc_ops.alibi_causal_bias(posenc_ops.alibi_slopes(heads), 9, mask).reshape(3 * heads, 1, 9)
    torch.testing.assert_close(ours, bloom, rtol=1e-6, atol=0)
    truth = (true_slopes(heads).view(1, heads, 1) * ((mask.cumsum(-1) - 1) * mask).double().view(3, 1, 9)).reshape(3 * heads, 1, 9)
    assert ((ours.double() - truth).abs() <= (bloom.double() - truth).abs() + 1e-300).all()
    # bool masks and a bfloat16 result, as BLOOM builds it for bfloat16 models
    torch.testing.assert_close(
        posenc_ops.alibi_causal_bias(posenc_ops.alibi_slopes(heads), 9, mask.bool(), dtype=torch.bfloat16).reshape(3 * heads, 1, 9).float(),
        build_alibi_tensor(mask, heads, torch.bfloat16).float(), rtol=2 ** -7, atol=0)


@pytest.mark.parametrize("heads", [1, 5, 8, 24, 64])
@pytest.mark.parametrize("length", [1, 7, 300])
def test_mpt_alibi(posenc_ops, heads, length):
    # MPT's tensor is the full bias of one query at the last position: -slope * (L - 1 - j)
    mpt = build_mpt_alibi_tensor(heads, length)  # [H, 1, L]
    ours = posenc_ops.alibi_bias(posenc_ops.alibi_slopes(heads), 1, length)
    torch.testing.assert_close(ours, mpt.float(), rtol=1e-6, atol=0)
    truth = -true_slopes(heads).view(heads, 1, 1) * (length - 1 - torch.arange(length)).double()
    assert ((ours.double() - truth).abs() <= (mpt.double() - truth).abs()).all()


def test_alibi_bias_as_attention_masks(posenc_ops):
    # nn.MultiheadAttention takes the bias as a [B * H, Lq, Lk] float mask;
    # scaled_dot_product_attention as a [H, Lq, Lk] one; both equal attention by hand.
    torch.manual_seed(0)
    heads, length, width, batch = 4, 6, 16, 2
    bias = posenc_ops.alibi_bias(posenc_ops.alibi_slopes(heads), length, length, causal=True)
    mha = torch.nn.MultiheadAttention(width, heads, batch_first=True).eval()
    x = torch.randn(batch, length, width)
    out, _ = mha(x, x, x, attn_mask=bias.repeat(batch, 1, 1), need_weights=False)
    q, k, v = torch.nn.functional.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, -1)
    split = lambda t: t.view(batch, length, heads, width // heads).transpose(1, 2)  # noqa: E731
    scores = split(q) @ split(k).transpose(-2, -1) / math.sqrt(width // heads) + bias
    expected = mha.out_proj((scores.softmax(-1) @ split(v)).transpose(1, 2).reshape(batch, length, width))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    sdpa = torch.nn.functional.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=bias)
    torch.testing.assert_close(sdpa, scores.softmax(-1) @ split(v), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("buckets, distance", [(32, 128), (32, 32), (64, 256), (16, 1000), (8, 20), (128, 128), (48, 100), (4, 4)])
def test_t5_buckets(posenc_ops, bidirectional, buckets, distance):
    if bidirectional and buckets < 4:
        pytest.skip("needs 4 buckets")
    relative = torch.arange(-3 * distance, 3 * distance + 1)
    theirs = T5Attention._relative_position_bucket(relative, bidirectional, buckets, distance)
    assert torch.equal(posenc_ops.relative_position_bucket(relative, bidirectional, buckets, distance), theirs)
    assert torch.equal(posenc_ops.relative_position_bucket(relative.int().view(-1, 1), bidirectional, buckets, distance), theirs.view(-1, 1))


@pytest.mark.parametrize("is_decoder", [False, True])
def test_t5_bias_loaded_in_cpp(posenc_ops, test_tool, tmp_path, is_decoder):
    torch.manual_seed(1)
    config = T5Config(d_model=32, d_kv=8, num_heads=4, relative_attention_num_buckets=32,
                      relative_attention_max_distance=128, is_decoder=is_decoder)
    layer = T5Attention(config, has_relative_attention_bias=True, layer_idx=0)
    torch.nn.init.normal_(layer.relative_attention_bias.weight)
    torch.save({"SelfAttention." + key: value for key, value in layer.state_dict().items()}, str(tmp_path / "t5.pt"))
    weight = layer.relative_attention_bias.weight.detach()
    for queries, keys, offset in [(40, 40, 0), (1, 200, 199), (3, 153, 150), (300, 300, 0)]:
        with torch.no_grad():
            theirs = layer.compute_bias(queries, keys, past_seen_tokens=offset)
        args = ["--num-heads", 4, "--query-length", queries, "--key-length", keys, "--offset", offset, "--prefix", "SelfAttention."]
        test_tool("t5-bias", *args, *(["--causal"] if is_decoder else []), tmp_path / "t5.pt", tmp_path / "bias.pt")
        assert torch.equal(torch.load(str(tmp_path / "bias.pt")), theirs)
        assert torch.equal(posenc_ops.relative_position_bias(weight, queries, keys, not is_decoder, 128, offset), theirs)


@pytest.mark.parametrize("is_decoder", [False, True])
def test_exported_t5_bias_with_a_t5_layers_weights(test_tool, tmp_path, is_decoder):
    """posenc::to_torchscript of a RelativePositionBias, run by plain PyTorch with a T5 layer's
    table loaded by name (relative_attention_bias.weight): HF's compute_bias, exactly."""
    torch.manual_seed(3)
    config = T5Config(d_model=32, d_kv=8, num_heads=4, is_decoder=is_decoder)
    layer = T5Attention(config, has_relative_attention_bias=True, layer_idx=0)
    torch.nn.init.normal_(layer.relative_attention_bias.weight)
    test_tool("export-attention", "t5", "--num-heads", 4, *(["--causal"] if is_decoder else []), tmp_path / "t5.pt")
    exported = torch.jit.load(str(tmp_path / "t5.pt"))
    exported.load_state_dict({"relative_attention_bias.weight": layer.relative_attention_bias.weight.detach()})
    for queries, keys, offset in [(40, 40, 0), (1, 200, 199), (300, 300, 0)]:
        with torch.no_grad():
            theirs = layer.compute_bias(queries, keys, past_seen_tokens=offset)
        assert torch.equal(exported(queries, keys, offset), theirs)


@pytest.mark.parametrize("length", [1, 16, 200])
def test_conformer_relative_table(posenc_ops, length):
    config = Wav2Vec2ConformerConfig(hidden_size=64, num_attention_heads=4, position_embeddings_type="relative", max_source_positions=256)
    theirs = Wav2Vec2ConformerRelPositionalEmbedding(config)(torch.zeros(1, length, 64))[0]
    ours = posenc_ops.relative_sinusoidal_table(length, 64)
    position = torch.arange(length - 1, -length, -1, dtype=torch.float64).view(-1, 1)
    frequency = torch.exp(torch.arange(0, 64, 2, dtype=torch.float64) * -(math.log(10000.0) / 64))
    truth = torch.stack([torch.sin(position * frequency), torch.cos(position * frequency)], -1).view(2 * length - 1, 64)
    ours_error = (ours.double() - truth).abs().max().item()
    their_error = (theirs.double() - truth).abs().max().item()
    assert ours_error <= max(their_error, 2 ** -24), f"{ours_error} > HF's {their_error}"
    torch.testing.assert_close(ours, theirs, rtol=0, atol=their_error + 2 ** -23)


def hf_conformer_attention(seed, length):
    """A Wav2Vec2ConformerSelfAttention (relative, 32 channels, 4 heads, random position biases),
    an input [2, length, 32] and its output with HF's own relative table."""
    torch.manual_seed(seed)
    config = Wav2Vec2ConformerConfig(hidden_size=32, num_attention_heads=4, position_embeddings_type="relative",
                                     max_source_positions=length, attention_dropout=0.0)
    config._attn_implementation = "eager"
    attention = Wav2Vec2ConformerSelfAttention(config).eval()
    with torch.no_grad():
        attention.pos_bias_u.normal_()
        attention.pos_bias_v.normal_()
    x = torch.randn(2, length, 32)
    with torch.no_grad():
        theirs, _ = attention(x, relative_position_embeddings=Wav2Vec2ConformerRelPositionalEmbedding(config)(x))
    return attention, x, theirs


def test_conformer_attention_loaded_in_cpp(posenc_ops, test_tool, tmp_path):
    attention, x, theirs = hf_conformer_attention(seed=2, length=12)
    torch.save(attention.state_dict(), str(tmp_path / "attn.pt"))
    torch.save(x, str(tmp_path / "x.pt"))
    test_tool("conformer-attention", "--d-model", 32, "--num-heads", 4, tmp_path / "attn.pt", tmp_path / "x.pt", tmp_path / "out.pt")
    # float32 matmuls in another order (HF scales each score matrix, posenc their sum) and
    # HF's float32 table angles: a few ulps of the outputs
    torch.testing.assert_close(torch.load(str(tmp_path / "out.pt")), theirs, rtol=1e-5, atol=1e-5)


def test_exported_conformer_attention_with_transformers_weights(test_tool, tmp_path):
    """posenc::to_torchscript of RelPositionalEncoding and RelPositionMultiheadAttention, run by
    plain PyTorch with a Wav2Vec2ConformerSelfAttention's state dict: HF's output (same tolerance
    as the C++ module's, see test_conformer_attention_loaded_in_cpp)."""
    length = 10
    attention, x, theirs = hf_conformer_attention(seed=4, length=length)
    test_tool("export-attention", "rel-encoding", "--d-model", 32, "--max-len", length, "--unscaled", tmp_path / "pos.pt")
    test_tool("export-attention", "rel-attention", "--d-model", 32, "--num-heads", 4, tmp_path / "attn.pt")
    encoding = torch.jit.load(str(tmp_path / "pos.pt"))
    exported = torch.jit.load(str(tmp_path / "attn.pt"))
    exported.load_state_dict(attention.state_dict())
    _, pos_emb = encoding(x)
    torch.testing.assert_close(exported(x, x, x, pos_emb), theirs, rtol=1e-5, atol=1e-5)


def test_rel_shift_against_the_zero_pad_formulation(posenc_ops):
    x = torch.randn(2, 3, 5, 9)
    padded = torch.nn.functional.pad(x, (1, 0)).view(2, 3, 10, 5)
    expected = padded[:, :, 1:].reshape(2, 3, 5, 9)[..., :5]
    assert torch.equal(posenc_ops.rel_shift(x), expected)


def test_gradients(posenc_ops):
    weight = torch.randn(32, 3, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda w: posenc_ops.relative_position_bias(w, 5, 9, True, 128, 2), (weight,))
    # one query, with distances past max_distance (the last bucket, taken without a logarithm):
    # through the embedding where a gradient is wanted, the table's columns gathered straight into
    # [1, H, 1, Lk] where not (a decoding step); the same values
    torch.autograd.gradcheck(lambda w: posenc_ops.relative_position_bias(w, 1, 80, True, 32, 70), (weight,))
    with_grad = posenc_ops.relative_position_bias(weight, 1, 80, False, 32, 79)
    with torch.no_grad():
        step = posenc_ops.relative_position_bias(weight, 1, 80, False, 32, 79)
    assert with_grad.requires_grad and not step.requires_grad
    assert step.shape == (1, 3, 1, 80) and step.is_contiguous() and torch.equal(step, with_grad.detach())
    x = torch.randn(2, 4, 4 + 6 - 1, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(posenc_ops.rel_shift, (x,))


@requires_torch(2, 4, "torch.library.opcheck")
def test_opcheck(posenc_ops):
    slopes = posenc_ops.alibi_slopes(6)
    weight = lambda *shape: torch.randn(*shape, requires_grad=True)  # noqa: E731
    cases = [
        (posenc_ops.alibi_bias.default, (slopes, 4, 7), {"causal": True}),
        (posenc_ops.alibi_bias.default, (torch.stack([slopes, slopes * 2]), 3, 3), {"offset": 5}),
        (posenc_ops.alibi_causal_bias.default, (slopes, 7), {"attention_mask": torch.tensor([[0, 1, 1, 1, 1, 1, 1]])}),
        (posenc_ops.relative_position_bucket.default, (torch.arange(-200, 200).view(20, 20),), {"bidirectional": False}),
        (posenc_ops.rel_shift.default, (torch.randn(2, 3, 4, 9, requires_grad=True),), {}),
        (posenc_ops.relative_position_bias.default, (torch.randn(32, 4, requires_grad=True), 5, 8), {"offset": 3}),
        (posenc_ops.relative_sinusoidal_table.default, (5, 8), {"key_length": 7, "dtype": torch.float64}),
        (posenc_ops.alibi_slopes.default, (12,), {"first_head": 4, "heads": 4}),
        # the module calls posenc.nn makes (composite: a table narrow, the projections, rel_shift)
        (posenc_ops.rel_positional_encoding_call.default,
         (torch.randn(2, 5, 8, requires_grad=True), posenc_ops.relative_sinusoidal_table(16, 8, key_length=16), 3, False, 2.0, 0.0, False), {}),
        (posenc_ops.rel_positional_encoding_call.default,
         (torch.randn(2, 5, 8, requires_grad=True), posenc_ops.relative_sinusoidal_table(16, 8), 1, True, 1.0, 0.0, False), {}),
        (posenc_ops.rel_position_multihead_attention_call.default,
         (weight(2, 4, 8), weight(2, 6, 8), weight(2, 6, 8), weight(1, 9, 8), torch.arange(6).expand(2, 1, 1, 6) < torch.tensor([6, 4]).view(2, 1, 1, 1), 8, 2,
          weight(8, 8), weight(8), weight(8, 8), weight(8), weight(8, 8), weight(8), weight(8, 8), weight(8, 8), weight(8),
          weight(2, 4), weight(2, 4), 0.0, False), {}),
    ]
    for op, args, kwargs in cases:
        torch.library.opcheck(op, args, kwargs)


@requires_torch(2, 4, "torch.compile of custom operators")
def test_compiled_attention_with_biases(posenc_ops):
    def attend(q, k, v, slopes, weight):
        length = q.shape[-2]
        alibi = posenc_ops.alibi_bias(slopes, length, length, causal=True)
        t5 = posenc_ops.relative_position_bias(weight, length, length)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=alibi + t5)

    q, k, v = (torch.randn(2, 4, 10, 8) for _ in range(3))
    slopes, weight = posenc_ops.alibi_slopes(4), torch.randn(32, 4)
    compiled = torch.compile(attend, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v, slopes, weight), attend(q, k, v, slopes, weight))


def test_errors(posenc_ops):
    with pytest.raises(RuntimeError, match=r"num_heads must be in \[1, 2\^28\]"):
        posenc_ops.alibi_slopes(0)
    with pytest.raises(RuntimeError, match=r"num_heads must be in \[1, 2\^28\] \(posenc's limit of heads\), but got 4611686018427387904"):
        posenc_ops.alibi_slopes(2 ** 62)  # (was "vector::reserve")
    with pytest.raises(RuntimeError, match="max_distance must be >= num_buckets"):
        posenc_ops.relative_position_bucket(torch.arange(3), True, 32, 16)
    with pytest.raises(RuntimeError, match="attention_mask must be"):
        posenc_ops.alibi_causal_bias(posenc_ops.alibi_slopes(4), 5, torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(RuntimeError, match="must be >= Lq >= 1"):
        posenc_ops.rel_shift(torch.randn(4, 3))

"""posenc.nn's attention biases as FlexAttention takes them (ALiBi.score_mod and
causal_block_mask, RelativePositionBias.score_mod): the scores they add equal the materialized
biases (forward) exactly, and attention with them equals scaled_dot_product_attention with the
materialized bias as attn_mask.

Tolerance of the attention outputs: 2e-6 absolute for float32 values of magnitude <= about 3. The
two sides add the same bias values to the same scores; flex_attention (eager, the reference
implementation on the CPU) and SDPA's CPU kernel sum the softmax and the weighted values in
different orders, a few float32 ulps apart. The scores themselves are compared exactly.
"""

import os
import sys

import pytest
import torch

from conftest import requires_torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

pytestmark = requires_torch(2, 5, "torch.nn.attention.flex_attention")


@pytest.fixture(scope="module")
def nn(posenc_ops):  # the fixture checks POSENC_LIBRARY is set (the package reads it)
    import posenc

    return posenc.nn


def scores_added(score_mod, heads, query_length, key_length):
    """What score_mod adds to a zero score at every (head, query, key), evaluated on index grids."""
    h = torch.arange(heads).view(heads, 1, 1)
    q = torch.arange(query_length).view(1, query_length, 1)
    kv = torch.arange(key_length).view(1, 1, key_length)
    return score_mod(torch.zeros(heads, query_length, key_length), torch.tensor(0), h, q, kv)


def flex(q, k, v, **mods):
    from torch.nn.attention.flex_attention import flex_attention

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager flex_attention says it is for debugging
        return flex_attention(q, k, v, **mods)


@pytest.mark.parametrize("query_length,key_length,offset", [(16, 16, None), (1, 40, None), (5, 12, 3), (12, 5, 0), (7, 7, 20)])
def test_alibi_scores_equal_the_materialized_bias(nn, query_length, key_length, offset):
    alibi = nn.ALiBi(12, first_head=2, heads=8)
    bias = alibi(query_length, key_length, offset)
    added = scores_added(alibi.score_mod(query_length, key_length, offset), 8, query_length, key_length)
    assert torch.equal(added, bias.reshape(added.shape))


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("query_length,key_length,offset", [(16, 16, 0), (1, 300, 299), (9, 40, 3), (40, 9, 0)])
def test_t5_scores_equal_the_materialized_bias(nn, bidirectional, query_length, key_length, offset):
    torch.manual_seed(0)
    t5 = nn.RelativePositionBias(6, num_buckets=32, max_distance=128, bidirectional=bidirectional)
    bias = t5(query_length, key_length, offset)
    added = scores_added(t5.score_mod(query_length, key_length, offset), 6, query_length, key_length)
    assert torch.equal(added, bias.reshape(added.shape))


@pytest.mark.parametrize("causal", [False, True])
def test_alibi_attention_equals_sdpa_with_the_bias(nn, causal):
    torch.manual_seed(1)
    heads, query_length, key_length = 8, 48, 64
    q, k, v = torch.randn(2, heads, query_length, 16), torch.randn(2, heads, key_length, 16), torch.randn(2, heads, key_length, 16)
    alibi = nn.ALiBi(heads)
    mods = {"score_mod": alibi.score_mod(query_length, key_length)}
    if causal:
        mods["block_mask"] = alibi.causal_block_mask(query_length, key_length)
    ours = flex(q, k, v, **mods)
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=alibi(query_length, key_length, None, causal))
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-6)
    if causal:  # the compact causal form gives the same attention under the causal mask
        compact = alibi.forward_causal(key_length).expand(heads, query_length, key_length)
        mask = torch.ones(query_length, key_length, dtype=torch.bool).tril(key_length - query_length)
        compact = compact.masked_fill(~mask, float("-inf"))
        torch.testing.assert_close(torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=compact),
                                   theirs, rtol=0, atol=2e-6)


def test_t5_attention_equals_sdpa_with_the_bias(nn):
    torch.manual_seed(2)
    heads, query_length, key_length = 4, 20, 33
    q, k, v = torch.randn(1, heads, query_length, 8), torch.randn(1, heads, key_length, 8), torch.randn(1, heads, key_length, 8)
    t5 = nn.RelativePositionBias(heads)
    with torch.no_grad():
        ours = flex(q, k, v, score_mod=t5.score_mod(query_length, key_length, 13))
        theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=t5(query_length, key_length, 13))
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-6)


def test_the_rows_are_linear_in_the_lengths(nn):
    """What the score_mods hold: O(H (Lq + Lk)), not the O(H Lq Lk) of the materialized bias."""
    alibi, t5 = nn.ALiBi(32), nn.RelativePositionBias(32)
    for mod in (alibi.score_mod(4096, 8192), t5.score_mod(4096, 8192)):
        captured = [cell.cell_contents for cell in mod.__closure__ if isinstance(cell.cell_contents, torch.Tensor)]
        assert len(captured) == 1 and captured[0].numel() <= 32 * (4096 + 8192)


def test_the_checks_are_the_operators(nn):
    with pytest.raises(RuntimeError, match=r"offset \(the position of the first query\) must be >= 0"):
        nn.ALiBi(4).score_mod(3, 5, -1)
    with pytest.raises(RuntimeError, match="query_length must be >= 1, but got 0"):
        nn.RelativePositionBias(4).score_mod(0, 5)


def test_compiled_flex_attention_equals_sdpa_with_the_bias(nn):
    """flex_attention compiled by Inductor (the form that never builds the bias; what
    bench/flex_attention_benchmark.py times): within 1e-5 of SDPA with the materialized bias
    (Inductor's exp and its blockwise, online softmax differ from SDPA's in the last bits)."""
    from torch.nn.attention.flex_attention import flex_attention

    torch.manual_seed(3)
    heads, length = 4, 256
    q, k, v = (torch.randn(1, heads, length, 32) for _ in range(3))
    compiled = torch.compile(flex_attention, dynamic=False)
    alibi, t5 = nn.ALiBi(heads), nn.RelativePositionBias(heads)
    with torch.no_grad():
        ours = compiled(q, k, v, score_mod=alibi.score_mod(length, length), block_mask=alibi.causal_block_mask(length, length))
        theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=alibi(length, length, None, True))
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
        ours = compiled(q, k, v, score_mod=t5.score_mod(length, length))
        theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=t5(length, length))
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)

"""Rotary embedding fused with the KV-cache write (posenc::rotary_kv_cache(_),
posenc::rotary_paged_kv_cache(_)): bit for bit against the composite of posenc's own rotation and
an index_copy_ into the cache; against the conventions of flash-attn (cache_seqlens, block
tables) and vLLM (slot_mapping, slot -1), each written out here as those projects document them;
bad calls refused with nothing written; fake tensors, opcheck and torch.compile; posenc.nn's
module methods for every rope type."""

import pytest
import torch

from conftest import requires_torch

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


def tables(rotary_dim, rows=64, dtype=torch.float32):
    inv_freq, _ = torch.ops.posenc.rope_frequencies(rotary_dim)
    cos, sin = torch.ops.posenc.rotary_tables(rows, inv_freq, dtype=dtype)
    return cos, sin, inv_freq


def composite_contiguous(q, k, v, k_cache, v_cache, cos, sin, seqlens, positions=None, interleaved=False):
    """posenc's rotation, then each sequence's new rows copied into its cache at its length."""
    length = q.shape[1]
    if positions is None:
        positions = seqlens.long()[:, None] + torch.arange(length)
    q_rot, k_rot = torch.ops.posenc.apply_rotary_qk(q, k, cos, sin, positions=positions, interleaved=interleaved)
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    for b in range(q.shape[0]):
        slots = torch.arange(length) + int(seqlens[b])
        k_cache[b].index_copy_(0, slots, k_rot[b])
        v_cache[b].index_copy_(0, slots, v[b])
    return q_rot, k_cache, v_cache


def composite_paged(q, k, v, k_cache, v_cache, cos, sin, positions, slots, interleaved=False):
    """posenc's rotation, then index_copy_ of the written tokens into the flattened cache."""
    q_rot, k_rot = torch.ops.posenc.apply_rotary_qk(q[None], k[None], cos, sin, positions=positions, interleaved=interleaved)
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    keep = slots >= 0
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots[keep].long(), k_rot[0][keep])
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots[keep].long(), v[keep])
    return q_rot[0], k_cache, v_cache


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [32, 16])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_contiguous_equals_rotation_then_copy(posenc_ops, dtype, interleaved, rotary_dim, index_dtype):
    torch.manual_seed(0)
    B, L, Hq, Hkv, D, Dv, S = 3, 4, 8, 2, 32, 24, 16
    cos, sin, _ = tables(rotary_dim)
    q, k = torch.randn(B, L, Hq, D, dtype=dtype), torch.randn(B, L, Hkv, D, dtype=dtype)
    v = torch.randn(B, L, Hkv, Dv, dtype=dtype)
    k_cache, v_cache = torch.randn(B, S, Hkv, D, dtype=dtype), torch.randn(B, S, Hkv, Dv, dtype=dtype)
    seqlens = torch.tensor([0, 5, S - L], dtype=index_dtype)
    q_ref, k_ref, v_ref = composite_contiguous(q, k, v, k_cache, v_cache, cos, sin, seqlens, interleaved=interleaved)
    # in place
    q1, kc, vc = q.clone(), k_cache.clone(), v_cache.clone()
    posenc_ops.rotary_kv_cache_(q1, k, v, kc, vc, cos, sin, seqlens, interleaved=interleaved)
    assert torch.equal(q1, q_ref) and torch.equal(kc, k_ref) and torch.equal(vc, v_ref)
    # out of place: q only read
    kc, vc = k_cache.clone(), v_cache.clone()
    q_saved = q.clone()
    q_out = posenc_ops.rotary_kv_cache(q, k, v, kc, vc, cos, sin, seqlens, interleaved=interleaved)
    assert torch.equal(q_out, q_ref) and torch.equal(kc, k_ref) and torch.equal(vc, v_ref)
    assert torch.equal(q, q_saved)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("cache_heads_first", [False, True])
def test_paged_equals_rotation_then_copy(posenc_ops, dtype, interleaved, cache_heads_first):
    torch.manual_seed(1)
    T, Hq, Hkv, D, NB, BS = 9, 4, 1, 16, 5, 4  # MQA
    cos, sin, _ = tables(16)
    q, k, v = torch.randn(T, Hq, D, dtype=dtype), torch.randn(T, Hkv, D, dtype=dtype), torch.randn(T, Hkv, D, dtype=dtype)
    k_cache, v_cache = torch.randn(NB, BS, Hkv, D, dtype=dtype), torch.randn(NB, BS, Hkv, D, dtype=dtype)
    positions = torch.tensor([0, 1, 2, 3, 4, 17, 40, -1, 63])  # prefill, decode tokens, a padding position
    slots = torch.tensor([4, 5, 6, 7, 8, 0, 19, -1, 13])  # -1: a padding token, not written
    q_ref, k_ref, v_ref = composite_paged(q, k, v, k_cache, v_cache, cos, sin, positions, slots, interleaved)
    kc, vc = k_cache.clone(), v_cache.clone()
    if cache_heads_first:  # FlashInfer's HND layout
        kc, vc = kc.transpose(1, 2).contiguous(), vc.transpose(1, 2).contiguous()
    q1 = q.clone()
    posenc_ops.rotary_paged_kv_cache_(q1, k, v, kc, vc, cos, sin, positions, slots, interleaved=interleaved,
                                      cache_heads_first=cache_heads_first)
    if cache_heads_first:
        kc, vc = kc.transpose(1, 2), vc.transpose(1, 2)
    assert torch.equal(q1, q_ref) and torch.equal(kc, k_ref) and torch.equal(vc, v_ref)


def test_vllm_slot_mapping_convention(posenc_ops):
    # vLLM's reshape_and_cache_flash: slot_idx = slot_mapping[t]; a negative slot_idx returns
    # (padding); else block_idx = slot_idx // block_size, block_offset = slot_idx % block_size and
    # key_cache[block_idx, block_offset, h, :] = key[t, h, :] (after the rotary kernel rotated key
    # in place by positions[t] from its cos_sin_cache).
    torch.manual_seed(2)
    T, H, D, NB, BS = 6, 2, 8, 3, 4
    cos, sin, _ = tables(8)
    q, k, v = torch.randn(T, H, D), torch.randn(T, H, D), torch.randn(T, H, D)
    positions = torch.tensor([7, 8, 9, 0, 1, 2])
    slot_mapping = torch.tensor([11, -1, 2, 5, 6, 0])
    k_cache, v_cache = torch.zeros(NB, BS, H, D), torch.zeros(NB, BS, H, D)
    q_in = q.clone()
    posenc_ops.rotary_paged_kv_cache_(q_in, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping)
    expected_k, expected_v = torch.zeros(NB, BS, H, D), torch.zeros(NB, BS, H, D)
    for t in range(T):
        c, s = cos[positions[t]].double(), sin[positions[t]].double()
        x = k[t].double()
        rotated = torch.cat([x[:, :4] * c - x[:, 4:] * s, x[:, 4:] * c + x[:, :4] * s], dim=-1)
        slot_idx = int(slot_mapping[t])
        if slot_idx < 0:
            continue
        expected_k[slot_idx // BS, slot_idx % BS] = rotated.float()
        expected_v[slot_idx // BS, slot_idx % BS] = v[t]
    # float32 products and sums, each rounded once, against the float64 formula: within 2 ulp of 1.
    torch.testing.assert_close(k_cache, expected_k, rtol=0, atol=4 * 2.0 ** -23 * k.abs().max().item())
    assert torch.equal(v_cache, expected_v)
    assert int(torch.count_nonzero(k_cache.abs().sum(dim=(2, 3)))) == 5


def test_flash_attn_cache_seqlens_and_block_table(posenc_ops):
    # flash_attn_with_kvcache: k and v are appended at cache_seqlens[b] (k rotated first, at
    # positions cache_seqlens[b] + l); with block_table [B, max_blocks], token position p of
    # sequence b lives in page block_table[b, p // page_block_size], row p % page_block_size.
    torch.manual_seed(3)
    B, L, H, D, S = 2, 3, 2, 16, 12
    cos, sin, _ = tables(16)
    q, k, v = torch.randn(B, L, H, D), torch.randn(B, L, H, D), torch.randn(B, L, H, D)
    seqlens = torch.tensor([4, 9], dtype=torch.int32)
    k_cache, v_cache = torch.randn(B, S, H, D), torch.randn(B, S, H, D)
    kc, vc, q1 = k_cache.clone(), v_cache.clone(), q.clone()
    posenc_ops.rotary_kv_cache_(q1, k, v, kc, vc, cos, sin, seqlens)
    for b in range(B):
        start = int(seqlens[b])
        untouched = torch.ones(S, dtype=torch.bool)
        untouched[start:start + L] = False
        assert torch.equal(kc[b][untouched], k_cache[b][untouched])
        assert torch.equal(vc[b, start:start + L], v[b])
        q_rot, k_rot = posenc_ops.apply_rotary_qk(q[b:b + 1], k[b:b + 1], cos, sin, offset=start)
        assert torch.equal(kc[b, start:start + L], k_rot[0]) and torch.equal(q1[b], q_rot[0])
    # The same write through a block table: pages of 4 rows, sequence b's pages scattered.
    page, pages = 4, 8
    block_table = torch.tensor([[5, 2, 7], [0, 6, 3]])
    paged_k, paged_v = torch.zeros(pages, page, H, D), torch.zeros(pages, page, H, D)
    position = seqlens.long()[:, None] + torch.arange(L)
    slot_mapping = (block_table.gather(1, position // page) * page + position % page).reshape(-1)
    q2 = q.clone().reshape(B * L, H, D)
    posenc_ops.rotary_paged_kv_cache_(q2, k.reshape(-1, H, D), v.reshape(-1, H, D), paged_k, paged_v, cos, sin,
                                      position.reshape(-1), slot_mapping)
    assert torch.equal(q2.view(B, L, H, D), q1)
    for b in range(B):
        for p in range(int(seqlens[b]), int(seqlens[b]) + L):
            row = paged_k[block_table[b, p // page], p % page]
            assert torch.equal(row, kc[b, p])


def test_fused_qkv_views_heads_first_and_explicit_positions(posenc_ops):
    # q, k, v as views of one projection output [B, L, (Hq + 2 Hkv) * D]: written where they lie.
    torch.manual_seed(4)
    B, L, Hq, Hkv, D, S = 2, 5, 4, 2, 16, 8
    cos, sin, _ = tables(16)
    qkv = torch.randn(B, L, (Hq + 2 * Hkv) * D)
    q, k, v = qkv.split([Hq * D, Hkv * D, Hkv * D], dim=-1)
    q, k, v = q.view(B, L, Hq, D), k.view(B, L, Hkv, D), v.view(B, L, Hkv, D)
    positions = torch.tensor([[-1, 0, 1, 2, 3], [0, 1, 2, 3, 4]])  # left padding: HF's position_ids
    seqlens = torch.tensor([0, 3])
    k_cache, v_cache = torch.zeros(B, Hkv, S, D), torch.zeros(B, Hkv, S, D)  # heads-first caches
    q_ref, k_ref, v_ref = composite_contiguous(q.clone(), k, v, k_cache.transpose(1, 2), v_cache.transpose(1, 2),
                                               cos, sin, seqlens, positions=positions)
    data = qkv.data_ptr()
    posenc_ops.rotary_kv_cache_(q, k, v, k_cache, v_cache, cos, sin, seqlens, positions=positions,
                                cache_heads_first=True)
    assert qkv.data_ptr() == data and torch.equal(qkv[..., :Hq * D].view(B, L, Hq, D), q_ref)
    assert torch.equal(k_cache.transpose(1, 2), k_ref) and torch.equal(v_cache.transpose(1, 2), v_ref)
    # heads-first inputs [B, H, L, D]
    q2 = torch.randn(B, Hq, L, D)
    k2, v2 = torch.randn(B, Hkv, L, D), torch.randn(B, Hkv, L, D)
    kc, vc = torch.zeros(B, S, Hkv, D), torch.zeros(B, S, Hkv, D)
    q_ref, k_ref, v_ref = composite_contiguous(q2.transpose(1, 2), k2.transpose(1, 2), v2.transpose(1, 2), kc, vc,
                                               cos, sin, seqlens)
    q_out = posenc_ops.rotary_kv_cache(q2, k2, v2, kc, vc, cos, sin, seqlens, heads_first=True)
    assert torch.equal(q_out.transpose(1, 2), q_ref) and torch.equal(kc, k_ref) and torch.equal(vc, v_ref)


def test_rows_past_the_caches_from_inv_freq(posenc_ops):
    torch.manual_seed(5)
    cos, sin, inv_freq = tables(16, rows=8)
    big_cos, big_sin, _ = tables(16, rows=64)
    q, k, v = torch.randn(1, 2, 2, 16), torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16)
    kc, vc = torch.zeros(1, 40, 1, 16), torch.zeros(1, 40, 1, 16)
    kc2, vc2 = kc.clone(), vc.clone()
    seqlens = torch.tensor([30])
    q1, q2 = q.clone(), q.clone()
    posenc_ops.rotary_kv_cache_(q1, k, v, kc, vc, cos, sin, seqlens, inv_freq=inv_freq)
    posenc_ops.rotary_kv_cache_(q2, k, v, kc2, vc2, big_cos, big_sin, seqlens)
    # rows computed from the float64 frequencies, rounded once to float32 as the tables are
    assert torch.equal(q1, q2) and torch.equal(kc, kc2)
    with pytest.raises(RuntimeError, match="past the cos/sin caches"):
        posenc_ops.rotary_kv_cache_(q.clone(), k, v, kc, vc, cos, sin, seqlens)


def call_args(T=4, NB=2, BS=4, dtype=torch.float32):
    cos, sin, _ = tables(8)
    return dict(q=torch.randn(T, 2, 8, dtype=dtype), k=torch.randn(T, 1, 8, dtype=dtype), v=torch.randn(T, 1, 8, dtype=dtype),
                k_cache=torch.zeros(NB, BS, 1, 8, dtype=dtype), v_cache=torch.zeros(NB, BS, 1, 8, dtype=dtype),
                cos=cos, sin=sin, positions=torch.arange(T), slot_mapping=torch.arange(T))


def paged(posenc_ops, args):
    return posenc_ops.rotary_paged_kv_cache_(args["q"], args["k"], args["v"], args["k_cache"], args["v_cache"], args["cos"],
                                             args["sin"], args["positions"], args["slot_mapping"])


@pytest.mark.parametrize("change, message", [
    (dict(slot_mapping=torch.tensor([0, 1, 8, 2])), "token 2 goes to slot 8"),
    (dict(slot_mapping=torch.tensor([0, 5, 1, 5])), "tokens 1 and 3 both go to slot 5"),
    (dict(slot_mapping=torch.tensor([0, 1, 2])), r"slot_mapping must be \[T\] = \[4\]"),
    (dict(slot_mapping=torch.tensor([0.0, 1, 2, 3])), "slot_mapping must be an int64 or int32 tensor"),
    (dict(k_cache=torch.zeros(2, 4, 1, 8, dtype=torch.bfloat16)), "k_cache must have the dtype of q"),
    (dict(v_cache=torch.zeros(2, 4, 1, 6)), "v_cache must be"),
    (dict(k_cache=torch.zeros(2, 4, 2, 8)), "k_cache must be"),
    (dict(k_cache=torch.zeros(2, 4, 1, 16)[..., ::2]), "channels .* must be contiguous"),
    (dict(v=torch.randn(3, 1, 8)), "v must hold one row per token"),
    (dict(positions=torch.tensor([0, 1, 2, 64])), "outside|position"),
    (dict(k_cache=torch.zeros(2, 4, 1, 8, device="meta")), "device"),
])
def test_bad_calls_are_refused_and_write_nothing(posenc_ops, change, message):
    torch.manual_seed(6)
    args = call_args()
    args.update(change)
    before = {name: args[name].clone() for name in ("q", "k_cache", "v_cache") if args[name].device.type == "cpu"}
    with pytest.raises(RuntimeError, match=message):
        paged(posenc_ops, args)
    for name, value in before.items():
        assert torch.equal(args[name], value), name


def test_overlap_and_grad_are_refused(posenc_ops):
    args = call_args()
    cache = torch.zeros(2, 4, 1, 8)
    args["k_cache"], args["v_cache"] = cache, cache  # one buffer for both caches
    with pytest.raises(RuntimeError, match="k_cache shares memory with v_cache"):
        paged(posenc_ops, args)
    args = call_args()
    args["q"] = args["k_cache"].view(8, 1, 8)[:4].expand(4, 2, 8)  # q inside the cache, and overlapping itself
    with pytest.raises(RuntimeError, match="memory location|shares memory"):
        paged(posenc_ops, args)
    args = call_args()
    args["k"] = args["k"].requires_grad_()
    with pytest.raises(RuntimeError, match="inference only"):
        paged(posenc_ops, args)
    assert torch.count_nonzero(args["k_cache"]) == 0
    with torch.no_grad():
        paged(posenc_ops, args)
    assert torch.count_nonzero(args["k_cache"]) > 0
    args = call_args()
    with torch.inference_mode():
        args = call_args()
        paged(posenc_ops, args)
    assert torch.count_nonzero(args["k_cache"]) > 0


def test_contiguous_cache_bounds(posenc_ops):
    cos, sin, _ = tables(8)
    q, k, v = torch.randn(2, 3, 1, 8), torch.randn(2, 3, 1, 8), torch.randn(2, 3, 1, 8)
    kc, vc = torch.zeros(2, 5, 1, 8), torch.zeros(2, 5, 1, 8)
    for seqlens, message in [([0, 3], "sequence 1 holds 3 tokens"), ([-1, 0], "cache_seqlens must be >= 0")]:
        with pytest.raises(RuntimeError, match=message):
            posenc_ops.rotary_kv_cache_(q, k, v, kc, vc, cos, sin, torch.tensor(seqlens))
    with pytest.raises(RuntimeError, match=r"the caches must hold the B = 2 sequences"):
        posenc_ops.rotary_kv_cache_(q, k, v, kc[:1], vc[:1], cos, sin, torch.tensor([0]))
    assert torch.count_nonzero(kc) == 0 and torch.count_nonzero(vc) == 0


def test_version_counters_bump(posenc_ops):
    args = call_args()
    versions = [args[name]._version for name in ("q", "k_cache", "v_cache")]
    paged(posenc_ops, args)
    assert [args[name]._version for name in ("q", "k_cache", "v_cache")] == [v + 1 for v in versions]


@requires_torch(2, 4, "torch.library.opcheck")
@pytest.mark.parametrize("inplace", [True, False])
def test_opcheck(posenc_ops, inplace):
    from torch.library import opcheck
    cos, sin, _ = tables(8)
    args = call_args()
    op = posenc_ops.rotary_paged_kv_cache_ if inplace else posenc_ops.rotary_paged_kv_cache
    opcheck(op.default, (args["q"], args["k"], args["v"], args["k_cache"], args["v_cache"], cos, sin, args["positions"],
                         torch.tensor([3, -1, 0, 6], dtype=torch.int32)))
    op = posenc_ops.rotary_kv_cache_ if inplace else posenc_ops.rotary_kv_cache
    opcheck(op.default, (torch.randn(2, 1, 4, 8), torch.randn(2, 1, 2, 8), torch.randn(2, 1, 2, 4), torch.zeros(2, 6, 2, 8),
                         torch.zeros(2, 6, 2, 4), cos, sin, torch.tensor([2, 5])))


@requires_torch(2, 4, "torch.compile of mutating custom operators")
def test_compiled_decode_step_equals_eager(posenc_ops):
    torch.manual_seed(7)
    cos, sin, _ = tables(16)

    def step(q, k, v, k_cache, v_cache, positions, slots):
        torch.ops.posenc.rotary_paged_kv_cache_(q, k, v, k_cache, v_cache, cos, sin, positions, slots)
        return q * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    args = [torch.randn(3, 4, 16), torch.randn(3, 2, 16), torch.randn(3, 2, 16), torch.zeros(4, 4, 2, 16),
            torch.zeros(4, 4, 2, 16), torch.tensor([5, 9, 1]), torch.tensor([3, 12, 7])]
    eager_args = [a.clone() for a in args]
    out = compiled(*args)
    expected = step(*eager_args)
    assert torch.equal(out, expected)
    for a, b in zip(args, eager_args):
        assert torch.equal(a, b)


@requires_torch(2, 1, "fake tensors")
def test_fake_tensors_check_shapes(posenc_ops):
    from torch._subclasses.fake_tensor import FakeTensorMode
    real = call_args()
    mode = FakeTensorMode()
    args = {name: mode.from_tensor(value) for name, value in real.items()}
    with mode:
        paged(posenc_ops, args)
        out = posenc_ops.rotary_paged_kv_cache(args["q"], args["k"], args["v"], args["k_cache"], args["v_cache"], args["cos"],
                                               args["sin"], args["positions"], args["slot_mapping"])
        assert out.shape == args["q"].shape
        args["v_cache"] = torch.empty(2, 4, 1, 6)
        with pytest.raises(RuntimeError, match="v_cache must be"):
            paged(posenc_ops, args)


ROPE_TYPES = [
    {},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 16},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    {"rope_type": "dynamic", "factor": 2.0},
    {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0, 3.0, 4.0, 5.0],
     "original_max_position_embeddings": 16},
]


@pytest.mark.parametrize("rope_scaling", ROPE_TYPES, ids=lambda r: r.get("rope_type", "default"))
@pytest.mark.parametrize("cached_len", [None, 8])
def test_module_methods_equal_forward_qk_then_copy(posenc_ops, rope_scaling, cached_len):
    import posenc.nn
    torch.manual_seed(8)
    rope = posenc.nn.RotaryEmbedding(head_dim=16, max_len=64, rotary_dim=8, rope_scaling=rope_scaling or None,
                                     cached_len=cached_len, pairing="interleaved")
    B, L, S = 2, 3, 40
    q, k, v = torch.randn(B, L, 4, 16), torch.randn(B, L, 2, 16), torch.randn(B, L, 2, 16)
    seqlens = torch.tensor([2, 30])
    positions = seqlens[:, None] + torch.arange(L)
    q_rot, k_rot = posenc_ops.rotary_embedding_call_qk(q, k, rope.cos, rope.sin, rope.inv_freq, rope._long_inv_freq,
                                                       rope._module, 0, positions)
    kc, vc = torch.zeros(B, S, 2, 16), torch.zeros(B, S, 2, 16)
    q1 = q.clone()
    assert rope.forward_kv_cache_(q1, k, v, kc, vc, seqlens) is q1
    torch.testing.assert_close(q1, q_rot, rtol=0, atol=0)
    for b in range(B):
        assert torch.equal(kc[b, seqlens[b]:seqlens[b] + L], k_rot[b])
        assert torch.equal(vc[b, seqlens[b]:seqlens[b] + L], v[b])
    # paged: the same tokens packed, each sequence's slots in its own block of 64
    pk, pv = torch.zeros(2, 64, 2, 16), torch.zeros(2, 64, 2, 16)
    q2 = q.clone().reshape(B * L, 4, 16)
    slots = (torch.arange(B)[:, None] * 64 + positions).reshape(-1)
    rope.forward_paged_kv_cache_(q2, k.reshape(-1, 2, 16), v.reshape(-1, 2, 16), pk, pv, positions.reshape(-1), slots)
    if rope_scaling.get("rope_type") in ("dynamic", "longrope"):
        # one packed call of both sequences: the frequencies of its largest position for every token
        # (as forward_qk of the packed tokens at these positions)
        q_rot, k_rot = posenc_ops.rotary_embedding_call_qk(q.reshape(1, B * L, 4, 16), k.reshape(1, B * L, 2, 16),
                                                           rope.cos, rope.sin, rope.inv_freq, rope._long_inv_freq,
                                                           rope._module, 0, positions.reshape(1, -1))
    assert torch.equal(q2.reshape(q_rot.shape), q_rot)
    assert torch.equal(pk.view(-1, 2, 16)[slots], k_rot.reshape(-1, 2, 16))
    assert torch.equal(pv.view(-1, 2, 16)[slots], v.reshape(-1, 2, 16))


def test_module_refuses_what_the_fused_write_cannot_do(posenc_ops):
    import posenc.nn
    rope = posenc.nn.RotaryEmbedding(head_dim=16, max_len=64, deinterleave=True)
    q, k, v = torch.randn(1, 1, 2, 16), torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    with pytest.raises(RuntimeError, match="regroups them"):
        rope.forward_kv_cache_(q, k, v, torch.zeros(1, 4, 1, 16), torch.zeros(1, 4, 1, 16), torch.tensor([0]))


def test_transformers_rotation_and_static_cache(posenc_ops):
    # transformers' own apply_rotary_pos_emb and StaticCache.update, the decode step of a LLaMA
    # layer: the cache holds the same keys (float32 angles in transformers, float64 rounded once in
    # posenc: within 2 ulp of the angle's cos/sin each) and the same values, bit for bit.
    transformers = pytest.importorskip("transformers", reason="transformers is installed in the pip test environment only")
    from transformers import LlamaConfig, StaticCache
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
    import posenc.nn
    torch.manual_seed(9)
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
                         max_position_embeddings=64, head_dim=16)
    B, L, past = 2, 1, 11
    cache = StaticCache(config=config, max_cache_len=32)
    q, k, v = torch.randn(B, 4, L, 16), torch.randn(B, 2, L, 16), torch.randn(B, 2, L, 16)  # HF: [B, H, L, D]
    position_ids = torch.full((B, L), past)
    cos, sin = LlamaRotaryEmbedding(config)(v, position_ids)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    cache_position = torch.arange(past, past + L)
    # the prompt's `past` tokens (zeros here), then the decode step at position `past`
    cache.update(torch.zeros(B, 2, past, 16), torch.zeros(B, 2, past, 16), 0, {"cache_position": torch.arange(past)})
    keys, values = cache.update(k_hf, v, 0, {"cache_position": cache_position})
    rope = posenc.nn.RotaryEmbedding(head_dim=16, max_len=64, heads_first=True)
    k_cache, v_cache = torch.zeros(B, 2, 32, 16), torch.zeros(B, 2, 32, 16)
    q1 = q.clone()
    rope.forward_kv_cache_(q1, k, v, k_cache, v_cache, torch.full((B,), past))
    bound = 4 * 2.0 ** -24 * 2 * max(q.abs().max().item(), k.abs().max().item())
    torch.testing.assert_close(q1, q_hf, rtol=0, atol=bound)
    torch.testing.assert_close(k_cache[:, :, past:past + L], keys[:, :, past:past + L], rtol=0, atol=bound)
    assert torch.equal(v_cache[:, :, past:past + L], values[:, :, past:past + L])


@requires_torch(2, 6, "torch.export of a module whose buffers a custom operator mutates")
def test_exported_decode_step_equals_eager(posenc_ops):
    # A serving layer's step as a module: its paged caches are buffers the fused write mutates;
    # torch.export keeps the mutation (auto-functionalized), with the number of tokens dynamic.
    cos, sin, _ = tables(16)

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("k_cache", torch.zeros(8, 4, 2, 16))
            self.register_buffer("v_cache", torch.zeros(8, 4, 2, 16))
            self.register_buffer("cos", cos)
            self.register_buffer("sin", sin)

        def forward(self, q, k, v, positions, slots):
            torch.ops.posenc.rotary_paged_kv_cache_(q, k, v, self.k_cache, self.v_cache, self.cos, self.sin, positions, slots)
            return q + 0

    torch.manual_seed(10)
    tokens = torch.export.Dim("tokens", min=2, max=32)
    args = (torch.randn(3, 4, 16), torch.randn(3, 2, 16), torch.randn(3, 2, 16), torch.tensor([5, 9, 1]), torch.tensor([3, 12, 7]))
    program = torch.export.export(Step(), tuple(a.clone() for a in args),
                                  dynamic_shapes=({0: tokens}, {0: tokens}, {0: tokens}, {0: tokens}, {0: tokens}))
    exported, eager = program.module(), Step()
    for t in (3, 5):
        q, k, v = torch.randn(t, 4, 16), torch.randn(t, 2, 16), torch.randn(t, 2, 16)
        positions, slots = torch.randint(0, 64, (t,)), torch.randperm(32)[:t]
        out = exported(q.clone(), k, v, positions, slots)
        expected = eager(q.clone(), k, v, positions, slots)
        assert torch.equal(out, expected)
        assert torch.equal(exported.k_cache, eager.k_cache) and torch.equal(exported.v_cache, eager.v_cache)


def test_explicit_slots_in_a_contiguous_cache_and_fused_qkv_packed(posenc_ops):
    # A contiguous cache [B, S, H, D] is a paged one of B blocks of S slots: the paged form writes
    # packed tokens at explicit positions of their sequences (slot b * S + position), here from
    # views of one fused projection output [T, (Hq + 2 Hkv) * D], rotated where they lie.
    torch.manual_seed(11)
    B, S, Hq, Hkv, D = 2, 10, 4, 2, 8
    cos, sin, _ = tables(8)
    sequence = torch.tensor([0, 0, 1, 1, 1])
    positions = torch.tensor([7, 2, 0, 9, 4])
    qkv = torch.randn(5, (Hq + 2 * Hkv) * D)
    q, k, v = (t.view(5, -1, D) for t in qkv.split([Hq * D, Hkv * D, Hkv * D], dim=-1))
    k_cache, v_cache = torch.zeros(B, S, Hkv, D), torch.zeros(B, S, Hkv, D)
    q_rot, k_rot = posenc_ops.apply_rotary_qk(q[None], k[None], cos, sin, positions=positions)
    posenc_ops.rotary_paged_kv_cache_(q, k, v, k_cache, v_cache, cos, sin, positions, sequence * S + positions)
    assert torch.equal(qkv[:, :Hq * D].view(5, Hq, D), q_rot[0])
    for t in range(5):
        assert torch.equal(k_cache[sequence[t], positions[t]], k_rot[0, t])
        assert torch.equal(v_cache[sequence[t], positions[t]], v[t])
    assert int(torch.count_nonzero(v_cache.abs().sum(dim=(2, 3)))) == 5

"""Packed sequences and context-parallel shards through the operators: posenc::packed_positions,
posenc::context_parallel_positions and posenc::context_parallel_packed_positions, and a
torch.distributed run (gloo, 2 processes on the CPU) proving that rotating each rank's shard at its
positions equals rotating the whole sequence, or the whole packed batch."""

import itertools
import os

import pytest
import torch
import torch.distributed as dist

from conftest import finish_rank, requires_torch, spawn_ranks


def rope_tables(max_len, rotary_dim, base=10000.0):
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * inv_freq
    return angles.cos().float(), angles.sin().float()


def test_packed_positions_restart_or_start_where_given(posenc_ops):
    cu = torch.tensor([0, 3, 3, 5], dtype=torch.int32)
    assert posenc_ops.packed_positions(cu, 5).tolist() == [0, 1, 2, 0, 1]
    start = torch.tensor([4, 7, 10])
    assert posenc_ops.packed_positions(cu, 5, start).tolist() == [4, 5, 6, 10, 11]
    with pytest.raises(RuntimeError, match="cu_seqlens must not decrease"):
        posenc_ops.packed_positions(torch.tensor([0, 4, 3]), 3)
    with pytest.raises(RuntimeError, match="must start at 0 and end at the number of packed tokens T = 6"):
        posenc_ops.packed_positions(cu, 6)


def test_packed_sequences_rotate_like_each_sequence(posenc_ops):
    """[T, H, Dh] packed tokens rotated at packed positions equal each sequence rotated alone."""
    torch.manual_seed(0)
    cos, sin = rope_tables(64, 16)
    lengths, starts = [5, 1, 7], [0, 30, 12]
    cu = torch.tensor([0, 5, 6, 13], dtype=torch.int32)
    packed = torch.randn(13, 4, 16)
    positions = posenc_ops.packed_positions(cu, 13, torch.tensor(starts))
    rotated = posenc_ops.apply_rotary(packed[None], cos, sin, positions=positions)[0]
    for s, (length, start) in enumerate(zip(lengths, starts)):
        alone = posenc_ops.apply_rotary(packed[None, cu[s]:cu[s + 1]], cos, sin, start)[0]
        assert torch.equal(rotated[cu[s]:cu[s + 1]], alone)


def test_context_parallel_positions(posenc_ops):
    assert posenc_ops.context_parallel_positions(8, 2, 1).tolist() == [4, 5, 6, 7]
    assert posenc_ops.context_parallel_positions(8, 2, 0, True).tolist() == [0, 1, 6, 7]
    assert posenc_ops.context_parallel_positions(8, 2, 1, zigzag=True).tolist() == [2, 3, 4, 5]
    with pytest.raises(RuntimeError, match="multiple of 2 \\* world_size = 4"):
        posenc_ops.context_parallel_positions(10, 2, 0, True)
    with pytest.raises(RuntimeError, match="0 <= rank < world_size"):
        posenc_ops.context_parallel_positions(8, 2, 2)


@requires_torch(2, 4, "torch.library.opcheck")
@pytest.mark.parametrize("args", [
    (torch.tensor([0, 3, 3, 5], dtype=torch.int32), 5),
    (torch.tensor([0, 2, 6]), 6, torch.tensor([9, 0])),
])
def test_opcheck_packed_positions(posenc_ops, args):
    torch.library.opcheck(posenc_ops.packed_positions.default, args)


@requires_torch(2, 4, "torch.library.opcheck")
def test_opcheck_context_parallel_positions(posenc_ops):
    torch.library.opcheck(posenc_ops.context_parallel_positions.default, (12, 3, 1), {"zigzag": True})


def test_zigzag_positions_are_torchs_head_tail_layout(posenc_ops):
    """torch's context_parallel (which torchtitan runs) balances a causal sequence with its
    head-tail load balancer: the sequence reordered by its indices, then cut in world_size equal
    pieces, one per rank. Each piece is the zigzag split's positions of that rank."""
    try:
        from torch.distributed.tensor.experimental._context_parallel._load_balancer import _HeadTailLoadBalancer
    except ImportError:
        pytest.skip("this torch has no head-tail load balancer (torch.distributed.tensor.experimental._context_parallel)")
    for seq_len, world in ((16, 2), (48, 3), (64, 4), (8, 1)):
        indices = _HeadTailLoadBalancer(seq_len, world, "cpu")._generate_indices().reshape(-1)
        for rank, piece in enumerate(indices.chunk(world)):
            assert torch.equal(posenc_ops.context_parallel_positions(seq_len, world, rank, True), piece), (seq_len, world, rank)


def test_context_parallel_packed_positions_split_each_sequence(posenc_ops):
    """A packed batch split sequence by sequence: rank r holds, of every sequence in turn, the
    positions context_parallel_positions gives a whole sequence of that length, at indices
    cu_seqlens[s] + position; over the ranks every token is held exactly once."""
    cu = torch.tensor([0, 8, 12], dtype=torch.int32)
    positions, indices = posenc_ops.context_parallel_packed_positions(cu, 12, 2, 0, True)
    assert positions.tolist() == [0, 1, 6, 7, 0, 3] and indices.tolist() == [0, 1, 6, 7, 8, 11]
    positions, indices = posenc_ops.context_parallel_packed_positions(cu, 12, 2, 1)
    assert positions.tolist() == [4, 5, 6, 7, 2, 3] and indices.tolist() == [4, 5, 6, 7, 10, 11]
    lengths = [12, 0, 24, 6, 30]
    cu = torch.tensor([0, *itertools.accumulate(lengths)])
    for world, zigzag in ((1, False), (3, False), (6, False), (3, True), (1, True)):
        held = []
        for rank in range(world):
            positions, indices = posenc_ops.context_parallel_packed_positions(cu, int(cu[-1]), world, rank, zigzag)
            assert positions.dtype == indices.dtype == torch.int64
            expected = [posenc_ops.context_parallel_positions(length, world, rank, zigzag) for length in lengths]
            assert torch.equal(positions, torch.cat(expected))
            assert torch.equal(indices, torch.cat([part + start for part, start in zip(expected, cu[:-1].tolist())]))
            held += indices.tolist()
        assert sorted(held) == list(range(int(cu[-1])))


def test_context_parallel_packed_positions_refuse_uneven_sequences(posenc_ops):
    cu = torch.tensor([0, 8, 14, 16])
    with pytest.raises(RuntimeError, match=r"sequence 1 has 6 tokens, which must be a multiple of 2 \* world_size = 4"):
        posenc_ops.context_parallel_packed_positions(cu, 16, 2, 0, True)
    with pytest.raises(RuntimeError, match=r"total \(the number of packed tokens\) must be a multiple of world_size = 3"):
        posenc_ops.context_parallel_packed_positions(cu, 16, 3, 0)
    with pytest.raises(RuntimeError, match="cu_seqlens must not decrease, but entry 1 is 8 and entry 2 is 4"):
        posenc_ops.context_parallel_packed_positions(torch.tensor([0, 8, 4, 12]), 12, 2, 0)
    with pytest.raises(RuntimeError, match="cu_seqlens must start at 0 and end at the number of packed tokens T = 20"):
        posenc_ops.context_parallel_packed_positions(cu, 20, 2, 0)
    with pytest.raises(RuntimeError, match="expected 0 <= rank < world_size"):
        posenc_ops.context_parallel_packed_positions(cu, 16, 2, 2)


@requires_torch(2, 4, "torch.library.opcheck")
def test_opcheck_context_parallel_packed_positions(posenc_ops):
    cu = torch.tensor([0, 8, 12, 24])
    for zigzag in (False, True):
        torch.library.opcheck(posenc_ops.context_parallel_packed_positions.default, (cu, 24, 2, 1), {"zigzag": zigzag})


SEQ_LEN, WORLD = 32, 2


def _assembled(whole, shard, where, dim):
    """Every rank's `shard`, gathered and put back at its places `where` along `dim` of a tensor
    shaped like `whole` (NaN where no rank put anything)."""
    shards = [torch.empty_like(shard) for _ in range(WORLD)]
    places = [torch.empty_like(where) for _ in range(WORLD)]
    dist.all_gather(shards, shard)
    dist.all_gather(places, where)
    assembled = torch.full_like(whole, float("nan"))
    for part, place in zip(shards, places):
        assembled.index_copy_(dim, place, part)
    return assembled


def _rank_main(rank, library, store, directory):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        torch.ops.load_library(library)
        ops = torch.ops.posenc
        torch.manual_seed(0)  # every rank holds the same full sequence, and keeps its shard only
        q = torch.randn(2, SEQ_LEN, 4, 16)
        cos, sin = rope_tables(8, 16)  # short caches: most positions come from inv_freq
        inv_freq = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
        whole = ops.apply_rotary(q, cos, sin, 0, inv_freq=inv_freq)
        for zigzag in (False, True):
            positions = ops.context_parallel_positions(SEQ_LEN, WORLD, rank, zigzag)
            shard = ops.apply_rotary(q.index_select(1, positions).contiguous(), cos, sin, positions=positions, inv_freq=inv_freq)
            assembled = _assembled(whole, shard, positions, 1)
            assert torch.equal(assembled, whole), f"rank {rank}, zigzag {zigzag}: the shards differ from the whole sequence"
        # A packed batch of 3 sequences split sequence by sequence: each rank rotates its tokens at
        # their positions; put back at their indices they equal the whole batch rotated at its
        # packed positions.
        cu = torch.tensor([0, 8, 20, 32])
        packed = torch.randn(32, 4, 16)
        whole = ops.apply_rotary(packed[None], cos, sin, positions=ops.packed_positions(cu, 32), inv_freq=inv_freq)[0]
        for zigzag in (False, True):
            positions, indices = ops.context_parallel_packed_positions(cu, 32, WORLD, rank, zigzag)
            shard = ops.apply_rotary(packed.index_select(0, indices)[None], cos, sin, positions=positions, inv_freq=inv_freq)[0]
            assembled = _assembled(whole, shard, indices, 0)
            assert torch.equal(assembled, whole), f"rank {rank}, zigzag {zigzag}: the packed shards differ from the whole batch"
        finish_rank(rank, directory)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="this torch has no gloo backend")
def test_rotating_shards_equals_rotating_the_sequence_gloo(posenc_ops, tmp_path):
    library = os.environ["POSENC_LIBRARY"]
    spawn_ranks(_rank_main, (library, str(tmp_path / "store"), str(tmp_path)), WORLD, str(tmp_path))


def _aborting_rank(rank, store, directory, after_finish):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    if after_finish:
        finish_rank(rank, directory)
    if rank == 0:
        os.abort()  # (as torch's gloo teardown aborts: SIGABRT)
    dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="this torch has no gloo backend")
def test_spawn_ranks_forgives_only_a_teardown_abort(tmp_path):
    """spawn_ranks (conftest): an abort after every rank has finished (gloo's teardown) is a
    warning; an abort before is the failure it is."""
    (tmp_path / "after").mkdir()
    (tmp_path / "before").mkdir()
    with pytest.warns(UserWarning, match="teardown aborted after every rank had finished"):
        spawn_ranks(_aborting_rank, (str(tmp_path / "store1"), str(tmp_path / "after"), True), WORLD,
                    str(tmp_path / "after"))
    with pytest.raises(Exception, match="SIGABRT"):
        spawn_ranks(_aborting_rank, (str(tmp_path / "store2"), str(tmp_path / "before"), False), WORLD,
                    str(tmp_path / "before"))

"""posenc's operators on DTensor inputs (posenc.distributed's sharding rules), in 4 processes on the
CPU (gloo, 127.0.0.1): each operator's call on sharded inputs equals the unsharded call bit for bit
(the same kernel on each shard: the rotation and the adds are elementwise in the batch, heads,
sequence and, for the table adds, features), keeps the placement its rule allows (no gather), and
refuses what no rule allows with a message saying what to pass. One spawn runs every case; it stops
by itself (gloo's 60 s timeout, spawn ends the other ranks when one fails)."""

import datetime
import os
import sys

import pytest
import torch
import torch.distributed as dist

from conftest import finish_rank, spawn_ranks

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

WORLD = 4

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="this torch has no gloo backend")


def rope_tables(max_len, rotary_dim, base=10000.0):
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * inv_freq
    return angles.cos().float(), angles.sin().float(), inv_freq


def _same(rank, what, got, expected, placements=None):
    from torch.distributed.tensor import DTensor

    assert isinstance(got, DTensor), f"{what}: not a DTensor"
    if placements is not None:
        assert tuple(got.placements) == tuple(placements), f"rank {rank}, {what}: placements {got.placements}, expected {placements}"
    full = got.full_tensor()
    assert torch.equal(full, expected), f"rank {rank}, {what}: differs from the unsharded call by {(full - expected).abs().max()}"


def _refused(what, call, match):
    try:
        call()
    except RuntimeError as error:
        assert match in str(error), f"{what}: {error}"
        return
    raise AssertionError(f"{what}: not refused")


def _rotary_cases(rank, mesh, ops):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    def d(t, *placements):
        return distribute_tensor(t, mesh, list(placements))

    torch.manual_seed(0)
    cos, sin, inv_freq = rope_tables(6, 16)  # short caches: positions past them come from inv_freq
    dcos, dsin, dinv = d(cos, Replicate()), d(sin, Replicate()), d(inv_freq, Replicate())
    for heads_first in (False, True):
        batch, seq, heads = (0, 2, 1) if heads_first else (0, 1, 2)
        x = torch.randn(4, 8, 8, 16)
        label = f"apply_rotary heads_first={heads_first}"
        whole = ops.apply_rotary(x, cos, sin, 3, heads_first=heads_first, inv_freq=inv_freq)
        for dim in (batch, heads):
            _same(rank, f"{label} Shard({dim})", ops.apply_rotary(d(x, Shard(dim)), dcos, dsin, 3, heads_first=heads_first,
                                                                 inv_freq=dinv), whole, [Shard(dim)])
        # the sequence, with positions sharded alike ([L] and [B, L])
        positions = torch.arange(8) * 3 + 1
        whole = ops.apply_rotary(x, cos, sin, positions=positions, heads_first=heads_first, inv_freq=inv_freq)
        _same(rank, f"{label} Shard(seq) positions [L]",
              ops.apply_rotary(d(x, Shard(seq)), dcos, dsin, positions=d(positions, Shard(0)), heads_first=heads_first,
                               inv_freq=dinv), whole, [Shard(seq)])
        each = positions.expand(4, 8) + torch.arange(4)[:, None]
        whole = ops.apply_rotary(x, cos, sin, positions=each, heads_first=heads_first, inv_freq=inv_freq)
        _same(rank, f"{label} Shard(seq) positions [B, L]",
              ops.apply_rotary(d(x, Shard(seq)), dcos, dsin, positions=d(each, Shard(1)), heads_first=heads_first,
                               inv_freq=dinv), whole, [Shard(seq)])
        _same(rank, f"{label} Shard(batch) positions [B, L]",
              ops.apply_rotary(d(x, Shard(batch)), dcos, dsin, positions=d(each, Shard(0)), heads_first=heads_first,
                               inv_freq=dinv), whole, [Shard(batch)])
        _refused(f"{label} offset on a sequence shard",
                 lambda: ops.apply_rotary(d(x, Shard(seq)), dcos, dsin, 3, heads_first=heads_first, inv_freq=dinv),
                 f"posenc.apply_rotary: x is sharded along its sequence dimension ({seq})")
        # in place: the shard rotates where it lies
        inplace = d(x.clone(), Shard(heads))
        ops.apply_rotary_(inplace, dcos, dsin, 3, heads_first=heads_first, inv_freq=dinv)
        _same(rank, f"{label} in place", inplace, ops.apply_rotary(x, cos, sin, 3, heads_first=heads_first, inv_freq=inv_freq),
              [Shard(heads)])

    # queries and keys (GQA: 8 query heads, 4 key heads), out of place and in place
    q, k = torch.randn(4, 8, 8, 16), torch.randn(4, 8, 4, 16)
    wq, wk = ops.apply_rotary_qk(q, k, cos, sin, 2, inv_freq=inv_freq)
    for dim in (0, 2):
        gq, gk = ops.apply_rotary_qk(d(q, Shard(dim)), d(k, Shard(dim)), dcos, dsin, 2, inv_freq=dinv)
        _same(rank, f"apply_rotary_qk q Shard({dim})", gq, wq, [Shard(dim)])
        _same(rank, f"apply_rotary_qk k Shard({dim})", gk, wk, [Shard(dim)])
    positions = torch.arange(8) + 5
    wq, wk = ops.apply_rotary_qk(q, k, cos, sin, positions=positions, inv_freq=inv_freq)
    gq, gk = ops.apply_rotary_qk(d(q, Shard(1)), d(k, Shard(1)), dcos, dsin, positions=d(positions, Shard(0)), inv_freq=dinv)
    _same(rank, "apply_rotary_qk q Shard(seq)", gq, wq, [Shard(1)])
    _same(rank, "apply_rotary_qk k Shard(seq)", gk, wk, [Shard(1)])
    _refused("apply_rotary_qk offset on a sequence shard",
             lambda: ops.apply_rotary_qk(d(q, Shard(1)), d(k, Shard(1)), dcos, dsin, 2, inv_freq=dinv),
             "posenc.apply_rotary_qk: q is sharded along its sequence dimension (1)")
    iq, ik = d(q.clone(), Shard(2)), d(k.clone(), Shard(2))
    ops.apply_rotary_qk_(iq, ik, dcos, dsin, positions=d(positions, Replicate()), inv_freq=dinv)
    _same(rank, "apply_rotary_qk_ q", iq, wq, [Shard(2)])
    _same(rank, "apply_rotary_qk_ k", ik, wk, [Shard(2)])
    # in place, q and k must be placed alike (DTensor would rotate a moved copy of k and drop it)
    _refused("apply_rotary_qk_ q and k placed differently",
             lambda: ops.apply_rotary_qk_(d(q.clone(), Shard(2)), d(k.clone(), Shard(0)), dcos, dsin, 2, inv_freq=dinv),
             "posenc.apply_rotary_qk_: rotating q and k in place needs them placed alike")

    # gradients: the backward (the inverse rotation) is sharded like the forward
    leaf = torch.randn(4, 8, 8, 16, requires_grad=True)
    ops.apply_rotary(leaf, cos, sin, positions=positions, inv_freq=inv_freq).square().sum().backward()
    sharded = d(leaf.detach(), Shard(1)).requires_grad_()
    ops.apply_rotary(sharded, dcos, dsin, positions=d(positions, Shard(0)), inv_freq=dinv).square().sum().backward()
    assert torch.equal(sharded.grad.full_tensor(), leaf.grad), "apply_rotary gradient"


def _module_cases(rank, mesh, posenc):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.experimental import implicit_replication

    def d(t, *placements):
        return distribute_tensor(t, mesh, list(placements))

    torch.manual_seed(1)
    x = torch.randn(4, 16, 4, 32)
    positions = torch.arange(16) + 100  # past max_len 64: computed from the frequencies
    rope = posenc.nn.RotaryEmbedding(32, 64, beyond_max_len="extrapolate")
    with implicit_replication():  # (the module's buffers are plain tensors: replicated)
        whole = rope.forward_positions(x, positions)
        _same(rank, "RotaryEmbedding Shard(heads)", rope.forward_positions(d(x, Shard(2)), positions), whole, [Shard(2)])
        _same(rank, "RotaryEmbedding Shard(seq)", rope.forward_positions(d(x, Shard(1)), d(positions, Shard(0))), whole, [Shard(1)])
        _refused("RotaryEmbedding offset on a sequence shard", lambda: rope(d(x, Shard(1))),
                 "x is sharded along its sequence dimension (1) and the call numbers its tokens from `offset`")
        # dynamic NTK and LongRoPE: a call's frequencies follow its largest position, which the
        # module's call reads on the host: from sharded DTensor positions that would be the
        # shard's own (off by 0.8 to 11 before posenc.nn replicated them): every placement of x
        # and of [L] / [B, L] positions (rows with different largest positions) equals the
        # unsharded call
        for scaling in ({"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 32},
                        {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 32,
                         "short_factor": [1.0 + i / 32 for i in range(16)], "long_factor": [1.0 + i / 4 for i in range(16)]}):
            module = posenc.nn.RotaryEmbedding(32, 256, beyond_max_len="extrapolate", rope_scaling=scaling)
            rows = torch.arange(16).expand(4, 16) * torch.tensor([[1], [10], [3], [7]])  # largest 15 to 150
            for where in (positions, rows):
                whole = module.forward_positions(x, where)
                for x_placement, p_placement in ((Shard(0), Shard(0)), (Shard(2), Shard(0)), (Shard(1), Shard(where.ndim - 1)),
                                                 (Replicate(), Shard(0))):
                    if where.ndim == 1 and x_placement == Shard(0):
                        continue  # ([L] positions have no batch)
                    _same(rank, f"{scaling['rope_type']} x {x_placement} positions {tuple(where.shape)} {p_placement}",
                          module.forward_positions(d(x, x_placement), d(where, p_placement)), whole, [x_placement])
            _refused(f"{scaling['rope_type']} offset on a sequence shard", lambda: module(d(x, Shard(1)), 40),
                     "x is sharded along its sequence dimension (1) and the call numbers its tokens from `offset`")


def _table_cases(rank, mesh, ops):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    def d(t, *placements):
        return distribute_tensor(t, mesh, list(placements))

    torch.manual_seed(2)
    for batch_first in (True, False):
        batch, seq = (0, 1) if batch_first else (1, 0)
        x = torch.randn(4, 8, 12) if batch_first else torch.randn(8, 4, 12)
        table = torch.randn(16, 12)
        columns = ops.sinusoidal_columns(12)
        label = f"add_position_table batch_first={batch_first}"
        whole = ops.add_position_table(x, table, 2, batch_first, scale=0.5)
        _same(rank, f"{label} Shard(batch)", ops.add_position_table(d(x, Shard(batch)), d(table, Replicate()), 2, batch_first,
                                                                     scale=0.5), whole, [Shard(batch)])
        _same(rank, f"{label} Shard(features)", ops.add_position_table(d(x, Shard(2)), d(table, Shard(1)), 2, batch_first,
                                                                        scale=0.5), whole, [Shard(2)])
        positions = torch.arange(8) * 2  # past the table: from the columns
        whole = ops.add_position_table(x, table, 0, batch_first, positions, columns=columns)
        _same(rank, f"{label} Shard(seq)", ops.add_position_table(d(x, Shard(seq)), d(table, Replicate()), 0, batch_first,
                                                                   d(positions, Shard(0)), columns=d(columns, Replicate())),
              whole, [Shard(seq)])
        _same(rank, f"{label} Shard(features) columns",
              ops.add_position_table(d(x, Shard(2)), d(table, Shard(1)), 0, batch_first, d(positions, Replicate()),
                                     columns=d(columns, Shard(1))), whole, [Shard(2)])
        _refused(f"{label} offset on a sequence shard",
                 lambda: ops.add_position_table(d(x, Shard(seq)), d(table, Replicate()), 0, batch_first),
                 f"posenc.add_position_table: x is sharded along its sequence dimension ({seq})")
        table3 = table.unsqueeze(0)  # [1, max_len, D]: its features are its last dimension
        whole = ops.add_position_table(x, table3, 2, batch_first)
        _same(rank, f"{label} [1, max_len, D] Shard(features)", ops.add_position_table(d(x, Shard(2)), d(table3, Shard(2)), 2,
                                                                                      batch_first), whole, [Shard(2)])
        _same(rank, f"{label} [1, max_len, D] replicated, x Shard(features)",
              ops.add_position_table(d(x, Shard(2)), d(table3, Replicate()), 2, batch_first), whole, [Shard(2)])
        inplace = d(x.clone(), Shard(batch))
        ops.add_position_table_(inplace, d(table, Replicate()), 2, batch_first)
        _same(rank, f"{label} in place", inplace, ops.add_position_table(x, table, 2, batch_first), [Shard(batch)])
        whole = ops.add_positional_encoding(x, 5, batch_first=batch_first)
        _same(rank, f"add_positional_encoding batch_first={batch_first} Shard(batch)",
              ops.add_positional_encoding(d(x, Shard(batch)), 5, batch_first=batch_first), whole, [Shard(batch)])
        whole = ops.add_positional_encoding(x, batch_first=batch_first, positions=positions)
        _same(rank, f"add_positional_encoding batch_first={batch_first} Shard(seq)",
              ops.add_positional_encoding(d(x, Shard(seq)), batch_first=batch_first, positions=d(positions, Shard(0))),
              whole, [Shard(seq)])

    # a learned table's gradient: partial sums over the shards, reduced to the unsharded one (the
    # sums of 8 or 32 rows in another order: float32 rounding, 1e-6 relative); x's is elementwise
    x = torch.randn(4, 8, 12, requires_grad=True)
    table = torch.randn(16, 12, requires_grad=True)
    positions = torch.tensor([3, 4, 5, -1, 7, 8, 3, 9])  # (a repeated row, padding)
    ops.add_position_table(x, table, 0, True, positions).square().sum().backward()
    for x_placement, table_placement, p_placement in ((Shard(0), Replicate(), Replicate()), (Shard(2), Shard(1), Replicate()),
                                                      (Shard(1), Replicate(), Shard(0))):
        dx = d(x.detach(), x_placement).requires_grad_()
        dtable = d(table.detach(), table_placement).requires_grad_()
        ops.add_position_table(dx, dtable, 0, True, d(positions, p_placement)).square().sum().backward()
        assert torch.equal(dx.grad.full_tensor(), x.grad), f"x gradient under {x_placement}"
        assert torch.allclose(dtable.grad.full_tensor(), table.grad, rtol=1e-6, atol=1e-6), f"table gradient under {x_placement}"
    out = d(torch.empty(4, 8, 12), Shard(0))
    _refused("add_position_table_out", lambda: ops.add_position_table_out(d(x.detach(), Shard(0)), d(table.detach(), Replicate()),
                                                                          out=out),
             "posenc.add_position_table_out: DTensor cannot write into a given `out`")


def _bias_cases(rank, mesh, ops):
    """ALiBi's biases sharded over the heads (their slopes) or the batch (the mask); T5's buckets
    elementwise; Llama 4's query temperature (a composite: its ATen operations under DTensor)."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.experimental import implicit_replication

    def d(t, *placements):
        return distribute_tensor(t, mesh, list(placements))

    slopes = ops.alibi_slopes(8)
    _same(rank, "alibi_bias Shard(heads)", ops.alibi_bias(d(slopes, Shard(0)), 5, 7, 2, True),
          ops.alibi_bias(slopes, 5, 7, 2, True), [Shard(0)])
    _same(rank, "alibi_causal_bias Shard(heads)", ops.alibi_causal_bias(d(slopes, Shard(0)), 7),
          ops.alibi_causal_bias(slopes, 7), [Shard(0)])
    mask = torch.ones(4, 7, dtype=torch.long)
    mask[1, :3] = 0
    whole = ops.alibi_causal_bias(slopes, 7, mask)
    _same(rank, "alibi_causal_bias mask, Shard(heads)", ops.alibi_causal_bias(d(slopes, Shard(0)), 7, d(mask, Replicate())),
          whole, [Shard(1)])
    _same(rank, "alibi_causal_bias mask, Shard(batch)", ops.alibi_causal_bias(d(slopes, Replicate()), 7, d(mask, Shard(0))),
          whole, [Shard(0)])
    distances = torch.arange(-40, 40).view(8, 10)
    for dim in (0, 1):
        _same(rank, f"relative_position_bucket Shard({dim})", ops.relative_position_bucket(d(distances, Shard(dim)), False, 32, 64),
              ops.relative_position_bucket(distances, False, 32, 64), [Shard(dim)])
    q = torch.randn(2, 8, 4, 16)
    positions = torch.arange(8) * 3000
    with implicit_replication():  # (the composite's own tensors: replicated)
        _same(rank, "attention_temperature Shard(heads)", ops.attention_temperature(d(q, Shard(2)), d(positions, Replicate())),
              ops.attention_temperature(q, positions), [Shard(2)])
        _same(rank, "attention_temperature Shard(seq)", ops.attention_temperature(d(q, Shard(1)), d(positions, Shard(0))),
              ops.attention_temperature(q, positions), [Shard(1)])
        _same(rank, "attention_temperature Shard(seq) offset", ops.attention_temperature(d(q, Shard(1)), None, 9000),
              ops.attention_temperature(q, None, 9000), [Shard(1)])


def _two_dimensional_cases(rank, ops):
    """A 2 x 2 mesh (data parallel x tensor parallel): batch and heads sharded at once."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(3)
    cos, sin, inv_freq = rope_tables(32, 16)
    q, k = torch.randn(4, 8, 8, 16), torch.randn(4, 8, 4, 16)
    positions = torch.arange(8) + 20
    wq, wk = ops.apply_rotary_qk(q, k, cos, sin, positions=positions)
    placements = [Shard(0), Shard(2)]
    gq, gk = ops.apply_rotary_qk(distribute_tensor(q, mesh, placements), distribute_tensor(k, mesh, placements),
                                 distribute_tensor(cos, mesh, [Replicate(), Replicate()]),
                                 distribute_tensor(sin, mesh, [Replicate(), Replicate()]),
                                 positions=distribute_tensor(positions, mesh, [Replicate(), Replicate()]))
    _same(rank, "2-D mesh q", gq, wq, placements)
    _same(rank, "2-D mesh k", gk, wk, placements)
    # context parallel x tensor parallel: the sequence on one axis, the heads on the other
    placements = [Shard(1), Shard(2)]
    gq, gk = ops.apply_rotary_qk(distribute_tensor(q, mesh, placements), distribute_tensor(k, mesh, placements),
                                 distribute_tensor(cos, mesh, [Replicate(), Replicate()]),
                                 distribute_tensor(sin, mesh, [Replicate(), Replicate()]),
                                 positions=distribute_tensor(positions, mesh, [Shard(0), Replicate()]))
    _same(rank, "2-D mesh cp x tp q", gq, wq, placements)
    _same(rank, "2-D mesh cp x tp k", gk, wk, placements)


def _llama(posenc, seed=0):
    """A LLaMA-style block with posenc's positions: a token and learned position embedding, GQA
    attention whose queries and keys turn by posenc.nn.RotaryEmbedding, an output head."""
    import torch.nn.functional as F

    torch.manual_seed(seed)

    class Attention(torch.nn.Module):
        def __init__(self, dim=32, heads=4, kv_heads=2):
            super().__init__()
            self.head_dim = dim // heads
            self.wq = torch.nn.Linear(dim, heads * self.head_dim, bias=False)
            self.wk = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
            self.wv = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
            self.wo = torch.nn.Linear(heads * self.head_dim, dim, bias=False)
            self.rope = posenc.nn.RotaryEmbedding(self.head_dim, 64)

        def forward(self, x, positions):
            batch, length, _ = x.shape
            # (-1: the heads this rank holds under tensor parallelism)
            q, k, v = (w(x).view(batch, length, -1, self.head_dim) for w in (self.wq, self.wk, self.wv))
            q, k = self.rope.forward_positions(q, positions), self.rope.forward_positions(k, positions)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], 1) for t in (k, v))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(out.transpose(1, 2).reshape(batch, length, -1))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = posenc.nn.TokenAndPositionEmbedding(64, 32, 64, positions="learned")
            self.attn = Attention()
            self.norm = torch.nn.LayerNorm(32)
            self.bias = posenc.nn.RelativePositionBias(4, num_buckets=8, max_distance=16)
            self.head = torch.nn.Linear(32, 64)

        def forward(self, ids, positions):
            h = self.embed(ids)
            h = h + self.attn(self.norm(h), positions)
            # (T5's bias as a learned per-position offset: its table trains under FSDP2 too)
            h = h + self.bias(ids.shape[1], ids.shape[1]).mean(dim=(0, 1)).sum(-1).unsqueeze(-1) * 0.1  # [L, 1]
            return self.head(h)

    return Model()


def _training_cases(rank, posenc, directory):
    """One training step of _llama under FSDP2 x tensor parallelism (a 2 x 2 mesh: the batch over
    dp, the heads over tp, posenc's rotation on each rank's heads) equals the single-process step;
    its state dict, saved by torch.distributed.checkpoint from the sharded model, loads into an
    unsharded posenc model and into another sharded one."""
    import torch.distributed.checkpoint as dcp
    import torch.nn.functional as F
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def sharded(seed=0):
        model = _llama(posenc, seed)
        parallelize_module(model.attn, mesh["tp"], {"wq": ColwiseParallel(), "wk": ColwiseParallel(),
                                                     "wv": ColwiseParallel(), "wo": RowwiseParallel()})
        for part in (model.embed, model.bias, model):
            fully_shard(part, mesh=mesh["dp"])
        return model

    def full(tensor):
        return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(5)
    ids, target = torch.randint(0, 64, (4, 16)), torch.randint(0, 64, (4, 16))
    positions = torch.arange(16) + 3
    reference = _llama(posenc)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    loss = F.cross_entropy(reference(ids, positions).flatten(0, 1), target.flatten())
    loss.backward()
    optimizer.step()

    model = sharded()
    assert isinstance(model.embed.positions.weight, torch.distributed.tensor.DTensor), "the learned table is not sharded"
    assert not isinstance(model.attn.rope.cos, torch.distributed.tensor.DTensor), "the rotary caches should stay plain buffers"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    dp = mesh["dp"].get_local_rank()
    local = F.cross_entropy(model(ids.chunk(2)[dp], positions).flatten(0, 1), target.chunk(2)[dp].flatten())
    local.backward()
    optimizer.step()
    # (float32 sums of the two halves' gradients in another order: a few ulp of the gradients)
    whole_loss = (local.detach() + 0) / 2
    dist.all_reduce(whole_loss, group=mesh["dp"].get_group())
    assert torch.allclose(whole_loss, loss.detach(), rtol=1e-6, atol=0), f"rank {rank}: loss {whole_loss} vs {loss}"
    mine = dict(model.named_parameters())
    for name, parameter in reference.named_parameters():
        assert torch.allclose(full(mine[name].detach()), parameter.detach(), rtol=1e-5, atol=1e-6), \
            f"rank {rank}, {name}: differs after the step by {(full(mine[name].detach()) - parameter.detach()).abs().max()}"

    # torch.distributed.checkpoint: the sharded state dict saved, then loaded into an unsharded
    # posenc model (converted to a torch.save file) and into a fresh sharded one
    state = get_model_state_dict(model)
    dcp.save(state, checkpoint_id=os.path.join(directory, "checkpoint"))
    dist.barrier()
    if rank == 0:
        dcp_to_torch_save(os.path.join(directory, "checkpoint"), os.path.join(directory, "model.pt"))
    dist.barrier()
    unsharded = _llama(posenc, seed=1)
    unsharded.load_state_dict(torch.load(os.path.join(directory, "model.pt")), strict=True)
    other = sharded(seed=2)
    restored = get_model_state_dict(other)
    dcp.load(restored, checkpoint_id=os.path.join(directory, "checkpoint"))
    set_model_state_dict(other, restored)
    expected = reference(ids, positions)
    assert torch.allclose(unsharded(ids, positions), expected, rtol=1e-5, atol=1e-5), "the unsharded model loaded from the checkpoint"
    got = other(ids.chunk(2)[dp], positions)
    assert torch.allclose(full(got), expected.chunk(2)[dp], rtol=1e-5, atol=1e-5), "the sharded model loaded from the checkpoint"


def _rank_main(rank, store, directory):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    try:
        import posenc
        from torch.distributed.device_mesh import init_device_mesh

        assert posenc.distributed.register_sharding_rules(), "the rules were not registered"
        mesh = init_device_mesh("cpu", (WORLD,))
        _rotary_cases(rank, mesh, posenc.ops)
        _module_cases(rank, mesh, posenc)
        _table_cases(rank, mesh, posenc.ops)
        _bias_cases(rank, mesh, posenc.ops)
        _two_dimensional_cases(rank, posenc.ops)
        _training_cases(rank, posenc, directory)
        finish_rank(rank, directory)
    finally:
        dist.destroy_process_group()


def test_operators_on_dtensors_equal_the_unsharded_calls(tmp_path):
    from posenc import distributed

    if not distributed.available():
        pytest.skip("this torch has no DTensor sharding registration")
    spawn_ranks(_rank_main, (str(tmp_path / "store"), str(tmp_path)), WORLD, str(tmp_path))

"""Sharding rules of posenc's operators for DTensor (tensor, sequence and context parallelism).

``import posenc`` registers them where ``torch.distributed`` and DTensor's public
``torch.distributed.tensor.experimental.register_sharding`` exist (torch >= 2.5). A rule lists the
placements under which an operator computes each shard from the shards of its inputs alone; DTensor
takes the one that costs least and moves the inputs to it (an input sharded some other way is
gathered first). For every operator here:

* the batch and the heads shard freely (the head width never: a rotation pairs channels across it);
* the sequence shards only together with explicit ``positions`` sharded along their sequence
  dimension the same way (``posenc.ops.context_parallel_positions`` gives each rank its own): a call
  by ``offset`` on a sequence-sharded input would number every shard from ``offset``, and is refused
  with a message that says so. The module calls (``rotary_embedding_call`` and the others that
  posenc.nn makes) are CompositeImplicitAutograd: DTensor sees the operators they decompose into,
  and these rules apply. A RotaryEmbedding whose frequencies follow the call's largest position
  (dynamic NTK, LongRoPE) reads it on the host, so posenc.nn replicates sharded positions first;
* the caches, tables and frequencies (``cos``, ``sin``, ``inv_freq``, ``table``, ``columns``) stay
  replicated, except that a table add may shard its features with the table's columns;
* the attention biases shard over the heads (ALiBi's slopes), the batch (a padding mask) or,
  for relative_position_bucket, any dimension (it is elementwise);
* the in-place forms keep their input's placement (DTensor cannot move an input it writes to, and
  keeps only the first in place: apply_rotary_qk_ refuses q and k placed differently); the
  ``out=`` form is refused, naming the functional form.

``test_distributed.py`` runs every rule in 4 processes (gloo) against the unsharded call.
"""

import torch

__all__ = ["register_sharding_rules", "available"]


def available() -> bool:
    """Whether this torch has DTensor's public sharding registration (and torch.distributed)."""
    if not torch.distributed.is_available():
        return False
    try:
        from torch.distributed.tensor.experimental import register_sharding  # noqa: F401  (exists)
        from torch.distributed.tensor import Partial, Replicate, Shard  # noqa: F401  (exist)
    except ImportError:
        return False
    return True


def _placements():
    from torch.distributed.tensor import Partial, Replicate, Shard

    return Partial, Replicate, Shard


def _sharded_dims(spec):
    """The tensor dimensions a DTensorSpec is sharded along (on any mesh dimension)."""
    return {placement.dim for placement in spec.placements if placement.is_shard()}


def _inputs(schema, **placed):
    """The input placements of one strategy, in the schema's argument order: `placed[name]` for
    the arguments named (None for a missing optional tensor), None for the other arguments."""
    return [placed.get(argument.name) for argument in schema.arguments]


def _refuse_offset_on_sequence(op, x_name, x, seq_dim, positions):
    if positions is None and seq_dim in _sharded_dims(x):
        raise RuntimeError(
            f"posenc.{op}: {x_name} is sharded along its sequence dimension ({seq_dim}) and the call "
            "numbers its tokens from `offset`, which would give every shard the positions of the first; "
            "pass `positions` sharded like the sequence (for context parallelism, "
            "posenc.ops.context_parallel_positions(seq_len, world_size, rank) as a DTensor with "
            f"Shard(0)), or replicate {x_name} along its sequence first")


def _position_dims(positions, batch_first=True):
    """The batch and sequence dimensions of `positions` ([L], or [B, L], [L, B] for sequence-first
    inputs): (batch dim or None, sequence dim)."""
    if positions.ndim == 1:
        return None, 0
    return (0, 1) if batch_first else (1, 0)


def _rotary_strategies(op, schema, operands, tables, positions, heads_first):
    """Strategies of a rotary call on `operands` ({name: spec} of [B, L, H, D] or [B, H, L, D]
    queries/keys), with `tables` replicated."""
    _, Replicate, Shard = _placements()
    batch, seq, heads = (0, 2, 1) if heads_first else (0, 1, 2)
    for name, spec in operands.items():
        _refuse_offset_on_sequence(op, name, spec, seq, positions)
    replicated = {name: Replicate() for name in tables}
    outputs = len(schema.returns)
    strategies = []

    def add(dim, position_placement):
        placed = dict(replicated)
        placed.update({name: (Replicate() if dim is None else Shard(dim)) for name in operands})
        if positions is not None:
            placed["positions"] = position_placement
        out = [Replicate() if dim is None else Shard(dim)] * outputs
        strategies.append((out, _inputs(schema, **placed)))

    add(None, Replicate())
    if positions is None:
        add(batch, None)
        add(heads, None)
        return strategies
    pos_batch, pos_seq = _position_dims(positions)
    add(batch, Replicate() if pos_batch is None else Shard(pos_batch))
    add(heads, Replicate())
    add(seq, Shard(pos_seq))
    return strategies


def _table_strategies(op, schema, x, positions, batch_first, tables=(), feature_tables=None):
    """Strategies of a sequence add on x [B, L, D] (or [L, B, D]) with the replicated `tables`
    (the names of the tensor arguments given); `feature_tables`: {name: spec} of those that shard
    their last dimension with x's features (None: the features never shard)."""
    _, Replicate, Shard = _placements()
    batch, seq = (0, 1) if batch_first else (1, 0)
    _refuse_offset_on_sequence(op, "x", x, seq, positions)
    outputs = len(schema.returns)
    strategies = []

    def add(dim, position_placement, sharded_tables):
        placed = {name: Replicate() for name in tables}
        placed.update(sharded_tables)
        placed["x"] = Replicate() if dim is None else Shard(dim)
        if positions is not None:
            placed["positions"] = position_placement
        strategies.append(([placed["x"]] * outputs, _inputs(schema, **placed)))

    add(None, Replicate(), {})
    if positions is None:
        add(batch, None, {})
    else:
        pos_batch, pos_seq = _position_dims(positions, batch_first)
        add(batch, Replicate() if pos_batch is None else Shard(pos_batch), {})
        add(seq, Shard(pos_seq), {})
    if feature_tables:  # (a table [max_len, D] or [1, max_len, D], columns [2, D]: their last dim)
        add(2, Replicate(), {name: Shard(spec.ndim - 1) for name, spec in feature_tables.items()})
    return strategies


def register_sharding_rules() -> bool:
    """Registers the rules (once; False where this torch cannot, see `available`)."""
    global _registered
    if _registered or not available():
        return _registered
    from torch.distributed.tensor.experimental import register_sharding

    ops = torch.ops.posenc
    Partial, Replicate, Shard = _placements()

    def rule(op_name):
        overload = getattr(ops, op_name).default
        return overload, overload._schema

    # --- rotary: the caches' and frequencies' call, in both forms and in place -----------------
    for name in ("apply_rotary", "apply_rotary_"):
        overload, schema = rule(name)

        def apply_rotary_rule(x, cos, sin, offset=0, positions=None, interleaved=False, heads_first=False,
                              inverse=False, inv_freq=None, attention_factor=1.0, _schema=schema, _name=name):
            return _rotary_strategies(_name, _schema, {"x": x}, ("cos", "sin", "inv_freq") if inv_freq is not None
                                      else ("cos", "sin"), positions, heads_first)

        register_sharding(overload)(apply_rotary_rule)

    for name in ("apply_rotary_qk", "apply_rotary_qk_"):
        overload, schema = rule(name)

        def apply_rotary_qk_rule(q, k, cos, sin, offset=0, positions=None, interleaved=False, heads_first=False,
                                 inverse=False, inv_freq=None, attention_factor=1.0, _schema=schema, _name=name):
            if _name.endswith("_") and tuple(q.placements) != tuple(k.placements):
                # (DTensor keeps only the first argument in place: k would be moved into a copy,
                # rotated there and the copy dropped)
                raise RuntimeError(
                    f"posenc.{_name}: rotating q and k in place needs them placed alike, but q is {tuple(q.placements)} "
                    f"and k is {tuple(k.placements)}; redistribute k to q's placement, or call posenc.apply_rotary_qk "
                    "(the functional form)")
            return _rotary_strategies(_name, _schema, {"q": q, "k": k}, ("cos", "sin", "inv_freq") if inv_freq is not None
                                      else ("cos", "sin"), positions, heads_first)

        register_sharding(overload)(apply_rotary_qk_rule)

    # --- table adds -----------------------------------------------------------------------------
    for name in ("add_position_table", "add_position_table_"):
        overload, schema = rule(name)

        def add_position_table_rule(x, table, offset=0, batch_first=True, positions=None, scale=1.0, columns=None,
                                    _schema=schema, _name=name):
            tables = {"table": table} | ({"columns": columns} if columns is not None else {})
            return _table_strategies(_name, _schema, x, positions, batch_first, tuple(tables), tables)

        register_sharding(overload)(add_position_table_rule)

    out_overload = ops.add_position_table_out.default

    def add_position_table_out_rule(*args, **kwargs):
        raise RuntimeError("posenc.add_position_table_out: DTensor cannot write into a given `out`; call "
                           "posenc.ops.add_position_table (the functional form) or add_position_table_ (in place)")

    register_sharding(out_overload)(add_position_table_out_rule)

    overload, schema = rule("_add_position_table_backward")

    def add_position_table_backward_rule(grad, table, offset, batch_first, positions=None, _schema=schema):
        # grad_table sums the rows of every token: a partial sum where the tokens are sharded.
        batch, seq = (0, 1) if batch_first else (1, 0)
        strategies = [([Replicate()], _inputs(_schema, grad=Replicate(), table=Replicate(),
                                              positions=None if positions is None else Replicate()))]
        if positions is None:
            if seq not in _sharded_dims(grad):
                strategies.append(([Partial()], _inputs(_schema, grad=Shard(batch), table=Replicate())))
        else:
            pos_batch, pos_seq = _position_dims(positions, batch_first)
            strategies.append(([Partial()], _inputs(_schema, grad=Shard(batch), table=Replicate(),
                                                    positions=Replicate() if pos_batch is None else Shard(pos_batch))))
            strategies.append(([Partial()], _inputs(_schema, grad=Shard(seq), table=Replicate(), positions=Shard(pos_seq))))
        features = table.ndim - 1  # (the table's last dimension: [max_len, D] or [1, max_len, D])
        strategies.append(([Shard(features)], _inputs(_schema, grad=Shard(2), table=Shard(features),
                                                      positions=None if positions is None else Replicate())))
        return strategies

    register_sharding(overload)(add_position_table_backward_rule)

    overload, schema = rule("add_positional_encoding")

    def add_positional_encoding_rule(x, offset=0, base=10000.0, batch_first=True, positions=None, scale=1.0,
                                     channels="interleaved", frequencies="paper", _schema=schema):
        # (no feature sharding: each column's frequency follows from its index)
        return _table_strategies("add_positional_encoding", _schema, x, positions, batch_first)

    register_sharding(overload)(add_positional_encoding_rule)
    # --- attention biases -------------------------------------------------------------------------
    overload, schema = rule("alibi_bias")

    def alibi_bias_rule(slopes, query_length, key_length, offset=None, causal=False, dtype=None, _schema=schema):
        # [H, Lq, Lk]: each head's bias from its slope (tensor parallelism over the heads)
        return [([Replicate()], _inputs(_schema, slopes=Replicate())),
                ([Shard(0)], _inputs(_schema, slopes=Shard(0)))]

    register_sharding(overload)(alibi_bias_rule)
    overload, schema = rule("alibi_causal_bias")

    def alibi_causal_bias_rule(slopes, key_length, attention_mask=None, dtype=None, _schema=schema):
        # [H, 1, Lk], or [B, H, 1, Lk] with a mask [B, Lk] (its positions count along the keys: the
        # mask's key dimension never shards)
        if attention_mask is None:
            return [([Replicate()], _inputs(_schema, slopes=Replicate())),
                    ([Shard(0)], _inputs(_schema, slopes=Shard(0)))]
        return [([Replicate()], _inputs(_schema, slopes=Replicate(), attention_mask=Replicate())),
                ([Shard(1)], _inputs(_schema, slopes=Shard(0), attention_mask=Replicate())),
                ([Shard(0)], _inputs(_schema, slopes=Replicate(), attention_mask=Shard(0)))]

    register_sharding(overload)(alibi_causal_bias_rule)
    overload, schema = rule("relative_position_bucket")

    def relative_position_bucket_rule(relative_position, bidirectional=True, num_buckets=32, max_distance=128,
                                      _schema=schema):
        # elementwise: the buckets are sharded as the distances are (relative_position_bias, a
        # composite, buckets its [Lq, Lk] distances with it)
        return [([Replicate()], _inputs(_schema, relative_position=Replicate()))] + [
            ([Shard(dim)], _inputs(_schema, relative_position=Shard(dim))) for dim in range(relative_position.ndim)]

    register_sharding(overload)(relative_position_bucket_rule)
    _registered = True
    return True


_registered = False

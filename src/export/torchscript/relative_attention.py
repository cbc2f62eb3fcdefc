# TorchScript: the methods of an exported RelPositionMultiheadAttention (Transformer-XL /
# Conformer relative-position self-attention): the submodules linear_q, linear_k, linear_v,
# linear_out (weight, bias) and linear_pos (weight), the parameters pos_bias_u and pos_bias_v
# [H, d_k], and the attributes embed_dim, num_heads and score_scale (1 / sqrt(d_k)). Eval mode:
# dropout is not exported. Used with common.py (see there).

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class RelPositionMultiheadAttentionMethods:
    # x W^T + b for x [B, L, D] as torch.nn.Linear computes it for a contiguous input (one addmm
    # of the [B * L, D] rows; torch.nn.functional.linear is not a torch built-in name).
    def _linear(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        rows = torch.addmm(bias, x.reshape(-1, x.size(-1)), weight.t())
        return rows.view(x.size(0), x.size(1), weight.size(0))

    # [B, L, D] -> [B, H, L, d_k]
    def _split(self, t: Tensor) -> Tensor:
        return t.view(t.size(0), t.size(1), self.num_heads, self.embed_dim // self.num_heads).transpose(1, 2)

    # Transformer-XL's relative shift of scores [B, H, Lq, Lq + Lk - 1] to [B, H, Lq, Lk]:
    # out[i, j] = x[i, Lq - 1 - i + j], a narrow / reshape / narrow of the flattened scores.
    def _rel_shift(self, x: Tensor) -> Tensor:
        queries = x.size(-2)
        relative = x.size(-1)
        keys = relative - queries + 1
        if queries == 1:
            return x.contiguous()
        flat = x.reshape(x.size(0), x.size(1), queries * relative)
        rows = flat.narrow(-1, queries - 1, queries * (relative - 1)).reshape(x.size(0), x.size(1), queries, relative - 1)
        return rows.narrow(-1, 0, keys).contiguous()

    # Attends query [B, Lq, D] to key and value [B, Lk, D] with pos_emb [1 or B, Lq + Lk - 1, D]
    # (relative positions Lk - 1 .. -(Lq - 1)); mask: bool (true = attend) or additive float,
    # broadcastable to [B, H, Lq, Lk].
    def forward(self, query: Tensor, key: Tensor, value: Tensor, pos_emb: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        for t in [query, key, value, pos_emb]:
            if t.dim() != 3 or t.size(-1) != self.embed_dim:
                self._fail("query, key, value and pos_emb must be [B, L, embed_dim = " + str(self.embed_dim) + "], but got " + str(t.shape))
        if key.shape != value.shape or key.size(0) != query.size(0):
            self._fail("key and value must be [B, Lk, " + str(self.embed_dim) + "] with the batch of query " + str(query.shape) + ", but got " + str(key.shape) + " and " + str(value.shape))
        queries = query.size(1)
        keys = key.size(1)
        if (pos_emb.size(0) != 1 and pos_emb.size(0) != query.size(0)) or pos_emb.size(1) != queries + keys - 1:
            self._fail("pos_emb must be [1 or B, Lq + Lk - 1, embed_dim] = [1 or " + str(query.size(0)) + ", " + str(queries + keys - 1) + ", " + str(self.embed_dim) + "] for Lq = " + str(queries) + " queries and Lk = " + str(keys) + " keys, but got " + str(pos_emb.shape) + "; pass the table of relative positions Lk - 1 .. -(Lq - 1)")
        q = self._split(self._linear(query, self.linear_q.weight, self.linear_q.bias))
        k = self._split(self._linear(key, self.linear_k.weight, self.linear_k.bias))
        v = self._split(self._linear(value, self.linear_v.weight, self.linear_v.bias))
        p = self._split(torch.matmul(pos_emb, self.linear_pos.weight.t()))
        content = torch.matmul(q + self.pos_bias_u.unsqueeze(1), k.transpose(-2, -1))
        position = self._rel_shift(torch.matmul(q + self.pos_bias_v.unsqueeze(1), p.transpose(-2, -1)))
        scores = (content + position) * self.score_scale
        if mask is not None:
            if mask.dtype == 11:
                scores = scores.masked_fill(mask.logical_not(), float("-inf"))
            else:
                scores = scores + mask
        weights = torch.softmax(scores, -1)
        attended = torch.matmul(weights, v)
        out = attended.transpose(1, 2).reshape(query.size(0), queries, self.embed_dim)
        return self._linear(out, self.linear_out.weight, self.linear_out.bias)

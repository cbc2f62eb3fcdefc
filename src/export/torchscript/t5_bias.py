# TorchScript: the methods of an exported RelativePositionBias (T5): the learned table, the
# submodule `relative_attention_bias` with its `weight` [num_buckets, H] (a T5 checkpoint's key),
# and `bucket_of`, the int64 buckets of the relative positions -max_distance .. max_distance that
# posenc::detail::relative_position_bucket gives (every position past them falls in the bucket of
# the nearest end, so a clamp makes the lookup exact for any int64 distance). Used with common.py.

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class RelativePositionBiasMethods:
    # The bias [1, H, Lq, Lk] for queries offset .. offset + Lq - 1 and keys 0 .. Lk - 1: the
    # Lq + Lk - 1 distances key - query are bucketed and looked up once, then unfolded.
    def forward(self, query_length: int, key_length: int, offset: int = 0) -> Tensor:
        if query_length < 1:
            self._fail("query_length must be >= 1, but got " + str(query_length))
        if key_length < 1:
            self._fail("key_length must be >= 1, but got " + str(key_length))
        if offset < 0 or offset > 9223372036854775807 - query_length:
            self._fail("offset (the position of the first query, e.g. the number of cached tokens) must be >= 0 and offset + query_length must fit in int64, but got offset = " + str(offset) + " and query_length = " + str(query_length))
        weight = self.relative_attention_bias.weight
        first = -(offset + query_length - 1)
        distances = torch.arange(first, key_length - offset, device=weight.device)
        index = distances.clamp(-self.max_distance, self.max_distance) + self.max_distance
        buckets = self.bucket_of.to(weight.device).index_select(0, index)
        rows = torch.embedding(weight, buckets).t()
        return rows.unfold(1, key_length, 1).flip([1]).unsqueeze(0)

# TorchScript: the methods of an exported ALiBi: the buffer `slopes` (the heads' slopes, [H]) and
# the two forms of its bias, as posenc's alibi_bias and alibi_causal_bias operators compute them
# (in float32, float64 for float64 slopes, rounded once to the slopes' dtype). Used with common.py
# (see there).

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class ALiBiMethods:
    def _check_length(self, what: str, length: int):
        if length < 1:
            self._fail(what + " must be >= 1, but got " + str(length))

    # The position of the first query: `offset`, or the last query_length of the keys.
    def _query_start(self, query_length: int, key_length: int, offset: Optional[int]) -> int:
        self._check_length("query_length", query_length)
        self._check_length("key_length", key_length)
        if offset is None:
            if key_length < query_length:
                self._fail("without an offset the queries are the last query_length keys, which needs key_length >= query_length, but got query_length = " + str(query_length) + " and key_length = " + str(key_length) + "; pass offset (the position of the first query)")
            return key_length - query_length
        start = offset
        if start < 0 or start > 9223372036854775807 - query_length:
            self._fail("offset (the position of the first query) must be >= 0 and offset + query_length must fit in int64, but got offset = " + str(start) + " and query_length = " + str(query_length))
        return start

    def _compute_type(self) -> int:
        return 7 if self.slopes.dtype == 7 else 6

    # The full bias [H, Lq, Lk]: -slope * |(start + i) - j|, -inf where j > start + i if causal.
    def forward(self, query_length: int, key_length: int, offset: Optional[int] = None, causal: bool = False) -> Tensor:
        start = self._query_start(query_length, key_length, offset)
        keys = torch.arange(key_length, device=self.slopes.device)
        queries = torch.arange(start, start + query_length, device=self.slopes.device).unsqueeze(1)
        difference = keys - queries
        distance = difference.abs().to(self._compute_type())
        bias = self.slopes.to(self._compute_type()).neg().unsqueeze(-1).unsqueeze(-1) * distance
        if causal:
            bias = bias.masked_fill(difference > 0, float("-inf"))
        return bias.to(self.slopes.dtype)

    # The compact causal bias [H, 1, Lk] (BLOOM's form); with an attention_mask [B, Lk] (1: a
    # token, 0: padding), [B, H, 1, Lk] with positions counted from each sequence's first token.
    def forward_causal(self, key_length: int, attention_mask: Optional[Tensor] = None) -> Tensor:
        self._check_length("key_length", key_length)
        compute = self._compute_type()
        if attention_mask is None:
            positions = torch.arange(key_length, device=self.slopes.device).to(compute)
            return (self.slopes.to(compute).unsqueeze(-1) * positions).unsqueeze(-2).to(self.slopes.dtype)
        mask = attention_mask
        if mask.dim() != 2 or mask.size(1) != key_length:
            self._fail("attention_mask must be [batch, key_length] = [batch, " + str(key_length) + "] (1 for a token, 0 for padding), but got shape " + str(mask.shape))
        if mask.dtype > 4 and mask.dtype != 11:
            self._fail("attention_mask must be bool or integer (1 for a token, 0 for padding), but got " + self._dtype_name(mask.dtype))
        if mask.device != self.slopes.device:
            self._fail("expected all tensors of the call on one device, but attention_mask is on " + str(mask.device) + " and the input on " + str(self.slopes.device) + "; move attention_mask with .to(" + str(self.slopes.device) + ")")
        keep = mask.to(4)
        positions = (keep.cumsum(1) - 1) * keep
        bias = self.slopes.unsqueeze(0).to(compute).unsqueeze(-1) * positions.to(compute).unsqueeze(1)
        return bias.unsqueeze(-2).to(self.slopes.dtype)

# TorchScript: the methods of an exported AttentionTemperature: the query temperature of Llama 4
# (`form` "llama4") or of Ministral 3 and Mistral 4 ("ministral3") with the attributes
# `floor_scale`, `attn_scale` and `heads_first`, as posenc's attention_temperature operator
# computes it (transformers' float32 operations in their order; negative positions are padding,
# not scaled). Used with common.py (see there).

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class AttentionTemperatureMethods:
    def _check_query(self, query: Tensor):
        layout = "[B, H, L, head_dim]" if self.heads_first else "[B, L, H, head_dim]"
        if query.dim() != 4 or not self._is_floating(query.dtype):
            self._fail("query must be a floating-point " + layout + " tensor (float16, bfloat16, float32 or float64), but got " + self._dtype_name(query.dtype) + " of shape " + str(query.shape) + ("" if self.heads_first else "; pass heads_first=true for [B, H, L, head_dim]"))

    def _scaled(self, query: Tensor, steps: Tensor) -> Tensor:
        length = query.size(2) if self.heads_first else query.size(1)
        rows = steps.size(0) if steps.dim() == 2 else 1
        if self.form == "llama4":
            scales = torch.log1p(torch.floor((steps.clamp_min(-1.0) + 1.0) / self.floor_scale)) * self.attn_scale + 1.0
        else:
            scales = torch.log(torch.floor(steps.clamp_min(0.0) / self.floor_scale) + 1.0) * self.attn_scale + 1.0
        shaped = scales.view([rows, 1, length, 1]) if self.heads_first else scales.view([rows, length, 1, 1])
        if self.form == "llama4":
            return (query * shaped).to(query.dtype)
        return query * shaped.to(query.dtype)

    # The queries at positions offset .. offset + L - 1, scaled.
    def forward(self, query: Tensor, offset: int = 0) -> Tensor:
        self._check_query(query)
        length = query.size(2) if self.heads_first else query.size(1)
        self._check_offset_fits(offset, length)
        steps = torch.arange(offset, offset + length, device=query.device).to(6)
        return self._scaled(query, steps)

    # The queries at explicit positions [L] or [B, L], scaled.
    def forward_positions(self, query: Tensor, positions: Tensor) -> Tensor:
        self._check_query(query)
        length = query.size(2) if self.heads_first else query.size(1)
        each = [query.size(0), length]
        self._check_positions_dtype(positions)
        if not ((positions.dim() == 1 and positions.size(0) == length) or (positions.dim() == 2 and (positions.size(0) == each[0] or positions.size(0) == 1) and positions.size(1) == length)):
            self._fail("positions must have shape [L] = [" + str(length) + "] or [B, L] = " + str(each) + " (or [1, L]), but got " + str(positions.shape))
        self._check_positions_device(positions, query)
        return self._scaled(query, positions.to(6))

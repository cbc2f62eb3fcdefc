# TorchScript: the methods of the exported table-based sequence modules (PositionalEncoding,
# LearnedPositionalEmbedding), which add rows of a [max_len, D] table to [B, L, D] or [L, B, D]
# inputs. Each module adds `_table()` (its table), `_extrapolate(flat, rows)` (the rows of
# positions past the table) and `_fractional_rows(flat)` (the rows of float64 positions):
# sinusoidal.py, learned.py. See common.py for how these files are used.

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class SequenceMethods:
    def _check_input(self, x: Tensor):
        layout = "[B, L, D] (batch_first=true)" if self.batch_first else "[L, B, D] (batch_first=false)"
        if x.dim() != 3:
            self._fail("expected a 3-D input of shape " + layout + ", but got a " + str(x.dim()) + "-D tensor of shape " + str(x.shape))
        self._check_float(x)
        self._check_features(x, self.d_model, self._table(), False)

    # The rows of `positions` (flattened): table rows, zeros for -1 (padding), and past the table
    # what `_extrapolate` makes of them.
    def _rows(self, positions: Tensor) -> Tensor:
        flat = positions.reshape(-1).to(4)
        in_table = torch.where(flat < self.max_len, flat, torch.full_like(flat, -1))
        rows = self._table().index_select(0, in_table.clamp(min=0))
        rows = rows.masked_fill((in_table < 0).unsqueeze(1), 0.0)
        return self._extrapolate(flat, rows)

    def _broadcast(self, rows: Tensor, positions: Tensor) -> Tensor:
        if positions.dim() == 2:
            return rows.view(positions.size(0), positions.size(1), rows.size(1))
        if self.batch_first:
            return rows.unsqueeze(0)
        return rows.unsqueeze(1)

    def _add(self, x: Tensor, rows: Tensor) -> Tensor:
        if x.dtype != 7 and (self.scale > 3.4028234663852886e38 or self.scale < -3.4028234663852886e38):
            self._fail("scale must lie in [-3.4028e38, 3.4028e38] for " + self._dtype_name(x.dtype) + " inputs (computed in float32), but got " + str(self.scale) + "; pass float64 inputs or a smaller scale")
        if self.scale == 1.0:
            return torch.add(x, rows).to(x.dtype)
        # the product rounded before the sum (add's alpha may fuse them), as posenc's kernels do
        return torch.add(rows, x.to(torch.promote_types(x.dtype, rows.dtype)) * self.scale).to(x.dtype)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        self._check_input(x)
        length = x.size(1) if self.batch_first else x.size(0)
        self._check_offset(offset, length)
        if offset + length <= self.max_len:
            rows = self._table()[offset:offset + length]
            rows = rows.unsqueeze(0) if self.batch_first else rows.unsqueeze(1)
            return self._add(x, rows)
        positions = torch.arange(offset, offset + length, device=x.device)
        return self._add(x, self._broadcast(self._rows(positions), positions))

    def forward_positions(self, x: Tensor, positions: Tensor) -> Tensor:
        self._check_input(x)
        length = x.size(1) if self.batch_first else x.size(0)
        each_name = "[B, L] (batch_first=true)" if self.batch_first else "[L, B] (batch_first=false)"
        self._check_positions(positions, length, [x.size(0), x.size(1)], each_name, x, -1 if self.extrapolate else self.max_len)
        if positions.is_floating_point():
            rows = self._fractional_rows(positions.reshape(-1).to(7))
        else:
            rows = self._rows(positions)
        return self._add(x, self._broadcast(rows, positions))

    def forward_padded(self, x: Tensor, padding_mask: Tensor) -> Tensor:
        if padding_mask.dim() != 2 or padding_mask.dtype != 11:
            self._fail("expected a bool padding mask (true = padding) of 2 dimensions, but got " + self._dtype_name(padding_mask.dtype) + " of shape " + str(padding_mask.shape))
        real = torch.logical_not(padding_mask).to(4)
        positions = (real.cumsum(1 if self.batch_first else 0) - 1).masked_fill(padding_mask, -1)
        return self.forward_positions(x, positions)

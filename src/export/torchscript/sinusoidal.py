# TorchScript: the table of an exported PositionalEncoding (the buffer `pe`, [1, max_len, D]) and
# its rows past the table (BeyondMaxLen::kExtrapolate), computed in float64 from the attributes
# `column_frequency` (float64 [D]) and `column_kind` (int64 [D]: 0 sine, 1 cosine, 2 zero) that
# posenc::detail::column_plan defines, and rounded once to the table's dtype. Used with
# common.py, offset.py and sequence.py (see common.py).

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class SinusoidalMethods:
    def _table(self) -> Tensor:
        return self.pe[0]

    # column_frequency and column_kind are plain attributes, which Module.to() does not move: they
    # are moved to the positions' device here.
    def _extrapolate(self, flat: Tensor, rows: Tensor) -> Tensor:
        past = flat >= self.max_len
        if self.extrapolate and bool(past.any()):
            rows = torch.where(past.unsqueeze(1), self._fractional_rows(flat.to(7)), rows)
        return rows

    # The rows of float64 positions `flat`, computed from the column plan, rounded once.
    def _fractional_rows(self, flat: Tensor) -> Tensor:
        kind = self.column_kind.to(flat.device)
        angle = flat.unsqueeze(1) * self.column_frequency.to(flat.device).unsqueeze(0)
        computed = torch.where(kind == 0, torch.sin(angle), torch.cos(angle))
        return computed.masked_fill(kind == 2, 0.0).to(self._table().dtype)

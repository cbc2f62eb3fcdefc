# TorchScript: the table of an exported LearnedPositionalEmbedding (the parameter `weight`,
# [max_len, D]); a learned table has no rows past its end (positions there are rejected by the
# checks). Used with common.py, offset.py and sequence.py (see common.py).

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class LearnedMethods:
    def _table(self) -> Tensor:
        return self.weight

    def _extrapolate(self, flat: Tensor, rows: Tensor) -> Tensor:
        return rows

    def _fractional_rows(self, flat: Tensor) -> Tensor:
        self._fail("floating-point positions are computed from the encoding's definition, which a learned table does not have; pass integer positions")
        return flat  # (not reached: _fail raises; TorchScript wants a value on every path)

# TorchScript: an exported TokenAndPositionEmbedding, the submodules `tokens`
# (token_embedding.py) and `positions` (an exported PositionalEncoding or
# LearnedPositionalEmbedding). With a padding token (`padding_idx` >= 0), padding tokens get no
# position and the others count from `offset`. See common.py for how these files are used.

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class TokenAndPositionMethods:
    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:
        embedded = self.tokens.forward(ids)
        if self.padding_idx < 0:
            return self.positions.forward(embedded, offset)
        length = ids.size(1) if self.batch_first else ids.size(0)
        self._check_offset_fits(offset, length)
        padding = ids == self.padding_idx
        real = torch.logical_not(padding).to(4)
        positions = (real.cumsum(1 if self.batch_first else 0) - 1).masked_fill(padding, -1)
        positions = torch.where(positions < 0, positions, positions + offset)
        return self.positions.forward_positions(embedded, positions)

    def forward_positions(self, ids: Tensor, positions: Tensor) -> Tensor:
        return self.positions.forward_positions(self.tokens.forward(ids), positions)

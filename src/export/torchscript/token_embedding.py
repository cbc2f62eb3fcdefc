# TorchScript: the token embedding of an exported TokenAndPositionEmbedding (its submodule
# `tokens`: the parameter `weight`, [vocab_size, D], and `padding_idx`, -1 for none). Used with
# common.py (see there for how these files are used).

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class TokenMethods:
    def forward(self, ids: Tensor) -> Tensor:
        layout = "[B, L] (batch_first=true)" if self.batch_first else "[L, B] (batch_first=false)"
        if ids.dim() != 2:
            self._fail("expected token ids of shape " + layout + ", but got a " + str(ids.dim()) + "-D tensor of shape " + str(ids.shape))
        if ids.dtype > 4:
            self._fail("expected integer token ids, but got " + self._dtype_name(ids.dtype))
        if ids.device != self.weight.device:
            self._fail("expected the token ids on the module's device (" + str(self.weight.device) + "), but got " + str(ids.device))
        if ids.numel() > 0:
            smallest = int(ids.min())
            largest = int(ids.max())
            if smallest < 0 or largest >= self.weight.size(0):
                self._fail("token ids must lie in [0, vocab_size) = [0, " + str(self.weight.size(0)) + "), but got ids from " + str(smallest) + " to " + str(largest))
        return torch.embedding(self.weight, ids.to(4), self.padding_idx)

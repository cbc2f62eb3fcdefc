# TorchScript: the method of an exported TimestepEmbedder (DiT's): the timestep embedding of
# timestep.py (cos first, no shift) through `mlp` = Linear, SiLU, Linear, whose parameters are the
# submodules `mlp.0` and `mlp.2` (weight, bias), the names of the C++ module's state dict. Each
# Linear is the addmm torch.nn.Linear computes for [N, D] rows; SiLU is x * sigmoid(x) (aten's silu
# has no name in torch's Python namespace), which can differ from posenc's (aten::silu) in the last
# bit. Used with common.py and timestep.py (see common.py).

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class TimestepEmbedderMethods:
    def forward(self, timesteps: Tensor) -> Tensor:
        first = getattr(self.mlp, "0")
        second = getattr(self.mlp, "2")
        if timesteps.device != first.weight.device:
            self._fail("expected the timesteps on the module's device (" + str(first.weight.device) + "), but got timesteps on " + str(timesteps.device) + "; move them with .to(" + str(first.weight.device) + ")")
        frequencies = self._timestep_embedding(timesteps).to(first.weight.dtype)
        hidden = torch.addmm(first.bias, frequencies, first.weight.t())
        hidden = hidden * torch.sigmoid(hidden)
        return torch.addmm(second.bias, hidden, second.weight.t())

# TorchScript: the method of an exported Timesteps (diffusers' Timesteps): the timestep embedding
# [N, embedding_dim] (float32) of timesteps [N]. Used with common.py and timestep.py (see
# common.py).

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class TimestepsMethods:
    def forward(self, timesteps: Tensor) -> Tensor:
        return self._timestep_embedding(timesteps)

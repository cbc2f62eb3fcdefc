# TorchScript: the methods of an exported AxialRotaryEmbedding (Flux's axial RoPE): `x` [B, L, H, Dh]
# (heads_first: [B, H, L, Dh]) rotated by the angles of its tokens' coordinates `ids` [L, A], with
# tables computed for each call (axial.py) and the rotation of rotation.py. No tensors besides
# axial.py's attributes; `axes_dim`, `theta`, `interleaved`, `heads_first` as the options. Used
# with common.py, rotation.py and axial.py (see common.py).

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class AxialRotaryEmbeddingMethods:
    # float64 inputs rotate by float64 tables, every other dtype by float32 ones.
    def forward(self, x: Tensor, ids: Tensor) -> Tensor:
        length_dim = 2 if self.heads_first else 1
        layout = "[B, H, L, Dh] (heads_first=true)" if self.heads_first else "[B, L, H, Dh] (heads_first=false)"
        self._check_query_key(x, layout)
        length = x.size(length_dim)
        if ids.dim() != 2 or ids.size(0) != length:
            self._fail("ids must hold one row per token, [L, " + str(len(self.axes_dim)) + "] with L = " + str(length) + ", but got shape " + str(ids.shape))
        if ids.device != x.device:
            self._fail("expected ids on the input's device (" + str(x.device) + "), but got ids on " + str(ids.device))
        c, s = self._axial_tables(ids, 7 if x.dtype == 7 else 6)
        self._check_rotary_input(x, 2 * c.size(1))
        return self._rotate(x, self._broadcast(c, 1, length), self._broadcast(s, 1, length))

    # cos and sin [L, sum(axes_dim) / 2] of `ids`, float32 (or `dtype`), on the ids' device.
    def tables(self, ids: Tensor, dtype: Optional[int] = None) -> Tuple[Tensor, Tensor]:
        return self._axial_tables(ids, 6 if dtype is None else dtype)

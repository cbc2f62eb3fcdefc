# TorchScript: the methods of an exported RelPositionalEncoding (Transformer-XL / Conformer): the
# buffer `pe` (relative positions max_len - 1 .. -(max_len - 1), or with `legacy` the absolute
# positions 0 .. max_len - 1), the input scale `scale` (sqrt(d_model) or 1) and the streaming
# offset. Eval mode: dropout is not exported. Used with common.py (see there).

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class RelPositionalEncodingMethods:
    # (x * scale, the encoding of the relative positions offset + L - 1 .. -(L - 1)) for x
    # [B, L, d_model] with `offset` frames cached before it (legacy: positions offset ..
    # offset + L - 1).
    def forward(self, x: Tensor, offset: int = 0) -> Tuple[Tensor, Tensor]:
        if x.dim() != 3:
            self._fail("expected a 3-D input of shape [B, L, D] (batch_first=true), but got a " + str(x.dim()) + "-D tensor of shape " + str(x.shape) + "; add the missing dimension, e.g. x.unsqueeze(0) for a single sequence")
        self._check_float(x)
        self._check_features(x, self.d_model, self.pe, True)
        length = x.size(1)
        self._check_offset_fits(offset, length)
        if offset + length > self.max_len:
            self._fail("the " + str(offset) + " cached and " + str(length) + " new positions must fit in the table's max_len = " + str(self.max_len) + " (offset + L <= " + str(self.max_len) + "); build the module with a larger max_len")
        if self.legacy:
            pos_emb = self.pe.narrow(0, offset, length)
        elif length == 0:
            pos_emb = self.pe.narrow(0, 0, 0)
        else:
            pos_emb = self.pe.narrow(0, self.max_len - offset - length, offset + 2 * length - 1)
        scaled = x
        if self.scale != 1.0:
            scaled = x * self.scale
        return scaled, pos_emb.unsqueeze(0).to(x.dtype)

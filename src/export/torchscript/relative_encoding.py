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
            raise RuntimeError(self.who + ": expected a 3-D input of shape [B, L, D] (batch_first=true), but got a " + str(x.dim()) + "-D tensor of shape " + str(x.shape) + "; add the missing dimension, e.g. x.unsqueeze(0) for a single sequence")
        self._check_float(x)
        if x.size(2) != self.d_model:
            raise RuntimeError(self.who + ": expected the last dimension of the input to be d_model = " + str(self.d_model) + ", but got " + str(x.size(2)) + " (input shape " + str(x.shape) + "); build the module with d_model = " + str(x.size(2)) + " or project the input to " + str(self.d_model) + " features")
        if x.device != self.pe.device:
            raise RuntimeError(self.who + ": expected the input on the device of the encoding table (" + str(self.pe.device) + "), but got an input on " + str(x.device) + "; move the module with module->to(" + str(x.device) + ") or the input with x.to(" + str(self.pe.device) + ")")
        length = x.size(1)
        if offset < 0:
            raise RuntimeError(self.who + ": offset must be >= 0, but got " + str(offset) + "; positions start at 0")
        if offset > 9223372036854775807 - length:
            raise RuntimeError(self.who + ": offset + L must fit in int64, but got offset = " + str(offset) + " and L = " + str(length))
        if offset + length > self.max_len:
            raise RuntimeError(self.who + ": the " + str(offset) + " cached and " + str(length) + " new positions must fit in the table's max_len = " + str(self.max_len) + " (offset + L <= " + str(self.max_len) + "); build the module with a larger max_len")
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

# TorchScript: the rotation of queries and keys by cos/sin rows, shared by the exported rotary
# modules (RotaryEmbedding, AxialRotaryEmbedding, VisionRotaryEmbedding): the arithmetic of
# posenc's apply_rotary kernels, with the attributes `interleaved` (pairs (2i, 2i + 1), else
# (i, i + R/2)), `deinterleave` (pairs (2i, 2i + 1) read and written as halves (i, i + R/2):
# RotaryEmbeddingOptions::deinterleave), `inverse` (turned by -theta: -sin is exact),
# `rotate_last` (the last R channels turn, the leading ones pass through:
# RotaryEmbeddingOptions::rotate_last_channels) and `heads_first` ([B, H, L, Dh], else [B, L, H, Dh]). See common.py for how these files are used.

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class RotationMethods:
    # The checks of posenc::detail::check_rotary_input that the callers leave to apply_rotary: a
    # floating-point input whose head dimension holds the rotated width.
    def _check_rotary_input(self, x: Tensor, rotary_dim: int):
        if not self._is_floating(x.dtype):
            self._fail("expected a floating-point input (float16, bfloat16, float32 or float64), but got " + self._dtype_name(x.dtype))
        if x.size(3) < rotary_dim:
            self._fail("the head dimension Dh = " + str(x.size(3)) + " is smaller than the rotated width " + str(rotary_dim) + " (input shape " + str(x.shape) + "); build the module with head_dim = " + str(x.size(3)))

    # rows [batch * length, R/2] -> broadcastable over the heads of x.
    def _broadcast(self, rows: Tensor, batch: int, length: int) -> Tensor:
        if self.heads_first:
            return rows.view(batch, 1, length, rows.size(1))
        return rows.view(batch, length, 1, rows.size(1))

    def _rotate(self, x: Tensor, c: Tensor, s: Tensor) -> Tensor:
        half = c.size(-1)
        rotated = 2 * half
        passed = x.size(-1) - rotated
        start = passed if self.rotate_last else 0
        part = x[..., start:start + rotated]
        if self.interleaved or self.deinterleave:
            shape = part.shape[:-1]
            shape.append(half)
            shape.append(2)
            pairs = part.reshape(shape)
            a = pairs.select(-1, 0)
            b = pairs.select(-1, 1)
        else:
            a = part[..., :half]
            b = part[..., half:rotated]
        if self.inverse:
            s = s.neg()
        new_a = a.mul(c).sub(b.mul(s))
        new_b = a.mul(s).add(b.mul(c))
        if self.interleaved:
            out = torch.stack([new_a, new_b], -1).flatten(-2)
        else:
            out = torch.cat([new_a, new_b], -1)
        if passed > 0 and self.rotate_last:
            out = torch.cat([x[..., :passed].to(out.dtype), out], -1)
        elif passed > 0:
            out = torch.cat([out, x[..., rotated:].to(out.dtype)], -1)
        return out.to(x.dtype)

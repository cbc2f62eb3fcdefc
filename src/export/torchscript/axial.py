# TorchScript: the axial RoPE tables of the exported AxialRotaryEmbedding and VisionRotaryEmbedding
# (posenc::detail::axial_rotary_tables): for token n with coordinates ids[n] (one per axis of
# `axes_dim`), the angle of frequency i is ids[n, axial_axis[i]] * axial_inv_freq[i], computed in
# float64 and rounded once. The attributes `axial_inv_freq` (float64 [R/2], each axis' RoPE
# frequencies theta^(-2i / axes_dim[a]) as posenc::detail::rope_frequencies defines them, one axis
# after the other) and `axial_axis` (int64 [R/2]) are plain attributes, moved to the ids' device
# here. cos/sin are PyTorch's float64 cos/sin (posenc's: the C library's, which can differ in the
# last bit). See common.py for how these files are used.

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class AxialMethods:
    # x must be a 4-D query or key tensor, [B, L, H, Dh] or [B, H, L, Dh] (`layout` in words).
    def _check_query_key(self, x: Tensor, layout: str):
        if x.dim() != 4:
            self._fail("expected a 4-D query or key tensor of shape " + layout + ", but got shape " + str(x.shape))

    # cos and sin [N, R/2] of the coordinates `ids` [N, A] in `dtype`, with the checks of
    # posenc::detail::check_axial_rotary_arguments (and of the dtype).
    def _axial_tables(self, ids: Tensor, dtype: int) -> Tuple[Tensor, Tensor]:
        axes = len(self.axes_dim)
        if ids.dim() != 2 or ids.size(1) != axes:
            self._fail("ids must be [N, " + str(axes) + "] (one coordinate per token and axis of axes_dim), but got shape " + str(ids.shape))
        if not (ids.is_floating_point() or ids.dtype <= 4):
            self._fail("ids must be a real or integer tensor, but got " + self._dtype_name(ids.dtype))
        half = self.axial_inv_freq.size(0)
        if ids.size(0) > 268435456 // half:
            self._fail(str(ids.size(0)) + " tokens * " + str(half) + " frequencies is over posenc's limit of 2^28 elements")
        if not self._is_floating(dtype):
            self._fail("dtype must be float16, bfloat16, float32 or float64, but got " + self._dtype_name(dtype) + "; positional encodings are sines and cosines and need a floating dtype")
        coordinates = ids.to(7)
        if not bool(torch.isfinite(coordinates).all()):
            self._fail("ids must be finite, but got NaN or infinite coordinates; replace them (e.g. torch.nan_to_num) before encoding")
        angle = coordinates.index_select(1, self.axial_axis.to(ids.device)) * self.axial_inv_freq.to(ids.device).unsqueeze(0)
        return torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)

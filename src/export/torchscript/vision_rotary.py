# TorchScript: the methods of an exported VisionRotaryEmbedding (timm's RotaryEmbeddingCat as EVA-02
# uses it): the patch tokens of `x` [B, H, N, Dh] (without heads_first: [B, N, H, Dh]) after
# `num_prefix_tokens` prefix tokens rotated by the coordinates of the grid `feat_shape` [h, w]
# (posenc::detail::grid_ids: (index + grid_offset), rescaled to `ref_feat_shape` when it is not
# empty, (column, row) for grid_indexing "xy"), with the tables of axial.py (axes_dim [dim / 2,
# dim / 2]) and the rotation of rotation.py. Used with common.py, rotation.py and axial.py (see
# common.py).

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class VisionRotaryEmbeddingMethods:
    # The checks of feat_shape in posenc::detail::check_grid_rotary_arguments (the options were
    # checked when the module was built).
    def _check_grid(self, feat_shape: List[int]):
        if len(feat_shape) != 2:
            self._fail("feat_shape must be the patch grid [H, W], but got " + str(len(feat_shape)) + " values")
        rows = 1
        for size in feat_shape:
            if size < 1 or size > 268435456:
                self._fail("feat_shape must hold sizes in [1, 2^28], but got " + str(feat_shape))
            rows = rows * size
            if rows > 268435456:
                self._fail("the grid " + str(feat_shape) + " has over 2^28 positions")
        half = self.dim // 2
        if rows > 268435456 // half:
            self._fail("the tables = " + str(rows) + " * " + str(half) + " elements is over posenc's limit of 2^28 elements (1 GiB in float32); lower the grid or dim")

    # The float64 coordinates [h * w, 2] of the grid (posenc::detail::grid_ids), on `device`.
    def _grid_ids(self, feat_shape: List[int], device: torch.device) -> Tensor:
        height = feat_shape[0]
        width = feat_shape[1]
        rows = torch.arange(height, dtype=7, device=device) + self.grid_offset
        columns = torch.arange(width, dtype=7, device=device) + self.grid_offset
        if len(self.ref_feat_shape) == 2:
            rows = rows / float(height) * float(self.ref_feat_shape[0])
            columns = columns / float(width) * float(self.ref_feat_shape[1])
        rows = rows.view(height, 1).expand(height, width).reshape(-1)
        columns = columns.view(1, width).expand(height, width).reshape(-1)
        if self.grid_indexing == "xy":
            return torch.stack([columns, rows], 1)
        return torch.stack([rows, columns], 1)

    # float64 inputs rotate by float64 tables, every other dtype by float32 ones.
    def forward(self, x: Tensor, feat_shape: List[int]) -> Tensor:
        length_dim = 2 if self.heads_first else 1
        layout = "[B, H, N, Dh] (heads_first=true)" if self.heads_first else "[B, N, H, Dh] (heads_first=false)"
        self._check_query_key(x, layout)
        self._check_grid(feat_shape)
        patches = feat_shape[0] * feat_shape[1]
        prefix = self.num_prefix_tokens
        if x.size(length_dim) != prefix + patches:
            self._fail("expected " + str(prefix) + " prefix tokens + " + str(feat_shape[0]) + " x " + str(feat_shape[1]) + " = " + str(prefix + patches) + " tokens along dimension " + str(length_dim) + ", but got " + str(x.size(length_dim)) + " (shape " + str(x.shape) + "); pass the patch grid of this input")
        if x.size(3) < self.dim:
            self._fail("the head width " + str(x.size(3)) + " is smaller than the rotated width dim = " + str(self.dim))
        c, s = self._axial_tables(self._grid_ids(feat_shape, x.device), 7 if x.dtype == 7 else 6)
        self._check_rotary_input(x, self.dim)
        rotated = self._rotate(x.narrow(length_dim, prefix, patches), self._broadcast(c, 1, patches), self._broadcast(s, 1, patches))
        if prefix == 0:
            return rotated
        return torch.cat([x.narrow(length_dim, 0, prefix), rotated], length_dim)

    # cos and sin [h * w, dim / 2] of the grid, float32 (or `dtype`), on `device` (default: CPU).
    def tables(self, feat_shape: List[int], dtype: Optional[int] = None, device: Optional[torch.device] = None) -> Tuple[Tensor, Tensor]:
        self._check_grid(feat_shape)
        where = torch.device("cpu") if device is None else device
        return self._axial_tables(self._grid_ids(feat_shape, where), 6 if dtype is None else dtype)

# TorchScript: the methods of an exported RotaryEmbedding: the buffers `cos` and `sin`
# ([cached_len, R/2]), rows past them (up to max_len, and past it with BeyondMaxLen::kExtrapolate;
# the callers check positions against max_len) computed in float64 from the
# attributes `inv_freq` (float64 [R/2]) and `attention_factor` that
# posenc::detail::rope_frequencies defines, and the rotation of the first R = rotary_dim channels
# of [B, L, H, Dh] or [B, H, L, Dh] queries and keys (rotation.py). Used with common.py, offset.py
# and rotation.py (see common.py).

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class RotaryMethods:
    def _check_input(self, x: Tensor):
        layout = "[B, H, L, Dh] (heads_first=true)" if self.heads_first else "[B, L, H, Dh] (heads_first=false)"
        if x.dim() != 4:
            self._fail("expected a 4-D query or key tensor of shape " + layout + ", but got a " + str(x.dim()) + "-D tensor of shape " + str(x.shape))
        self._check_float(x)
        if x.size(3) < self.rotary_dim:
            self._fail("the head dimension Dh = " + str(x.size(3)) + " is smaller than the rotated width " + str(self.rotary_dim) + " (input shape " + str(x.shape) + ")")
        if self.rotate_last and x.size(3) != self.head_dim:
            # (the last channels are those of a head of head_dim channels, as the C++ module's check_heads)
            self._fail("expected heads of width head_dim = " + str(self.head_dim) + ", but got " + str(x.size(3)) + " (input shape " + str(x.shape) + "); build the module with head_dim = " + str(x.size(3)) + " or split the heads to " + str(self.head_dim) + " channels")
        if x.device != self.cos.device:
            self._fail("expected the input on the device of the cos/sin caches (" + str(self.cos.device) + "), but got an input on " + str(x.device))

    # cos and sin of `positions` (flattened): rows of the caches, no rotation (cos 1, sin 0) for -1
    # (padding), and past the caches computed in float64 and rounded once. inv_freq is a plain
    # attribute, which Module.to() does not move: it is moved to the positions' device here.
    def _tables(self, positions: Tensor) -> Tuple[Tensor, Tensor]:
        flat = positions.reshape(-1).to(4)
        rows = self.cos.size(0)
        in_table = torch.where(flat < rows, flat, torch.full_like(flat, -1))
        outside = (in_table < 0).unsqueeze(1)
        c = self.cos.index_select(0, in_table.clamp(min=0)).masked_fill(outside, 1.0)
        s = self.sin.index_select(0, in_table.clamp(min=0)).masked_fill(outside, 0.0)
        past = flat >= rows
        if bool(past.any()):
            computed_c, computed_s = self._computed(flat, self.inv_freq)
            c = torch.where(past.unsqueeze(1), computed_c, c)
            s = torch.where(past.unsqueeze(1), computed_s, s)
        return c, s

    # cos and sin of `flat` (int64 positions, -1: no rotation; or float64 ones) computed in float64 from the
    # frequencies `inv_freq` and rounded once to the caches' dtype.
    def _computed(self, flat: Tensor, inv_freq: Tensor) -> Tuple[Tensor, Tensor]:
        angle = flat.to(7).unsqueeze(1) * inv_freq.to(flat.device).unsqueeze(0)
        c = torch.cos(angle)
        s = torch.sin(angle)
        if self.attention_factor != 1.0:
            c = c * self.attention_factor
            s = s * self.attention_factor
        padding = (flat < 0).unsqueeze(1)
        c = c.masked_fill(padding, 1.0)
        s = s.masked_fill(padding, 0.0)
        return c.to(self.cos.dtype), s.to(self.sin.dtype)

    # dynamic NTK and LongRoPE: a call whose last position + 1 (`end`) exceeds `switch_len` rotates
    # all of its positions with the frequencies of its length (posenc::detail::rope_frequencies).
    def _switches(self, end: int) -> bool:
        return self.switch_len >= 0 and end > self.switch_len and (self.extrapolate or end <= self.max_len)

    def _call_inv_freq(self, end: int) -> Tensor:
        if self.long_inv_freq.numel() > 0:
            return self.long_inv_freq
        dim = float(self.rotary_dim)
        base = self.ntk_base * (self.ntk_factor * float(end) / float(self.switch_len) - (self.ntk_factor - 1.0)) ** (dim / (dim - 2.0))
        exponents = torch.arange(0, self.rotary_dim, 2).to(7) / dim
        return 1.0 / torch.pow(base, exponents) / self.freq_divisors

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        self._check_input(x)
        length = x.size(2) if self.heads_first else x.size(1)
        self._check_offset(offset, length)
        if length > 0 and self._switches(offset + length):
            c, s = self._computed(torch.arange(offset, offset + length, device=x.device), self._call_inv_freq(offset + length))
        elif offset + length <= self.cos.size(0):
            c = self.cos[offset:offset + length]
            s = self.sin[offset:offset + length]
        else:
            c, s = self._tables(torch.arange(offset, offset + length, device=x.device))
        return self._rotate(x, self._broadcast(c, 1, length), self._broadcast(s, 1, length))

    # Multimodal RoPE ([3, B, L] positions, mrope_section): each frequency from the rows of the
    # axis `mrope_axes` gives it (posenc::detail::mrope_axes), as posenc::multimodal_rotary_tables.
    def _multimodal(self, x: Tensor, positions: Tensor, length: int) -> Tuple[Tensor, Tensor]:
        if len(self.mrope_axes) == 0:
            self._fail("positions " + str(positions.shape) + " are multimodal [3, B, L] positions, but the module has no mrope_section; build it with mrope_section (e.g. {16, 24, 24} for Qwen2-VL) or pass [B, L] positions")
        if positions.dtype > 4:
            self._fail("positions must be an integer tensor (int64 or int32), but got " + self._dtype_name(positions.dtype))
        if positions.shape != [3, x.size(0), length]:
            self._fail("multimodal positions must be [3, B, L] = [3, " + str(x.size(0)) + ", " + str(length) + "], but got " + str(positions.shape))
        self._check_positions_device(positions, x)
        flat = positions.reshape(-1).to(4)
        end = 0
        if flat.numel() > 0:
            if int(flat.min()) < 0:
                self._fail("multimodal positions must be >= 0, but got " + str(int(flat.min())) + " (M-RoPE has no padding value: mask padded tokens in the attention)")
            largest = int(flat.max())
            self._check_below_max_len(largest, -1 if self.extrapolate else self.max_len)
            end = largest + 1
        if end > 0 and self._switches(end):
            c, s = self._computed(flat, self._call_inv_freq(end))
        else:
            c, s = self._tables(flat)
        half = c.size(1)
        tokens = x.size(0) * length
        axes = torch.tensor(self.mrope_axes, device=x.device).view(1, 1, half).expand(1, tokens, half)
        c = c.view(3, tokens, half).gather(0, axes).squeeze(0)
        s = s.view(3, tokens, half).gather(0, axes).squeeze(0)
        return c, s

    def forward_positions(self, x: Tensor, positions: Tensor) -> Tensor:
        self._check_input(x)
        length = x.size(2) if self.heads_first else x.size(1)
        if positions.dim() == 3:
            c, s = self._multimodal(x, positions, length)
            return self._rotate(x, self._broadcast(c, x.size(0), length), self._broadcast(s, x.size(0), length))
        self._check_positions(positions, length, [x.size(0), length], "[B, L]", x, -1 if self.extrapolate else self.max_len)
        batch = positions.size(0) if positions.dim() == 2 else 1
        if positions.is_floating_point():
            # Fractional positions: computed from the frequencies at any position (dynamic /
            # longrope: those of the first integer past the largest).
            flat = positions.reshape(-1).to(7)
            end = int(torch.floor(flat.max())) + 1 if flat.numel() > 0 else 0
            switch = end > 0 and self.switch_len >= 0 and end > self.switch_len
            c, s = self._computed(flat, self._call_inv_freq(end) if switch else self.inv_freq)
            return self._rotate(x, self._broadcast(c, batch, length), self._broadcast(s, batch, length))
        end = int(positions.max()) + 1 if positions.numel() > 0 else 0
        if end > 0 and self._switches(end):
            c, s = self._computed(positions.reshape(-1).to(4), self._call_inv_freq(end))
        else:
            c, s = self._tables(positions)
        return self._rotate(x, self._broadcast(c, batch, length), self._broadcast(s, batch, length))

    # Queries and keys of one call (posenc's forward_qk): the same rotation for both.
    def forward_qk(self, q: Tensor, k: Tensor, offset: int = 0) -> Tuple[Tensor, Tensor]:
        return self.forward(q, offset), self.forward(k, offset)

    def forward_qk_positions(self, q: Tensor, k: Tensor, positions: Tensor) -> Tuple[Tensor, Tensor]:
        return self.forward_positions(q, positions), self.forward_positions(k, positions)

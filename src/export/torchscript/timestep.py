# TorchScript: the diffusion timestep embedding of the exported Timesteps and TimestepEmbedder
# (posenc::detail::timestep_embedding): columns sin(t * scale * f_k) then cos (cos first with
# `flip_sin_to_cos`), a zero column last for an odd `embedding_dim`, computed in float64 and
# rounded once to float32. `frequencies` (float64 [embedding_dim / 2], a plain attribute moved to
# the timesteps' device here) holds posenc::detail::timestep_frequencies. See common.py for how
# these files are used.

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class TimestepMethods:
    def _timestep_embedding(self, timesteps: Tensor) -> Tensor:
        if timesteps.dim() != 1:
            self._fail("timesteps must be a 1-D tensor [N] (one timestep per batch element), but got shape " + str(timesteps.shape))
        if not (timesteps.is_floating_point() or timesteps.dtype <= 4):
            self._fail("timesteps must be a real or integer tensor, but got " + self._dtype_name(timesteps.dtype))
        if timesteps.size(0) > 268435456 // self.embedding_dim:
            self._fail(str(timesteps.size(0)) + " timesteps * embedding_dim " + str(self.embedding_dim) + " elements is over posenc's limit of 2^28 elements")
        values = timesteps.to(7)
        angles = values.unsqueeze(1) * self.frequencies.to(timesteps.device).mul(self.scale)
        if not bool(torch.isfinite(angles).all()):
            got = "timesteps whose angles overflow" if bool(torch.isfinite(values).all()) else "NaN or infinite timesteps"
            self._fail("timesteps must be finite (and scale * timesteps within float64), but got " + got)
        sines = torch.sin(angles)
        cosines = torch.cos(angles)
        columns = [cosines, sines] if self.flip_sin_to_cos else [sines, cosines]
        if self.embedding_dim % 2 == 1:
            columns.append(torch.zeros([timesteps.size(0), 1], dtype=7, device=timesteps.device))
        return torch.cat(columns, 1).to(6)

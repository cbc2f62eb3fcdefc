# TorchScript: the offset check of the exported modules with a table of `self.max_len` rows and an
# `self.extrapolate` flag (sinusoidal, learned, rotary). See common.py for how these files are used.

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class OffsetMethods:
    def _check_offset(self, offset: int, length: int):
        if offset < 0:
            raise RuntimeError(self.who + ": offset must be >= 0, but got " + str(offset) + "; positions start at 0")
        # Compared without forming offset + length, which can overflow int64 (and wrap around).
        if offset > 9223372036854775807 - length:
            raise RuntimeError(self.who + ": offset + L must fit in int64, but got offset = " + str(offset) + " and L = " + str(length))
        if not self.extrapolate and offset > self.max_len - length:
            raise RuntimeError(self.who + ": positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (" + str(self.max_len) + "), but got L = " + str(length) + " and offset = " + str(offset) + " (offset + L = " + str(offset + length) + "); build the module with a larger max_len, or split the sequence")

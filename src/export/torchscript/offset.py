# TorchScript: the offset check of the exported modules with a table of `self.max_len` rows and an
# `self.extrapolate` flag (sinusoidal, learned, rotary). See common.py for how these files are used.

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class OffsetMethods:
    def _check_offset(self, offset: int, length: int):
        self._check_offset_fits(offset, length)
        if not self.extrapolate and offset > self.max_len - length:
            self._fail("positions offset .. offset + L - 1 must lie in the table, i.e. offset + L <= max_len (" + str(self.max_len) + "), but got L = " + str(length) + " and offset = " + str(offset) + " (offset + L = " + str(offset + length) + "); build the module with a larger max_len, or split the sequence")

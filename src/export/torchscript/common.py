# TorchScript methods of every module posenc exports (posenc::to_torchscript, see
# src/export/torchscript.cpp): dtype names and the checks of inputs and positions.
#
# Each file of this folder holds one class whose body (its `def`s and comments, indented by 4
# spaces, no docstrings) is embedded into libposenc at build time (src/export/CMakeLists.txt) and
# passed to torch::jit::Module::define together with the bodies of the other files the exported
# module is made of. The exported module carries the attributes, buffers and parameters the
# methods read; `self.who`, the module's name, starts every error message.
#
# The code is compiled from C++, where a dtype is its c10::ScalarType code (stable across
# versions): Half = 5, Float = 6, Double = 7, BFloat16 = 15; integers 0-4 (Long = 4), Bool = 11.
# Conversions are written .to(4) (int64) and .to(7) (float64) for that reason. Only torch
# built-ins may be called, so that the saved file loads with plain PyTorch. The files are plain
# Python as well: test/python/test_export.py scripts these classes with torch.jit.script and
# compares them with the modules posenc exports.

import torch
from torch import Tensor
from typing import List, Optional, Tuple


class CommonMethods:
    # Every refusal of an exported module: a RuntimeError whose message starts with the module's
    # name, as posenc's TORCH_CHECKs start with the caller's. The checks shared by several modules
    # are the methods below, each message written once; they read no attribute but `who`, since
    # every exported module compiles all of them. A method that ends in _fail still returns a value
    # on every path (TorchScript does not know that _fail raises).
    def _fail(self, message: str):
        raise RuntimeError(self.who + ": " + message)

    def _dtype_name(self, dtype: int) -> str:
        names = ["Byte", "Char", "Short", "Int", "Long", "Half", "Float", "Double", "ComplexHalf", "ComplexFloat", "ComplexDouble", "Bool"]
        if dtype >= 0 and dtype < len(names):
            return names[dtype]
        if dtype == 15:
            return "BFloat16"
        return "dtype code " + str(dtype)

    def _is_floating(self, dtype: int) -> bool:
        return dtype == 5 or dtype == 15 or dtype == 6 or dtype == 7

    def _check_float(self, x: Tensor):
        if not self._is_floating(x.dtype):
            self._fail("expected a floating-point input (float16, bfloat16, float32 or float64), but got " + self._dtype_name(x.dtype) + "; embed integer token ids first")

    # `positions` must be [L] (shared by the batch) or `each` (named `each_name` in the messages),
    # on the device of `x`, >= -1 (-1 marks padding) and, for a `limit` >= 0, < limit; or
    # floating-point (fractional positions: see _check_fractional).
    def _check_positions(self, positions: Tensor, length: int, each: List[int], each_name: str, x: Tensor, limit: int):
        if positions.is_floating_point():
            self._check_fractional(positions)
        self._check_positions_dtype(positions)
        shared = positions.dim() == 1 and positions.size(0) == length
        if not (shared or (positions.dim() == 2 and positions.shape == each)):
            self._fail("positions must have shape [L] = [" + str(length) + "] or " + each_name + " = " + str(each) + ", but got " + str(positions.shape))
        self._check_positions_device(positions, x)
        if positions.numel() > 0 and not positions.is_floating_point():
            smallest = int(positions.min())
            largest = int(positions.max())
            if smallest < -1:
                self._fail("positions must be >= -1 (-1 marks padding), but got " + str(smallest))
            self._check_below_max_len(largest, limit)

    # For a `limit` >= 0 (the module's max_len, -1 when it extrapolates), the largest position
    # must lie below it.
    def _check_below_max_len(self, largest: int, limit: int):
        if limit >= 0 and largest >= limit:
            self._fail("positions must be < max_len (" + str(limit) + "), but got " + str(largest) + "; build the module with max_len >= " + (str(largest + 1) if largest < 9223372036854775807 else "2^63"))


    # Floating-point positions (posenc::detail::check_continuous_range): finite and in [0, 2^63),
    # computed from the encoding's definition (a module without one raises in _fractional_rows).
    # Only where the position is fine may the limit be skipped: their rows are never read from a
    # table.
    def _check_fractional(self, positions: Tensor):
        flat = positions.reshape(-1).to(7)
        bad = torch.logical_not(torch.isfinite(flat) & (flat >= 0.0) & (flat < 9223372036854775808.0))
        if bool(bad.any()):
            index = int(bad.nonzero()[0][0])
            self._fail("floating-point positions must be finite and in [0, 2^63), but got " + str(float(flat[index])) + " at index " + str(index) + "; replace NaN/Inf (e.g. torch.nan_to_num) before encoding")

    def _check_positions_dtype(self, positions: Tensor):
        if not (positions.is_floating_point() or positions.dtype <= 4):
            self._fail("positions must be an integer tensor (int64 or int32) or a floating-point one, but got " + self._dtype_name(positions.dtype))

    def _check_positions_device(self, positions: Tensor, x: Tensor):
        if positions.device != x.device:
            self._fail("positions must be on the input's device (" + str(x.device) + "), but got " + str(positions.device))

    # Positions offset .. offset + L - 1 start at 0 and fit in int64 (compared without forming
    # offset + L, which can overflow and wrap around).
    def _check_offset_fits(self, offset: int, length: int):
        if offset < 0:
            self._fail("offset must be >= 0, but got " + str(offset) + "; positions start at 0")
        if offset > 9223372036854775807 - length:
            self._fail("offset + L must fit in int64, but got offset = " + str(offset) + " and L = " + str(length))

    # The input's features against the module's `d_model` and its device against the `table`'s
    # (`advice`: the messages say what to change, as RelPositionalEncoding's C++ checks do).
    def _check_features(self, x: Tensor, d_model: int, table: Tensor, advice: bool):
        if x.size(2) != d_model:
            self._fail("expected the last dimension of the input to be d_model = " + str(d_model) + ", but got " + str(x.size(2)) + " (input shape " + str(x.shape) + ")" + ("; build the module with d_model = " + str(x.size(2)) + " or project the input to " + str(d_model) + " features" if advice else ""))
        if x.device != table.device:
            self._fail("expected the input on the device of the encoding table (" + str(table.device) + "), but got an input on " + str(x.device) + ("; move the module with module->to(" + str(x.device) + ") or the input with x.to(" + str(table.device) + ")" if advice else ""))

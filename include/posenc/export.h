#pragma once

/// TorchScript export of posenc's modules.
///
/// A C++ `torch::nn::Module` cannot be scripted or traced, so posenc writes the TorchScript itself:
/// `to_torchscript` returns a `torch::jit::Module` that holds the module's tensors (for
/// `PositionalEncoding`, the buffer `pe`) and a `forward` written in TorchScript with the module's
/// eval-mode semantics: the same layout, offset, dtype rules and error conditions (errors are
/// raised as TorchScript exceptions carrying the same messages). It calls only built-in operators,
/// so the saved file loads with plain PyTorch (`torch.jit.load`) without posenc, and with
/// `torch::jit::load` in C++.
///
/// Example:
/// ```
/// posenc::PositionalEncoding pe(512, 5000);
/// posenc::to_torchscript(pe).save("pe.pt");
/// // Python: m = torch.jit.load("pe.pt"); y = m(x, 3)
/// ```

#include <posenc/modules/positional_encoding.h>

#include <torch/csrc/jit/api/module.h>

namespace posenc {

/// TorchScript version of a `PositionalEncoding`: buffer `pe` (a copy), attributes `d_model`,
/// `max_len`, `batch_first`, and `forward(x: Tensor, offset: int = 0) -> Tensor`. Dropout, a
/// training-only operation, is not part of the export.
torch::jit::Module to_torchscript(const PositionalEncodingImpl& module);

/// Overload for the module holder.
inline torch::jit::Module to_torchscript(const PositionalEncoding& module) {
  return to_torchscript(*module);
}

} // namespace posenc

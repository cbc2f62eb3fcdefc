#pragma once

/// Loading state dicts written by Python's `torch.save(model.state_dict(), path)` into C++
/// modules: posenc's, or any `torch::nn::Module` whose parameter and buffer names match.
///
/// Part of the `posenc::io` library, not of `posenc::posenc`, and not included by
/// `<posenc/posenc.h>`: link `posenc::io` and include this header to use it.

#include <torch/arg.h>
#include <torch/nn/module.h>

#include <string>

namespace posenc {

/// Options for `load_state_dict`.
///
/// Example:
/// ```
/// // The Python model kept its encoding at `model.pos_encoder`:
/// posenc::load_state_dict(*pe, "model.pt", posenc::LoadStateDictOptions().prefix("pos_encoder."));
/// ```
struct LoadStateDictOptions {
  /// Prefix of the module's entries in the file, e.g. "encoder.pos_encoder." for a module that was
  /// a submodule in Python. Only keys that start with it are considered. Default: "".
  TORCH_ARG(std::string, prefix) = "";
  /// `true`: every parameter and buffer of the module must be in the file and every key under
  /// `prefix` must belong to the module (PyTorch's `strict=True`). `false`: missing entries keep
  /// their values and unknown keys are ignored. Shapes must match either way. Default: `true`.
  TORCH_ARG(bool, strict) = true;
};

/// Loads the tensors of a Python state dict file into `module`'s parameters and buffers (names
/// as in `module.named_parameters()` / `named_buffers()`, prefixed by `options.prefix()`).
///
/// Every entry is checked before anything is written: the file must be a dict of tensors, shapes
/// must equal the module's, dtypes must be floating where the module's are and values finite.
/// Any violation throws a `c10::Error` naming the key, and leaves the module unchanged. Values
/// are converted to the module's dtype and device.
///
/// For `PositionalEncoding`, `pe` has shape `[1, max_len, d_model]`: a file saved with another
/// `max_len` is a shape mismatch, as in PyTorch. Build the module with the saved `max_len` (the
/// message names it), or, since the sinusoidal table is a function of the options, load with
/// `strict(false)` from a file without `pe`.
void load_state_dict(torch::nn::Module& module, const std::string& path,
                     const LoadStateDictOptions& options = {});

} // namespace posenc

#pragma once

/// TorchScript export of posenc's modules. An opt-in header: include it where the export is used
/// (it brings in LibTorch's TorchScript module API, `torch/csrc/jit/api/module.h`).
///
/// A C++ `torch::nn::Module` cannot be scripted or traced, so posenc writes the TorchScript itself:
/// `to_torchscript` returns a `torch::jit::Module` that holds a copy of the module's tensors (the
/// same names as in C++: `pe`, `weight`, `cos`/`sin`, `tokens.weight` + `positions.*`) and methods
/// written in TorchScript with the module's eval-mode semantics: the same layouts, offsets,
/// explicit positions, padding, scale, dtype rules and error conditions (raised as TorchScript
/// exceptions carrying the same messages). Only built-in operators are called, so the saved file
/// loads with plain PyTorch (`torch.jit.load`) without posenc, and with `torch::jit::load` in C++.
///
/// Methods of every exported encoding module: `forward(x, offset: int = 0)` and
/// `forward_positions(x, positions)`; sequence modules also `forward_padded(x, padding_mask)`.
/// The attention-bias modules keep their C++ signatures: `ALiBi`'s `forward(query_length,
/// key_length, offset: Optional[int] = None, causal: bool = False)` and `forward_causal(key_length,
/// attention_mask: Optional[Tensor] = None)`, `RelativePositionBias`'s `forward(query_length,
/// key_length, offset: int = 0)`, `RelPositionalEncoding`'s `forward(x, offset: int = 0)` (a
/// tuple) and `RelPositionMultiheadAttention`'s `forward(query, key, value, pos_emb, mask:
/// Optional[Tensor] = None)`.
/// Their TorchScript source is the Python files of posenc's `src/export/torchscript/`, embedded in
/// the library at build time; besides the tensors, an exported module carries the attributes those
/// methods read (e.g. `who`, the module's name in the error messages, `max_len`, `extrapolate`).
/// Dropout, a training-only operation, is not exported. Encodings past `max_len` under
/// BeyondMaxLen::kExtrapolate are computed with PyTorch's float64 sin/cos, which can differ from
/// the C++ module's in the last bit after rounding to float32.
///
/// Example:
/// ```
/// posenc::PositionalEncoding pe(512, 5000);
/// posenc::to_torchscript(pe).save("pe.pt");
/// // Python: m = torch.jit.load("pe.pt"); y = m(x, 3)
/// ```

#include <posenc/modules/attention_bias.h>
#include <posenc/modules/learned_positional_embedding.h>
#include <posenc/modules/positional_encoding.h>
#include <posenc/modules/rotary_embedding.h>
#include <posenc/modules/token_and_position_embedding.h>

#include <torch/csrc/jit/api/module.h>

namespace posenc {

/// TorchScript version of a `PositionalEncoding`.
torch::jit::Module to_torchscript(const PositionalEncodingImpl& module);
/// TorchScript version of a `LearnedPositionalEmbedding`.
torch::jit::Module to_torchscript(const LearnedPositionalEmbeddingImpl& module);
/// TorchScript version of a `RotaryEmbedding`.
torch::jit::Module to_torchscript(const RotaryEmbeddingImpl& module);
/// TorchScript version of a `TokenAndPositionEmbedding` (forward takes token ids).
torch::jit::Module to_torchscript(const TokenAndPositionEmbeddingImpl& module);

/// TorchScript version of an `ALiBi` (the buffer `slopes`).
torch::jit::Module to_torchscript(const ALiBiImpl& module);
/// TorchScript version of a `RelativePositionBias` (`relative_attention_bias.weight`).
torch::jit::Module to_torchscript(const RelativePositionBiasImpl& module);
/// TorchScript version of a `RelPositionalEncoding` (the buffer `pe`).
torch::jit::Module to_torchscript(const RelPositionalEncodingImpl& module);
/// TorchScript version of a `RelPositionMultiheadAttention` (the parameters under the same names).
torch::jit::Module to_torchscript(const RelPositionMultiheadAttentionImpl& module);

/// Overloads for the module holders.
template <typename Impl>
torch::jit::Module to_torchscript(const torch::nn::ModuleHolder<Impl>& module) {
  return to_torchscript(*module);
}

} // namespace posenc

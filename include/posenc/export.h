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
/// The vision and diffusion modules keep their C++ signatures too: `Timesteps`' and
/// `TimestepEmbedder`'s `forward(timesteps)` ([N] -> [N, embedding_dim] float32, and [N,
/// hidden_size] through the MLP `mlp.0`, `mlp.2`), `AxialRotaryEmbedding`'s `forward(x, ids)` and
/// `tables(ids, dtype: Optional[int] = None)`, `VisionRotaryEmbedding`'s `forward(x, feat_shape:
/// List[int])` and `tables(feat_shape, dtype: Optional[int] = None, device: Optional[Device] =
/// None)` (a dtype is a `torch.dtype` from Python, a `torch::ScalarType` from C++). They hold no
/// tensors in their state dicts but `TimestepEmbedder`'s; their float64 frequencies are plain
/// attributes (`frequencies`, `axial_inv_freq`), and the tables are computed per call in float64
/// as in C++. The timestep embeddings equal the C++ module's bit for bit; the axial and grid
/// tables use PyTorch's float64 cos/sin where posenc uses the C library's, so they (and the
/// rotated outputs) can differ in the last bit of float32 (or float64) outputs; `TimestepEmbedder`
/// computes its SiLU as x * sigmoid(x) (aten::silu has no name in torch's Python namespace), a few
/// float32 ulps from the C++ module's.
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
#include <posenc/modules/vision.h>

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
/// TorchScript version of an `AttentionTemperature` (its options as attributes).
torch::jit::Module to_torchscript(const AttentionTemperatureImpl& module);
/// TorchScript version of a `RelPositionalEncoding` (the buffer `pe`).
torch::jit::Module to_torchscript(const RelPositionalEncodingImpl& module);
/// TorchScript version of a `RelPositionMultiheadAttention` (the parameters under the same names).
torch::jit::Module to_torchscript(const RelPositionMultiheadAttentionImpl& module);

/// TorchScript version of a `Timesteps` (no tensors; the attribute `frequencies`).
torch::jit::Module to_torchscript(const TimestepsImpl& module);
/// TorchScript version of a `TimestepEmbedder` (`mlp.0.weight`, `mlp.0.bias`, `mlp.2.weight`,
/// `mlp.2.bias`).
torch::jit::Module to_torchscript(const TimestepEmbedderImpl& module);
/// TorchScript version of an `AxialRotaryEmbedding` (no tensors; `forward` and `tables`).
torch::jit::Module to_torchscript(const AxialRotaryEmbeddingImpl& module);
/// TorchScript version of a `VisionRotaryEmbedding` (no tensors; `forward` and `tables`).
torch::jit::Module to_torchscript(const VisionRotaryEmbeddingImpl& module);

/// Overloads for the module holders.
template <typename Impl>
torch::jit::Module to_torchscript(const torch::nn::ModuleHolder<Impl>& module) {
  return to_torchscript(*module);
}

} // namespace posenc

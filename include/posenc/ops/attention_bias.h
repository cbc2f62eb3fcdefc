#pragma once

/// @file
/// posenc's operators: attention biases and relative encodings: ALiBi, T5, Transformer-XL. Each function calls its operator
/// `posenc::<name>` through the dispatcher (`torch.ops.posenc.<name>` from Python and
/// TorchScript); its schema is the `m.def` beside its entry point in `src/ops/bias/attention_bias.cpp` (kernels:
/// the same file and cuda/attention_bias_kernel.cu). What positions, padding and rows past a table mean for every operator is
/// in <posenc/ops.h>.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Optional.h>
#include <c10/util/string_view.h>

#include <cstdint>

namespace posenc {
namespace ops {

/// ALiBi's slopes of heads `first_head .. first_head + heads - 1` (default: all from
/// `first_head`) of a model with `num_heads` heads: 2^(-max_bias k / n) for the first n =
/// 2^floor(log2 num_heads) heads, the odd terms of the sequence for 2n heads for the others (BLOOM,
/// MPT, the ALiBi paper). Computed in float64, rounded once to `dtype` (default float32), on
/// `device` (default CPU). A tensor-parallel rank with heads h0 .. h0 + n - 1 passes
/// `first_head = h0, heads = n`.
at::Tensor alibi_slopes(int64_t num_heads, double max_bias = 8.0, int64_t first_head = 0,
                        c10::optional<int64_t> heads = c10::nullopt,
                        c10::optional<at::ScalarType> dtype = c10::nullopt,
                        c10::optional<at::Device> device = c10::nullopt);

/// The full ALiBi bias `-slope * |(offset + i) - j|`, `[H, Lq, Lk]` for slopes `[H]` or
/// `[B, H, Lq, Lk]` for per-batch slopes `[B, H]`, in the slopes' dtype (or `dtype`): query i at
/// position `offset + i` (default `key_length - query_length`: the queries are the last keys, as
/// in KV-cache decoding and flash-attn), key j at position j. `causal` adds -inf where a key lies
/// after its query. Usable as the float `attn_mask` of `at::scaled_dot_product_attention` (and,
/// reshaped to `[B * H, Lq, Lk]`, of `torch::nn::MultiheadAttention`).
at::Tensor alibi_bias(const at::Tensor& slopes, int64_t query_length, int64_t key_length,
                      c10::optional<int64_t> offset = c10::nullopt, bool causal = false,
                      c10::optional<at::ScalarType> dtype = c10::nullopt);

/// The compact causal ALiBi bias `slope * key_position`, `[H, 1, Lk]` (slopes `[H]`) or
/// `[B, H, 1, Lk]` (slopes `[B, H]` or an `attention_mask`): under a causal mask it differs from
/// the full bias by a constant per query row, which softmax cancels, so it takes O(H L) memory
/// instead of O(H L^2) (BLOOM's form). With `attention_mask` (`[B, Lk]`, 1 for a token, 0 for
/// padding) the key positions count each sequence's tokens from its first one (left padding),
/// padding at 0, as BLOOM's `build_alibi_tensor`.
at::Tensor alibi_causal_bias(const at::Tensor& slopes, int64_t key_length,
                             const c10::optional<at::Tensor>& attention_mask = c10::nullopt,
                             c10::optional<at::ScalarType> dtype = c10::nullopt);

/// T5's bucket (int64, same shape) of each relative position `key - query` (an integer tensor):
/// half the buckets (per direction when `bidirectional`) hold the distances below
/// `num_buckets / 2` (per direction) exactly, the others logarithmic ranges up to `max_distance`.
/// Computed on the CPU (positions on another device are copied there and back).
at::Tensor relative_position_bucket(const at::Tensor& relative_position, bool bidirectional = true,
                                    int64_t num_buckets = 32, int64_t max_distance = 128);

/// T5's relative position bias `[1, H, Lq, Lk]` from the learned table `weight`
/// (`[num_buckets, H]`, T5's `relative_attention_bias.weight`): `weight[bucket(j - (offset + i)),
/// h]`. Differentiable with respect to `weight`.
at::Tensor relative_position_bias(const at::Tensor& weight, int64_t query_length,
                                  int64_t key_length, bool bidirectional = true,
                                  int64_t max_distance = 128, int64_t offset = 0);

/// The sinusoidal table of relative positions `key_length - 1, ..., -(length - 1)` (query minus
/// key; default `key_length = length`: `[2 * length - 1, d_model]`), interleaved sin/cos with
/// the paper's frequencies, as Transformer-XL and ESPnet's `RelPositionalEncoding` build it.
/// Computed in float64 and rounded once to `dtype` (default float32) on `device`.
at::Tensor relative_sinusoidal_table(int64_t length, int64_t d_model, double base = 10000.0,
                                     c10::optional<int64_t> key_length = c10::nullopt,
                                     c10::optional<at::ScalarType> dtype = c10::nullopt,
                                     c10::optional<at::Device> device = c10::nullopt);

/// Transformer-XL's relative shift: scores `[..., Lq, Lq + Lk - 1]` of each query against the
/// rows of `relative_sinusoidal_table(Lq, d, key_length = Lk)` become `[..., Lq, Lk]`, entry
/// (i, j) the score for the relative position of query i (at Lk - Lq + i) and key j.
/// Differentiable.
at::Tensor rel_shift(const at::Tensor& x);

/// A query temperature (Llama 4's attention temperature tuning, or Ministral 3's and Mistral 4's
/// `llama_4_scaling_beta`): `query` (`[B, L, H, D]`, or `[B, H, L, D]` with `heads_first`) times
/// a scale of the position p of each token, `form` "llama4": `log1p(floor((p + 1) /
/// floor_scale)) * attn_scale + 1`, or "ministral3": `1 + attn_scale * log(1 + floor(p /
/// floor_scale))` (see AttentionTemperatureForm). Computed in float32 with transformers'
/// operations in their order (`Llama4TextAttention`, `get_llama_4_attn_scale`), so that it rounds
/// as transformers does; returned in `query`'s dtype. Positions: `positions` (`[L]` or `[B, L]`,
/// integer or floating point; -1, or any negative position, marks padding, which is not scaled),
/// or when it is absent `offset .. offset + L - 1` (offset: the tokens already in the KV cache).
/// Differentiable with respect to `query`; no value is read on the host (CUDA graphs, export).
at::Tensor attention_temperature(const at::Tensor& query,
                                 const c10::optional<at::Tensor>& positions = c10::nullopt,
                                 int64_t offset = 0, double floor_scale = 8192.0,
                                 double attn_scale = 0.1, bool heads_first = false,
                                 c10::string_view form = "llama4");

} // namespace ops
} // namespace posenc

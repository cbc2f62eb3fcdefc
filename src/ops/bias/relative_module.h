#pragma once

// The calls of the Transformer-XL / Conformer relative-position modules, defined once below every
// front end: RelPositionalEncoding's (which rows of its relative or absolute table a call of L
// frames after `offset` cached ones uses, the input scaling, dropout) and
// RelPositionMultiheadAttention's (the input checks against embed_dim, the projections, the
// content and position scores, masking, dropout). The C++ modules and the functional twins call
// them directly; posenc.nn's modules through the rel_positional_encoding_call /
// rel_position_multihead_attention_call operators. Sizes are compared, not read, so that
// torch.export keeps the lengths and the batch symbolic.

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <tuple>

namespace posenc {
namespace ops {

/// `(dropout(x * scale), dropout(rows))` of `x` `[B, L, D]` after `offset` cached frames: `rows`
/// `[1, 2 L + offset - 1, D]`, the relative positions `offset + L - 1 .. -(L - 1)` of the
/// relative `table` (`2 max_len - 1` rows), or, `legacy`, `[1, L, D]`, the absolute positions
/// `offset .. offset + L - 1` (no rows for L = 0). Messages name the caller.
std::tuple<at::Tensor, at::Tensor> rel_positional_encoding_forward(const at::Tensor& x,
                                                                   const at::Tensor& table,
                                                                   int64_t offset, bool legacy,
                                                                   double scale, double dropout,
                                                                   bool training);

/// The attention after the projections (functional::relative_position_attention): `q`, `k`, `v`
/// `[B, H, Lq|Lk, d_k]`, `p` `[1 or B, H, Lq + Lk - 1, d_k]`, `pos_bias_u` / `pos_bias_v`
/// `[H, d_k]`; returns `[B, H, Lq, d_k]`. Messages name the caller.
at::Tensor relative_position_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v, const at::Tensor& p,
                                               const at::Tensor& pos_bias_u,
                                               const at::Tensor& pos_bias_v,
                                               const c10::optional<at::Tensor>& mask,
                                               double dropout, bool training);

/// A RelPositionMultiheadAttention's options and parameters (ESPnet's names; a `*_bias` may be
/// undefined: a Linear without bias).
struct RelPositionAttentionState {
  int64_t embed_dim = 0;
  int64_t num_heads = 0;
  double dropout = 0.0;
  at::Tensor q_weight, q_bias;
  at::Tensor k_weight, k_bias;
  at::Tensor v_weight, v_bias;
  at::Tensor pos_weight;
  at::Tensor out_weight, out_bias;
  at::Tensor pos_bias_u, pos_bias_v;
};

/// A RelPositionMultiheadAttention's call: `query` `[B, Lq, embed_dim]`, `key` and `value`
/// `[B, Lk, embed_dim]`, `pos_emb` `[1 or B, Lq + Lk - 1, embed_dim]` (RelPositionalEncoding's),
/// `mask` bool (true = attend) or additive, broadcastable to `[B, H, Lq, Lk]`; returns
/// `[B, Lq, embed_dim]`. Messages name "RelPositionMultiheadAttention".
at::Tensor rel_position_multihead_attention_forward(const RelPositionAttentionState& module,
                                                    const at::Tensor& query, const at::Tensor& key,
                                                    const at::Tensor& value,
                                                    const at::Tensor& pos_emb,
                                                    const c10::optional<at::Tensor>& mask,
                                                    bool training);

} // namespace ops
} // namespace posenc

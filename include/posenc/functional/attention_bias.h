#pragma once

/// Positions as attention biases and relative encodings, in functional form: ALiBi (BLOOM, MPT),
/// T5's relative position buckets and bias, and the Transformer-XL / Conformer relative
/// sinusoidal encoding with its relative shift and attention. The modules in
/// <posenc/modules/attention_bias.h> call these; each calls a `posenc::` operator
/// (<posenc/ops.h>).

#include <posenc/enums.h>

#include <ATen/core/Tensor.h>

#include <c10/util/Optional.h>

#include <cstdint>
#include <tuple>

namespace posenc {
namespace functional {

/// ALiBi's float32 slopes of heads `first_head .. first_head + heads - 1` (default all) of a
/// `num_heads`-head model (see posenc::ops::alibi_slopes).
///
/// Example:
/// ```
/// auto slopes = posenc::functional::alibi_slopes(8);   // 2^-1, 2^-2, ..., 2^-8
/// ```
at::Tensor alibi_slopes(int64_t num_heads, double max_bias = 8.0, int64_t first_head = 0,
                        c10::optional<int64_t> heads = c10::nullopt);

/// The full ALiBi bias `-slope * |(offset + i) - j|`, `[H, Lq, Lk]` (or `[B, H, Lq, Lk]` for
/// per-batch slopes `[B, H]`); `offset` defaults to `key_length - query_length`; `causal` adds
/// -inf above the diagonal. Pass it as `attn_mask` to `at::scaled_dot_product_attention`.
///
/// Example:
/// ```
/// auto bias = F::alibi_bias(F::alibi_slopes(8), 128, 128, c10::nullopt, /*causal=*/true);
/// auto out = at::scaled_dot_product_attention(q, k, v, bias);   // q, k, v [B, 8, 128, 64]
/// ```
at::Tensor alibi_bias(const at::Tensor& slopes, int64_t query_length, int64_t key_length,
                      c10::optional<int64_t> offset = c10::nullopt, bool causal = false);

/// The compact causal ALiBi bias `slope * key_position`, `[H, 1, Lk]`, or `[B, H, 1, Lk]` with
/// per-batch slopes or an `attention_mask` (`[B, Lk]`, 1 token / 0 padding: positions count from
/// each sequence's first token, as BLOOM's). Add it to causally masked scores.
at::Tensor alibi_causal_bias(const at::Tensor& slopes, int64_t key_length,
                             const at::Tensor& attention_mask = at::Tensor());

/// T5's bucket of each relative position (key - query) (see posenc::ops::relative_position_bucket).
at::Tensor relative_position_bucket(const at::Tensor& relative_position, bool bidirectional = true,
                                    int64_t num_buckets = 32, int64_t max_distance = 128);

/// T5's bias `[1, H, Lq, Lk]` from the learned `[num_buckets, H]` table, for queries at
/// `offset .. offset + Lq - 1` (`offset`: the tokens already in the KV cache).
at::Tensor relative_position_bias(const at::Tensor& weight, int64_t query_length,
                                  int64_t key_length, bool bidirectional = true,
                                  int64_t max_distance = 128, int64_t offset = 0);

/// The `[length + key_length - 1, d_model]` table of relative positions `key_length - 1 ..
/// -(length - 1)` (default `key_length = length`), float32.
at::Tensor relative_sinusoidal_table(int64_t length, int64_t d_model,
                                     c10::optional<int64_t> key_length = c10::nullopt,
                                     double base = 10000.0);

/// Transformer-XL's relative shift: `[..., Lq, Lq + Lk - 1]` -> `[..., Lq, Lk]`.
at::Tensor rel_shift(const at::Tensor& x);

/// The query temperature of `form` (Llama 4's, or Ministral 3's) of `query` at positions
/// `offset .. offset + L - 1`, or at `positions` (`[L]` or `[B, L]`) when given (see
/// posenc::ops::attention_temperature).
///
/// Example:
/// ```
/// auto q_scaled = posenc::functional::attention_temperature(q, /*positions=*/{}, past_len);
/// ```
at::Tensor attention_temperature(const at::Tensor& query, const at::Tensor& positions = {},
                                 int64_t offset = 0, double floor_scale = 8192.0,
                                 double attn_scale = 0.1, bool heads_first = false,
                                 AttentionTemperatureForm form = AttentionTemperatureForm::kLlama4);

/// The Conformer relative-position encoding step: returns `(dropout(x * scale), dropout(rows))`
/// where `rows` (`[1, R, D]`) are, from a relative `table` of `2 * max_len - 1` rows (relative
/// positions `max_len - 1 .. -(max_len - 1)`), the relative positions `offset + L - 1 ..
/// -(L - 1)` of `L = x.size(1)` queries after `offset` cached frames; or, `legacy`, from an
/// absolute sinusoidal table of `max_len` rows, the positions `offset .. offset + L - 1`.
/// `x` is `[B, L, D]`; no frames (L = 0) have no rows.
std::tuple<at::Tensor, at::Tensor> relative_positional_encoding(const at::Tensor& x,
                                                                const at::Tensor& table,
                                                                int64_t offset, bool legacy,
                                                                double scale, double dropout,
                                                                bool training);

/// Relative-position multi-head attention (Transformer-XL, Conformer), after the projections:
/// `q`, `k`, `v` `[B, H, Lq|Lk, d_k]`, `p` the projected relative table `[1 or B, H, Lq + Lk - 1,
/// d_k]`, `pos_bias_u` / `pos_bias_v` `[H, d_k]`:
/// `softmax(((q + u) k^T + rel_shift((q + v) p^T)) / sqrt(d_k) + mask) v`, `[B, H, Lq, d_k]`.
/// `mask`: bool (true = attend) or additive float, broadcastable to `[B, H, Lq, Lk]`.
at::Tensor relative_position_attention(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& p,
                                       const at::Tensor& pos_bias_u, const at::Tensor& pos_bias_v,
                                       const at::Tensor& mask = at::Tensor(),
                                       double dropout = 0.0, bool training = false);

} // namespace functional
} // namespace posenc

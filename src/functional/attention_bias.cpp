#include <posenc/functional/attention_bias.h>
#include <posenc/ops.h>

#include "detail/checks.h"

#include <ATen/ops/dropout.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/softmax.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

namespace posenc {
namespace functional {

namespace pd = posenc::detail;

namespace {
c10::optional<at::Tensor> optional_of(const at::Tensor& tensor) {
  return tensor.defined() ? c10::optional<at::Tensor>(tensor) : c10::nullopt;
}
} // namespace

at::Tensor alibi_slopes(int64_t num_heads, double max_bias, int64_t first_head,
                        c10::optional<int64_t> heads) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "alibi_slopes");
  return ops::alibi_slopes(num_heads, max_bias, first_head, heads);
}

at::Tensor alibi_bias(const at::Tensor& slopes, int64_t query_length, int64_t key_length,
                      c10::optional<int64_t> offset, bool causal) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "alibi_bias");
  return ops::alibi_bias(slopes, query_length, key_length, offset, causal);
}

at::Tensor alibi_causal_bias(const at::Tensor& slopes, int64_t key_length,
                             const at::Tensor& attention_mask) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "alibi_causal_bias");
  return ops::alibi_causal_bias(slopes, key_length, optional_of(attention_mask));
}

at::Tensor relative_position_bucket(const at::Tensor& relative_position, bool bidirectional,
                                    int64_t num_buckets, int64_t max_distance) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "relative_position_bucket");
  return ops::relative_position_bucket(relative_position, bidirectional, num_buckets,
                                       max_distance);
}

at::Tensor relative_position_bias(const at::Tensor& weight, int64_t query_length,
                                  int64_t key_length, bool bidirectional, int64_t max_distance,
                                  int64_t offset) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "relative_position_bias");
  return ops::relative_position_bias(weight, query_length, key_length, bidirectional,
                                     max_distance, offset);
}

at::Tensor relative_sinusoidal_table(int64_t length, int64_t d_model,
                                     c10::optional<int64_t> key_length, double base) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "relative_sinusoidal_table");
  return ops::relative_sinusoidal_table(length, d_model, base, key_length);
}

at::Tensor rel_shift(const at::Tensor& x) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "rel_shift");
  return ops::rel_shift(x);
}

at::Tensor attention_temperature(const at::Tensor& query, const at::Tensor& positions,
                                 int64_t offset, double floor_scale, double attn_scale,
                                 bool heads_first, AttentionTemperatureForm form) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "attention_temperature");
  return ops::attention_temperature(query, optional_of(positions), offset, floor_scale, attn_scale,
                                    heads_first, attention_temperature_form_name(form));
}

std::tuple<at::Tensor, at::Tensor> relative_positional_encoding(const at::Tensor& x,
                                                                const at::Tensor& table,
                                                                int64_t offset, bool legacy,
                                                                double scale, double dropout,
                                                                bool training) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "relative_positional_encoding");
  const char* who = pd::caller_or("");
  pd::check_dropout(who, dropout);
  const pd::TableShape shape = pd::check_table(who, table);
  pd::check_sequence_input(who, x, shape.width, /*batch_first=*/true, table.device());
  const int64_t length = x.size(1);
  // legacy: an absolute table of max_len rows; otherwise relative positions max_len - 1 ..
  // -(max_len - 1), so max_len = (rows + 1) / 2
  const int64_t max_len = legacy ? shape.max_len : (shape.max_len + 1) / 2;
  TORCH_CHECK(legacy || shape.max_len % 2 == 1, who,
              ": a relative table has 2 * max_len - 1 rows (an odd number), but got ",
              shape.max_len);
  pd::check_offset_start(who, offset, length);
  TORCH_CHECK(offset + length <= max_len, who, ": the ", offset, " cached and ", length,
              " new positions must fit in the table's max_len = ", max_len, " (offset + L <= ",
              max_len, "); build the module with a larger max_len");
  const at::Tensor rows = pd::table_rows(table);
  // legacy: positions offset .. offset + L - 1; relative: row r holds max_len - 1 - r
  const at::Tensor pos_emb =
      legacy ? rows.narrow(0, offset, length)
             : rows.narrow(0, max_len - offset - length, offset + 2 * length - 1);
  at::Tensor scaled = scale == 1.0 ? x : x * scale;
  at::Tensor positions = pos_emb.unsqueeze(0).to(x.scalar_type());
  if (dropout > 0 && training) {
    scaled = at::dropout(scaled, dropout, training);
    positions = at::dropout(positions, dropout, training);
  }
  return {scaled, positions};
}

at::Tensor relative_position_attention(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& p,
                                       const at::Tensor& pos_bias_u, const at::Tensor& pos_bias_v,
                                       const at::Tensor& mask, double dropout, bool training) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "relative_position_attention");
  const char* who = pd::caller_or("");
  pd::check_dropout(who, dropout);
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, who,
              ": q, k and v must be [B, H, L, d_k], but got shapes ", q.sizes(), ", ", k.sizes(),
              " and ", v.sizes());
  const int64_t heads = q.size(1);
  const int64_t depth = q.size(3);
  const int64_t queries = q.size(2);
  const int64_t keys = k.size(2);
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(1) == heads &&
                  v.size(1) == heads && k.size(3) == depth && v.size(2) == keys,
              who, ": k and v must be [B, H, Lk, d_k] with the B, H and d_k of q ", q.sizes(),
              ", but got ", k.sizes(), " and ", v.sizes());
  TORCH_CHECK(p.dim() == 4 && (p.size(0) == 1 || p.size(0) == q.size(0)) && p.size(1) == heads &&
                  p.size(2) == queries + keys - 1 && p.size(3) == depth,
              who, ": the projected relative table p must be [1 or B, H, Lq + Lk - 1, d_k] = [1 or ",
              q.size(0), ", ", heads, ", ", queries + keys - 1, ", ", depth,
              "] for Lq = ", queries, " queries and Lk = ", keys, " keys, but got ", p.sizes(),
              "; pass the table of relative positions Lk - 1 .. -(Lq - 1)");
  TORCH_CHECK(pos_bias_u.dim() == 2 && pos_bias_u.size(0) == heads && pos_bias_u.size(1) == depth &&
                  pos_bias_v.sizes() == pos_bias_u.sizes(),
              who, ": pos_bias_u and pos_bias_v must be [H, d_k] = [", heads, ", ", depth,
              "], but got ", pos_bias_u.sizes(), " and ", pos_bias_v.sizes());
  const at::Tensor u = pos_bias_u.unsqueeze(1); // [H, 1, d_k]
  const at::Tensor bias_v = pos_bias_v.unsqueeze(1);
  const at::Tensor content = at::matmul(q + u, k.transpose(-2, -1));          // [B, H, Lq, Lk]
  const at::Tensor position = rel_shift(at::matmul(q + bias_v, p.transpose(-2, -1)));
  at::Tensor scores = (content + position) * (1.0 / std::sqrt(static_cast<double>(depth)));
  if (mask.defined()) {
    if (mask.scalar_type() == at::kBool) {
      scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
    } else {
      scores = scores + mask;
    }
  }
  at::Tensor weights = at::softmax(scores, -1);
  if (dropout > 0 && training) {
    weights = at::dropout(weights, dropout, training);
  }
  return at::matmul(weights, v);
}

} // namespace functional
} // namespace posenc

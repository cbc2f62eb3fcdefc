#include <posenc/functional/attention_bias.h>
#include <posenc/ops.h>

#include "detail/checks.h"
#include "ops/common/arguments.h"
#include "ops/bias/relative_module.h"

#include <c10/util/Exception.h>

namespace posenc {
namespace functional {

namespace pd = posenc::detail;

using ops::optional_of;

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
  return ops::rel_positional_encoding_forward(x, table, offset, legacy, scale, dropout, training);
}

at::Tensor relative_position_attention(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& p,
                                       const at::Tensor& pos_bias_u, const at::Tensor& pos_bias_v,
                                       const at::Tensor& mask, double dropout, bool training) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "relative_position_attention");
  return ops::relative_position_attention_forward(q, k, v, p, pos_bias_u, pos_bias_v,
                                                  optional_of(mask), dropout, training);
}

} // namespace functional
} // namespace posenc

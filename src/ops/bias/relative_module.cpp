// The relative-position modules' calls (ops/bias/relative_module.h), and the
// rel_positional_encoding_call / rel_position_multihead_attention_call operators through which
// posenc.nn's modules make them.

#include "ops/bias/relative_module.h"
#include "ops/common/sym_length.h"

#include "detail/checks.h"

#include <posenc/ops/attention_bias.h>

#include <ATen/ops/dropout.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/softmax.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace posenc {
namespace ops {

namespace {
constexpr const char* kRelEncodingName = "RelPositionalEncoding";
constexpr const char* kRelAttentionName = "RelPositionMultiheadAttention";

// "an undefined tensor" or the tensor's shape, for messages
std::string shape_or_undefined(const at::Tensor& t) {
  return t.defined() ? c10::str(shape_of(t)) : "an undefined tensor";
}
} // namespace

std::tuple<at::Tensor, at::Tensor> rel_positional_encoding_forward(const at::Tensor& x,
                                                                   const at::Tensor& table,
                                                                   int64_t offset, bool legacy,
                                                                   double scale, double dropout,
                                                                   bool training) {
  static constexpr detail::CallerName who{};
  detail::check_dropout(dropout);
  const detail::TableShape shape = detail::check_table(table);
  detail::check_sequence_input(x, shape.width, /*batch_first=*/true, table.device());
  const SymLength length = size_of(x, 1);
  // legacy: an absolute table of max_len rows; otherwise relative positions max_len - 1 ..
  // -(max_len - 1), so max_len = (rows + 1) / 2
  const int64_t max_len = legacy ? shape.max_len : (shape.max_len + 1) / 2;
  TORCH_CHECK(legacy || shape.max_len % 2 == 1, who,
              ": a relative table has 2 * max_len - 1 rows (an odd number), but got ",
              shape.max_len);
  // offset >= 0, and offset + L within int64 where L is concrete (a symbolic L is bounded by the
  // next check, which torch.export turns into a constraint on it)
  detail::check_offset_start(offset, concrete(length).value_or(0));
  // (offset + L <= max_len, written so that L is compared, not read)
  TORCH_CHECK(length <= max_len - offset, who, ": the ", offset, " cached and ", length,
              " new positions must fit in the table's max_len = ", max_len,
              " (offset + L <= ", max_len, "); build the module with a larger max_len");
  const at::Tensor rows = detail::table_rows(table);
  // legacy: positions offset .. offset + L - 1; relative: row r holds max_len - 1 - r, and no
  // frames have no relative positions (ESPnet's empty slice)
  const at::Tensor pos_emb = legacy        ? POSENC_SYM(rows.narrow)(0, offset, length)
                             : length == 0 ? rows.narrow(0, 0, 0)
                                           : POSENC_SYM(rows.narrow)(0, max_len - offset - length,
                                                                     offset + 2 * length - 1);
  at::Tensor scaled = scale == 1.0 ? x : x * scale;
  at::Tensor positions = pos_emb.unsqueeze(0).to(x.scalar_type());
  if (dropout > 0 && training) {
    scaled = at::dropout(scaled, dropout, training);
    positions = at::dropout(positions, dropout, training);
  }
  return {scaled, positions};
}

at::Tensor relative_position_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v, const at::Tensor& p,
                                               const at::Tensor& pos_bias_u,
                                               const at::Tensor& pos_bias_v,
                                               const c10::optional<at::Tensor>& mask,
                                               double dropout, bool training) {
  static constexpr detail::CallerName who{};
  detail::check_dropout(dropout);
  TORCH_CHECK(
      q.defined() && k.defined() && v.defined() && q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
      who, ": q, k and v must be [B, H, L, d_k], but got shapes ", shape_or_undefined(q), ", ",
      shape_or_undefined(k), " and ", shape_or_undefined(v));
  const SymLength batch = size_of(q, 0);
  const SymLength heads = size_of(q, 1);
  const SymLength queries = size_of(q, 2);
  const SymLength depth = size_of(q, 3);
  const SymLength keys = size_of(k, 2);
  TORCH_CHECK(size_of(k, 0) == batch && size_of(v, 0) == batch && size_of(k, 1) == heads &&
                  size_of(v, 1) == heads && size_of(k, 3) == depth && size_of(v, 2) == keys,
              who, ": k and v must be [B, H, Lk, d_k] with the B, H and d_k of q ", shape_of(q),
              ", but got ", shape_of(k), " and ", shape_of(v));
  TORCH_CHECK(
      p.defined() && p.dim() == 4 && (size_of(p, 0) == 1 || size_of(p, 0) == batch) &&
          size_of(p, 1) == heads && size_of(p, 2) == queries + keys - 1 && size_of(p, 3) == depth,
      who, ": the projected relative table p must be [1 or B, H, Lq + Lk - 1, d_k] = [1 or ", batch,
      ", ", heads, ", ", queries + keys - 1, ", ", depth, "] for Lq = ", queries,
      " queries and Lk = ", keys, " keys, but got ", shape_or_undefined(p),
      "; pass the table of relative positions Lk - 1 .. -(Lq - 1)");
  TORCH_CHECK(pos_bias_u.defined() && pos_bias_v.defined() && pos_bias_u.dim() == 2 &&
                  pos_bias_v.dim() == 2 && size_of(pos_bias_u, 0) == heads &&
                  size_of(pos_bias_u, 1) == depth && size_of(pos_bias_v, 0) == heads &&
                  size_of(pos_bias_v, 1) == depth,
              who, ": pos_bias_u and pos_bias_v must be [H, d_k] = [", heads, ", ", depth,
              "], but got ", shape_or_undefined(pos_bias_u), " and ",
              shape_or_undefined(pos_bias_v));
  const at::Tensor content = at::matmul(q + pos_bias_u.unsqueeze(1), k.transpose(-2, -1));
  const at::Tensor position =
      ops::rel_shift(at::matmul(q + pos_bias_v.unsqueeze(1), p.transpose(-2, -1)));
  // (d_k is a weight's width: concrete under torch.export)
  at::Tensor scores =
      (content + position) * (1.0 / std::sqrt(static_cast<double>(value_of(depth))));
  if (mask.has_value() && mask->defined()) {
    if (mask->scalar_type() == at::kBool) {
      scores = scores.masked_fill(mask->logical_not(), -std::numeric_limits<double>::infinity());
    } else {
      scores = scores + *mask;
    }
  }
  at::Tensor weights = at::softmax(scores, -1);
  if (dropout > 0 && training) {
    weights = at::dropout(weights, dropout, training);
  }
  return at::matmul(weights, v); // [B, H, Lq, d_k]
}

at::Tensor rel_position_multihead_attention_forward(const RelPositionAttentionState& module,
                                                    const at::Tensor& query, const at::Tensor& key,
                                                    const at::Tensor& value,
                                                    const at::Tensor& pos_emb,
                                                    const c10::optional<at::Tensor>& mask,
                                                    bool training) {
  const detail::CallerScope caller(kRelAttentionName);
  const char* who = kRelAttentionName;
  const int64_t embed_dim = module.embed_dim;
  const int64_t num_heads = module.num_heads;
  TORCH_CHECK(num_heads >= 1 && embed_dim >= 1 && embed_dim % num_heads == 0, who,
              ": embed_dim must be a positive multiple of num_heads >= 1, but got embed_dim = ",
              embed_dim, " and num_heads = ", num_heads);
  for (const at::Tensor* t : {&query, &key, &value, &pos_emb}) {
    TORCH_CHECK(t->defined() && t->dim() == 3 && size_of(*t, 2) == embed_dim, who,
                ": query, key, value and pos_emb must be [B, L, embed_dim = ", embed_dim,
                "], but got ", shape_or_undefined(*t));
  }
  const SymLength batch = size_of(query, 0);
  const SymLength queries = size_of(query, 1);
  const SymLength keys = size_of(key, 1);
  TORCH_CHECK(size_of(key, 0) == batch && size_of(value, 0) == batch && size_of(value, 1) == keys,
              who, ": key and value must be [B, Lk, ", embed_dim, "] with the batch of query ",
              shape_of(query), ", but got ", shape_of(key), " and ", shape_of(value));
  TORCH_CHECK((size_of(pos_emb, 0) == 1 || size_of(pos_emb, 0) == batch) &&
                  size_of(pos_emb, 1) == queries + keys - 1,
              who, ": pos_emb must be [1 or B, Lq + Lk - 1, embed_dim] = [1 or ", batch, ", ",
              queries + keys - 1, ", ", embed_dim, "] for Lq = ", queries,
              " queries and Lk = ", keys, " keys, but got ", shape_of(pos_emb),
              "; pass the table of relative positions Lk - 1 .. -(Lq - 1)");
  const int64_t depth = embed_dim / num_heads;
  const auto split = [&](const at::Tensor& t) { // [B, L, D] -> [B, H, L, d_k]
    const std::vector<SymLength> sizes{size_of(t, 0), size_of(t, 1), SymLength(num_heads),
                                       SymLength(depth)};
    return POSENC_SYM(t.view)(sizes).transpose(1, 2);
  };
  const at::Tensor q = split(at::linear(query, module.q_weight, module.q_bias));
  const at::Tensor k = split(at::linear(key, module.k_weight, module.k_bias));
  const at::Tensor v = split(at::linear(value, module.v_weight, module.v_bias));
  const at::Tensor p = split(at::linear(pos_emb, module.pos_weight));
  const at::Tensor attended = relative_position_attention_forward(
      q, k, v, p, module.pos_bias_u, module.pos_bias_v, mask, module.dropout, training);
  const std::vector<SymLength> merged{batch, queries, SymLength(embed_dim)};
  return at::linear(POSENC_SYM(attended.transpose(1, 2).reshape)(merged), module.out_weight,
                    module.out_bias);
}

namespace {

// --- the operators: posenc.nn's modules pass their options and parameters as arguments --------

std::tuple<at::Tensor, at::Tensor> rel_positional_encoding_call(const at::Tensor& x,
                                                                const at::Tensor& pe,
                                                                int64_t offset, bool legacy,
                                                                double scale, double dropout,
                                                                bool training) {
  const detail::CallerScope caller(kRelEncodingName);
  return rel_positional_encoding_forward(x, pe, offset, legacy, scale, dropout, training);
}

at::Tensor undefined_if_absent(const c10::optional<at::Tensor>& t) {
  return t.has_value() ? *t : at::Tensor();
}

at::Tensor rel_position_multihead_attention_call(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& pos_emb, const c10::optional<at::Tensor>& mask, int64_t embed_dim,
    int64_t num_heads, const at::Tensor& q_weight, const c10::optional<at::Tensor>& q_bias,
    const at::Tensor& k_weight, const c10::optional<at::Tensor>& k_bias, const at::Tensor& v_weight,
    const c10::optional<at::Tensor>& v_bias, const at::Tensor& pos_weight,
    const at::Tensor& out_weight, const c10::optional<at::Tensor>& out_bias,
    const at::Tensor& pos_bias_u, const at::Tensor& pos_bias_v, double dropout, bool training) {
  RelPositionAttentionState module;
  module.embed_dim = embed_dim;
  module.num_heads = num_heads;
  module.dropout = dropout;
  module.q_weight = q_weight;
  module.q_bias = undefined_if_absent(q_bias);
  module.k_weight = k_weight;
  module.k_bias = undefined_if_absent(k_bias);
  module.v_weight = v_weight;
  module.v_bias = undefined_if_absent(v_bias);
  module.pos_weight = pos_weight;
  module.out_weight = out_weight;
  module.out_bias = undefined_if_absent(out_bias);
  module.pos_bias_u = pos_bias_u;
  module.pos_bias_v = pos_bias_v;
  return rel_position_multihead_attention_forward(module, query, key, value, pos_emb, mask,
                                                  training);
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, CompositeImplicitAutograd, m) {
  m.impl("rel_positional_encoding_call", &rel_positional_encoding_call);
  m.impl("rel_position_multihead_attention_call", &rel_position_multihead_attention_call);
}

} // namespace ops
} // namespace posenc

#pragma once

#include <posenc/options/token_and_position_embedding.h>

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace posenc {
namespace functional {

namespace detail {
/// `token_and_position_embedding` with raw arguments, as TokenAndPositionEmbedding calls it;
/// `columns` (the table's column plan) lets positions past the table be computed.
at::Tensor token_and_position_embedding(const at::Tensor& tokens, const at::Tensor& weight,
                                        const at::Tensor& table, int64_t offset,
                                        const at::Tensor& positions, bool batch_first, double scale,
                                        int64_t padding_idx, double dropout, bool training,
                                        const at::Tensor& columns = at::Tensor());
} // namespace detail

/// `dropout(weight[tokens] * scale + table[positions])` in one pass (the posenc::
/// token_and_position_embedding operator): the functional form of TokenAndPositionEmbedding.
/// `tokens` are int64 `[B, L]` (or `[L, B]`), `weight` `[vocab, D]`, `table` `[max_len, D]` or
/// `[1, max_len, D]`; the result is `[B, L, D]` (`[L, B, D]`) in the weight's dtype.
inline at::Tensor token_and_position_embedding(
    const at::Tensor& tokens, const at::Tensor& weight, const at::Tensor& table,
    const TokenAndPositionEmbeddingFuncOptions& options = {}) {
  return detail::token_and_position_embedding(
      tokens, weight, table, options.offset(), options.positions(), options.batch_first(),
      options.scale(), options.padding_idx(), options.dropout(), options.training());
}

} // namespace functional
} // namespace posenc

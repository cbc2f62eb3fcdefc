#pragma once

// token_and_position_embedding's operator kernel for a backend with hand-written loops (CPU,
// CUDA), written once: the backend supplies its loop and its allocation
// (ops/common/backend_entries.h).

#include "detail/checks.h"
#include "ops/common/backend_entries.h"
#include "ops/token/arguments.h"

#include <ATen/core/Tensor.h>

#include <tuple>

namespace posenc {
namespace ops {

/// out = dropout(weight[tokens] * scale + table[positions]) for a checked call, writing `mask`
/// when `train && dropout > 0`; tokens and weight contiguous.
using TokenLoop = void (*)(const at::Tensor& tokens, const at::Tensor& weight, at::Tensor& out,
                           at::Tensor& mask, const TableCall& call, double dropout, bool drop);

template <TokenLoop loop, EmptyFn empty>
std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_kernel(
    const at::Tensor& tokens, const at::Tensor& weight, const at::Tensor& table, int64_t offset,
    bool batch_first, OptionalTensor positions, double scale, int64_t padding_idx, double dropout,
    bool train, OptionalTensor columns) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{},
                                   "posenc::token_and_position_embedding");
  const TableCall call = prepare_token_call(tokens, weight, table, offset, positions, batch_first,
                                            scale, dropout, columns);
  // (the forward reads every row; padding_idx is the row the backward leaves without gradient)
  check_padding_idx(padding_idx, weight.size(0));
  at::Tensor out = empty({tokens.size(0), tokens.size(1), weight.size(1)}, weight.options());
  const bool drop = train && dropout > 0.0;
  at::Tensor mask =
      empty(drop ? out.sizes() : at::IntArrayRef{0}, weight.options().dtype(at::kBool));
  loop(tokens.contiguous(), weight.contiguous(), out, mask, call, dropout, drop);
  return {out, mask};
}

} // namespace ops
} // namespace posenc

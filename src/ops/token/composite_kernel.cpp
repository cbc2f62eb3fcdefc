// Composite kernels of the token-embedding family (ATen operations only), registered as
// CompositeExplicitAutograd for devices without a fused kernel. The CPU and CUDA kernels draw their
// dropout masks differently (see ../cpu and ../cuda); on those devices this kernel never runs.

#include "ops/common/backend_entries.h"
#include "ops/common/composite_kernels.h"
#include "ops/common/composite_rows.h"
#include "ops/common/dispatch.h"
#include "ops/token/composite_kernel.h"

#include <ATen/ops/embedding.h>
#include <ATen/ops/embedding_dense_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace composite {
namespace {

// grad * mask / (1 - p): the gradient through the dropout that produced `mask`.
at::Tensor through_dropout(const at::Tensor& grad, const at::Tensor& mask, double dropout) {
  if (mask.numel() == 0) {
    return grad;
  }
  return dropout >= 1.0 ? at::zeros_like(grad)
                        : grad.masked_fill(mask.logical_not(), 0)
                              .mul(1.0 / (1.0 - dropout))
                              .to(grad.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_backward(
    const at::Tensor& grad, const at::Tensor& mask, const at::Tensor& tokens,
    const at::Tensor& weight, const at::Tensor& table, int64_t offset, bool batch_first,
    OptionalTensor positions, double scale, int64_t padding_idx, double dropout,
    std::array<bool, 2> output_mask) {
  check_token_backward_devices(grad, mask, tokens, weight, table, positions);
  const at::Tensor g = through_dropout(grad, mask, dropout);
  at::Tensor grad_weight;
  at::Tensor grad_table;
  if (output_mask[0]) {
    grad_weight = at::embedding_dense_backward(g.mul(scale).to(weight.scalar_type()), tokens,
                                               weight.size(0), padding_idx,
                                               /*scale_grad_by_freq=*/false);
  }
  if (output_mask[1]) {
    grad_table = ops::add_position_table_backward(g, table, offset, batch_first, positions);
  }
  return {grad_weight, grad_table};
}

} // namespace

void token_loop(const at::Tensor& tokens, const at::Tensor& weight, at::Tensor& out,
                at::Tensor& mask, const TableCall& call, double dropout, bool drop) {
  at::Tensor sum = add_rows(at::embedding(weight, tokens), selected_rows(call), call.scale);
  if (drop) {
    // Keep each element with probability 1 - p and scale the kept ones by 1 / (1 - p).
    mask.copy_(at::empty(out.sizes(), out.options().dtype(at::kFloat)).bernoulli_(1.0 - dropout));
    sum = through_dropout(sum, mask, dropout);
  }
  out.copy_(sum);
}

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding(
    const at::Tensor& tokens, const at::Tensor& weight, const at::Tensor& table, int64_t offset,
    bool batch_first, OptionalTensor positions, double scale, int64_t padding_idx, double dropout,
    bool train, OptionalTensor columns) {
  return token_and_position_embedding_kernel<token_loop, empty>(
      tokens, weight, table, offset, batch_first, positions, scale, padding_idx, dropout, train,
      columns);
}

} // namespace composite

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  m.impl("token_and_position_embedding",
         TORCH_FN((token_and_position_embedding_kernel<composite::token_loop, composite::empty>)));
  m.impl("_token_and_position_embedding_backward",
         TORCH_FN(composite::token_and_position_embedding_backward));
}

} // namespace ops
} // namespace posenc

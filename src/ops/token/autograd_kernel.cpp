// Autograd kernel of the token-embedding family: gradients for the weight (embedding backward,
// padding_idx rows excluded) and the table (batch-summed rows), through the private backward
// operator.

#include "ops/common/autograd_helpers.h"
#include "ops/common/dispatch.h"

#include <posenc/ops.h>

#include <torch/autograd.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class TokenAndPositionFunction : public torch::autograd::Function<TokenAndPositionFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& tokens,
                               const at::Tensor& weight, const at::Tensor& table, int64_t offset,
                               bool batch_first, OptionalTensor positions, double scale,
                               int64_t padding_idx, double dropout, bool train,
                               OptionalTensor columns) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out;
    at::Tensor mask;
    std::tie(out, mask) =
        token_and_position_embedding(tokens, weight, table, offset, batch_first, positions, scale,
                                     padding_idx, dropout, train, columns);
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["batch_first"] = batch_first;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["padding_idx"] = padding_idx;
    ctx->saved_data["dropout"] = dropout;
    ctx->save_for_backward({mask, tokens, weight, table, defined_or_empty(positions)});
    ctx->mark_non_differentiable({mask});
    return {out, mask};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list grads(11);
    if (!grad_outputs[0].defined()) {
      return grads;
    }
    const variable_list saved = ctx->get_saved_variables();
    const std::array<bool, 2> output_mask = {ctx->needs_input_grad(1), ctx->needs_input_grad(2)};
    std::tie(grads[1], grads[2]) = token_and_position_embedding_backward(
        grad_outputs[0], saved[0], saved[1], saved[2], saved[3], ctx->saved_data["offset"].toInt(),
        ctx->saved_data["batch_first"].toBool(), optional_of(saved[4]),
        ctx->saved_data["scale"].toDouble(), ctx->saved_data["padding_idx"].toInt(),
        ctx->saved_data["dropout"].toDouble(), output_mask);
    return grads;
  }
};

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_autograd(
    const at::Tensor& tokens, const at::Tensor& weight, const at::Tensor& table, int64_t offset,
    bool batch_first, OptionalTensor positions, double scale, int64_t padding_idx, double dropout,
    bool train, OptionalTensor columns) {
  if (below_autograd_suffices(weight, table)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return token_and_position_embedding(tokens, weight, table, offset, batch_first, positions,
                                        scale, padding_idx, dropout, train, columns);
  }
  if (columns.has_value() && columns->defined()) {
    check_fixed_table("posenc::token_and_position_embedding", table, kExtendedTable);
  }
  const variable_list outputs =
      TokenAndPositionFunction::apply(tokens, weight, table, offset, batch_first, positions, scale,
                                      padding_idx, dropout, train, columns);
  return {outputs[0], outputs[1]};
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, Autograd, m) {
  m.impl("token_and_position_embedding", TORCH_FN(token_and_position_embedding_autograd));
}

} // namespace ops
} // namespace posenc

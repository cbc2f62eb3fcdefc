// Autograd kernels: each forward redispatches below autograd; each backward is written with
// operators only (no shapes read here), so it also traces under fake tensors with symbolic shapes.

#include <posenc/ops.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class AddPositionTableFunction : public torch::autograd::Function<AddPositionTableFunction> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& x,
      const at::Tensor& table,
      int64_t offset,
      bool batch_first) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["batch_first"] = batch_first;
    ctx->save_for_backward({table});
    return add_position_table(x, table, offset, batch_first);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const at::Tensor& grad = grad_outputs[0];
    at::Tensor grad_table;
    if (ctx->needs_input_grad(1) && grad.defined()) {
      const at::Tensor table = ctx->get_saved_variables()[0];
      grad_table = add_position_table_backward(
          grad, table, ctx->saved_data["offset"].toInt(), ctx->saved_data["batch_first"].toBool());
    }
    // d(x + rows)/dx is the identity; the output has the dtype of x, and so has its gradient.
    return {grad, grad_table, at::Tensor(), at::Tensor()};
  }
};

// grad_table = scatter of grad (summed over the batch) into rows offset .. offset + L - 1. It is
// linear in grad, so its own gradient broadcasts the incoming table gradient's rows back:
// add_position_table(zeros_like(grad), grad_grad_table) does exactly that with operators only.
class AddPositionTableBackwardFunction : public torch::autograd::Function<AddPositionTableBackwardFunction> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& grad,
      const at::Tensor& table,
      int64_t offset,
      bool batch_first) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["batch_first"] = batch_first;
    ctx->save_for_backward({grad});
    return add_position_table_backward(grad, table, offset, batch_first);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const at::Tensor& grad_grad_table = grad_outputs[0];
    at::Tensor grad_grad;
    if (ctx->needs_input_grad(0) && grad_grad_table.defined()) {
      const at::Tensor grad = ctx->get_saved_variables()[0];
      grad_grad = add_position_table(
          at::zeros_like(grad), grad_grad_table, ctx->saved_data["offset"].toInt(), ctx->saved_data["batch_first"].toBool());
    }
    // The table only lends its shape: no gradient flows to it.
    return {grad_grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

class AddPositionalEncodingFunction : public torch::autograd::Function<AddPositionalEncodingFunction> {
 public:
  static at::Tensor forward(AutogradContext* /*ctx*/, const at::Tensor& x, int64_t offset, double base, bool batch_first) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return add_positional_encoding(x, offset, base, batch_first);
  }

  static variable_list backward(AutogradContext* /*ctx*/, variable_list grad_outputs) {
    return {grad_outputs[0], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor add_position_table_autograd(const at::Tensor& x, const at::Tensor& table, int64_t offset, bool batch_first) {
  return AddPositionTableFunction::apply(x, table, offset, batch_first);
}

at::Tensor add_position_table_backward_autograd(const at::Tensor& grad, const at::Tensor& table, int64_t offset, bool batch_first) {
  return AddPositionTableBackwardFunction::apply(grad, table, offset, batch_first);
}

at::Tensor add_positional_encoding_autograd(const at::Tensor& x, int64_t offset, double base, bool batch_first) {
  return AddPositionalEncodingFunction::apply(x, offset, base, batch_first);
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, Autograd, m) {
  m.impl("add_position_table", TORCH_FN(add_position_table_autograd));
  m.impl("add_position_table_backward", TORCH_FN(add_position_table_backward_autograd));
  m.impl("add_positional_encoding", TORCH_FN(add_positional_encoding_autograd));
}

} // namespace ops
} // namespace posenc

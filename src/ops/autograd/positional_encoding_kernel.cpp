// Autograd kernels: each forward redispatches below autograd; each backward is written with
// operators only (no shapes read here), so it also traces under fake tensors with symbolic shapes.

#include <posenc/ops.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptionalTensor = const c10::optional<at::Tensor>&;

c10::optional<at::Tensor> optional_of(const at::Tensor& tensor) {
  return tensor.defined() ? c10::optional<at::Tensor>(tensor) : c10::nullopt;
}

at::Tensor defined_or_empty(OptionalTensor tensor) {
  return tensor.has_value() ? *tensor : at::Tensor();
}

// d(x * scale + rows)/dx = scale; the output has the dtype of x, and so has its gradient.
at::Tensor scaled(const at::Tensor& grad, double scale) {
  return scale == 1.0 || !grad.defined() ? grad : at::mul(grad, scale);
}

class AddPositionTableFunction : public torch::autograd::Function<AddPositionTableFunction> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& x,
      const at::Tensor& table,
      int64_t offset,
      bool batch_first,
      OptionalTensor positions,
      double scale) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["batch_first"] = batch_first;
    ctx->saved_data["scale"] = scale;
    ctx->save_for_backward({table, defined_or_empty(positions)});
    return add_position_table(x, table, offset, batch_first, positions, scale);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const at::Tensor& grad = grad_outputs[0];
    at::Tensor grad_table;
    if (ctx->needs_input_grad(1) && grad.defined()) {
      const variable_list saved = ctx->get_saved_variables();
      grad_table = add_position_table_backward(
          grad, saved[0], ctx->saved_data["offset"].toInt(), ctx->saved_data["batch_first"].toBool(), optional_of(saved[1]));
    }
    return {scaled(grad, ctx->saved_data["scale"].toDouble()), grad_table, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// grad_table = the gradient rows added into the table rows they came from. It is linear in grad,
// so its own gradient gathers the incoming table gradient's rows back:
// add_position_table(zeros_like(grad), grad_grad_table, ...) does exactly that with operators only.
class AddPositionTableBackwardFunction : public torch::autograd::Function<AddPositionTableBackwardFunction> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& grad,
      const at::Tensor& table,
      int64_t offset,
      bool batch_first,
      OptionalTensor positions) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["batch_first"] = batch_first;
    ctx->save_for_backward({grad, defined_or_empty(positions)});
    return add_position_table_backward(grad, table, offset, batch_first, positions);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const at::Tensor& grad_grad_table = grad_outputs[0];
    at::Tensor grad_grad;
    if (ctx->needs_input_grad(0) && grad_grad_table.defined()) {
      const variable_list saved = ctx->get_saved_variables();
      grad_grad = add_position_table(
          at::zeros_like(saved[0]), grad_grad_table, ctx->saved_data["offset"].toInt(),
          ctx->saved_data["batch_first"].toBool(), optional_of(saved[1]), 1.0);
    }
    // The table only lends its shape: no gradient flows to it.
    return {grad_grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

class AddPositionalEncodingFunction : public torch::autograd::Function<AddPositionalEncodingFunction> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& x,
      int64_t offset,
      double base,
      bool batch_first,
      OptionalTensor positions,
      double scale,
      c10::string_view channels,
      c10::string_view frequencies) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["scale"] = scale;
    return add_positional_encoding(x, offset, base, batch_first, positions, scale, channels, frequencies);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list grads(8);
    grads[0] = scaled(grad_outputs[0], ctx->saved_data["scale"].toDouble());
    return grads;
  }
};

// A rotation is orthogonal: its gradient is the inverse rotation of the incoming gradient.
class ApplyRotaryFunction : public torch::autograd::Function<ApplyRotaryFunction> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& x,
      const at::Tensor& cos,
      const at::Tensor& sin,
      int64_t offset,
      OptionalTensor positions,
      bool interleaved,
      bool heads_first,
      bool inverse) {
    TORCH_CHECK(
        !cos.requires_grad() && !sin.requires_grad(),
        "posenc::apply_rotary: cos and sin are fixed tables and get no gradient; pass cos.detach() and sin.detach()");
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["interleaved"] = interleaved;
    ctx->saved_data["heads_first"] = heads_first;
    ctx->saved_data["inverse"] = inverse;
    ctx->save_for_backward({cos, sin, defined_or_empty(positions)});
    return apply_rotary(x, cos, sin, offset, positions, interleaved, heads_first, inverse);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list grads(8);
    if (grad_outputs[0].defined()) {
      const variable_list saved = ctx->get_saved_variables();
      grads[0] = apply_rotary(
          grad_outputs[0], saved[0], saved[1], ctx->saved_data["offset"].toInt(), optional_of(saved[2]),
          ctx->saved_data["interleaved"].toBool(), ctx->saved_data["heads_first"].toBool(),
          !ctx->saved_data["inverse"].toBool());
    }
    return grads;
  }
};

at::Tensor add_position_table_autograd(
    const at::Tensor& x,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first,
    OptionalTensor positions,
    double scale) {
  return AddPositionTableFunction::apply(x, table, offset, batch_first, positions, scale);
}

at::Tensor add_position_table_backward_autograd(
    const at::Tensor& grad,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first,
    OptionalTensor positions) {
  return AddPositionTableBackwardFunction::apply(grad, table, offset, batch_first, positions);
}

at::Tensor add_positional_encoding_autograd(
    const at::Tensor& x,
    int64_t offset,
    double base,
    bool batch_first,
    OptionalTensor positions,
    double scale,
    c10::string_view channels,
    c10::string_view frequencies) {
  return AddPositionalEncodingFunction::apply(x, offset, base, batch_first, positions, scale, channels, frequencies);
}

at::Tensor apply_rotary_autograd(
    const at::Tensor& x,
    const at::Tensor& cos,
    const at::Tensor& sin,
    int64_t offset,
    OptionalTensor positions,
    bool interleaved,
    bool heads_first,
    bool inverse) {
  return ApplyRotaryFunction::apply(x, cos, sin, offset, positions, interleaved, heads_first, inverse);
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, Autograd, m) {
  m.impl("add_position_table", TORCH_FN(add_position_table_autograd));
  m.impl("add_position_table_backward", TORCH_FN(add_position_table_backward_autograd));
  m.impl("add_positional_encoding", TORCH_FN(add_positional_encoding_autograd));
  m.impl("apply_rotary", TORCH_FN(apply_rotary_autograd));
}

} // namespace ops
} // namespace posenc

// Autograd kernels: each forward redispatches below autograd; each backward is written with
// operators only (no shapes read here), so it also traces under fake tensors with symbolic shapes.

#include "ops/common.h"

#include <posenc/ops.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

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
  static at::Tensor forward(AutogradContext* ctx,
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
      grad_table = add_position_table_backward(grad,
                                               saved[0],
                                               ctx->saved_data["offset"].toInt(),
                                               ctx->saved_data["batch_first"].toBool(),
                                               optional_of(saved[1]));
    }
    return {scaled(grad, ctx->saved_data["scale"].toDouble()),
            grad_table,
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

// grad_table = the gradient rows added into the table rows they came from. It is linear in grad,
// so its own gradient gathers the incoming table gradient's rows back:
// add_position_table(zeros_like(grad), grad_grad_table, ...) does exactly that with operators only.
class AddPositionTableBackwardFunction
    : public torch::autograd::Function<AddPositionTableBackwardFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx,
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
      grad_grad = add_position_table(at::zeros_like(saved[0]),
                                     grad_grad_table,
                                     ctx->saved_data["offset"].toInt(),
                                     ctx->saved_data["batch_first"].toBool(),
                                     optional_of(saved[1]),
                                     1.0);
    }
    // The table only lends its shape: no gradient flows to it.
    return {grad_grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

class AddPositionalEncodingFunction
    : public torch::autograd::Function<AddPositionalEncodingFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx,
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
    return add_positional_encoding(
        x, offset, base, batch_first, positions, scale, channels, frequencies);
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
  static at::Tensor forward(AutogradContext* ctx,
                            const at::Tensor& x,
                            const at::Tensor& cos,
                            const at::Tensor& sin,
                            int64_t offset,
                            OptionalTensor positions,
                            bool interleaved,
                            bool heads_first,
                            bool inverse) {
    TORCH_CHECK(!cos.requires_grad() && !sin.requires_grad(),
                "posenc::apply_rotary: cos and sin are fixed tables and get no gradient; pass "
                "cos.detach() and sin.detach()");
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
      grads[0] = apply_rotary(grad_outputs[0],
                              saved[0],
                              saved[1],
                              ctx->saved_data["offset"].toInt(),
                              optional_of(saved[2]),
                              ctx->saved_data["interleaved"].toBool(),
                              ctx->saved_data["heads_first"].toBool(),
                              !ctx->saved_data["inverse"].toBool());
    }
    return grads;
  }
};

at::Tensor add_position_table_autograd(const at::Tensor& x,
                                       const at::Tensor& table,
                                       int64_t offset,
                                       bool batch_first,
                                       OptionalTensor positions,
                                       double scale) {
  if (below_autograd_suffices(x, table)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return add_position_table(x, table, offset, batch_first, positions, scale);
  }
  return AddPositionTableFunction::apply(x, table, offset, batch_first, positions, scale);
}

// In place: x = x * scale + rows. The gradient is the out-of-place one.
class AddPositionTableInplaceFunction
    : public torch::autograd::Function<AddPositionTableInplaceFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx,
                            at::Tensor x,
                            const at::Tensor& table,
                            int64_t offset,
                            bool batch_first,
                            OptionalTensor positions,
                            double scale) {
    {
      at::AutoDispatchBelowAutograd guard; // ADInplaceOrView still runs and bumps x's version
      add_position_table_(x, table, offset, batch_first, positions, scale);
    }
    ctx->mark_dirty({x});
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["batch_first"] = batch_first;
    ctx->saved_data["scale"] = scale;
    ctx->save_for_backward({table, defined_or_empty(positions)});
    return x;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return AddPositionTableFunction::backward(ctx, std::move(grad_outputs));
  }
};

void add_position_table_inplace_autograd(at::Tensor& x,
                                         const at::Tensor& table,
                                         int64_t offset,
                                         bool batch_first,
                                         OptionalTensor positions,
                                         double scale) {
  if (below_autograd_suffices(x, table)) {
    at::AutoDispatchBelowAutograd guard;
    add_position_table_(x, table, offset, batch_first, positions, scale);
    return;
  }
  AddPositionTableInplaceFunction::apply(x, table, offset, batch_first, positions, scale);
}

void add_position_table_out_autograd(const at::Tensor& x,
                                     const at::Tensor& table,
                                     int64_t offset,
                                     bool batch_first,
                                     OptionalTensor positions,
                                     double scale,
                                     at::Tensor& out) {
  TORCH_CHECK(below_autograd_suffices(x, table) && !out.requires_grad(),
              "posenc::add_position_table_out: the out= variant does not support autograd, but an "
              "argument requires grad; "
              "use add_position_table (or run under torch::NoGradGuard)");
  at::AutoDispatchBelowAutograd guard;
  add_position_table_out(out, x, table, offset, batch_first, positions, scale);
}

at::Tensor add_position_table_backward_autograd(const at::Tensor& grad,
                                                const at::Tensor& table,
                                                int64_t offset,
                                                bool batch_first,
                                                OptionalTensor positions) {
  return AddPositionTableBackwardFunction::apply(grad, table, offset, batch_first, positions);
}

at::Tensor add_positional_encoding_autograd(const at::Tensor& x,
                                            int64_t offset,
                                            double base,
                                            bool batch_first,
                                            OptionalTensor positions,
                                            double scale,
                                            c10::string_view channels,
                                            c10::string_view frequencies) {
  return AddPositionalEncodingFunction::apply(
      x, offset, base, batch_first, positions, scale, channels, frequencies);
}

at::Tensor apply_rotary_autograd(const at::Tensor& x,
                                 const at::Tensor& cos,
                                 const at::Tensor& sin,
                                 int64_t offset,
                                 OptionalTensor positions,
                                 bool interleaved,
                                 bool heads_first,
                                 bool inverse) {
  if (below_autograd_suffices(x, cos) && !(sin.requires_grad() && c10::GradMode::is_enabled())) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return apply_rotary(x, cos, sin, offset, positions, interleaved, heads_first, inverse);
  }
  return ApplyRotaryFunction::apply(
      x, cos, sin, offset, positions, interleaved, heads_first, inverse);
}

class ApplyRotaryInplaceFunction : public torch::autograd::Function<ApplyRotaryInplaceFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx,
                            at::Tensor x,
                            const at::Tensor& cos,
                            const at::Tensor& sin,
                            int64_t offset,
                            OptionalTensor positions,
                            bool interleaved,
                            bool heads_first,
                            bool inverse) {
    TORCH_CHECK(!cos.requires_grad() && !sin.requires_grad(),
                "posenc::apply_rotary_: cos and sin are fixed tables and get no gradient; pass "
                "cos.detach() and sin.detach()");
    {
      at::AutoDispatchBelowAutograd guard;
      apply_rotary_(x, cos, sin, offset, positions, interleaved, heads_first, inverse);
    }
    ctx->mark_dirty({x});
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["interleaved"] = interleaved;
    ctx->saved_data["heads_first"] = heads_first;
    ctx->saved_data["inverse"] = inverse;
    ctx->save_for_backward({cos, sin, defined_or_empty(positions)});
    return x;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return ApplyRotaryFunction::backward(ctx, std::move(grad_outputs));
  }
};

void apply_rotary_inplace_autograd(at::Tensor& x,
                                   const at::Tensor& cos,
                                   const at::Tensor& sin,
                                   int64_t offset,
                                   OptionalTensor positions,
                                   bool interleaved,
                                   bool heads_first,
                                   bool inverse) {
  if (below_autograd_suffices(x)) {
    at::AutoDispatchBelowAutograd guard;
    apply_rotary_(x, cos, sin, offset, positions, interleaved, heads_first, inverse);
    return;
  }
  ApplyRotaryInplaceFunction::apply(
      x, cos, sin, offset, positions, interleaved, heads_first, inverse);
}

// The fused token embedding: gradients for the weight (embedding backward, padding_idx rows
// excluded) and the table (batch-summed rows), through the backward operator.
class TokenAndPositionFunction : public torch::autograd::Function<TokenAndPositionFunction> {
 public:
  static variable_list forward(AutogradContext* ctx,
                               const at::Tensor& tokens,
                               const at::Tensor& weight,
                               const at::Tensor& table,
                               int64_t offset,
                               bool batch_first,
                               OptionalTensor positions,
                               double scale,
                               int64_t padding_idx,
                               double dropout,
                               bool train) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out;
    at::Tensor mask;
    std::tie(out, mask) = token_and_position_embedding(
        tokens, weight, table, offset, batch_first, positions, scale, padding_idx, dropout, train);
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
    variable_list grads(10);
    if (!grad_outputs[0].defined()) {
      return grads;
    }
    const variable_list saved = ctx->get_saved_variables();
    const std::array<bool, 2> output_mask = {ctx->needs_input_grad(1), ctx->needs_input_grad(2)};
    std::tie(grads[1], grads[2]) =
        token_and_position_embedding_backward(grad_outputs[0],
                                              saved[0],
                                              saved[1],
                                              saved[2],
                                              saved[3],
                                              ctx->saved_data["offset"].toInt(),
                                              ctx->saved_data["batch_first"].toBool(),
                                              optional_of(saved[4]),
                                              ctx->saved_data["scale"].toDouble(),
                                              ctx->saved_data["padding_idx"].toInt(),
                                              ctx->saved_data["dropout"].toDouble(),
                                              output_mask);
    return grads;
  }
};

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_autograd(const at::Tensor& tokens,
                                                                         const at::Tensor& weight,
                                                                         const at::Tensor& table,
                                                                         int64_t offset,
                                                                         bool batch_first,
                                                                         OptionalTensor positions,
                                                                         double scale,
                                                                         int64_t padding_idx,
                                                                         double dropout,
                                                                         bool train) {
  if (below_autograd_suffices(weight, table)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return token_and_position_embedding(
        tokens, weight, table, offset, batch_first, positions, scale, padding_idx, dropout, train);
  }
  const variable_list outputs = TokenAndPositionFunction::apply(
      tokens, weight, table, offset, batch_first, positions, scale, padding_idx, dropout, train);
  return {outputs[0], outputs[1]};
}

// ADInplaceOrView: the mutated tensor's version goes up, so that autograd notices uses of stale
// values (as for ATen's in-place operators).
void add_position_table_inplace_view(at::Tensor& x,
                                     const at::Tensor& table,
                                     int64_t offset,
                                     bool batch_first,
                                     OptionalTensor positions,
                                     double scale) {
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    add_position_table_(x, table, offset, batch_first, positions, scale);
  }
  torch::autograd::impl::bump_version(x);
}

void add_position_table_out_view(const at::Tensor& x,
                                 const at::Tensor& table,
                                 int64_t offset,
                                 bool batch_first,
                                 OptionalTensor positions,
                                 double scale,
                                 at::Tensor& out) {
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    add_position_table_out(out, x, table, offset, batch_first, positions, scale);
  }
  torch::autograd::impl::bump_version(out);
}

void apply_rotary_inplace_view(at::Tensor& x,
                               const at::Tensor& cos,
                               const at::Tensor& sin,
                               int64_t offset,
                               OptionalTensor positions,
                               bool interleaved,
                               bool heads_first,
                               bool inverse) {
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    apply_rotary_(x, cos, sin, offset, positions, interleaved, heads_first, inverse);
  }
  torch::autograd::impl::bump_version(x);
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, Autograd, m) {
  m.impl("add_position_table", TORCH_FN(add_position_table_autograd));
  m.impl("add_position_table_backward", TORCH_FN(add_position_table_backward_autograd));
  m.impl("add_positional_encoding", TORCH_FN(add_positional_encoding_autograd));
  m.impl("apply_rotary", TORCH_FN(apply_rotary_autograd));
  m.impl("add_position_table_", TORCH_FN(add_position_table_inplace_autograd));
  m.impl("add_position_table_out", TORCH_FN(add_position_table_out_autograd));
  m.impl("apply_rotary_", TORCH_FN(apply_rotary_inplace_autograd));
  m.impl("token_and_position_embedding", TORCH_FN(token_and_position_embedding_autograd));
}

TORCH_LIBRARY_IMPL(posenc, ADInplaceOrView, m) {
  m.impl("add_position_table_", TORCH_FN(add_position_table_inplace_view));
  m.impl("add_position_table_out", TORCH_FN(add_position_table_out_view));
  m.impl("apply_rotary_", TORCH_FN(apply_rotary_inplace_view));
}

} // namespace ops
} // namespace posenc

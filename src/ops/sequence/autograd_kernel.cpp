// Autograd kernels of the positional-encoding family: each forward redispatches below autograd;
// each backward is written with operators only (no shapes read here), so it also traces under fake
// tensors with symbolic shapes.

#include "ops/common/autograd_helpers.h"
#include "ops/common/dispatch.h"

#include <posenc/ops.h>

#include <ATen/ops/zeros_like.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class AddPositionTableFunction : public torch::autograd::Function<AddPositionTableFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& table,
                            int64_t offset, bool batch_first, OptionalTensor positions,
                            double scale, OptionalTensor columns) {
    at::AutoDispatchBelowADInplaceOrView guard;
    save(ctx, table, offset, batch_first, positions, scale);
    return add_position_table(x, table, offset, batch_first, positions, scale, columns);
  }

  static void save(AutogradContext* ctx, const at::Tensor& table, int64_t offset, bool batch_first,
                   OptionalTensor positions, double scale) {
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["batch_first"] = batch_first;
    ctx->saved_data["scale"] = scale;
    ctx->save_for_backward({table, defined_or_empty(positions)});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const at::Tensor& grad = grad_outputs[0];
    at::Tensor grad_table;
    if (ctx->needs_input_grad(1) && grad.defined()) {
      const variable_list saved = ctx->get_saved_variables();
      grad_table = add_position_table_backward(grad, saved[0], ctx->saved_data["offset"].toInt(),
                                               ctx->saved_data["batch_first"].toBool(),
                                               optional_of(saved[1]));
    }
    variable_list grads(7);
    grads[0] = scaled(grad, ctx->saved_data["scale"].toDouble());
    grads[1] = grad_table;
    return grads;
  }
};

// In place: x = x * scale + rows. The gradient is the out-of-place one.
class AddPositionTableInplaceFunction
    : public torch::autograd::Function<AddPositionTableInplaceFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, const at::Tensor& table,
                            int64_t offset, bool batch_first, OptionalTensor positions,
                            double scale, OptionalTensor columns) {
    {
      at::AutoDispatchBelowAutograd guard; // ADInplaceOrView still runs and bumps x's version
      add_position_table_(x, table, offset, batch_first, positions, scale, columns);
    }
    ctx->mark_dirty({x});
    AddPositionTableFunction::save(ctx, table, offset, batch_first, positions, scale);
    return x;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return AddPositionTableFunction::backward(ctx, std::move(grad_outputs));
  }
};

// grad_table = the gradient rows added into the table rows they came from. It is linear in grad,
// so its own gradient gathers the incoming table gradient's rows back:
// add_position_table(zeros_like(grad), grad_grad_table, ...) does exactly that with operators only.
class AddPositionTableBackwardFunction
    : public torch::autograd::Function<AddPositionTableBackwardFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& grad, const at::Tensor& table,
                            int64_t offset, bool batch_first, OptionalTensor positions) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["batch_first"] = batch_first;
    ctx->save_for_backward({grad, defined_or_empty(positions)});
    return add_position_table_backward(grad, table, offset, batch_first, positions);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const at::Tensor& grad_grad_table = grad_outputs[0];
    variable_list grads(5);
    if (ctx->needs_input_grad(0) && grad_grad_table.defined()) {
      const variable_list saved = ctx->get_saved_variables();
      grads[0] = add_position_table(
          at::zeros_like(saved[0]), grad_grad_table, ctx->saved_data["offset"].toInt(),
          ctx->saved_data["batch_first"].toBool(), optional_of(saved[1]), 1.0);
    }
    // The table only lends its shape: no gradient flows to it.
    return grads;
  }
};

class AddPositionalEncodingFunction
    : public torch::autograd::Function<AddPositionalEncodingFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t offset, double base,
                            bool batch_first, OptionalTensor positions, double scale,
                            c10::string_view channels, c10::string_view frequencies) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["scale"] = scale;
    return add_positional_encoding(x, offset, base, batch_first, positions, scale, channels,
                                   frequencies);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list grads(8);
    grads[0] = scaled(grad_outputs[0], ctx->saved_data["scale"].toDouble());
    return grads;
  }
};

at::Tensor add_position_table_autograd(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                                       bool batch_first, OptionalTensor positions, double scale,
                                       OptionalTensor columns) {
  if (below_autograd_suffices(x, table)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return add_position_table(x, table, offset, batch_first, positions, scale, columns);
  }
  if (columns.has_value() && columns->defined()) {
    check_fixed_table("posenc::add_position_table", table, kExtendedTable);
  }
  return AddPositionTableFunction::apply(x, table, offset, batch_first, positions, scale, columns);
}

void add_position_table_inplace_autograd(at::Tensor& x, const at::Tensor& table, int64_t offset,
                                         bool batch_first, OptionalTensor positions, double scale,
                                         OptionalTensor columns) {
  const bool needs_graph = !below_autograd_suffices(x, table);
  check_inplace_allowed(x, needs_graph);
  if (!needs_graph) {
    at::AutoDispatchBelowAutograd guard;
    add_position_table_(x, table, offset, batch_first, positions, scale, columns);
    return;
  }
  if (columns.has_value() && columns->defined()) {
    check_fixed_table("posenc::add_position_table_", table, kExtendedTable);
  }
  AddPositionTableInplaceFunction::apply(x, table, offset, batch_first, positions, scale, columns);
}

void add_position_table_out_autograd(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                                     bool batch_first, OptionalTensor positions, double scale,
                                     OptionalTensor columns, at::Tensor& out) {
  TORCH_CHECK(below_autograd_suffices(x, table) && !out.requires_grad(),
              "posenc::add_position_table_out: the out= variant does not support autograd, but an "
              "argument requires grad; "
              "use add_position_table (or run under torch::NoGradGuard)");
  at::AutoDispatchBelowAutograd guard;
  add_position_table_out(out, x, table, offset, batch_first, positions, scale, columns);
}

at::Tensor add_position_table_backward_autograd(const at::Tensor& grad, const at::Tensor& table,
                                                int64_t offset, bool batch_first,
                                                OptionalTensor positions) {
  return AddPositionTableBackwardFunction::apply(grad, table, offset, batch_first, positions);
}

at::Tensor add_positional_encoding_autograd(const at::Tensor& x, int64_t offset, double base,
                                            bool batch_first, OptionalTensor positions,
                                            double scale, c10::string_view channels,
                                            c10::string_view frequencies) {
  return AddPositionalEncodingFunction::apply(x, offset, base, batch_first, positions, scale,
                                              channels, frequencies);
}

void add_position_table_inplace_view(at::Tensor& x, const at::Tensor& table, int64_t offset,
                                     bool batch_first, OptionalTensor positions, double scale,
                                     OptionalTensor columns) {
  mutate_and_bump(
      x, [&] { add_position_table_(x, table, offset, batch_first, positions, scale, columns); });
}

void add_position_table_out_view(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                                 bool batch_first, OptionalTensor positions, double scale,
                                 OptionalTensor columns, at::Tensor& out) {
  mutate_and_bump(out, [&] {
    add_position_table_out(out, x, table, offset, batch_first, positions, scale, columns);
  });
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, Autograd, m) {
  m.impl("add_position_table", TORCH_FN(add_position_table_autograd));
  m.impl("add_position_table_", TORCH_FN(add_position_table_inplace_autograd));
  m.impl("add_position_table_out", TORCH_FN(add_position_table_out_autograd));
  m.impl("_add_position_table_backward", TORCH_FN(add_position_table_backward_autograd));
  m.impl("add_positional_encoding", TORCH_FN(add_positional_encoding_autograd));
}

TORCH_LIBRARY_IMPL(posenc, ADInplaceOrView, m) {
  m.impl("add_position_table_", TORCH_FN(add_position_table_inplace_view));
  m.impl("add_position_table_out", TORCH_FN(add_position_table_out_view));
}

} // namespace ops
} // namespace posenc

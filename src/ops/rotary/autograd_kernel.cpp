// Autograd kernels of the rotary family. A rotation is orthogonal: the gradient is the inverse
// rotation of the incoming gradient (with an attention factor a, the transpose of a * R is
// a * R^-1, which the same caches give).

#include "ops/common/autograd_helpers.h"

#include <posenc/ops.h>

#include <c10/core/GradMode.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <tuple>

namespace posenc {
namespace ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kFixedCaches =
    "cos and sin are fixed tables and get no gradient; pass cos.detach() and sin.detach()";

void save_rotary(AutogradContext* ctx, const at::Tensor& cos, const at::Tensor& sin, int64_t offset,
                 OptionalTensor positions, bool interleaved, bool heads_first, bool inverse,
                 OptionalTensor inv_freq, double attention_factor) {
  ctx->saved_data["offset"] = offset;
  ctx->saved_data["interleaved"] = interleaved;
  ctx->saved_data["heads_first"] = heads_first;
  ctx->saved_data["inverse"] = inverse;
  ctx->saved_data["attention_factor"] = attention_factor;
  ctx->save_for_backward({cos, sin, defined_or_empty(positions), defined_or_empty(inv_freq)});
}

class ApplyRotaryFunction : public torch::autograd::Function<ApplyRotaryFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin, int64_t offset, OptionalTensor positions,
                            bool interleaved, bool heads_first, bool inverse,
                            OptionalTensor inv_freq, double attention_factor) {
    at::AutoDispatchBelowADInplaceOrView guard;
    save_rotary(ctx, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                attention_factor);
    return apply_rotary(x, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                        attention_factor);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list grads(10);
    if (grad_outputs[0].defined()) {
      const variable_list saved = ctx->get_saved_variables();
      grads[0] = apply_rotary(
          grad_outputs[0], saved[0], saved[1], ctx->saved_data["offset"].toInt(),
          optional_of(saved[2]), ctx->saved_data["interleaved"].toBool(),
          ctx->saved_data["heads_first"].toBool(), !ctx->saved_data["inverse"].toBool(),
          optional_of(saved[3]), ctx->saved_data["attention_factor"].toDouble());
    }
    return grads;
  }
};

class ApplyRotaryInplaceFunction : public torch::autograd::Function<ApplyRotaryInplaceFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, const at::Tensor& cos,
                            const at::Tensor& sin, int64_t offset, OptionalTensor positions,
                            bool interleaved, bool heads_first, bool inverse,
                            OptionalTensor inv_freq, double attention_factor) {
    {
      at::AutoDispatchBelowAutograd guard;
      apply_rotary_(x, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                    attention_factor);
    }
    ctx->mark_dirty({x});
    save_rotary(ctx, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                attention_factor);
    return x;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return ApplyRotaryFunction::backward(ctx, std::move(grad_outputs));
  }
};

// Queries and keys: the gradient of each is the inverse rotation of its incoming gradient (one
// rotary_qk call when both arrive).
variable_list rotary_qk_backward(AutogradContext* ctx, const variable_list& grad_outputs) {
  variable_list grads(11);
  const variable_list saved = ctx->get_saved_variables();
  const int64_t offset = ctx->saved_data["offset"].toInt();
  const bool interleaved = ctx->saved_data["interleaved"].toBool();
  const bool heads_first = ctx->saved_data["heads_first"].toBool();
  const bool inverse = !ctx->saved_data["inverse"].toBool();
  const double factor = ctx->saved_data["attention_factor"].toDouble();
  const auto positions = optional_of(saved[2]);
  const auto inv_freq = optional_of(saved[3]);
  if (grad_outputs[0].defined() && grad_outputs[1].defined()) {
    std::tie(grads[0], grads[1]) =
        apply_rotary_qk(grad_outputs[0], grad_outputs[1], saved[0], saved[1], offset, positions,
                        interleaved, heads_first, inverse, inv_freq, factor);
    return grads;
  }
  for (const int i : {0, 1}) {
    if (grad_outputs[i].defined()) {
      grads[i] = apply_rotary(grad_outputs[i], saved[0], saved[1], offset, positions, interleaved,
                              heads_first, inverse, inv_freq, factor);
    }
  }
  return grads;
}

class ApplyRotaryQkFunction : public torch::autograd::Function<ApplyRotaryQkFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& cos, const at::Tensor& sin, int64_t offset,
                               OptionalTensor positions, bool interleaved, bool heads_first,
                               bool inverse, OptionalTensor inv_freq, double attention_factor) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->set_materialize_grads(false); // an unused output's gradient stays undefined
    save_rotary(ctx, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                attention_factor);
    const auto out = apply_rotary_qk(q, k, cos, sin, offset, positions, interleaved, heads_first,
                                     inverse, inv_freq, attention_factor);
    return {std::get<0>(out), std::get<1>(out)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return rotary_qk_backward(ctx, grad_outputs);
  }
};

class ApplyRotaryQkInplaceFunction
    : public torch::autograd::Function<ApplyRotaryQkInplaceFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, at::Tensor q, at::Tensor k,
                               const at::Tensor& cos, const at::Tensor& sin, int64_t offset,
                               OptionalTensor positions, bool interleaved, bool heads_first,
                               bool inverse, OptionalTensor inv_freq, double attention_factor) {
    {
      at::AutoDispatchBelowAutograd guard;
      apply_rotary_qk_(q, k, cos, sin, offset, positions, interleaved, heads_first, inverse,
                       inv_freq, attention_factor);
    }
    ctx->mark_dirty({q, k});
    ctx->set_materialize_grads(false);
    save_rotary(ctx, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                attention_factor);
    return {q, k};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return rotary_qk_backward(ctx, grad_outputs);
  }
};

bool caches_need_grad(const at::Tensor& cos, const at::Tensor& sin) {
  return c10::GradMode::is_enabled() && (cos.requires_grad() || sin.requires_grad());
}

at::Tensor apply_rotary_autograd(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                 int64_t offset, OptionalTensor positions, bool interleaved,
                                 bool heads_first, bool inverse, OptionalTensor inv_freq,
                                 double attention_factor) {
  if (!caches_need_grad(cos, sin) && below_autograd_suffices(x)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return apply_rotary(x, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                        attention_factor);
  }
  check_fixed_table("posenc::apply_rotary", cos, kFixedCaches);
  check_fixed_table("posenc::apply_rotary", sin, kFixedCaches);
  return ApplyRotaryFunction::apply(x, cos, sin, offset, positions, interleaved, heads_first,
                                    inverse, inv_freq, attention_factor);
}

void apply_rotary_inplace_autograd(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                   int64_t offset, OptionalTensor positions, bool interleaved,
                                   bool heads_first, bool inverse, OptionalTensor inv_freq,
                                   double attention_factor) {
  const bool needs_graph = caches_need_grad(cos, sin) || !below_autograd_suffices(x);
  check_inplace_allowed(x, needs_graph);
  if (!needs_graph) {
    at::AutoDispatchBelowAutograd guard;
    apply_rotary_(x, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                  attention_factor);
    return;
  }
  check_fixed_table("posenc::apply_rotary_", cos, kFixedCaches);
  check_fixed_table("posenc::apply_rotary_", sin, kFixedCaches);
  ApplyRotaryInplaceFunction::apply(x, cos, sin, offset, positions, interleaved, heads_first,
                                    inverse, inv_freq, attention_factor);
}

void apply_rotary_inplace_view(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                               int64_t offset, OptionalTensor positions, bool interleaved,
                               bool heads_first, bool inverse, OptionalTensor inv_freq,
                               double attention_factor) {
  mutate_and_bump(x, [&] {
    apply_rotary_(x, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                  attention_factor);
  });
}

std::tuple<at::Tensor, at::Tensor> apply_rotary_qk_autograd(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
    int64_t offset, OptionalTensor positions, bool interleaved, bool heads_first, bool inverse,
    OptionalTensor inv_freq, double attention_factor) {
  if (!caches_need_grad(cos, sin) && below_autograd_suffices(q, k)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return apply_rotary_qk(q, k, cos, sin, offset, positions, interleaved, heads_first, inverse,
                           inv_freq, attention_factor);
  }
  check_fixed_table("posenc::apply_rotary_qk", cos, kFixedCaches);
  check_fixed_table("posenc::apply_rotary_qk", sin, kFixedCaches);
  const variable_list out =
      ApplyRotaryQkFunction::apply(q, k, cos, sin, offset, positions, interleaved, heads_first,
                                   inverse, inv_freq, attention_factor);
  return {out[0], out[1]};
}

void apply_rotary_qk_inplace_autograd(at::Tensor& q, at::Tensor& k, const at::Tensor& cos,
                                      const at::Tensor& sin, int64_t offset,
                                      OptionalTensor positions, bool interleaved, bool heads_first,
                                      bool inverse, OptionalTensor inv_freq,
                                      double attention_factor) {
  const bool needs_graph = caches_need_grad(cos, sin) || !below_autograd_suffices(q, k);
  check_inplace_allowed(q, needs_graph);
  check_inplace_allowed(k, needs_graph);
  if (!needs_graph) {
    at::AutoDispatchBelowAutograd guard;
    apply_rotary_qk_(q, k, cos, sin, offset, positions, interleaved, heads_first, inverse,
                     inv_freq, attention_factor);
    return;
  }
  check_fixed_table("posenc::apply_rotary_qk_", cos, kFixedCaches);
  check_fixed_table("posenc::apply_rotary_qk_", sin, kFixedCaches);
  ApplyRotaryQkInplaceFunction::apply(q, k, cos, sin, offset, positions, interleaved, heads_first,
                                      inverse, inv_freq, attention_factor);
}

void apply_rotary_qk_inplace_view(at::Tensor& q, at::Tensor& k, const at::Tensor& cos,
                                  const at::Tensor& sin, int64_t offset, OptionalTensor positions,
                                  bool interleaved, bool heads_first, bool inverse,
                                  OptionalTensor inv_freq, double attention_factor) {
  // k is checked (and bumped) around q's mutation, so neither is written when either is refused.
  mutate_and_bump(k, [&] {
    mutate_and_bump(q, [&] {
      apply_rotary_qk_(q, k, cos, sin, offset, positions, interleaved, heads_first, inverse,
                       inv_freq, attention_factor);
    });
  });
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, Autograd, m) {
  m.impl("apply_rotary", TORCH_FN(apply_rotary_autograd));
  m.impl("apply_rotary_", TORCH_FN(apply_rotary_inplace_autograd));
  m.impl("apply_rotary_qk", TORCH_FN(apply_rotary_qk_autograd));
  m.impl("apply_rotary_qk_", TORCH_FN(apply_rotary_qk_inplace_autograd));
}

TORCH_LIBRARY_IMPL(posenc, ADInplaceOrView, m) {
  m.impl("apply_rotary_", TORCH_FN(apply_rotary_inplace_view));
  m.impl("apply_rotary_qk_", TORCH_FN(apply_rotary_qk_inplace_view));
}

} // namespace ops
} // namespace posenc

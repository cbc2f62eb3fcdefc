// A sequence module's call (ops/sequence/module.h), and the operators through which posenc.nn's
// PositionalEncoding, LearnedPositionalEmbedding and TokenAndPositionEmbedding make it.

#include "ops/sequence/module.h"
#include "ops/common/dispatch.h"

#include "detail/checks.h"

#include <posenc/ops/positional_encoding.h>
#include <posenc/ops/positions.h>
#include <posenc/ops/token_embedding.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/dropout.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <tuple>

namespace posenc {
namespace ops {

namespace {

// The advice on positions past the table, for a sinusoidal module that does not extrapolate.
const char* beyond_table_hint(const SequenceModuleCall& call, bool sinusoidal) {
  if (!sinusoidal || call.extrapolate) {
    return "";
  }
  return detail::extrapolate_hint(call.python);
}

// The column plan where the call's rows come from the definition: positions past the table
// (extrapolating) or fractional positions; none otherwise (the table's rows). (A learned table has
// no plan: the operator refuses fractional positions, naming the module.)
c10::optional<at::Tensor> plan_of_call(const SequenceModuleCall& call, const at::Tensor& columns,
                                       const at::Tensor& positions) {
  if (columns.defined() && (call.extrapolate || detail::is_continuous(positions))) {
    return columns;
  }
  return c10::nullopt;
}

} // namespace

at::Tensor sequence_module_forward(const SequenceModuleCall& call, const at::Tensor& x,
                                   const at::Tensor& table, const at::Tensor& columns,
                                   int64_t offset, const at::Tensor& positions, bool train,
                                   bool inplace) {
  const detail::CallerScope caller(call.name, beyond_table_hint(call, columns.defined()));
  detail::check_dropout(call.dropout);
  const c10::optional<at::Tensor> plan = plan_of_call(call, columns, positions);
  at::Tensor out;
  if (inplace) {
    out = x;
    add_position_table_(out, table, offset, call.batch_first, optional_tensor(positions),
                        call.scale, plan);
  } else {
    out = add_position_table(x, table, offset, call.batch_first, optional_tensor(positions),
                             call.scale, plan);
  }
  if (!train || call.dropout == 0.0) {
    return out;
  }
  return inplace ? at::dropout_(out, call.dropout, /*train=*/true)
                 : at::dropout(out, call.dropout, /*train=*/true);
}

at::Tensor token_module_forward(const SequenceModuleCall& call, const at::Tensor& ids,
                                const at::Tensor& weight, const at::Tensor& table,
                                const at::Tensor& columns, int64_t offset,
                                const at::Tensor& positions, bool train) {
  // What the operator cannot know: the accepted id dtypes (any integer type, as
  // torch::nn::Embedding) and where positions come from with padding_idx. Values are checked
  // once, by the operator.
  const char* layout = detail::sequence_layout(call.batch_first);
  TORCH_CHECK(ids.defined(), call.name, ": expected token ids of shape ", layout,
              ", but got an undefined tensor");
  TORCH_CHECK(ids.dim() == 2, call.name, ": expected token ids of shape ", layout, ", but got a ",
              ids.dim(), "-D tensor of shape ", ids.sizes());
  TORCH_CHECK(at::isIntegralType(ids.scalar_type(), /*includeBool=*/false), call.name,
              ": expected integer token ids, but got ", ids.scalar_type());
  const detail::CallerScope caller(call.name, beyond_table_hint(call, columns.defined()));
  at::Tensor at_positions = positions;
  if (!positions.defined() && call.padding_idx >= 0) {
    at_positions = positions_from_padding_mask(ids.eq(call.padding_idx), call.batch_first);
    if (offset != 0) {
      // (offset + L must fit in int64 too: the positions are formed by adding them; no size is
      // read at offset 0, so that torch.export keeps the ids' sizes symbolic)
      detail::check_offset_start(offset, ids.size(call.batch_first ? 1 : 0));
      at_positions = at_positions.where(at_positions.lt(0), at_positions + offset);
    }
    offset = 0;
  }
  return std::get<0>(token_and_position_embedding(ids.to(at::kLong), weight, table, offset,
                                                  call.batch_first, optional_tensor(at_positions),
                                                  call.scale, call.padding_idx, call.dropout, train,
                                                  plan_of_call(call, columns, at_positions)));
}

namespace {

// --- the operators: posenc.nn's modules pass their options --------------------------------------

// The call of a posenc.nn module named `name` (for the sequence encodings: the PositionalEncoding
// when it has a column plan, else the LearnedPositionalEmbedding).
SequenceModuleCall python_call(const char* name, const c10::optional<at::Tensor>& columns,
                               bool batch_first, double scale, double dropout, bool extrapolate) {
  SequenceModuleCall call;
  call.name = name != nullptr
                  ? name
                  : (columns.has_value() ? "PositionalEncoding" : "LearnedPositionalEmbedding");
  call.batch_first = batch_first;
  call.scale = scale;
  call.dropout = dropout;
  call.extrapolate = extrapolate;
  call.python = true;
  TORCH_CHECK(!extrapolate || columns.has_value(), call.name,
              ": rows past the table are computed from a sinusoidal encoding's columns, but none "
              "were given (learned positions cannot extrapolate); pass the module's columns or "
              "extrapolate=False");
  return call;
}

at::Tensor positional_encoding_call(const at::Tensor& x, const at::Tensor& table,
                                    const c10::optional<at::Tensor>& columns, int64_t offset,
                                    const c10::optional<at::Tensor>& positions, bool batch_first,
                                    double scale, double dropout, bool train, bool extrapolate) {
  return sequence_module_forward(
      python_call(nullptr, columns, batch_first, scale, dropout, extrapolate), x, table,
      columns.value_or(at::Tensor()), offset, positions.value_or(at::Tensor()), train,
      /*inplace=*/false);
}

void positional_encoding_call_(at::Tensor& x, const at::Tensor& table,
                               const c10::optional<at::Tensor>& columns, int64_t offset,
                               const c10::optional<at::Tensor>& positions, bool batch_first,
                               double scale, double dropout, bool train, bool extrapolate) {
  sequence_module_forward(python_call(nullptr, columns, batch_first, scale, dropout, extrapolate),
                          x, table, columns.value_or(at::Tensor()), offset,
                          positions.value_or(at::Tensor()), train, /*inplace=*/true);
}

at::Tensor token_and_position_embedding_call(const at::Tensor& ids, const at::Tensor& weight,
                                             const at::Tensor& table,
                                             const c10::optional<at::Tensor>& columns,
                                             int64_t offset,
                                             const c10::optional<at::Tensor>& positions,
                                             bool batch_first, double scale, int64_t padding_idx,
                                             double dropout, bool train, bool extrapolate) {
  SequenceModuleCall call =
      python_call("TokenAndPositionEmbedding", columns, batch_first, scale, dropout, extrapolate);
  call.padding_idx = padding_idx;
  return token_module_forward(call, ids, weight, table, columns.value_or(at::Tensor()), offset,
                              positions.value_or(at::Tensor()), train);
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, CompositeImplicitAutograd, m) {
  m.impl("positional_encoding_call", &positional_encoding_call);
  m.impl("positional_encoding_call_", &positional_encoding_call_);
  m.impl("token_and_position_embedding_call", &token_and_position_embedding_call);
}

} // namespace ops
} // namespace posenc

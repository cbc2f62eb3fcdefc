#pragma once

// Calling posenc's operators through the dispatcher, and the private backward operators (their
// schemas start with an underscore; they are not part of the public C++ API in <posenc/ops.h>).

#include "ops/common/arguments.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <array>
#include <tuple>

namespace posenc {
namespace ops {

/// The typed handle of the operator `name` (e.g. "posenc::apply_rotary"), looked up once per call
/// site: `static const auto op = typed_op<Signature>("posenc::name");`.
template <typename Signature>
c10::TypedOperatorHandle<Signature> typed_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

/// An optional tensor argument from a tensor that may be undefined (undefined: none given).
inline c10::optional<at::Tensor> optional_tensor(const at::Tensor& tensor) {
  return tensor.defined() ? c10::optional<at::Tensor>(tensor) : c10::nullopt;
}

/// posenc::_add_position_table_backward: the gradient of add_position_table with respect to
/// `table`, shaped like `table`, holding `grad` summed into the rows it was added from.
at::Tensor add_position_table_backward(const at::Tensor& grad, const at::Tensor& table,
                                       int64_t offset, bool batch_first, OptionalTensor positions);

/// posenc::_token_and_position_embedding_backward: the gradients with respect to `weight` and
/// `table` (each computed when its `output_mask` entry is set).
std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_backward(
    const at::Tensor& grad, const at::Tensor& mask, const at::Tensor& tokens,
    const at::Tensor& weight, const at::Tensor& table, int64_t offset, bool batch_first,
    OptionalTensor positions, double scale, int64_t padding_idx, double dropout,
    std::array<bool, 2> output_mask);

} // namespace ops
} // namespace posenc

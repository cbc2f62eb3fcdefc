#include "ops/token/arguments.h"

#include "detail/checks.h"
#include "detail/device_checks.h"
#include "detail/sinusoidal.h"

#include <c10/util/Exception.h>

namespace posenc {
namespace ops {

void check_padding_idx(int64_t padding_idx, int64_t vocab_size) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(padding_idx == -1 || (padding_idx >= 0 && padding_idx < vocab_size), who,
              ": padding_idx must be -1 (none) or a token id in [0, vocab_size) = [0, ",
              vocab_size, "), but got ", padding_idx);
}

TableCall prepare_token_call(const at::Tensor& tokens, const at::Tensor& weight,
                             const at::Tensor& table, int64_t offset, OptionalTensor positions,
                             bool batch_first, double scale, double dropout,
                             OptionalTensor columns) {
  static constexpr detail::CallerName who{};
  const char* layout = detail::sequence_layout(batch_first);
  TORCH_CHECK(tokens.defined() && tokens.dim() == 2, who, ": expected token ids of shape ", layout,
              ", but got ", tokens.defined() ? tokens.sizes() : at::IntArrayRef{});
  TORCH_CHECK(tokens.scalar_type() == at::kLong, who, ": expected int64 token ids, but got ",
              tokens.scalar_type());
  TORCH_CHECK(weight.defined() && weight.dim() == 2, who,
              ": expected the token embedding weight as [vocab, D], but got ",
              weight.defined() ? weight.sizes() : at::IntArrayRef{});
  detail::check_float_dtype("the dtype of the token embedding weight", weight.scalar_type());
  TORCH_CHECK(tokens.device() == weight.device(), who,
              ": expected the token ids on the module's device (", weight.device(), "), but got ",
              tokens.device());
  detail::check_dropout(dropout);
  detail::check_scale(scale, weight.scalar_type());
  const detail::TableShape shape = detail::check_table(table);
  TORCH_CHECK(shape.width == weight.size(1) && table.device() == weight.device(), who,
              ": the position table must have D = ", weight.size(1), " columns on ",
              weight.device(), ", but has ", shape.width, " on ", table.device());
  check_definition_device(columns, "columns", table.device());
  TableCall call = table_call(table, shape.width, tokens.sizes(), batch_first, scale);
  const Resolved resolved =
      resolve_positions(call, positions, offset, tokens.sizes(), layout, tokens.device(),
                        shape.max_len, given(columns), "columns", tokens);
  TORCH_CHECK(resolved.ids.first >= 0 && resolved.ids.second < weight.size(0), who,
              ": token ids must lie in [0, vocab_size) = [0, ", weight.size(0),
              "), but got ids from ", resolved.ids.first, " to ", resolved.ids.second);
  if (resolved.device.defined()) {
    extend_table_on_device(call, resolved.device, *columns);
  } else if (resolved.past) {
    extend_table(call, resolved.host, *columns, shape.max_len);
  }
  return call;
}

void check_token_backward_devices(const at::Tensor& grad, const at::Tensor& mask,
                                  const at::Tensor& tokens, const at::Tensor& weight,
                                  const at::Tensor& table, OptionalTensor positions) {
  const detail::CallerScope caller_scope(detail::CallerScope::Rename{},
                                         "posenc::_token_and_position_embedding_backward");
  const c10::Device device = weight.device();
  detail::check_argument_device(grad, "grad", device);
  detail::check_argument_device(mask, "the dropout mask", device);
  detail::check_argument_device(tokens, "the token ids", device);
  detail::check_argument_device(table, "the table", device);
  check_definition_device(positions, "positions", device);
}

} // namespace ops
} // namespace posenc

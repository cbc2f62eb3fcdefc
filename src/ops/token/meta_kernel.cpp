// Meta kernels of the token-embedding family (see meta_checks.h).

#include "ops/common/meta_checks.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <array>
#include <tuple>

namespace posenc {
namespace ops {
namespace meta {
namespace {

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding(
    const at::Tensor& tokens, const at::Tensor& weight, const at::Tensor& table, int64_t offset,
    bool batch_first, OptionalTensor positions, double scale, int64_t padding_idx, double dropout,
    bool train, OptionalTensor columns) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{},
                                         "posenc::token_and_position_embedding");
  static constexpr detail::CallerName who{};
  TORCH_CHECK(tokens.dim() == 2 && tokens.scalar_type() == at::kLong, who,
              ": expected int64 token ids of 2 dimensions");
  TORCH_CHECK(weight.dim() == 2 && detail::is_supported_float(weight.scalar_type()), who,
              ": expected a floating [vocab, D] weight");
  TORCH_CHECK(tokens.device() == weight.device(), who,
              ": expected the token ids on the module's device (", weight.device(), "), but got ",
              tokens.device());
  detail::check_dropout(dropout);
  detail::check_scale(scale, weight.scalar_type());
  check_padding_idx(padding_idx, weight.size(0));
  TORCH_CHECK(table.dim() == 2 || table.dim() == 3, who,
              ": expected the table as [max_len, D] or [1, max_len, D]");
  TORCH_CHECK(table.device() == weight.device(), who,
              ": the position table must be on the weight's device (", weight.device(),
              "), but is on ", table.device());
  TORCH_CHECK(detail::size_of(table, -1) == detail::size_of(weight, 1), who,
              ": the position table must have D = ", detail::size_of(weight, 1), " columns on ",
              weight.device(), ", but has ", detail::size_of(table, -1), " on ", table.device());
  check_positions(positions, tokens, has_value(columns), "columns");
  check_definition_device(columns, "columns", weight.device());
  if (!has_value(positions)) {
    check_offset_rows(offset, detail::size_of(tokens, batch_first ? 1 : 0),
                      detail::size_of(table, -2), has_value(columns));
  }
  // [B, L] ids and a [V, D] weight give [B, L, D]; symbolic sizes stay symbolic (torch.export with
  // a dynamic sequence length).
  at::Tensor out = at::empty_symint({tokens.sym_size(0), tokens.sym_size(1), weight.sym_size(1)},
                                    weight.options());
  at::Tensor mask = train && dropout > 0.0 ? at::empty_like(out, out.options().dtype(at::kBool))
                                           : at::empty({0}, weight.options().dtype(at::kBool));
  return {out, mask};
}

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_backward(
    const at::Tensor& grad, const at::Tensor& mask, const at::Tensor& tokens,
    const at::Tensor& weight, const at::Tensor& table, int64_t, bool, OptionalTensor positions,
    double, int64_t, double, std::array<bool, 2> output_mask) {
  check_token_backward_devices(grad, mask, tokens, weight, table, positions);
  return {output_mask[0] ? at::empty_like(weight, at::MemoryFormat::Contiguous) : at::Tensor(),
          output_mask[1] ? at::empty_like(table, at::MemoryFormat::Contiguous) : at::Tensor()};
}

} // namespace
} // namespace meta

TORCH_LIBRARY_IMPL(posenc, Meta, m) {
  m.impl("token_and_position_embedding", TORCH_FN(meta::token_and_position_embedding));
  m.impl("_token_and_position_embedding_backward",
         TORCH_FN(meta::token_and_position_embedding_backward));
}

} // namespace ops
} // namespace posenc

#include <posenc/functional/positional_encoding.h>
#include <posenc/functional/positions.h>
#include <posenc/ops.h>

#include "detail/checks.h"
#include "detail/sinusoidal.h"
#include "ops/sequence/module.h"

#include <c10/util/Exception.h>

namespace posenc {
namespace functional {

namespace pd = posenc::detail;

namespace detail {

at::Tensor sinusoidal_table(int64_t max_len, int64_t d_model, double base, int64_t offset,
                            ChannelLayout layout, FrequencySpacing spacing, at::ScalarType dtype,
                            at::Device device) {
  const pd::CallerScope caller(pd::CallerScope::Rename{}, "sinusoidal_table");
  pd::check_table_request(max_len, d_model, base, offset, dtype);
  return pd::sinusoidal_table(max_len, offset, {d_model, base, layout, spacing}, dtype, device);
}

at::Tensor positional_encoding(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                               const at::Tensor& positions, bool batch_first, double scale,
                               double dropout, bool training, bool inplace,
                               const at::Tensor& columns) {
  // The modules' call, named as called (a module's name when a module calls this; otherwise
  // this), with rows computed from `columns` wherever they are given.
  ops::SequenceModuleCall call;
  call.name = pd::caller_or("positional_encoding");
  call.batch_first = batch_first;
  call.scale = scale;
  call.dropout = dropout;
  call.extrapolate = columns.defined();
  return ops::sequence_module_forward(call, x, table, columns, offset, positions, training,
                                      inplace);
}

} // namespace detail

at::Tensor sinusoidal_columns(int64_t d_model, const SinusoidalTableFuncOptions& options) {
  const pd::CallerScope caller(pd::CallerScope::Rename{}, "sinusoidal_columns");
  pd::check_table_arguments(1, d_model, options.base());
  return posenc::detail::column_plan_tensor(
      {d_model, options.base(), options.layout(), options.spacing()});
}

at::Tensor packed_positions(const at::Tensor& cu_seqlens, int64_t total,
                            const at::Tensor& start_positions) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "packed_positions");
  return ops::packed_positions(
      cu_seqlens, total,
      start_positions.defined() ? c10::optional<at::Tensor>(start_positions) : c10::nullopt);
}

at::Tensor context_parallel_positions(int64_t seq_len, int64_t world_size, int64_t rank,
                                      bool zigzag, const c10::Device& device) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "context_parallel_positions");
  return ops::context_parallel_positions(seq_len, world_size, rank, zigzag, device);
}

std::tuple<at::Tensor, at::Tensor> context_parallel_packed_positions(const at::Tensor& cu_seqlens,
                                                                     int64_t total,
                                                                     int64_t world_size,
                                                                     int64_t rank, bool zigzag) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "context_parallel_packed_positions");
  return ops::context_parallel_packed_positions(cu_seqlens, total, world_size, rank, zigzag);
}

at::Tensor positions_from_padding_mask(const at::Tensor& padding_mask, bool batch_first) {
  constexpr const char* who = "positions_from_padding_mask";
  TORCH_CHECK(padding_mask.defined(), who, ": expected a padding mask of shape ",
              posenc::detail::sequence_layout(batch_first), ", but got an undefined tensor");
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, who);
  return ops::positions_from_padding_mask(padding_mask, batch_first);
}

at::Tensor positions_from_tokens(const at::Tensor& tokens, int64_t padding_idx, bool batch_first) {
  TORCH_CHECK(tokens.defined(),
              "positions_from_tokens: expected token ids, but got an undefined tensor");
  TORCH_CHECK(at::isIntegralType(tokens.scalar_type(), /*includeBool=*/false),
              "positions_from_tokens: expected integer token ids, but got ", tokens.scalar_type());
  return positions_from_padding_mask(tokens.eq(padding_idx), batch_first);
}

} // namespace functional
} // namespace posenc

// Meta kernels of the positional-encoding family (see meta_checks.h).

#include "ops/common/meta_checks.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace meta {
namespace {

at::Tensor add_position_table(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                              bool batch_first, OptionalTensor positions, double scale,
                              OptionalTensor columns) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{},
                                         "posenc::add_position_table");
  check_input(x, 3);
  detail::check_scale(scale, x.scalar_type());
  check_table(table, x);
  check_positions(positions, x, has_value(columns), "columns");
  check_definition_device(columns, "columns", x.device());
  if (!has_value(positions)) {
    check_offset_rows(offset, detail::size_of(x, batch_first ? 1 : 0),
                      detail::size_of(table, -2), has_value(columns));
  }
  return at::empty_like(x);
}

void add_position_table_(at::Tensor& x, const at::Tensor& table, int64_t offset, bool batch_first,
                         OptionalTensor positions, double scale, OptionalTensor columns) {
  add_position_table(x, table, offset, batch_first, positions, scale, columns);
}

void add_position_table_out(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                            bool batch_first, OptionalTensor positions, double scale,
                            OptionalTensor columns, at::Tensor& out) {
  add_position_table(x, table, offset, batch_first, positions, scale, columns);
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{},
                                   "posenc::add_position_table_out");
  check_out(out, x);
  at::native::resize_output(out, x.sizes());
}

at::Tensor add_position_table_backward(const at::Tensor& grad, const at::Tensor& table, int64_t,
                                       bool, OptionalTensor positions) {
  const detail::CallerScope caller(detail::CallerScope::Rename{},
                                   "posenc::_add_position_table_backward");
  check_input(grad, 3);
  check_table(table, grad);
  check_positions(positions, grad);
  return at::empty_like(table, at::MemoryFormat::Contiguous);
}

at::Tensor add_positional_encoding(const at::Tensor& x, int64_t offset, double, bool,
                                   OptionalTensor positions, double, c10::string_view,
                                   c10::string_view) {
  const detail::CallerScope caller(detail::CallerScope::Rename{},
                                   "posenc::add_positional_encoding");
  check_input(x, 3);
  check_positions(positions, x, /*has_definition=*/true);
  TORCH_CHECK(offset >= 0, "posenc::add_positional_encoding: offset must be >= 0, but got ",
              offset);
  return at::empty_like(x);
}

} // namespace
} // namespace meta

TORCH_LIBRARY_IMPL(posenc, Meta, m) {
  m.impl("add_position_table", TORCH_FN(meta::add_position_table));
  m.impl("add_position_table_", TORCH_FN(meta::add_position_table_));
  m.impl("add_position_table_out", TORCH_FN(meta::add_position_table_out));
  m.impl("_add_position_table_backward", TORCH_FN(meta::add_position_table_backward));
  m.impl("add_positional_encoding", TORCH_FN(meta::add_positional_encoding));
}

} // namespace ops
} // namespace posenc

#include <posenc/functional/positional_encoding.h>

#include "detail/checks.h"
#include "detail/positional_encoding.h"

#include <ATen/ops/add.h>
#include <ATen/ops/dropout.h>

namespace posenc {
namespace detail {

at::Tensor add_table_rows(
    const at::Tensor& x,
    const at::Tensor& rows,
    int64_t offset,
    bool batch_first) {
  const int64_t length = x.size(batch_first ? 1 : 0);
  at::Tensor slice = rows.narrow(0, offset, length);
  slice = batch_first ? slice.unsqueeze(0) : slice.unsqueeze(1);
  // Type promotion forms the sum in float32 for float16/bfloat16 inputs (float64 when either side
  // is float64); the single cast below is the only rounding to the input's dtype.
  at::Tensor out = at::add(x, slice);
  if (out.scalar_type() != x.scalar_type()) {
    out = out.to(x.scalar_type());
  }
  return out;
}

at::Tensor apply_dropout(const at::Tensor& x, double p, bool training) {
  if (!training || p == 0.0) {
    return x;
  }
  return at::dropout(x, p, /*train=*/true);
}

} // namespace detail

namespace functional {
namespace detail {

at::Tensor positional_encoding(
    const at::Tensor& x,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first,
    double dropout,
    bool training) {
  constexpr const char* who = "positional_encoding";
  const at::Tensor rows = posenc::detail::table_rows(who, table);
  posenc::detail::check_dropout(who, dropout);
  posenc::detail::check_sequence_input(who, x, rows.size(1), batch_first, rows.device());
  posenc::detail::check_offset(who, offset, x.size(batch_first ? 1 : 0), rows.size(0));
  const at::Tensor out = posenc::detail::add_table_rows(x, rows, offset, batch_first);
  return posenc::detail::apply_dropout(out, dropout, training);
}

} // namespace detail
} // namespace functional
} // namespace posenc

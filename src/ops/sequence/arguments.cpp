#include "ops/sequence/arguments.h"

#include "detail/checks.h"
#include "detail/sinusoidal.h"

namespace posenc {
namespace ops {

TableCall prepare_table_call(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                             OptionalTensor positions, bool batch_first, double scale,
                             OptionalTensor columns) {
  const detail::TableShape shape = detail::check_table(table);
  detail::check_sequence_input(x, shape.width, batch_first, table.device());
  detail::check_scale(scale, x.scalar_type());
  check_definition_device(columns, "columns", table.device());
  TableCall call = table_call(table, shape.width, x.sizes(), batch_first, scale);
  const Resolved resolved = resolve_positions(call, positions, offset, x.sizes().slice(0, 2),
                                              detail::sequence_layout(batch_first), x.device(),
                                              shape.max_len, given(columns), "columns");
  if (resolved.device.defined()) {
    extend_table_on_device(call, resolved.device, *columns);
  } else if (resolved.past) {
    extend_table(call, resolved.host, *columns, shape.max_len);
  }
  return call;
}

} // namespace ops
} // namespace posenc

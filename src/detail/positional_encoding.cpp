#include "detail/positional_encoding.h"

#include "detail/checks.h"

#include <posenc/ops.h>

#include <ATen/ops/add.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/where.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <tuple>

namespace posenc {
namespace detail {

CheckedPositions checked_positions(const char* who,
                                   const at::Tensor& positions,
                                   int64_t length,
                                   at::IntArrayRef per_sequence,
                                   const char* per_sequence_name,
                                   const c10::Device& device,
                                   int64_t limit,
                                   const BeyondTable& beyond) {
  TORCH_CHECK(positions.defined(), who, ": positions are undefined");
  TORCH_CHECK(at::isIntegralType(positions.scalar_type(), /*includeBool=*/false),
              who,
              ": positions must be an integer tensor (int64 or int32), but got ",
              positions.scalar_type());
  const bool shared = positions.dim() == 1 && positions.size(0) == length;
  const bool each = positions.dim() == 2 && positions.sizes() == per_sequence;
  TORCH_CHECK(shared || each,
              who,
              ": positions must have shape [L] = [",
              length,
              "] or ",
              per_sequence_name,
              " = ",
              per_sequence,
              ", but got ",
              positions.sizes());
  TORCH_CHECK(positions.device() == device,
              who,
              ": positions must be on the input's device (",
              device,
              "), but got ",
              positions.device());
  CheckedPositions result;
  result.values = positions.to(at::kLong).contiguous();
  if (result.values.numel() == 0) {
    return result;
  }
  at::Tensor low;
  at::Tensor high;
  std::tie(low, high) = at::aminmax(result.values);
  const int64_t smallest = low.item<int64_t>();
  const int64_t largest = high.item<int64_t>();
  result.largest = largest;
  TORCH_CHECK(
      smallest >= -1, who, ": positions must be >= -1 (-1 marks padding), but got ", smallest);
  TORCH_CHECK(limit < 0 || largest < limit || beyond.extrapolate != nullptr,
              who,
              ": positions must be < max_len (",
              limit,
              "), but got ",
              largest,
              "; build the module with max_len >= ",
              static_cast<double>(largest) + 1,
              beyond.hint);
  return result;
}

CheckedPositions checked_sequence_positions(const char* who,
                                            const at::Tensor& positions,
                                            const at::Tensor& x,
                                            bool batch_first,
                                            int64_t limit,
                                            const BeyondTable& beyond) {
  return checked_positions(who,
                           positions,
                           x.size(batch_first ? 1 : 0),
                           x.sizes().slice(0, 2),
                           batch_first ? "[B, L] (batch_first=true)" : "[L, B] (batch_first=false)",
                           x.device(),
                           limit,
                           beyond);
}

at::Tensor rows_for_offset(const at::Tensor& table_rows,
                           int64_t offset,
                           int64_t length,
                           bool batch_first) {
  const at::Tensor slice = table_rows.narrow(0, offset, length);
  return batch_first ? slice.unsqueeze(0) : slice.unsqueeze(1);
}

at::Tensor broadcast_rows(const at::Tensor& rows, const at::Tensor& positions, bool batch_first) {
  const int64_t width = rows.size(1);
  if (positions.dim() == 1) {
    return batch_first ? rows.unsqueeze(0) : rows.unsqueeze(1);
  }
  return rows.view({positions.size(0), positions.size(1), width});
}

at::Tensor rows_for_positions(const at::Tensor& table_rows,
                              const at::Tensor& positions,
                              bool batch_first) {
  const at::Tensor flat = positions.reshape({-1});
  const at::Tensor padding = flat.lt(0);
  at::Tensor rows = at::index_select(table_rows, 0, flat.clamp_min(0));
  rows = rows.masked_fill(padding.unsqueeze(1), 0);
  return broadcast_rows(rows, positions, batch_first);
}

at::Tensor add_rows(const at::Tensor& x, const at::Tensor& rows, double scale) {
  at::Tensor out = scale == 1.0 ? at::add(x, rows) : at::add(rows, x, scale);
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

at::Tensor table_forward(const char* who,
                         const at::Tensor& x,
                         const at::Tensor& table,
                         int64_t offset,
                         const at::Tensor& positions,
                         bool batch_first,
                         double scale,
                         const BeyondTable& beyond,
                         bool inplace) {
  const TableShape shape = check_table(who, table);
  const int64_t max_len = shape.max_len;
  check_sequence_input(who, x, shape.width, batch_first, table.device());
  TORCH_CHECK(std::isfinite(scale), who, ": scale must be finite, but got ", scale);
  const int64_t length = x.size(batch_first ? 1 : 0);

  at::Tensor checked;
  bool past_table = false;
  if (positions.defined()) {
    TORCH_CHECK(offset == 0,
                who,
                ": pass either an offset or explicit positions, not both (got offset = ",
                offset,
                ")");
    const CheckedPositions valid =
        checked_sequence_positions(who, positions, x, batch_first, max_len, beyond);
    checked = valid.values;
    past_table = valid.largest >= max_len;
  } else {
    TORCH_CHECK(
        offset >= 0, who, ": offset must be >= 0, but got ", offset, "; positions start at 0");
    TORCH_CHECK(offset <= std::numeric_limits<int64_t>::max() - length,
                who,
                ": offset + L must fit in int64, but got offset = ",
                offset,
                " and L = ",
                length);
    past_table = offset > max_len - length;
    if (past_table && beyond.extrapolate == nullptr) {
      check_offset(who, offset, length, max_len, beyond.hint);
    }
  }
  const c10::optional<at::Tensor> given =
      checked.defined() ? c10::optional<at::Tensor>(checked) : c10::nullopt;
  if (!past_table) {
    if (inplace) {
      at::Tensor target = x;
      return ops::add_position_table_(target, table, offset, batch_first, given, scale);
    }
    return ops::add_position_table(x, table, offset, batch_first, given, scale);
  }
  // Some positions lie past the table: rows from the table where they exist, computed on the fly
  // (same formula, same single rounding to the table's dtype) where they do not. Each part is zero
  // where the other applies, so their sum is exact.
  if (!checked.defined()) {
    checked = at::arange(offset, offset + length, x.options().dtype(at::kLong));
  }
  const at::Tensor rows = table_rows(who, table);
  const at::Tensor in_table = at::where(checked.lt(max_len), checked, -1);
  const at::Tensor past = at::where(checked.ge(max_len), checked, -1);
  const at::Tensor computed = sinusoidal_rows(past, *beyond.extrapolate, rows.scalar_type());
  const at::Tensor combined = rows_for_positions(rows, in_table, batch_first)
                                  .add(broadcast_rows(computed, checked, batch_first));
  const at::Tensor out = add_rows(x, combined, scale);
  if (inplace) {
    at::Tensor target = x;
    return target.copy_(out);
  }
  return out;
}

at::Tensor apply_dropout(const at::Tensor& x, double p, bool training, bool inplace) {
  if (!training || p == 0.0) {
    return x;
  }
  if (inplace) {
    at::Tensor target = x;
    return at::dropout_(target, p, /*train=*/true);
  }
  return at::dropout(x, p, /*train=*/true);
}

} // namespace detail
} // namespace posenc

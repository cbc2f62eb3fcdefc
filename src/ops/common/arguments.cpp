#include "ops/common/arguments.h"


#include "detail/checks.h"
#include "detail/rotary.h"
#include "detail/sinusoidal.h"
#include "detail/device_checks.h"
#include "detail/memory_overlap.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIndexing.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/where.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

namespace posenc {
namespace ops {

using detail::caller_hint;

bool given(OptionalTensor tensor) {
  return tensor.has_value() && tensor->defined();
}

// The smallest and largest value of an int64 CPU tensor ({0, -1} when empty).
std::pair<int64_t, int64_t> whole_range(const at::Tensor& host) {
  if (host.numel() == 0) {
    return {0, -1};
  }
  const int64_t* values = host.data_ptr<int64_t>();
  const auto extremes = std::minmax_element(values, values + host.numel());
  return {*extremes.first, *extremes.second};
}


// Checks the positions of a call (offset form or explicit) against a table of `max_len` rows and
// fills `source`. Reads from the device at most once: the extremes of `ids` (token ids) and of the
// positions, or, when positions may lie past the table (`extendable`), all positions.
Resolved resolve_positions(PositionSource& source, OptionalTensor positions, int64_t offset,
                           at::IntArrayRef per_sequence, const char* per_sequence_name,
                           const c10::Device& device, int64_t max_len, bool extendable,
                           const char* definition, const at::Tensor& ids) {
  Resolved resolved;
  const bool on_host = !detail::checks_on_device(device);
  if (given(positions)) {
    detail::check_no_offset_with_positions(offset);
    detail::check_positions_form(*positions, source.length, per_sequence, per_sequence_name, device,
                                 /*continuous=*/true);
    detail::check_continuous_allowed(*positions, extendable, definition);
    if (!on_host) {
      // Nothing is read back: the kernels check integer positions (and token ids) where they read
      // them; a call that may reach past the table gets the rows of exactly its positions,
      // computed on the device.
      if (detail::is_continuous(*positions)) {
        const at::Tensor p = positions->to(at::kDouble);
        detail::check_positions_on_device(p);
        resolved.device = p;
        resolved.past = true;
        return resolved;
      }
      source.positions = positions->to(at::kLong).contiguous();
      if (extendable) {
        detail::check_positions_on_device(source.positions);
        resolved.device = source.positions;
        resolved.past = true;
      }
      return resolved;
    }
    if (detail::is_continuous(*positions)) {
      // Every row is computed from the definition (a second read for token ids, if any).
      if (ids.defined()) {
        resolved.ids = detail::host_read({ids}).ranges[0];
      }
      resolved.host = positions->to(at::kCPU, at::kDouble).contiguous();
      detail::check_continuous_range(resolved.host);
      resolved.past = true;
      return resolved;
    }
    const detail::HostValues host =
        extendable ? detail::host_read({ids}, *positions) : detail::host_read({ids, *positions});
    resolved.ids = host.ranges[0];
    const std::pair<int64_t, int64_t> range =
        extendable ? whole_range(host.whole) : host.ranges[1];
    detail::check_positions_range(range.first, range.second, extendable ? -1 : max_len,
                                  caller_hint());
    source.positions = positions->to(at::kLong).contiguous();
    resolved.past = range.second >= max_len;
    if (resolved.past) {
      resolved.host = host.whole;
    }
    return resolved;
  }
  detail::check_offset_start(offset, source.length);
  if (ids.defined() && on_host) { // (on a device, the kernel checks each id it reads)
    resolved.ids = detail::host_read({ids}).ranges[0];
  }
  source.offset = offset;
  resolved.past = offset > max_len - source.length;
  if (resolved.past && !extendable) {
    detail::check_offset(offset, source.length, max_len, caller_hint());
  }
  if (resolved.past) {
    const auto long_options = at::TensorOptions().dtype(at::kLong);
    if (on_host) {
      resolved.host = at::arange(offset, offset + source.length, long_options);
    } else { // made on the device: no copy from the host either
      resolved.device = at::arange(offset, offset + source.length, long_options.device(device));
    }
  }
  return resolved;
}

// Positions 0 .. N-1 over the N positions of `host` (-1 kept for integer padding), on `device`:
// they index a table of exactly the rows used.
at::Tensor index_positions(const at::Tensor& host, const c10::Device& device) {
  const at::Tensor index =
      at::arange(host.numel(), host.options().dtype(at::kLong)).view(host.sizes());
  if (detail::is_continuous(host)) {
    return index.to(device);
  }
  return at::where(host.lt(0), host, index).to(device);
}

// index_positions for device-resident positions, computed there.
at::Tensor index_positions_on_device(const at::Tensor& positions) {
  const at::Tensor index =
      at::arange(positions.numel(), positions.options().dtype(at::kLong)).view(positions.sizes());
  if (detail::is_continuous(positions)) {
    return index;
  }
  return index.masked_fill(positions.lt(0), -1);
}

// The rows of exactly `positions` (device-resident, int64 with -1 for padding or float64): a row
// of `table` ([max_len, W]) where an integer position lies in it, else the row `computed` holds
// for it ([N, W], computed from the definition), on the device, in the table's dtype. (Padding
// rows are never read: the kernels treat -1 as padding.)
at::Tensor rows_on_device(const at::Tensor& table, const at::Tensor& positions,
                          const at::Tensor& computed) {
  const int64_t max_len = table.size(0);
  if (detail::is_continuous(positions) || max_len == 0) {
    return computed;
  }
  // Row i of [gathered; computed]: i inside the table, N + i past it (a selection, no arithmetic
  // on the values; operations that run on meta tensors too).
  const at::Tensor flat = positions.reshape({-1});
  const at::Tensor gathered = table.index({flat.clamp(0, max_len - 1)});
  const at::Tensor pick = at::arange(flat.numel(), flat.options()) + flat.ge(max_len).to(at::kLong).mul(flat.numel());
  return at::cat({gathered, computed}, 0).index({pick});
}

// Rows past a sinusoidal table, for device-resident positions: from the column plan on the device
// (angle = position * frequency in float64, then sin, cos or 0 by the column's kind, rounded once
// to the table's dtype, as detail::sinusoidal_rows computes them on the host).
void extend_table_on_device(TableCall& call, const at::Tensor& positions,
                            const at::Tensor& columns) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(columns.dim() == 2 && columns.size(0) == 2 && columns.size(1) == call.width &&
                  columns.scalar_type() == at::kDouble,
              who, ": columns must be a float64 [2, D] = [2, ", call.width,
              "] column plan (frequencies, kinds), but got ", columns.scalar_type(), " of shape ",
              columns.sizes(), "; pass the module's plan or none");
  const at::Tensor frequency = columns[0];
  const at::Tensor kind = columns[1];
  detail::check_on_device(detail::within(frequency, -detail::kMaxFrequency, detail::kMaxFrequency) &
                              (kind.eq(0) | kind.eq(1) | kind.eq(2)),
                  frequency, detail::DeviceCheck::kFrequencies);
  const at::Tensor rows = detail::table_rows(call.table);
  call.table =
      rows_on_device(rows, positions, detail::sinusoidal_rows_from(positions, columns, rows.scalar_type()));
  call.positions = index_positions_on_device(positions);
  call.offset = 0;
}

// Rows past a sinusoidal table: the rows of exactly the positions used, gathered from the table
// where they exist and computed from the column plan where they do not (each part is zero where the
// other applies, so the sum is exact), then positions indexing them. Floating-point positions:
// every row computed from the column plan.
void extend_table(TableCall& call, const at::Tensor& host, const at::Tensor& columns,
                  int64_t max_len) {
  const detail::ColumnPlan plan = detail::column_plan_from_tensor(columns, call.width);
  const at::Tensor flat = host.reshape({-1});
  if (detail::is_continuous(host)) {
    const at::Tensor rows = detail::table_rows(call.table);
    call.table = detail::sinusoidal_rows(flat, plan, rows.scalar_type()).to(rows.device());
    call.positions = index_positions(host, rows.device());
    call.offset = 0;
    return;
  }
  const at::Tensor values = flat.contiguous();
  const int64_t* first = values.data_ptr<int64_t>();
  if (std::all_of(first, first + values.numel(),
                  [max_len](int64_t p) { return p < 0 || p >= max_len; })) {
    // No position in the table (decoding past max_len): its rows computed alone (padding, -1:
    // a zero row, as below), without a gather.
    const at::Tensor rows = detail::table_rows(call.table);
    call.table = detail::sinusoidal_rows(values, plan, rows.scalar_type()).to(rows.device());
    call.positions = index_positions(host, rows.device());
    call.offset = 0;
    return;
  }
  const at::Tensor in_table = at::where(flat.lt(max_len), flat, -1);
  const at::Tensor past = at::where(flat.ge(max_len), flat, -1);
  const at::Tensor rows = detail::table_rows(call.table);
  const at::Tensor device_in_table = in_table.to(rows.device());
  const at::Tensor gathered = at::index_select(rows, 0, device_in_table.clamp_min(0))
                                  .masked_fill(device_in_table.lt(0).unsqueeze(1), 0);
  call.table =
      gathered.add(detail::sinusoidal_rows(past, plan, rows.scalar_type()).to(rows.device()));
  call.positions = index_positions(host, rows.device());
  call.offset = 0;
}

// A table call over `sizes` ([B, L, ...] or [L, B, ...]) before its positions are resolved.
TableCall table_call(const at::Tensor& table, int64_t width, at::IntArrayRef sizes,
                     bool batch_first, double scale) {
  TableCall call;
  call.table = table;
  call.width = width;
  call.batch_first = batch_first;
  call.scale = scale;
  call.length = sizes[batch_first ? 1 : 0];
  call.batch = sizes[batch_first ? 0 : 1];
  return call;
}

// A table as the hand-written kernels read it: contiguous float32 or float64, as given when it is
// (a contiguous [1, max_len, D] table is read as its rows directly: no view on the decode path),
// else widened (float16/bfloat16 to float32, exactly) and made contiguous.
at::Tensor kernel_readable(const at::Tensor& table) {
  const at::ScalarType dtype = table.scalar_type();
  if (table.is_contiguous() && (dtype == at::kFloat || dtype == at::kDouble)) {
    return table;
  }
  return detail::table_rows(table).to(dtype == at::kDouble ? at::kDouble : at::kFloat).contiguous();
}

at::Tensor TableCall::kernel_table() const {
  return kernel_readable(table);
}

void check_out(const at::Tensor& out, const at::Tensor& x) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(out.defined(), who, ": out is undefined");
  TORCH_CHECK(out.scalar_type() == x.scalar_type() && out.device() == x.device(), who,
              ": out must have the input's dtype and device (", x.scalar_type(), ", ", x.device(),
              "), but has ", out.scalar_type(), ", ", out.device());
}

void prepare_out(at::Tensor& out, const at::Tensor& x) {
  check_out(out, x);
  // PyTorch's rule: an out of another shape is resized (with a deprecation warning unless it is
  // empty).
  at::native::resize_output(out, x.sizes());
  at::assert_no_internal_overlap(out);
  at::assert_no_partial_overlap(out, x);
}

void check_no_overlap(const at::Tensor& written, const char* written_name,
                      std::initializer_list<NamedInput> inputs) {
  for (const NamedInput& input : inputs) {
    if (input.tensor == nullptr || !input.tensor->defined()) {
      continue;
    }
    // (exact where ATen answers "too hard": strided views of one buffer, e.g. q and k of a fused
    // qkv tensor; what cannot be decided is refused like a proven overlap)
    const detail::Sharing sharing = detail::tensors_share(written, *input.tensor);
    TORCH_CHECK(
        sharing != detail::Sharing::kUnknown, detail::caller(), ": cannot tell whether ",
        written_name, " and ", input.name,
        " share memory (strided views of one buffer "
        "whose elements interleave too intricately to decide); pass a clone() of one of them");
    TORCH_CHECK(sharing == detail::Sharing::kNone, detail::caller(), ": ", written_name,
                " shares memory with ", input.name, ", which the operation reads while writing ",
                written_name, "; pass a clone() of one of them");
  }
}

bool below_autograd_suffices(const at::Tensor& a, const at::Tensor& b) {
  if (!c10::GradMode::is_enabled()) {
    return true;
  }
  return !(a.defined() && a.requires_grad()) && !(b.defined() && b.requires_grad());
}

void check_definition_device(OptionalTensor tensor, const char* what, const c10::Device& device) {
  if (given(tensor)) {
    detail::check_argument_device(*tensor, what, device);
  }
}

c10::optional<at::Tensor> optional_of(const at::Tensor& tensor) {
  return tensor.defined() ? c10::optional<at::Tensor>(tensor) : c10::nullopt;
}

at::Tensor defined_or_empty(OptionalTensor tensor) {
  return tensor.has_value() ? *tensor : at::Tensor();
}

} // namespace ops
} // namespace posenc

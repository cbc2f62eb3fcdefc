#include "ops/op_arguments.h"

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
namespace {

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

// What resolving a call's positions found out.
struct Resolved {
  bool past = false; // some position lies at or past the table's end (only when extendable)
  at::Tensor host;   // then: every position on the host, int64, of the positions' shape
  std::pair<int64_t, int64_t> ids{0, -1}; // the range of `ids`, when given
  // Device-resident positions whose rows are computed on the device (a call that may reach past
  // the table: it has the definition); `past` is then true. Never read on the host.
  at::Tensor device;
};


// Checks the positions of a call (offset form or explicit) against a table of `max_len` rows and
// fills `source`. Reads from the device at most once: the extremes of `ids` (token ids) and of the
// positions, or, when positions may lie past the table (`extendable`), all positions.
Resolved resolve_positions(PositionSource& source, OptionalTensor positions, int64_t offset,
                           at::IntArrayRef per_sequence, const char* per_sequence_name,
                           const c10::Device& device, int64_t max_len, bool extendable,
                           const char* definition, const at::Tensor& ids = at::Tensor()) {
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

} // namespace

namespace {
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
} // namespace

at::Tensor TableCall::kernel_table() const {
  return kernel_readable(table);
}
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

at::Tensor RotaryCall::kernel_cos() const {
  return kernel_readable(cos);
}

at::Tensor RotaryCall::kernel_sin() const {
  return kernel_readable(sin);
}

namespace {

// cos and sin: [max_len, R/2] tables of one floating dtype on one device.
void check_caches(const at::Tensor& cos, const at::Tensor& sin) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(cos.defined() && sin.defined() && cos.dim() == 2 && cos.sizes() == sin.sizes() &&
                  cos.size(1) >= 1 && cos.size(1) <= detail::kMaxTableElements,
              who, ": cos and sin must be [max_len, R/2] tables of the same shape (R/2 <= 2^28), "
              "but got ",
              cos.defined() ? cos.sizes() : at::IntArrayRef{}, " and ",
              sin.defined() ? sin.sizes() : at::IntArrayRef{});
  detail::check_float_dtype("the dtype of cos and sin", cos.scalar_type());
  TORCH_CHECK(cos.scalar_type() == sin.scalar_type() && cos.device() == sin.device(), who,
              ": cos and sin must share dtype and device, but cos is ", cos.scalar_type(), " on ",
              cos.device(), " and sin ", sin.scalar_type(), " on ", sin.device());
}

} // namespace

detail::RopeFrequencies given_frequencies(const at::Tensor& inv_freq, const at::Tensor& cos,
                                          double attention_factor) {
  static constexpr detail::CallerName who{};
  const int64_t half = cos.size(1);
  TORCH_CHECK(inv_freq.dim() == 1 && inv_freq.size(0) == half &&
                  inv_freq.scalar_type() == at::kDouble,
              who, ": inv_freq must be a float64 [R/2] = [", half,
              "] tensor of frequencies, but got ", inv_freq.scalar_type(), " of shape ",
              inv_freq.sizes());
  check_definition_device(inv_freq, "inv_freq", cos.device());
  // cos/sin carry the factor, so it must be a finite number in their dtype.
  const double largest = cos.scalar_type() == at::kDouble ? std::numeric_limits<double>::max()
                         : cos.scalar_type() == at::kHalf ? 65504.0
                                                          : std::numeric_limits<float>::max();
  TORCH_CHECK(attention_factor > 0.0 && attention_factor <= largest, who,
              ": attention_factor must be > 0 and at most ", largest, " (the largest ",
              cos.scalar_type(), " of the cos/sin caches that carry it), but got ",
              attention_factor);
  detail::RopeFrequencies frequencies;
  frequencies.attention_factor = attention_factor;
  if (detail::checks_on_device(inv_freq.device())) {
    // Checked where it lies; the rows are computed there (rotary_rows_on_device).
    detail::check_on_device(detail::within(inv_freq, -detail::kMaxFrequency, detail::kMaxFrequency),
                            inv_freq, detail::DeviceCheck::kFrequencies);
    return frequencies;
  }
  const at::Tensor host = inv_freq.to(at::kCPU).contiguous();
  frequencies.inv_freq.assign(host.data_ptr<double>(), host.data_ptr<double>() + half);
  for (const double frequency : frequencies.inv_freq) {
    TORCH_CHECK(std::abs(frequency) <= detail::kMaxFrequency, who,
                ": inv_freq must hold frequencies in [-1.9e289, 1.9e289] (so that every angle "
                "is a finite number), but holds ",
                frequency);
  }
  frequencies.attention_factor = attention_factor;
  return frequencies;
}

std::pair<at::Tensor, at::Tensor> rotary_rows_on_device(const at::Tensor& cos,
                                                       const at::Tensor& sin,
                                                       const at::Tensor& positions,
                                                       const at::Tensor& inv_freq,
                                                       double attention_factor) {
  const auto computed =
      detail::rotary_rows_from(positions, inv_freq, attention_factor, cos.scalar_type());
  return {rows_on_device(cos, positions, computed.first),
          rows_on_device(sin, positions, computed.second)};
}

RotaryCall prepare_rotary_call(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                               int64_t offset, OptionalTensor positions, bool heads_first,
                               OptionalTensor inv_freq, double attention_factor) {
  check_caches(cos, sin);
  detail::check_rotary_input(x, 2 * cos.size(1), heads_first, cos.device());
  RotaryCall call;
  call.cos = cos;
  call.sin = sin;
  call.heads_first = heads_first;
  call.batch = x.size(0);
  call.length = x.size(heads_first ? 2 : 1);
  call.heads = x.size(heads_first ? 1 : 2);
  call.head_dim = x.size(3);
  call.half = cos.size(1);
  const detail::RopeFrequencies frequencies =
      given(inv_freq) ? given_frequencies(*inv_freq, cos, attention_factor)
                      : detail::RopeFrequencies();
  const int64_t batch_and_length[] = {call.batch, call.length};
  const Resolved resolved = resolve_positions(call, positions, offset, batch_and_length, "[B, L]",
                                              x.device(), cos.size(0), given(inv_freq), "inv_freq");
  if (resolved.device.defined()) {
    // On the device: the caches' rows where they exist, computed from inv_freq elsewhere.
    std::tie(call.cos, call.sin) =
        rotary_rows_on_device(cos, sin, resolved.device, *inv_freq, attention_factor);
    call.positions = index_positions_on_device(resolved.device);
    call.offset = 0;
  } else if (resolved.past) {
    // cos/sin for exactly the positions used, computed from the frequencies (identical to the
    // cached values where both exist), and positions indexing them.
    // In the offset form, the rows of offset .. offset + L - 1 in that order: row l is position
    // l of the rows, the offset form from 0 (a decoding step past the caches builds no position
    // or index tensor).
    const auto rows =
        given(positions)
            ? detail::rotary_rows(resolved.host.reshape({-1}), frequencies, cos.scalar_type())
            : detail::rotary_rows_range(offset, call.length, frequencies, cos.scalar_type());
    call.cos = rows.first.to(cos.device());
    call.sin = rows.second.to(cos.device());
    call.positions = given(positions) ? index_positions(resolved.host, x.device()) : at::Tensor();
    call.offset = 0;
  }
  return call;
}

MultimodalTablesCall prepare_multimodal_tables_call(const at::Tensor& cos, const at::Tensor& sin,
                                                    const at::Tensor& positions,
                                                    at::IntArrayRef mrope_section, bool interleaved,
                                                    OptionalTensor inv_freq,
                                                    double attention_factor) {
  static constexpr detail::CallerName who{};
  check_caches(cos, sin);
  const int64_t half = cos.size(1);
  MultimodalTablesCall call;
  call.axes = detail::mrope_axes(mrope_section.vec(), interleaved, half);
  TORCH_CHECK(positions.defined() && (positions.dim() == 2 || positions.dim() == 3) &&
                  positions.size(0) == 3,
              who,
              ": multimodal positions must be [3, B, L] or [3, L] (temporal, height and width "
              "position of each token, as Qwen2-VL's get_rope_index gives them), but got ",
              positions.defined() ? positions.sizes() : at::IntArrayRef{});
  TORCH_CHECK(at::isIntegralType(positions.scalar_type(), /*includeBool=*/false), who,
              ": positions must be an integer tensor (int64 or int32), but got ",
              positions.scalar_type());
  detail::check_positions_device(positions, cos.device());
  if (given(inv_freq)) {
    call.frequencies = given_frequencies(*inv_freq, cos, attention_factor);
  }
  call.shape = positions.sizes().slice(1).vec();
  call.shape.push_back(half);
  call.positions = positions.to(at::kLong).reshape({3, -1});
  if (detail::checks_on_device(positions.device())) {
    // Nothing is read back: the range is checked on the device, and with inv_freq every row is
    // taken from the caches or computed on the device (call.inv_freq).
    const at::Tensor ok = given(inv_freq) ? call.positions.ge(0)
                                          : call.positions.ge(0) & call.positions.lt(cos.size(0));
    detail::check_on_device(ok, call.positions, detail::DeviceCheck::kMultimodalPositions);
    if (given(inv_freq)) {
      call.inv_freq = *inv_freq;
    }
    return call;
  }
  // One read: all positions when rows past the caches may have to be computed, else their range.
  const detail::HostValues host = given(inv_freq) ? detail::host_read({}, positions)
                                                  : detail::host_read({positions});
  const std::pair<int64_t, int64_t> range =
      given(inv_freq) ? whole_range(host.whole) : host.ranges[0];
  TORCH_CHECK(range.first >= 0 || range.second < range.first, who,
              ": multimodal positions must be >= 0, but got ", range.first,
              " (M-RoPE has no padding value: mask padded tokens in the attention)");
  detail::check_positions_range(range.first, range.second, given(inv_freq) ? -1 : cos.size(0),
                                caller_hint());
  if (range.second >= cos.size(0)) {
    call.host_positions = host.whole.to(at::kLong).reshape({3, -1});
  }
  return call;
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

RotaryQkCall prepare_rotary_qk_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                    const at::Tensor& sin, int64_t offset, OptionalTensor positions,
                                    bool heads_first, OptionalTensor inv_freq,
                                    double attention_factor) {
  RotaryQkCall call;
  static_cast<RotaryCall&>(call) =
      prepare_rotary_call(q, cos, sin, offset, positions, heads_first, inv_freq, attention_factor);
  static constexpr detail::CallerName who{};
  detail::check_rotary_input(k, 2 * call.half, heads_first, cos.device());
  TORCH_CHECK(k.scalar_type() == q.scalar_type(), who,
              ": q and k must share a dtype, but q is ", q.scalar_type(), " and k ",
              k.scalar_type(), "; convert one of them");
  const int64_t k_length = k.size(heads_first ? 2 : 1);
  TORCH_CHECK(k.size(0) == call.batch && k_length == call.length, who,
              ": k must hold the keys of q's tokens (the same batch B and length L, in the layout ",
              heads_first ? "[B, H, L, Dh]" : "[B, L, H, Dh]", "), but q is ", q.sizes(),
              " and k ", k.sizes());
  call.k_heads = k.size(heads_first ? 1 : 2);
  call.k_head_dim = k.size(3);
  return call;
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

c10::optional<at::Tensor> optional_of(const at::Tensor& tensor) {
  return tensor.defined() ? c10::optional<at::Tensor>(tensor) : c10::nullopt;
}

at::Tensor defined_or_empty(OptionalTensor tensor) {
  return tensor.has_value() ? *tensor : at::Tensor();
}

} // namespace ops
} // namespace posenc

#include "detail/sinusoidal.h"

#include "detail/checks.h"
#include "detail/device_checks.h"
#include "detail/enum_names.h"

#include <ATen/Parallel.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace posenc {
namespace detail {

ColumnPlan column_plan(const SinusoidSpec& spec) {
  const int64_t d = spec.d_model;
  // Frequency k of each spacing.
  const int64_t paper_count = (d + 1) / 2;
  const int64_t t2t_count = d / 2;
  const auto frequency_of = [&](int64_t k) {
    if (spec.spacing == FrequencySpacing::kPaper) {
      return std::pow(spec.base, -static_cast<double>(2 * k) / static_cast<double>(d));
    }
    return std::pow(spec.base, -static_cast<double>(k) /
                                   static_cast<double>(std::max<int64_t>(t2t_count - 1, 1)));
  };
  const int64_t count = spec.spacing == FrequencySpacing::kPaper ? paper_count : t2t_count;
  // The number of sine columns: all frequencies. Cosines: as many as fit after them.
  ColumnPlan plan;
  plan.frequency.assign(static_cast<size_t>(d), 0.0);
  plan.kind.assign(static_cast<size_t>(d), ColumnPlan::kZero);
  for (int64_t c = 0; c < d; ++c) {
    int64_t k = 0;
    ColumnPlan::Kind kind = ColumnPlan::kZero;
    if (spec.layout == ChannelLayout::kInterleaved) {
      k = c / 2;
      kind = c % 2 == 0 ? ColumnPlan::kSin : ColumnPlan::kCos;
    } else if (c < count) {
      k = c;
      kind = ColumnPlan::kSin;
    } else {
      k = c - count;
      kind = ColumnPlan::kCos;
    }
    if (k < count && (kind == ColumnPlan::kSin || k < d - count)) {
      plan.frequency[static_cast<size_t>(c)] = frequency_of(k);
      plan.kind[static_cast<size_t>(c)] = kind;
    }
  }
  return plan;
}

namespace {
// A plan as a float64 [2, D] CPU tensor: frequencies, then kinds.
at::Tensor plan_tensor(const ColumnPlan& plan) {
  const int64_t d_model = static_cast<int64_t>(plan.frequency.size());
  at::Tensor columns = at::empty({2, d_model}, at::TensorOptions().dtype(at::kDouble));
  double* data = columns.data_ptr<double>();
  for (int64_t c = 0; c < d_model; ++c) {
    data[c] = plan.frequency[static_cast<size_t>(c)];
    data[d_model + c] = static_cast<double>(plan.kind[static_cast<size_t>(c)]);
  }
  return columns;
}
} // namespace

at::Tensor column_plan_tensor(const SinusoidSpec& spec) {
  return plan_tensor(column_plan(spec));
}

ColumnPlan column_plan_from_tensor(const at::Tensor& columns, int64_t width) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(columns.dim() == 2 && columns.size(0) == 2 && columns.size(1) == width &&
                  columns.scalar_type() == at::kDouble,
              who, ": columns must be a float64 [2, D] = [2, ", width,
              "] column plan (frequencies, kinds), but got ", columns.scalar_type(), " of shape ",
              columns.sizes(), "; pass the module's plan or none");
  const at::Tensor host = columns.to(at::kCPU).contiguous();
  const double* data = host.data_ptr<double>();
  ColumnPlan plan;
  plan.frequency.assign(data, data + width);
  plan.kind.resize(static_cast<size_t>(width));
  for (int64_t c = 0; c < width; ++c) {
    const double kind = data[width + c];
    TORCH_CHECK(std::abs(data[c]) <= kMaxFrequency && (kind == 0.0 || kind == 1.0 || kind == 2.0),
                who,
                ": columns must hold frequencies in [-1.9e289, 1.9e289] (so that every angle is a "
                "finite number) and kinds 0 (sine), 1 (cosine) or 2 (zero), but column ",
                c, " has frequency ", data[c], " and kind ", kind);
    plan.kind[static_cast<size_t>(c)] = static_cast<ColumnPlan::Kind>(static_cast<int>(kind));
  }
  return plan;
}

void check_table_arguments(int64_t max_len, int64_t d_model, double base) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(d_model >= 1, who, ": d_model must be >= 1, but got ", d_model,
              "; pass the width of the embeddings the encoding is added to");
  TORCH_CHECK(max_len >= 1, who, ": max_len must be >= 1, but got ", max_len,
              "; pass the number of positions the table must hold");
  // Frequencies lie between 1 and 1 / base; a base below 1 / kMaxFrequency would give angles that
  // overflow (and NaN at position 0, where the angle is 0 * inf).
  TORCH_CHECK(std::isfinite(base) && base >= 1.0 / kMaxFrequency, who,
              ": base must be finite and >= 5.2e-290 (so that every angle position * base^-e is a "
              "finite number), but got ",
              base, "; the paper uses 10000");
  check_table_size("a table of max_len * d_model", max_len, d_model, "max_len");
}

void check_table_request(int64_t max_len, int64_t d_model, double base, int64_t offset,
                         c10::ScalarType dtype) {
  static constexpr detail::CallerName who{};
  check_table_arguments(max_len, d_model, base);
  check_float_dtype("dtype", dtype);
  TORCH_CHECK(offset >= 0, who, ": offset must be >= 0, but got ", offset,
              "; positions start at 0");
  TORCH_CHECK(offset <= std::numeric_limits<int64_t>::max() - max_len, who,
              ": offset + max_len must fit in int64, but got offset = ", offset,
              " and max_len = ", max_len);
}

ChannelLayout parse_channel_layout(c10::string_view text) {
  static constexpr detail::CallerName who{};
  const c10::optional<ChannelLayout> layout = enum_value<ChannelLayout>(text);
  TORCH_CHECK(layout, who, ": channels must be ", enum_alternatives<ChannelLayout>("\""),
              ", but got \"", std::string(text.data(), text.size()), "\"");
  return *layout;
}

FrequencySpacing parse_frequency_spacing(c10::string_view text) {
  static constexpr detail::CallerName who{};
  const c10::optional<FrequencySpacing> spacing = enum_value<FrequencySpacing>(text);
  TORCH_CHECK(spacing, who, ": frequencies must be ", enum_alternatives<FrequencySpacing>("\""),
              ", but got \"", std::string(text.data(), text.size()), "\"");
  return *spacing;
}

namespace {
// Writes the rows of `count` positions: `position(r)` is row r's position (as a double), or
// nullopt for a row of zeros (padding).
template <typename T, typename Position>
void fill_sinusoidal_rows(int64_t count, const ColumnPlan& plan, T* out,
                          const Position& position) {
  const int64_t d_model = static_cast<int64_t>(plan.frequency.size());
  if (d_model == 0 || count == 0) {
    return; // nothing to write (and no grain to size from a zero width)
  }
  // Each element costs a double-precision sin or cos (~20 ns), so a few thousand elements are
  // worth a task.
  const int64_t grain = std::max<int64_t>(1, 4096 / d_model);
  at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* row = out + r * d_model;
      const c10::optional<double> at = position(r);
      if (!at.has_value()) {
        std::fill(row, row + d_model, T(0));
        continue;
      }
      for (int64_t c = 0; c < d_model; ++c) {
        const double angle = *at * plan.frequency[static_cast<size_t>(c)];
        const ColumnPlan::Kind kind = plan.kind[static_cast<size_t>(c)];
        row[c] = static_cast<T>(kind == ColumnPlan::kSin   ? std::sin(angle)
                                : kind == ColumnPlan::kCos ? std::cos(angle)
                                                           : 0.0);
      }
    }
  });
}

// `count` rows in `dtype` on the CPU: float32 and float64 are written directly; float16 and
// bfloat16 are rounded from float64 (never through float32, which would round twice).
template <typename Position>
at::Tensor rows_in(int64_t count, const ColumnPlan& plan, c10::ScalarType dtype,
                   const Position& position) {
  const int64_t d_model = static_cast<int64_t>(plan.frequency.size());
  const bool direct = dtype == at::kFloat || dtype == at::kDouble;
  at::Tensor rows =
      at::empty({count, d_model}, at::TensorOptions().dtype(direct ? dtype : at::kDouble));
  if (rows.scalar_type() == at::kFloat) {
    fill_sinusoidal_rows(count, plan, rows.data_ptr<float>(), position);
  } else {
    fill_sinusoidal_rows(count, plan, rows.data_ptr<double>(), position);
  }
  return rows.to(dtype);
}
} // namespace

at::Tensor sinusoidal_rows_from(const at::Tensor& positions, const at::Tensor& columns,
                                c10::ScalarType dtype) {
  const at::Tensor flat = positions.reshape({-1});
  const at::Tensor angles = flat.to(at::kDouble).unsqueeze(1) * columns[0].unsqueeze(0);
  // Column c of [sin | cos | 0] by the column's kind (0, 1, 2): a selection (gather), so that the
  // values are the functions' own, with operations that run on meta tensors too.
  const int64_t width = angles.size(1);
  const at::Tensor pick = (at::arange(width, flat.options().dtype(at::kLong)) +
                           columns[1].to(at::kLong).mul(width))
                              .unsqueeze(0)
                              .expand({angles.size(0), width});
  at::Tensor rows = at::cat({angles.sin(), angles.cos(), at::zeros_like(angles)}, 1).gather(1, pick);
  if (!at::isFloatingType(positions.scalar_type())) {
    rows = rows.masked_fill(flat.lt(0).unsqueeze(1), 0.0);
  }
  return rows.to(dtype);
}

at::Tensor sinusoidal_rows(const at::Tensor& positions, const ColumnPlan& plan,
                           c10::ScalarType dtype) {
  if (!positions.device().is_cpu()) {
    return sinusoidal_rows_from(positions, upload(plan_tensor(plan), positions.device()), dtype);
  }
  if (at::isFloatingType(positions.scalar_type())) {
    const at::Tensor cpu_positions = positions.to(at::kCPU, at::kDouble).contiguous();
    const double* values = cpu_positions.data_ptr<double>();
    return rows_in(cpu_positions.numel(), plan, dtype,
                   [values](int64_t r) -> c10::optional<double> { return values[r]; })
        .to(positions.device());
  }
  const at::Tensor cpu_positions = positions.to(at::kCPU, at::kLong).contiguous();
  const int64_t* values = cpu_positions.data_ptr<int64_t>();
  return rows_in(cpu_positions.numel(), plan, dtype,
                 [values](int64_t r) -> c10::optional<double> {
                   return values[r] < 0 ? c10::nullopt
                                        : c10::optional<double>(static_cast<double>(values[r]));
                 })
      .to(positions.device());
}

at::Tensor sinusoidal_descending_rows(int64_t first, int64_t count, const SinusoidSpec& spec,
                                      c10::ScalarType dtype, c10::Device device) {
  return rows_in(count, column_plan(spec), dtype,
                 [first](int64_t r) -> c10::optional<double> {
                   return static_cast<double>(first - r);
                 })
      .to(device);
}

at::Tensor sinusoidal_table(int64_t max_len, int64_t offset, const SinusoidSpec& spec,
                            c10::ScalarType dtype, c10::Device device) {
  const at::Tensor positions =
      at::arange(offset, offset + max_len, at::TensorOptions().dtype(at::kLong));
  return sinusoidal_rows(positions, column_plan(spec), dtype).to(device);
}

} // namespace detail
} // namespace posenc

#include <posenc/functional/positional_encoding.h>

#include "detail/checks.h"
#include "detail/sinusoidal.h"

#include <ATen/Parallel.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>
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
    return std::pow(
        spec.base,
        -static_cast<double>(k) / static_cast<double>(std::max<int64_t>(t2t_count - 1, 1)));
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

void check_table_arguments(const char* who, int64_t max_len, int64_t d_model, double base) {
  TORCH_CHECK(d_model >= 1,
              who,
              ": d_model must be >= 1, but got ",
              d_model,
              "; pass the width of the embeddings the encoding is added to");
  TORCH_CHECK(max_len >= 1,
              who,
              ": max_len must be >= 1, but got ",
              max_len,
              "; pass the number of positions the table must hold");
  TORCH_CHECK(std::isfinite(base) && base > 0.0,
              who,
              ": base must be finite and > 0, but got ",
              base,
              "; the paper uses 10000");
  TORCH_CHECK(
      max_len <= kMaxTableElements / d_model,
      who,
      ": a table of max_len * d_model = ",
      max_len,
      " * ",
      d_model,
      " elements is over posenc's limit of 2^28 elements (1 GiB in float32); lower max_len");
}

void check_table_request(const char* who,
                         int64_t max_len,
                         int64_t d_model,
                         double base,
                         int64_t offset,
                         c10::ScalarType dtype) {
  check_table_arguments(who, max_len, d_model, base);
  check_float_dtype(who, "dtype", dtype);
  TORCH_CHECK(
      offset >= 0, who, ": offset must be >= 0, but got ", offset, "; positions start at 0");
  TORCH_CHECK(offset <= std::numeric_limits<int64_t>::max() - max_len,
              who,
              ": offset + max_len must fit in int64, but got offset = ",
              offset,
              " and max_len = ",
              max_len);
}

ChannelLayout parse_channel_layout(const char* who, c10::string_view text) {
  if (text == "interleaved") {
    return ChannelLayout::kInterleaved;
  }
  TORCH_CHECK(text == "concatenated",
              who,
              ": channels must be \"interleaved\" or \"concatenated\", but got \"",
              std::string(text.data(), text.size()),
              "\"");
  return ChannelLayout::kConcatenated;
}

FrequencySpacing parse_frequency_spacing(const char* who, c10::string_view text) {
  if (text == "paper") {
    return FrequencySpacing::kPaper;
  }
  TORCH_CHECK(text == "tensor2tensor",
              who,
              ": frequencies must be \"paper\" or \"tensor2tensor\", but got \"",
              std::string(text.data(), text.size()),
              "\"");
  return FrequencySpacing::kTensor2Tensor;
}

const char* to_string(ChannelLayout layout) {
  return layout == ChannelLayout::kInterleaved ? "interleaved" : "concatenated";
}

const char* to_string(FrequencySpacing spacing) {
  return spacing == FrequencySpacing::kPaper ? "paper" : "tensor2tensor";
}

template <typename T>
void fill_sinusoidal_rows(const int64_t* positions,
                          int64_t count,
                          const SinusoidSpec& spec,
                          T* out) {
  const ColumnPlan plan = column_plan(spec);
  const int64_t d_model = spec.d_model;
  // Each element costs a double-precision sin or cos (~20 ns), so a few thousand elements are
  // worth a task.
  const int64_t grain = std::max<int64_t>(1, 4096 / d_model);
  at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* row = out + r * d_model;
      if (positions[r] < 0) {
        std::fill(row, row + d_model, T(0));
        continue;
      }
      const double position = static_cast<double>(positions[r]);
      for (int64_t c = 0; c < d_model; ++c) {
        const double angle = position * plan.frequency[static_cast<size_t>(c)];
        const ColumnPlan::Kind kind = plan.kind[static_cast<size_t>(c)];
        row[c] = static_cast<T>(kind == ColumnPlan::kSin   ? std::sin(angle)
                                : kind == ColumnPlan::kCos ? std::cos(angle)
                                                           : 0.0);
      }
    }
  });
}

template void fill_sinusoidal_rows<float>(const int64_t*, int64_t, const SinusoidSpec&, float*);
template void fill_sinusoidal_rows<double>(const int64_t*, int64_t, const SinusoidSpec&, double*);

at::Tensor sinusoidal_rows(const at::Tensor& positions,
                           const SinusoidSpec& spec,
                           c10::ScalarType dtype) {
  const at::Tensor cpu_positions = positions.to(at::kCPU, at::kLong).contiguous();
  const int64_t count = cpu_positions.numel();
  // float32 and float64 are written directly; float16 and bfloat16 are rounded from float64 (never
  // through float32, which would round twice).
  const bool direct = dtype == at::kFloat || dtype == at::kDouble;
  at::Tensor rows =
      at::empty({count, spec.d_model}, at::TensorOptions().dtype(direct ? dtype : at::kDouble));
  if (rows.scalar_type() == at::kFloat) {
    fill_sinusoidal_rows(cpu_positions.data_ptr<int64_t>(), count, spec, rows.data_ptr<float>());
  } else {
    fill_sinusoidal_rows(cpu_positions.data_ptr<int64_t>(), count, spec, rows.data_ptr<double>());
  }
  return rows.to(positions.device(), dtype);
}

at::Tensor sinusoidal_table(int64_t max_len,
                            int64_t offset,
                            const SinusoidSpec& spec,
                            c10::ScalarType dtype,
                            c10::Device device) {
  const at::Tensor positions =
      at::arange(offset, offset + max_len, at::TensorOptions().dtype(at::kLong));
  return sinusoidal_rows(positions, spec, dtype).to(device);
}

} // namespace detail

namespace functional {
namespace detail {

at::Tensor sinusoidal_table(int64_t max_len,
                            int64_t d_model,
                            double base,
                            int64_t offset,
                            ChannelLayout layout,
                            FrequencySpacing spacing,
                            at::ScalarType dtype,
                            at::Device device) {
  posenc::detail::check_table_request("sinusoidal_table", max_len, d_model, base, offset, dtype);
  return posenc::detail::sinusoidal_table(
      max_len, offset, {d_model, base, layout, spacing}, dtype, device);
}

} // namespace detail
} // namespace functional
} // namespace posenc

#pragma once

// The sinusoidal encoding itself, in double precision: the one definition that tables, rows
// computed on the fly (explicit positions, extrapolation past a table) and the TorchScript export
// use.

#include <posenc/enums.h>
#include <posenc/options/positional_encoding.h>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <vector>

namespace posenc {
namespace detail {

/// Everything that defines a sinusoidal encoding besides the positions.
struct SinusoidSpec {
  int64_t d_model = 1;
  double base = 10000.0;
  ChannelLayout layout = ChannelLayout::kInterleaved;
  FrequencySpacing spacing = FrequencySpacing::kPaper;
};

/// The spec a PositionalEncoding's options define (the module, its table and its export use it).
inline SinusoidSpec sinusoid_spec(const PositionalEncodingOptions& options) {
  return {options.d_model(), options.base(), options.layout(), options.spacing()};
}

/// What column c of the encoding holds: sin or cos of position * frequency[c], or zero.
struct ColumnPlan {
  enum Kind : uint8_t { kSin = 0, kCos = 1, kZero = 2 };
  std::vector<double> frequency;
  std::vector<Kind> kind;
};

/// The column plan of `spec` (frequencies computed in double precision). A new frequency spacing or
/// channel layout is a change here and in the enums.
ColumnPlan column_plan(const SinusoidSpec& spec);

/// The column plan as data, a float64 CPU tensor `[2, D]`: row 0 the frequency of each column, row
/// 1 its kind (0 sine, 1 cosine, 2 zero). This is what the operators take to compute rows past a
/// table (their `columns` argument).
at::Tensor column_plan_tensor(const SinusoidSpec& spec);

/// Checks a `columns` argument (float64 `[2, D]`, kinds 0, 1 or 2) against the table width `D` and
/// returns the plan it holds.
ColumnPlan column_plan_from_tensor(const at::Tensor& columns, int64_t width);

/// Checks the arguments that define a sinusoidal table; messages name the caller
/// (detail::caller()).
void check_table_arguments(int64_t max_len, int64_t d_model, double base);

/// Checks a request for a table of positions `offset .. offset + max_len - 1` in `dtype`: the
/// table arguments, a floating dtype and an offset that is >= 0 and does not overflow.
void check_table_request(int64_t max_len, int64_t d_model, double base, int64_t offset,
                         c10::ScalarType dtype);

/// Parses the `channels` / `frequencies` strings of the operator schemas.
ChannelLayout parse_channel_layout(c10::string_view text);
FrequencySpacing parse_frequency_spacing(c10::string_view text);

/// The `[N, D]` rows for the integer `positions` (any shape, flattened; a negative position gives
/// a row of zeros) or the floating-point ones (read as float64; checked finite by the caller) in
/// `dtype`, on the device of `positions`, computed in double precision and rounded once: with
/// libm on the CPU, where they lie elsewhere (sinusoidal_rows_from: nothing is read back). Every
/// element is computed on its own, so the result does not depend on the number of threads.
at::Tensor sinusoidal_rows(const at::Tensor& positions, const ColumnPlan& plan,
                           c10::ScalarType dtype);

/// sinusoidal_rows computed with tensor operations on the device of `positions`, from the column
/// plan `columns` (float64 `[2, D]`: frequencies, kinds, as column_plan_tensor makes it, on that
/// device): angle = position * frequency in float64, its sine, cosine or 0 by the column's kind,
/// rounded once to `dtype`; a negative integer position gives a row of zeros.
at::Tensor sinusoidal_rows_from(const at::Tensor& positions, const at::Tensor& columns,
                                c10::ScalarType dtype);

/// The `[count, d_model]` rows of the positions `first, first - 1, ..., first - count + 1`
/// (negative positions included: the sines and cosines of negative angles), computed in double
/// precision and rounded once to `dtype`, on `device`. The table of relative positions.
at::Tensor sinusoidal_descending_rows(int64_t first, int64_t count, const SinusoidSpec& spec,
                                      c10::ScalarType dtype, c10::Device device);

/// The `[max_len, d_model]` table of positions `offset ..` in `dtype` on `device`.
at::Tensor sinusoidal_table(int64_t max_len, int64_t offset, const SinusoidSpec& spec,
                            c10::ScalarType dtype, c10::Device device);

} // namespace detail
} // namespace posenc

#pragma once

#include <posenc/enums.h>
#include <posenc/options/positional_encoding.h>

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace posenc {
namespace functional {

namespace detail {
/// `sinusoidal_table` with raw arguments.
at::Tensor sinusoidal_table(int64_t max_len, int64_t d_model, double base, int64_t offset,
                            ChannelLayout layout, FrequencySpacing spacing, at::ScalarType dtype,
                            at::Device device);

/// `positional_encoding` with raw arguments, as the modules call it: `inplace` writes into `x`;
/// `columns` (the table's column plan, see `posenc::ops`) lets positions past the table be
/// computed instead of raising.
at::Tensor positional_encoding(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                               const at::Tensor& positions, bool batch_first, double scale,
                               double dropout, bool training, bool inplace = false,
                               const at::Tensor& columns = at::Tensor());
} // namespace detail

/// The sinusoidal encoding table of "Attention Is All You Need", shape `[max_len, d_model]`:
///
///   table[p, 2i]     = sin((offset + p) * base^(-2i / d_model))
///   table[p, 2i + 1] = cos((offset + p) * base^(-2i / d_model))
///
/// (other arrangements and spacings with `layout` and `spacing`). Every value is computed in
/// double precision and rounded once to `options.dtype()`, so a float32 table is exact to float32
/// rounding (<= 2^-25 absolute) at any position. Any `d_model >= 1` is accepted.
///
/// Example:
/// ```
/// namespace F = posenc::functional;
/// auto table = F::sinusoidal_table(/*max_len=*/8, /*d_model=*/6);
/// auto t64 = F::sinusoidal_table(8, 6, F::SinusoidalTableFuncOptions().dtype(torch::kDouble));
/// ```
inline at::Tensor sinusoidal_table(int64_t max_len, int64_t d_model,
                                   const SinusoidalTableFuncOptions& options = {}) {
  return detail::sinusoidal_table(max_len, d_model, options.base(), options.offset(),
                                  options.layout(), options.spacing(), options.dtype(),
                                  options.device());
}

/// The column plan of a sinusoidal encoding of width `d_model` (base, layout and spacing from
/// `options`): a float64 CPU tensor `[2, d_model]`, row 0 each column's frequency, row 1 its kind
/// (0 sine, 1 cosine, 2 zero). Passed as `columns` to the posenc operators, it lets positions past
/// a table be computed, exactly as the table's rows were.
at::Tensor sinusoidal_columns(int64_t d_model, const SinusoidalTableFuncOptions& options = {});

/// Adds rows of a position table to `x` and applies dropout: `dropout(x * scale + table[p])`
/// for positions `p = offset .. offset + L - 1` or the explicit `positions`. The functional form
/// of `PositionalEncoding::forward` and `LearnedPositionalEmbedding::forward`.
///
/// `x` is `[B, L, D]` (`batch_first`) or `[L, B, D]`, of dtype float16, bfloat16, float32 or
/// float64. `table` is `[max_len, D]` or `[1, max_len, D]` on the device of `x`; it may require
/// grad (a learned table receives the batch-summed gradient). The result has the shape and dtype
/// of `x`; the sum is formed in at least float32 (float64 if either operand is float64) and
/// rounded once to that dtype.
///
/// Example:
/// ```
/// namespace F = posenc::functional;
/// auto table = F::sinusoidal_table(5000, 512);
/// auto y = F::positional_encoding(x, table, F::PositionalEncodingFuncOptions().offset(16));
/// ```
inline at::Tensor positional_encoding(const at::Tensor& x, const at::Tensor& table,
                                      const PositionalEncodingFuncOptions& options = {}) {
  return detail::positional_encoding(x, table, options.offset(), options.positions(),
                                     options.batch_first(), options.scale(), options.dropout(),
                                     options.training());
}

/// The functional form of `LearnedPositionalEmbedding::forward`: `dropout(x * scale +
/// weight[positions])`, differentiable with respect to `x` and `weight`.
inline at::Tensor learned_positional_embedding(const at::Tensor& x, const at::Tensor& weight,
                                               const PositionalEncodingFuncOptions& options = {}) {
  return positional_encoding(x, weight, options);
}

} // namespace functional
} // namespace posenc

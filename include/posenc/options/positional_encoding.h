#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>

namespace posenc {

/// Options for the `PositionalEncoding` module.
///
/// Example:
/// ```
/// posenc::PositionalEncoding pe(
///     posenc::PositionalEncodingOptions(/*d_model=*/512, /*max_len=*/5000)
///         .dropout(0.1)
///         .batch_first(false));
/// ```
struct PositionalEncodingOptions {
  PositionalEncodingOptions(int64_t d_model, int64_t max_len);

  /// Width `D` of the inputs and of every encoding vector. Any value >= 1; for an odd width the
  /// last column is a sine.
  TORCH_ARG(int64_t, d_model);
  /// Number of positions the precomputed table `pe` holds: `forward` accepts positions
  /// `0 .. max_len - 1`.
  TORCH_ARG(int64_t, max_len);
  /// Base of the geometric progression of wavelengths: column pair `i` uses the angular frequency
  /// `base^(-2i / d_model)`. Must be finite and > 0. Default: 10000 (the paper's value).
  TORCH_ARG(double, base) = 10000.0;
  /// Probability of zeroing an element of the output in training mode, in [0, 1]. Default: 0.
  TORCH_ARG(double, dropout) = 0.0;
  /// `true`: inputs are `[B, L, D]`. `false`: inputs are `[L, B, D]`, the layout that
  /// `torch::nn::TransformerEncoder` takes by default. Default: `true`.
  TORCH_ARG(bool, batch_first) = true;
};

namespace functional {

/// Options for `posenc::functional::sinusoidal_table`.
///
/// Example:
/// ```
/// namespace F = posenc::functional;
/// auto table = F::sinusoidal_table(8, 6, F::SinusoidalTableFuncOptions().dtype(torch::kDouble));
/// ```
struct SinusoidalTableFuncOptions {
  /// Base of the geometric progression of wavelengths. Default: 10000.
  TORCH_ARG(double, base) = 10000.0;
  /// First position of the table: row `r` holds position `offset + r`. Default: 0.
  TORCH_ARG(int64_t, offset) = 0;
  /// dtype of the returned table (any floating dtype). The values are computed in double precision
  /// and rounded once to this dtype. Default: float32.
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat;
  /// Device of the returned table. Default: CPU.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
};

/// Options for `posenc::functional::positional_encoding`, the functional form of
/// `PositionalEncoding::forward`.
///
/// Example:
/// ```
/// namespace F = posenc::functional;
/// auto y = F::positional_encoding(x, table, F::PositionalEncodingFuncOptions().offset(7));
/// ```
struct PositionalEncodingFuncOptions {
  /// Position of the first element along the sequence dimension. Default: 0.
  TORCH_ARG(int64_t, offset) = 0;
  /// `true`: `x` is `[B, L, D]`; `false`: `x` is `[L, B, D]`. Default: `true`.
  TORCH_ARG(bool, batch_first) = true;
  /// Dropout probability applied to the sum when `training` is true. Default: 0.
  TORCH_ARG(double, dropout) = 0.0;
  /// Whether dropout is active. Default: `false`.
  TORCH_ARG(bool, training) = false;
};

} // namespace functional
} // namespace posenc

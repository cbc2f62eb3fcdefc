#pragma once

#include <posenc/enums.h>
#include <posenc/options/fields.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <tuple>

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
  /// Options for width `d_model` and `max_len` positions, the others at their defaults.
  PositionalEncodingOptions(int64_t d_model, int64_t max_len);

  /// Width `D` of the inputs and of every encoding vector. Any value >= 1; for an odd width the
  /// last column is a sine (kPaper) or zero (kTensor2Tensor).
  TORCH_ARG(int64_t, d_model);
  /// Number of positions the precomputed table `pe` holds: positions `0 .. max_len - 1`.
  TORCH_ARG(int64_t, max_len);
  /// Base of the geometric progression of wavelengths. Must be finite and >= 5.2e-290
  /// (every angle a finite number). Default: 10000.
  TORCH_ARG(double, base) = 10000.0;
  /// Probability of zeroing an element of the output in training mode, in [0, 1]. Default: 0.
  TORCH_ARG(double, dropout) = 0.0;
  /// `true`: inputs are `[B, L, D]`. `false`: inputs are `[L, B, D]`, the layout that
  /// `torch::nn::TransformerEncoder` takes by default. Default: `true`.
  TORCH_ARG(bool, batch_first) = true;
  /// Arrangement of the sine and cosine columns. Default: kInterleaved (the paper).
  TORCH_ARG(ChannelLayout, layout) = ChannelLayout::kInterleaved;
  /// Spacing of the frequencies. Default: kPaper. kTensor2Tensor with kConcatenated reproduces
  /// tensor2tensor's and fairseq's tables.
  TORCH_ARG(FrequencySpacing, spacing) = FrequencySpacing::kPaper;
  /// Positions at or past `max_len`: an error (default) or encodings computed on the fly.
  TORCH_ARG(BeyondMaxLen, beyond_max_len) = BeyondMaxLen::kError;
  /// Factor the input is multiplied by before the encoding is added; the paper scales its
  /// embeddings by sqrt(d_model) (see `scale_sqrt_d_model()`). Must be finite. Default: 1.
  TORCH_ARG(double, scale) = 1.0;
  /// Add to the input in place (as `torch::nn::Dropout`'s option): `forward` writes into `x` and
  /// returns it, saving the output allocation. Autograd rules of in-place operations apply (x must
  /// not be a leaf that requires grad). Default: `false`.
  TORCH_ARG(bool, inplace) = false;

 public:
  /// Sets `scale` to sqrt(d_model), as the paper does for its embeddings.
  PositionalEncodingOptions& scale_sqrt_d_model() {
    scale_ = std::sqrt(static_cast<double>(d_model_));
    return *this;
  }
};

/// The field table of PositionalEncodingOptions (<posenc/options/fields.h>).
template <>
struct OptionTable<PositionalEncodingOptions> {
  /// The constructor's arguments: d_model and max_len.
  static constexpr std::size_t kConstructorArguments = 2;
  /// The options, in the order pretty_print shows them and posenc.nn's keywords are read.
  static auto fields() {
    using O = PositionalEncodingOptions;
    return std::make_tuple(POSENC_OPTION_FIELD(O, d_model, kTorchScript),
                           POSENC_OPTION_FIELD(O, max_len, kTorchScript),
                           POSENC_OPTION_FIELD(O, base, kShowIfChanged),
                           POSENC_OPTION_FIELD(O, dropout, kShowAlways),
                           POSENC_OPTION_FIELD(O, batch_first, kTorchScript),
                           POSENC_OPTION_FIELD(O, layout, kShowIfChanged),
                           POSENC_OPTION_FIELD(O, spacing, kShowIfChanged),
                           POSENC_OPTION_FIELD(O, beyond_max_len, kShowIfChanged),
                           POSENC_OPTION_FIELD(O, scale, kShowIfChanged | kTorchScript),
                           POSENC_OPTION_FIELD(O, inplace, kShowIfChanged));
  }
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
  /// Arrangement of the sine and cosine columns. Default: kInterleaved.
  TORCH_ARG(ChannelLayout, layout) = ChannelLayout::kInterleaved;
  /// Spacing of the frequencies. Default: kPaper.
  TORCH_ARG(FrequencySpacing, spacing) = FrequencySpacing::kPaper;
  /// dtype of the returned table (any floating dtype). The values are computed in double precision
  /// and rounded once to this dtype. Default: float32.
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat;
  /// Device of the returned table. Default: CPU.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
};

/// Options for `posenc::functional::positional_encoding`, the functional form of the modules'
/// forward: `dropout(x * scale + table[positions])`.
///
/// Example:
/// ```
/// namespace F = posenc::functional;
/// auto y = F::positional_encoding(x, table, F::PositionalEncodingFuncOptions().offset(7));
/// ```
struct PositionalEncodingFuncOptions {
  /// Position of the first element along the sequence dimension. Default: 0.
  TORCH_ARG(int64_t, offset) = 0;
  /// Explicit int64 positions, shaped like the first two dimensions of `x` (`[B, L]` or `[L, B]`)
  /// or `[L]` for every sequence of the batch; -1 marks padding, which gets a zero vector. When
  /// defined, `offset` must be 0. Default: undefined (positions offset .. offset + L - 1).
  TORCH_ARG(torch::Tensor, positions) = torch::Tensor();
  /// `true`: `x` is `[B, L, D]`; `false`: `x` is `[L, B, D]`. Default: `true`.
  TORCH_ARG(bool, batch_first) = true;
  /// Factor `x` is multiplied by before the encoding is added. Default: 1.
  TORCH_ARG(double, scale) = 1.0;
  /// Dropout probability applied to the sum when `training` is true. Default: 0.
  TORCH_ARG(double, dropout) = 0.0;
  /// Whether dropout is active. Default: `false`.
  TORCH_ARG(bool, training) = false;
};

} // namespace functional
} // namespace posenc

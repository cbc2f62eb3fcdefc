#pragma once

#include <posenc/options/fields.h>
#include <posenc/options/positional_encoding.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <tuple>

namespace posenc {

/// Options for the `LearnedPositionalEmbedding` module.
///
/// Example:
/// ```
/// posenc::LearnedPositionalEmbedding pos(
///     posenc::LearnedPositionalEmbeddingOptions(/*d_model=*/768, /*max_len=*/512).dropout(0.1));
/// ```
struct LearnedPositionalEmbeddingOptions {
  /// Options for width `d_model` and `max_len` positions, the others at their defaults.
  LearnedPositionalEmbeddingOptions(int64_t d_model, int64_t max_len);

  /// Width `D` of the inputs and of every embedding vector (>= 1).
  TORCH_ARG(int64_t, d_model);
  /// Number of positions the trainable table holds: positions `0 .. max_len - 1`.
  TORCH_ARG(int64_t, max_len);
  /// Standard deviation of the normal initialization of the table (BERT, GPT-2). Default: 0.02.
  TORCH_ARG(double, init_std) = 0.02;
  /// Probability of zeroing an element of the output in training mode, in [0, 1]. Default: 0.
  TORCH_ARG(double, dropout) = 0.0;
  /// `true`: inputs are `[B, L, D]`; `false`: `[L, B, D]`. Default: `true`.
  TORCH_ARG(bool, batch_first) = true;
  /// Factor the input is multiplied by before the embedding is added. Default: 1.
  TORCH_ARG(double, scale) = 1.0;
  /// Add to the input in place (see PositionalEncodingOptions::inplace). Default: `false`.
  TORCH_ARG(bool, inplace) = false;
};

/// The field table of LearnedPositionalEmbeddingOptions (<posenc/options/fields.h>).
template <>
struct OptionTable<LearnedPositionalEmbeddingOptions> {
  /// The constructor's arguments: d_model and max_len.
  static constexpr std::size_t kConstructorArguments = 2;
  /// The options, in the order pretty_print shows them and posenc.nn's keywords are read.
  static auto fields() {
    using O = LearnedPositionalEmbeddingOptions;
    return std::make_tuple(POSENC_OPTION_FIELD(O, d_model, kTorchScript),
                           POSENC_OPTION_FIELD(O, max_len, kTorchScript),
                           POSENC_OPTION_FIELD(O, init_std, kShowNever),
                           POSENC_OPTION_FIELD(O, dropout, kShowAlways),
                           POSENC_OPTION_FIELD(O, batch_first, kTorchScript),
                           POSENC_OPTION_FIELD(O, scale, kShowIfChanged | kTorchScript),
                           POSENC_OPTION_FIELD(O, inplace, kShowIfChanged));
  }
};

namespace functional {
/// Options for `posenc::functional::learned_positional_embedding`: the same as for
/// `positional_encoding` (offset or positions, layout, scale, dropout).
using LearnedPositionalEmbeddingFuncOptions = PositionalEncodingFuncOptions;
} // namespace functional

} // namespace posenc

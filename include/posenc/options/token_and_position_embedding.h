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

/// Options for the `TokenAndPositionEmbedding` module.
///
/// Example:
/// ```
/// posenc::TokenAndPositionEmbedding embed(
///     posenc::TokenAndPositionEmbeddingOptions(/*vocab_size=*/32000, /*d_model=*/512,
///     /*max_len=*/2048)
///         .padding_idx(0)
///         .dropout(0.1));
/// ```
struct TokenAndPositionEmbeddingOptions {
  /// `scale` starts at sqrt(d_model), the paper's scaling of token embeddings.
  TokenAndPositionEmbeddingOptions(int64_t vocab_size, int64_t d_model, int64_t max_len);

  /// Number of token ids (rows of the token embedding).
  TORCH_ARG(int64_t, vocab_size);
  /// Embedding width `D`.
  TORCH_ARG(int64_t, d_model);
  /// Number of positions.
  TORCH_ARG(int64_t, max_len);
  /// Sinusoidal (fixed) or learned positions. Default: kSinusoidal.
  TORCH_ARG(PositionKind, positions) = PositionKind::kSinusoidal;
  /// Factor the token embeddings are multiplied by. Must be finite. Default: sqrt(d_model).
  TORCH_ARG(double, scale);
  /// Token id of padding: its embedding is zero and receives no gradient (as in
  /// torch::nn::Embedding), and padding tokens get no position (positions count real tokens from
  /// the first one, as in fairseq). Default: none.
  TORCH_ARG(c10::optional<int64_t>, padding_idx) = c10::nullopt;
  /// Probability of zeroing an element of the output in training mode, in [0, 1]. Default: 0.
  TORCH_ARG(double, dropout) = 0.0;
  /// `true`: token ids are `[B, L]` and the output `[B, L, D]`; `false`: `[L, B]` and `[L, B, D]`
  /// (the layout of torch::nn::TransformerEncoder). Default: `true`.
  TORCH_ARG(bool, batch_first) = true;
  /// Base of the sinusoidal wavelengths (sinusoidal positions only). Default: 10000.
  TORCH_ARG(double, base) = 10000.0;
  /// Positions at or past `max_len` (sinusoidal positions only can extrapolate). Default: kError.
  TORCH_ARG(BeyondMaxLen, beyond_max_len) = BeyondMaxLen::kError;
};

/// The field table of TokenAndPositionEmbeddingOptions (<posenc/options/fields.h>).
template <>
struct OptionTable<TokenAndPositionEmbeddingOptions> {
  /// The constructor's arguments: vocab_size, d_model and max_len.
  static constexpr std::size_t kConstructorArguments = 3;
  /// The options, in the order pretty_print shows them and posenc.nn's keywords are read.
  static auto fields() {
    using O = TokenAndPositionEmbeddingOptions;
    return std::make_tuple(
        POSENC_OPTION_FIELD(O, vocab_size, kShowAlways),
        POSENC_OPTION_FIELD(O, d_model, kShowAlways), POSENC_OPTION_FIELD(O, max_len, kShowAlways),
        POSENC_OPTION_FIELD(O, positions, kShowAlways),
        POSENC_OPTION_FIELD(O, scale, kShowAlways | kNullable),
        POSENC_OPTION_FIELD(O, padding_idx, kShowIfChanged | kNullable),
        POSENC_OPTION_FIELD(O, dropout, kShowAlways),
        POSENC_OPTION_FIELD(O, batch_first, kTorchScript), POSENC_OPTION_FIELD(O, base, kShowNever),
        POSENC_OPTION_FIELD(O, beyond_max_len, kShowNever));
  }
};

namespace functional {

/// Options for `posenc::functional::token_and_position_embedding`.
struct TokenAndPositionEmbeddingFuncOptions {
  /// Position of the first token. Default: 0.
  TORCH_ARG(int64_t, offset) = 0;
  /// Explicit int64 positions (`[B, L]` / `[L, B]` or `[L]`; -1 = padding). Default: undefined.
  TORCH_ARG(torch::Tensor, positions) = torch::Tensor();
  /// `true`: ids `[B, L]`; `false`: `[L, B]`. Default: `true`.
  TORCH_ARG(bool, batch_first) = true;
  /// Factor the token embeddings are multiplied by. Default: 1.
  TORCH_ARG(double, scale) = 1.0;
  /// Rows of `weight` that get no gradient (-1: none). Default: -1.
  TORCH_ARG(int64_t, padding_idx) = -1;
  /// Dropout probability when `training`. Default: 0.
  TORCH_ARG(double, dropout) = 0.0;
  /// Whether dropout is active. Default: `false`.
  TORCH_ARG(bool, training) = false;
};

} // namespace functional
} // namespace posenc

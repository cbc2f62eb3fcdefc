#pragma once

#include <posenc/functional/positional_encoding.h>
#include <posenc/modules/encoding_base.h>
#include <posenc/options/positional_encoding.h>

#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>
#include <vector>

namespace posenc {

/// Adds the fixed sinusoidal positional encoding of "Attention Is All You Need" to its input, then
/// applies dropout in training mode.
///
/// The table is a buffer named `pe` of shape `[1, max_len, d_model]` (the key and shape of the
/// usual PyTorch module, so state dicts line up). It is not a parameter and never requires grad.
/// It is computed in double precision and stored in float32; `.to(torch::kDouble)` recomputes it
/// in float64, while `.to(torch::kHalf)` / `.to(torch::kBFloat16)` keep it in float32 (the output
/// still takes the input's dtype), so a module is never left with a table rounded to 8 or 11 bits.
///
/// Inputs are `[B, L, D]` (`batch_first`, the default) or `[L, B, D]`; every forward returns
/// `dropout(x * scale + PE(positions))` in the dtype of `x`, with the positions given as an offset,
/// explicitly, or from a padding mask.
///
/// Example:
/// ```
/// posenc::PositionalEncoding pe(posenc::PositionalEncodingOptions(512, 5000).dropout(0.1));
/// auto y = pe(torch::randn({2, 10, 512}));          // positions 0..9
/// auto z = pe(torch::randn({2, 1, 512}), 10);       // position 10 (a decoding step)
/// ```
class PositionalEncodingImpl : public detail::SequenceEncodingModule<PositionalEncodingImpl> {
 public:
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "PositionalEncoding";
  /// `true`: the tables are computed from the options, so `to()` recomputes or casts them
  /// (see detail::EncodingModule::to) and never stores them in 16 bits.
  static constexpr bool kDerivedTables = true;

  /// Shorthand for `PositionalEncodingOptions(d_model, max_len)` (defaults otherwise).
  PositionalEncodingImpl(int64_t d_model, int64_t max_len)
      : PositionalEncodingImpl(PositionalEncodingOptions(d_model, max_len)) {}
  /// Builds the module from `options_` and calls reset(), which checks them.
  explicit PositionalEncodingImpl(const PositionalEncodingOptions& options_);

  /// Checks `options` and (re)builds the `pe` buffer. Throws `c10::Error` for invalid options,
  /// before changing anything.
  void reset() override;

  /// Pretty prints the module, e.g.
  /// `posenc::PositionalEncoding(d_model=512, max_len=5000, dropout=0.1, batch_first=true)`;
  /// options that differ from their defaults are added.
  void pretty_print(std::ostream& stream) const override;

  // forward(x, offset = 0): adds the encodings of positions `offset .. offset + L - 1`. `x`:
  // `[B, L, D]` if `batch_first`, else `[L, B, D]`; float16, bfloat16, float32 or float64, on the
  // device of `pe`. The result has the shape and dtype of `x`.
  // forward_positions(x, positions): explicit positions, shaped like the first two dimensions of
  // `x` (`[B, L]` or `[L, B]`: per-sample offsets, packed sequences, KV-cache decoding with
  // different lengths per row) or `[L]` (shared by the batch); -1 marks padding (a zero vector).
  // Floating-point positions (fractional: position interpolation, timesteps) are computed from the
  // encoding's definition in float64 for any finite value >= 0, never read from the table.
  // forward_padded(x, padding_mask): positions counted from the first real token.
  // (All three from detail::SequenceEncodingModule.)

  /// The options this module was built with.
  PositionalEncodingOptions options;

  /// The encoding table, `[1, max_len, d_model]`, registered as the buffer `pe`.
  torch::Tensor pe;

  /// The encoding's definition as the operators take it (`columns`: float64 `[2, d_model]`,
  /// frequencies and kinds, on the table's device): what positions past `max_len` (under
  /// BeyondMaxLen::kExtrapolate) and fractional positions are computed from.
  const torch::Tensor& column_plan() const {
    return columns_;
  }

 private:
  friend class detail::EncodingModule<PositionalEncodingImpl>;
  friend class detail::SequenceEncodingModule<PositionalEncodingImpl>;
  torch::Tensor forward_at(const torch::Tensor& x, int64_t offset, const torch::Tensor& positions);
  void build_tables(torch::Dtype dtype, torch::Device device);
  std::vector<torch::Tensor*> derived_tables();
  std::vector<detail::TableSlot> table_slots();

  /// column_plan(), rebuilt with the table (so on its device).
  torch::Tensor columns_;
};

/// A `ModuleHolder` subclass for `PositionalEncodingImpl`. See its documentation, and
/// `torch::nn::ModuleHolder` for the module storage semantics.
TORCH_MODULE(PositionalEncoding);

} // namespace posenc

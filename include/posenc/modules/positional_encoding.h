#pragma once

#include <posenc/functional/positional_encoding.h>
#include <posenc/options/positional_encoding.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/common.h>
#include <torch/nn/modules/container/any_module_holder.h>
#include <torch/nn/pimpl.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>

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
class PositionalEncodingImpl : public torch::nn::Cloneable<PositionalEncodingImpl> {
 public:
  PositionalEncodingImpl(int64_t d_model, int64_t max_len)
      : PositionalEncodingImpl(PositionalEncodingOptions(d_model, max_len)) {}
  explicit PositionalEncodingImpl(const PositionalEncodingOptions& options_);

  /// Checks `options` and (re)builds the `pe` buffer. Throws `c10::Error` for invalid options,
  /// before changing anything.
  void reset() override;

  /// Pretty prints the module, e.g.
  /// `posenc::PositionalEncoding(d_model=512, max_len=5000, dropout=0.1, batch_first=true)`;
  /// options that differ from their defaults are added.
  void pretty_print(std::ostream& stream) const override;

  /// Adds the encodings of positions `offset .. offset + L - 1`. `x`: `[B, L, D]` if
  /// `batch_first`, else `[L, B, D]`; float16, bfloat16, float32 or float64, on the device of
  /// `pe`. The result has the shape and dtype of `x`.
  torch::Tensor forward(const torch::Tensor& x, int64_t offset = 0);

  /// Adds the encodings of explicit positions: an integer tensor shaped like the first two
  /// dimensions of `x` (`[B, L]` or `[L, B]`: per-sample offsets, packed sequences, KV-cache
  /// decoding with different lengths per row) or `[L]` (shared by the batch). -1 marks padding,
  /// which gets a zero vector. Reading the positions' range synchronizes with a GPU.
  torch::Tensor forward_positions(const torch::Tensor& x, const torch::Tensor& positions);

  /// Adds encodings counted from the first real token of each sequence; padding (`true` in
  /// `padding_mask`, shaped like the first two dimensions of `x`) gets a zero vector, as in
  /// fairseq. Correct for left and right padding. See `functional::positions_from_padding_mask`.
  torch::Tensor forward_padded(const torch::Tensor& x, const torch::Tensor& padding_mask);

  /// Moves and casts like `torch::nn::Module::to`, except that `pe` is kept in at least float32:
  /// float64 recomputes it in float64, float16/bfloat16 leave it in float32.
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;

  /// Loads `pe` from an archive written by `torch::save`, checking its shape, dtype and values
  /// first: on any mismatch a `c10::Error` is thrown and the module is left unchanged.
  void load(torch::serialize::InputArchive& archive) override;

  /// The options this module was built with.
  PositionalEncodingOptions options;

  /// The encoding table, `[1, max_len, d_model]`, registered as the buffer `pe`.
  torch::Tensor pe;

 protected:
  FORWARD_HAS_DEFAULT_ARGS({1, torch::nn::AnyValue(int64_t{0})})

 private:
  torch::Tensor build_table(torch::Dtype dtype, torch::Device device) const;
  torch::Tensor forward_impl(const torch::Tensor& x,
                             int64_t offset,
                             const torch::Tensor& positions);
  void to_impl(c10::optional<torch::Device> device,
               c10::optional<torch::Dtype> dtype,
               bool non_blocking);
};

/// A `ModuleHolder` subclass for `PositionalEncodingImpl`. See its documentation, and
/// `torch::nn::ModuleHolder` for the module storage semantics.
TORCH_MODULE(PositionalEncoding);

} // namespace posenc

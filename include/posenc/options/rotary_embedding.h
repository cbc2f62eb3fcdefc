#pragma once

#include <posenc/enums.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>

namespace posenc {

/// Options for the `RotaryEmbedding` module.
///
/// Example:
/// ```
/// posenc::RotaryEmbedding rope(
///     posenc::RotaryEmbeddingOptions(/*head_dim=*/128, /*max_len=*/4096).base(500000.0));
/// ```
struct RotaryEmbeddingOptions {
  RotaryEmbeddingOptions(int64_t head_dim, int64_t max_len);

  /// Width `Dh` of each attention head of the queries and keys.
  TORCH_ARG(int64_t, head_dim);
  /// Number of positions the cos/sin caches hold: positions `0 .. max_len - 1`.
  TORCH_ARG(int64_t, max_len);
  /// Base of the frequencies base^(-2i / rotary_dim). Must be finite and >= 5.2e-290 (every angle
  /// a finite number). Default: 10000 (LLaMA 3 uses 500000).
  TORCH_ARG(double, base) = 10000.0;
  /// Number of leading channels of each head that are rotated (partial rotary, GPT-NeoX's
  /// rotary_pct, GPT-J's rotary_dim); the rest pass through. Even, 2 <= rotary_dim <= head_dim.
  /// Default: head_dim.
  TORCH_ARG(c10::optional<int64_t>, rotary_dim) = c10::nullopt;
  /// Which channels are paired: kHalfSplit (GPT-NeoX, HF LLaMA) or kInterleaved (GPT-J,
  /// torchtune). Default: kHalfSplit.
  TORCH_ARG(RotaryPairing, pairing) = RotaryPairing::kHalfSplit;
  /// `false`: queries/keys are `[B, L, H, Dh]`; `true`: `[B, H, L, Dh]`. Default: `false`.
  TORCH_ARG(bool, heads_first) = false;
  /// Positions at or past `max_len`: an error (default) or cos/sin computed on the fly.
  TORCH_ARG(BeyondMaxLen, beyond_max_len) = BeyondMaxLen::kError;

 public:
  /// The number of rotated channels: `rotary_dim` if set, else `head_dim`.
  int64_t rotated_width() const {
    return rotary_dim_.value_or(head_dim_);
  }
};

namespace functional {

/// Options for `posenc::functional::rotary_tables`.
struct RotaryTablesFuncOptions {
  /// Base of the frequencies. Default: 10000.
  TORCH_ARG(double, base) = 10000.0;
  /// dtype of the tables; values are computed in float64 and rounded once. Default: float32.
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat;
  /// Device of the tables. Default: CPU.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
};

/// Options for `posenc::functional::rotary_embedding`.
struct RotaryEmbeddingFuncOptions {
  /// Position of the first element along the sequence dimension. Default: 0.
  TORCH_ARG(int64_t, offset) = 0;
  /// Explicit int64 positions, `[B, L]` or `[L]`; -1 marks padding (not rotated). When defined,
  /// `offset` must be 0. Default: undefined.
  TORCH_ARG(torch::Tensor, positions) = torch::Tensor();
  /// Channel pairing. Default: kHalfSplit.
  TORCH_ARG(RotaryPairing, pairing) = RotaryPairing::kHalfSplit;
  /// `false`: `[B, L, H, Dh]`; `true`: `[B, H, L, Dh]`. Default: `false`.
  TORCH_ARG(bool, heads_first) = false;
};

} // namespace functional
} // namespace posenc

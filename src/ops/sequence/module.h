#pragma once

// The call of a module that adds a position table to a sequence (PositionalEncoding,
// LearnedPositionalEmbedding) or to the embeddings of its tokens (TokenAndPositionEmbedding),
// defined once below every front end: when rows come from the sinusoidal definition (positions
// past the table with BeyondMaxLen::kExtrapolate, fractional positions) rather than the table,
// positions of padded sequences, in-place addition and dropout, and the messages' names and
// advice. The C++ modules call it directly; posenc.nn's modules through the
// positional_encoding_call / token_and_position_embedding_call operators.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace posenc {
namespace ops {

/// What a sequence module's calls need besides its tensors: its options.
struct SequenceModuleCall {
  /// The module's name (a static string): the CallerScope its calls open, which starts the
  /// messages.
  const char* name = "PositionalEncoding";
  bool batch_first = true;
  double scale = 1.0;
  double dropout = 0.0;
  /// Sinusoidal positions past the table are computed from the column plan (BeyondMaxLen::
  /// kExtrapolate); without it they are an error.
  bool extrapolate = false;
  /// Token modules: the padding token (positions count the real tokens from each sequence's
  /// first one, padding gets none), or -1.
  int64_t padding_idx = -1;
  /// The advice of the messages is spelt for posenc.nn (Python) rather than C++.
  bool python = false;
};

/// The call of a C++ module named `name` with these options (batch_first, scale, dropout).
template <typename Options>
SequenceModuleCall sequence_module_call(const char* name, const Options& options,
                                        bool extrapolate = false) {
  SequenceModuleCall call;
  call.name = name;
  call.batch_first = options.batch_first();
  call.scale = options.scale();
  call.dropout = options.dropout();
  call.extrapolate = extrapolate;
  return call;
}

/// `dropout(x * scale + rows)` (in training, with the module's probability) for positions
/// `offset .. offset + L - 1`, or `positions` where they are defined, of `table` (`[max_len, D]`
/// or `[1, max_len, D]`). `columns`: the sinusoidal encoding's column plan (undefined for a
/// learned table), used for the rows the table does not hold. `inplace`: adds into `x`.
at::Tensor sequence_module_forward(const SequenceModuleCall& call, const at::Tensor& x,
                                   const at::Tensor& table, const at::Tensor& columns,
                                   int64_t offset, const at::Tensor& positions, bool train,
                                   bool inplace);

/// `dropout(weight[ids] * scale + rows)` for integer token ids `[B, L]` (`[L, B]` without
/// batch_first), at positions as sequence_module_forward's (with `padding_idx`: counted over the
/// real tokens from `offset`, unless `positions` are given).
at::Tensor token_module_forward(const SequenceModuleCall& call, const at::Tensor& ids,
                                const at::Tensor& weight, const at::Tensor& table,
                                const at::Tensor& columns, int64_t offset,
                                const at::Tensor& positions, bool train);

} // namespace ops
} // namespace posenc

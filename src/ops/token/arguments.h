#pragma once

// The checked calls of token_and_position_embedding and its backward: every backend starts with
// them (ops/common/arguments.h has the positions and tables they are made of).

#include "ops/common/arguments.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace posenc {
namespace ops {

/// Checks the token embedding's padding_idx: -1 (none) or a row of the weight.
void check_padding_idx(int64_t padding_idx, int64_t vocab_size);

/// Checks the arguments of token_and_position_embedding: int64 token ids `[B, L]` / `[L, B]` in
/// [0, vocab), a floating weight `[vocab, D]`, a table with D columns, positions, dropout.
TableCall prepare_token_call(const at::Tensor& tokens, const at::Tensor& weight,
                             const at::Tensor& table, int64_t offset, OptionalTensor positions,
                             bool batch_first, double scale, double dropout,
                             OptionalTensor columns);

/// Checks that every tensor argument of _token_and_position_embedding_backward lies on the
/// weight's device.
void check_token_backward_devices(const at::Tensor& grad, const at::Tensor& mask,
                                  const at::Tensor& tokens, const at::Tensor& weight,
                                  const at::Tensor& table, OptionalTensor positions);

} // namespace ops
} // namespace posenc

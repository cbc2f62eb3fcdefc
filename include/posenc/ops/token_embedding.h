#pragma once

/// @file
/// posenc's operators: token embedding, scale, positions and dropout in one operator. Each function calls its operator
/// `posenc::<name>` through the dispatcher (`torch.ops.posenc.<name>` from Python and
/// TorchScript); its schema is the `m.def` beside its entry point in `src/ops/token/token_embedding.cpp` (kernels:
/// cpu/, cuda/, meta/, autograd/ and composite/token_embedding_kernel.*). What positions, padding and rows past a table mean for every operator is
/// in <posenc/ops.h>.

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <tuple>

namespace posenc {
namespace ops {

/// Token embedding, scale, positions and dropout in one pass: `dropout(weight[tokens] * scale +
/// table[positions])`. `tokens` is int64 `[B, L]` (`batch_first`) or `[L, B]`; the output is
/// `[B, L, D]` / `[L, B, D]` in the weight's dtype. Returns the output and the dropout mask
/// (bool, of the output's shape; empty unless `train` and `dropout > 0`). Differentiable with
/// respect to `weight` (rows `padding_idx` get no gradient) and `table`.
///
/// Dropout: a counter-based hash of each element's index keyed by one 64-bit number per call from
/// the default generator of the device (a draw on the CPU; on CUDA, made on the device from a
/// Philox seed and offset, so CUDA-graph safe); the mask depends only on the seed, the device and
/// the output's shape: never on the layout of the arguments or on which kernel ran.
std::tuple<at::Tensor, at::Tensor> token_and_position_embedding(
    const at::Tensor& tokens, const at::Tensor& weight, const at::Tensor& table, int64_t offset = 0,
    bool batch_first = true, const c10::optional<at::Tensor>& positions = c10::nullopt,
    double scale = 1.0, int64_t padding_idx = -1, double dropout = 0.0, bool train = false,
    const c10::optional<at::Tensor>& columns = c10::nullopt);

} // namespace ops
} // namespace posenc

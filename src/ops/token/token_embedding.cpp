// The token-embedding family: token embedding, scale, positions and dropout in one pass. Schemas
// and C++ entry points; kernels per backend beside them (*_kernel.*).

#include "ops/common/dispatch.h"

#include <posenc/ops/token_embedding.h>

#include <torch/library.h>

namespace posenc {

TORCH_LIBRARY_FRAGMENT(posenc, m) {
  m.def(
      "token_and_position_embedding(Tensor tokens, Tensor weight, Tensor table, int offset=0, "
      "bool batch_first=True, Tensor? positions=None, float scale=1.0, int padding_idx=-1, "
      "float dropout=0.0, bool train=False, Tensor? columns=None) -> (Tensor, Tensor)");
  // The call of posenc.nn's TokenAndPositionEmbedding (src/ops/sequence/module.cpp): positions of
  // the real tokens with padding_idx, rows from the sinusoidal `columns` past the table
  // (`extrapolate`) or at fractional positions.
  m.def(
      "token_and_position_embedding_call(Tensor ids, Tensor weight, Tensor table, "
      "Tensor? columns, int offset=0, Tensor? positions=None, bool batch_first=True, "
      "float scale=1.0, int padding_idx=-1, float dropout=0.0, bool train=False, "
      "bool extrapolate=False) -> Tensor");
  m.def(
      "_token_and_position_embedding_backward(Tensor grad, Tensor mask, Tensor tokens, "
      "Tensor weight, Tensor table, int offset, bool batch_first, Tensor? positions, float scale, "
      "int padding_idx, float dropout, bool[2] output_mask) -> (Tensor, Tensor)");
}

namespace ops {

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding(
    const at::Tensor& tokens, const at::Tensor& weight, const at::Tensor& table, int64_t offset,
    bool batch_first, OptionalTensor positions, double scale, int64_t padding_idx, double dropout,
    bool train, OptionalTensor columns) {
  static const auto op = typed_op<std::tuple<at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, bool, OptionalTensor,
      double, int64_t, double, bool, OptionalTensor)>("posenc::token_and_position_embedding");
  return op.call(tokens, weight, table, offset, batch_first, positions, scale, padding_idx, dropout,
                 train, columns);
}

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_backward(
    const at::Tensor& grad, const at::Tensor& mask, const at::Tensor& tokens,
    const at::Tensor& weight, const at::Tensor& table, int64_t offset, bool batch_first,
    OptionalTensor positions, double scale, int64_t padding_idx, double dropout,
    std::array<bool, 2> output_mask) {
  static const auto op = typed_op<std::tuple<at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
      int64_t, bool, OptionalTensor, double, int64_t, double, std::array<bool, 2>)>(
      "posenc::_token_and_position_embedding_backward");
  return op.call(grad, mask, tokens, weight, table, offset, batch_first, positions, scale,
                 padding_idx, dropout, output_mask);
}

} // namespace ops
} // namespace posenc

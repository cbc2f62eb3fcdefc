#pragma once

// The backend-independent kernels (ATen operations only). Registered as CompositeExplicitAutograd,
// and called by the hand-written CPU/CUDA kernels for the cases those do not cover.

#include "ops/common.h"

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <tuple>

namespace posenc {
namespace ops {
namespace composite {

at::Tensor add_position_table(const at::Tensor& x,
                              const at::Tensor& table,
                              int64_t offset,
                              bool batch_first,
                              OptionalTensor positions,
                              double scale);
void add_position_table_(at::Tensor& x,
                         const at::Tensor& table,
                         int64_t offset,
                         bool batch_first,
                         OptionalTensor positions,
                         double scale);
void add_position_table_out(const at::Tensor& x,
                            const at::Tensor& table,
                            int64_t offset,
                            bool batch_first,
                            OptionalTensor positions,
                            double scale,
                            at::Tensor& out);
at::Tensor add_position_table_backward(const at::Tensor& grad,
                                       const at::Tensor& table,
                                       int64_t offset,
                                       bool batch_first,
                                       OptionalTensor positions);
at::Tensor apply_rotary(const at::Tensor& x,
                        const at::Tensor& cos,
                        const at::Tensor& sin,
                        int64_t offset,
                        OptionalTensor positions,
                        bool interleaved,
                        bool heads_first,
                        bool inverse);
void apply_rotary_(at::Tensor& x,
                   const at::Tensor& cos,
                   const at::Tensor& sin,
                   int64_t offset,
                   OptionalTensor positions,
                   bool interleaved,
                   bool heads_first,
                   bool inverse);
std::tuple<at::Tensor, at::Tensor> token_and_position_embedding(const at::Tensor& tokens,
                                                                const at::Tensor& weight,
                                                                const at::Tensor& table,
                                                                int64_t offset,
                                                                bool batch_first,
                                                                OptionalTensor positions,
                                                                double scale,
                                                                int64_t padding_idx,
                                                                double dropout,
                                                                bool train);
std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_backward(
    const at::Tensor& grad,
    const at::Tensor& mask,
    const at::Tensor& tokens,
    const at::Tensor& weight,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first,
    OptionalTensor positions,
    double scale,
    int64_t padding_idx,
    double dropout,
    std::array<bool, 2> output_mask);

/// The rows `table[positions]` for the call, shaped to broadcast against x.
at::Tensor selected_rows(const TableCall& call, int64_t offset, bool batch_first);

} // namespace composite
} // namespace ops
} // namespace posenc

#pragma once

// The backend-independent kernels (ATen operations only), registered as CompositeExplicitAutograd:
// they serve every device without a hand-written kernel, and the tests compare the CPU and CUDA
// kernels with them. Same arguments as the operators.

#include "ops/backend_entries.h"
#include "ops/op_arguments.h"

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace posenc {
namespace ops {
namespace composite {

/// at::empty, as the operator kernels built from the loops below allocate (ops/backend_entries.h).
at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options);

/// The loops of the composite kernels (see ops/backend_entries.h).
void add_loop(const at::Tensor& x, at::Tensor& out, const TableCall& call);
void rotary_loop(const at::Tensor& x, at::Tensor& out, const RotaryCall& call, bool interleaved,
                 bool inverse);
void rotary_qk_loop(const RotaryOperand& q, const RotaryOperand& k, const RotaryQkCall& call,
                    bool interleaved, bool inverse);
void token_loop(const at::Tensor& tokens, const at::Tensor& weight, at::Tensor& out,
                at::Tensor& mask, const TableCall& call, double dropout, bool drop);

// The out-of-place operators, for the tests.

at::Tensor add_position_table(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                              bool batch_first, OptionalTensor positions, double scale,
                              OptionalTensor columns = c10::nullopt);
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                        int64_t offset, OptionalTensor positions, bool interleaved,
                        bool heads_first, bool inverse, OptionalTensor inv_freq = c10::nullopt,
                        double attention_factor = 1.0);
std::tuple<at::Tensor, at::Tensor> apply_rotary_qk(const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& cos, const at::Tensor& sin,
                                                   int64_t offset, OptionalTensor positions,
                                                   bool interleaved, bool heads_first,
                                                   bool inverse,
                                                   OptionalTensor inv_freq = c10::nullopt,
                                                   double attention_factor = 1.0);
at::Tensor add_positional_encoding(const at::Tensor& x, int64_t offset, double base,
                                   bool batch_first, OptionalTensor positions, double scale,
                                   c10::string_view channels, c10::string_view frequencies);
std::tuple<at::Tensor, at::Tensor> rotary_tables(int64_t max_len, const at::Tensor& inv_freq,
                                                 double attention_factor,
                                                 c10::optional<at::ScalarType> dtype,
                                                 c10::optional<at::Device> device);
std::tuple<at::Tensor, at::Tensor> multimodal_rotary_tables(
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions,
    at::IntArrayRef mrope_section, bool interleaved, OptionalTensor inv_freq,
    double attention_factor);
std::tuple<at::Tensor, at::Tensor> token_and_position_embedding(
    const at::Tensor& tokens, const at::Tensor& weight, const at::Tensor& table, int64_t offset,
    bool batch_first, OptionalTensor positions, double scale, int64_t padding_idx, double dropout,
    bool train, OptionalTensor columns = c10::nullopt);

} // namespace composite
} // namespace ops
} // namespace posenc

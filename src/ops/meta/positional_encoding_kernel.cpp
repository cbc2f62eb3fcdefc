// Meta kernels: output metadata only, for fake tensors (torch.compile, torch.export) and shape
// propagation. They read no sizes, so symbolic shapes pass through; the checks that need sizes or
// values run in the real kernels.

#include "detail/checks.h"

#include <ATen/ops/embedding.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace {

using OptionalTensor = const c10::optional<at::Tensor>&;

void check_meta_input(const char* who, const at::Tensor& x, int64_t dims) {
  TORCH_CHECK(
      x.dim() == dims, who, ": expected a ", dims, "-D input, but got a ", x.dim(), "-D tensor");
  TORCH_CHECK(detail::is_supported_float(x.scalar_type()),
              who,
              ": expected a floating-point input (float16, bfloat16, float32 or float64), but got ",
              x.scalar_type());
}

void check_meta_positions(const char* who, OptionalTensor positions) {
  if (positions.has_value() && positions->defined()) {
    TORCH_CHECK(at::isIntegralType(positions->scalar_type(), /*includeBool=*/false),
                who,
                ": positions must be an integer tensor (int64 or int32), but got ",
                positions->scalar_type());
  }
}

at::Tensor add_position_table_meta(
    const at::Tensor& x, const at::Tensor& table, int64_t, bool, OptionalTensor positions, double) {
  check_meta_input("posenc::add_position_table", x, 3);
  check_meta_positions("posenc::add_position_table", positions);
  TORCH_CHECK(table.dim() == 2 || table.dim() == 3,
              "posenc::add_position_table: expected the encoding table as [max_len, D] or [1, "
              "max_len, D], but got a ",
              table.dim(),
              "-D tensor");
  return at::empty_like(x);
}

at::Tensor add_position_table_backward_meta(
    const at::Tensor& grad, const at::Tensor& table, int64_t, bool, OptionalTensor positions) {
  check_meta_input("posenc::add_position_table_backward", grad, 3);
  check_meta_positions("posenc::add_position_table_backward", positions);
  return at::empty_like(table, at::MemoryFormat::Contiguous);
}

at::Tensor add_positional_encoding_meta(const at::Tensor& x,
                                        int64_t offset,
                                        double,
                                        bool,
                                        OptionalTensor positions,
                                        double,
                                        c10::string_view,
                                        c10::string_view) {
  check_meta_input("posenc::add_positional_encoding", x, 3);
  check_meta_positions("posenc::add_positional_encoding", positions);
  TORCH_CHECK(
      offset >= 0, "posenc::add_positional_encoding: offset must be >= 0, but got ", offset);
  return at::empty_like(x);
}

at::Tensor apply_rotary_meta(const at::Tensor& x,
                             const at::Tensor& cos,
                             const at::Tensor& sin,
                             int64_t,
                             OptionalTensor positions,
                             bool,
                             bool,
                             bool) {
  check_meta_input("posenc::apply_rotary", x, 4);
  check_meta_positions("posenc::apply_rotary", positions);
  TORCH_CHECK(cos.dim() == 2 && sin.dim() == 2,
              "posenc::apply_rotary: cos and sin must be [max_len, R/2] tables");
  return at::empty_like(x);
}

void add_position_table_inplace_meta(at::Tensor& x,
                                     const at::Tensor& table,
                                     int64_t offset,
                                     bool batch_first,
                                     OptionalTensor positions,
                                     double scale) {
  add_position_table_meta(x, table, offset, batch_first, positions, scale);
}

void add_position_table_out_meta(const at::Tensor& x,
                                 const at::Tensor& table,
                                 int64_t offset,
                                 bool batch_first,
                                 OptionalTensor positions,
                                 double scale,
                                 at::Tensor& out) {
  add_position_table_meta(x, table, offset, batch_first, positions, scale);
  TORCH_CHECK(out.scalar_type() == x.scalar_type(),
              "posenc::add_position_table_out: out must have the input's dtype ",
              x.scalar_type(),
              ", but has ",
              out.scalar_type());
}

void apply_rotary_inplace_meta(at::Tensor& x,
                               const at::Tensor& cos,
                               const at::Tensor& sin,
                               int64_t offset,
                               OptionalTensor positions,
                               bool interleaved,
                               bool heads_first,
                               bool inverse) {
  apply_rotary_meta(x, cos, sin, offset, positions, interleaved, heads_first, inverse);
}

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_meta(const at::Tensor& tokens,
                                                                     const at::Tensor& weight,
                                                                     const at::Tensor& table,
                                                                     int64_t,
                                                                     bool,
                                                                     OptionalTensor positions,
                                                                     double,
                                                                     int64_t,
                                                                     double dropout,
                                                                     bool train) {
  constexpr const char* who = "posenc::token_and_position_embedding";
  TORCH_CHECK(tokens.dim() == 2 && tokens.scalar_type() == at::kLong,
              who,
              ": expected int64 token ids of 2 dimensions");
  TORCH_CHECK(weight.dim() == 2 && detail::is_supported_float(weight.scalar_type()),
              who,
              ": expected a floating [vocab, D] weight");
  TORCH_CHECK(table.dim() == 2 || table.dim() == 3,
              who,
              ": expected the table as [max_len, D] or [1, max_len, D]");
  check_meta_positions(who, positions);
  // [B, L] ids and a [V, D] weight give [B, L, D]; ATen's embedding computes that shape without
  // reading sizes here, so symbolic shapes pass through.
  at::Tensor out = at::embedding(weight, tokens);
  at::Tensor mask = train && dropout > 0.0 ? at::empty_like(out, out.options().dtype(at::kBool))
                                           : at::empty({0}, weight.options().dtype(at::kBool));
  return {out, mask};
}

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_backward_meta(
    const at::Tensor&,
    const at::Tensor&,
    const at::Tensor&,
    const at::Tensor& weight,
    const at::Tensor& table,
    int64_t,
    bool,
    OptionalTensor,
    double,
    int64_t,
    double,
    std::array<bool, 2> output_mask) {
  return {output_mask[0] ? at::empty_like(weight, at::MemoryFormat::Contiguous) : at::Tensor(),
          output_mask[1] ? at::empty_like(table, at::MemoryFormat::Contiguous) : at::Tensor()};
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, Meta, m) {
  m.impl("add_position_table_", TORCH_FN(add_position_table_inplace_meta));
  m.impl("add_position_table_out", TORCH_FN(add_position_table_out_meta));
  m.impl("apply_rotary_", TORCH_FN(apply_rotary_inplace_meta));
  m.impl("token_and_position_embedding", TORCH_FN(token_and_position_embedding_meta));
  m.impl("token_and_position_embedding_backward",
         TORCH_FN(token_and_position_embedding_backward_meta));
  m.impl("add_position_table", TORCH_FN(add_position_table_meta));
  m.impl("add_position_table_backward", TORCH_FN(add_position_table_backward_meta));
  m.impl("add_positional_encoding", TORCH_FN(add_positional_encoding_meta));
  m.impl("apply_rotary", TORCH_FN(apply_rotary_meta));
}

} // namespace ops
} // namespace posenc
